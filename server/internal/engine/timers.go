package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/lanesmq/lanes/server/internal/failurelog"
)

// Timer operation names and result statuses, as on the wire.
const (
	TimerSchedule   = "schedule"
	TimerReschedule = "reschedule"
	TimerCancel     = "cancel"

	TimerScheduled   = "scheduled"
	TimerRescheduled = "rescheduled"
	TimerCancelled   = "cancelled" //nolint:misspell // the wire spelling
	TimerAbsent      = "absent"
)

const (
	// TimerHorizon is the farthest a timer may be scheduled ahead.
	TimerHorizon = 90 * 24 * time.Hour
	// TimerMaxPayloadBytes is the largest timer payload.
	TimerMaxPayloadBytes = 1 << 20
	// timerLockClass keys the advisory locks on (queue, timerKey).
	timerLockClass = 0x544d // "TM"
	// timerFireBatch bounds how many timers one firing transaction delivers.
	timerFireBatch = 500
)

// Wire codes of timer input errors.
const (
	CodeTimersBadRequest     = "timers_bad_request"
	CodeTimerHorizonExceeded = "timer_horizon_exceeded"
	CodePayloadTooLarge      = "payload_too_large"
)

// TimerOp schedules, reschedules or cancels the timer (Queue, TimerKey).
type TimerOp struct {
	Op        string
	Queue     string
	TimerKey  string
	Partition string
	// TransactionID of the delivered message; minted when empty. On cancel,
	// a non-empty value cancels only a timer carrying it.
	TransactionID string
	// ProducerSub is the scheduling token's subject, stamped on the fired
	// message; set by the broker, never by a client ("" = none).
	ProducerSub string
	Delay       time.Duration
	Payload     json.RawMessage
	PayloadZstd bool
	Encrypted   bool
}

// TimerResult reports one timer operation.
type TimerResult struct {
	OK            bool
	Status        string
	Queue         string
	TimerKey      string
	TransactionID string
	MessageID     uuid.UUID // zero when no timer holds one
	DeliverAt     *time.Time
}

// Timer is a stored timer.
type Timer struct {
	Queue         string
	TimerKey      string
	Partition     string
	DeliverAt     time.Time
	TransactionID string
	MessageID     uuid.UUID
	Payload       json.RawMessage
	Attempts      int
	LastError     string
	CreatedAt     time.Time
	UpdatedAt     time.Time
	// ProducerSub is the subject of the token that scheduled the timer ("" = none).
	ProducerSub string
}

// validateTimerOps checks every op before any database work.
func validateTimerOps(ops []TimerOp, field string) error {
	for i := range ops {
		op := &ops[i]
		at := fmt.Sprintf("%s[%d]", field, i)
		if strings.TrimSpace(op.Queue) == "" {
			return codedInvalid(CodeTimersBadRequest, "%s.queue is required", at)
		}
		if op.TimerKey == "" {
			return codedInvalid(CodeTimersBadRequest, "%s.timerKey is required", at)
		}
		// A timer's queue, partition and transaction id become a push when it
		// fires: one the push would reject would fail the firing loop forever.
		for _, f := range [...]struct{ name, problem string }{
			{"queue", nameProblem(op.Queue)}, {"partition", optionalNameProblem(op.Partition)},
			{"timerKey", storedTextProblem(op.TimerKey, MaxTransactionIDBytes)},
			{"transactionId", storedTextProblem(op.TransactionID, MaxTransactionIDBytes)}} {
			if f.problem != "" {
				return codedInvalid(CodeTimersBadRequest, "%s.%s %s", at, f.name, f.problem)
			}
		}
		switch op.Op {
		case TimerCancel:
			continue
		case TimerSchedule, TimerReschedule:
			if msg := dotNameProblem(op.TimerKey); msg != "" {
				return codedInvalid(CodeTimersBadRequest, "%s.timerKey %s, so the timer routes could not address the timer", at, msg)
			}
		default:
			return codedInvalid(CodeTimersBadRequest, "%s.op must be schedule, reschedule or cancel, got %q", at, op.Op)
		}
		if op.Delay > TimerHorizon {
			return codedInvalid(CodeTimerHorizonExceeded, "%s.delayMs is beyond the timer horizon of %d seconds", at, int64(TimerHorizon/time.Second))
		}
		if op.PayloadZstd {
			return codedInvalid(CodeTimersBadRequest, "%s.payloadZstd: compressed timer payloads are not supported", at)
		}
		if op.Encrypted {
			return codedInvalid(CodeTimersBadRequest, "%s.encrypted: payload encryption is not supported", at)
		}
		if len(op.Payload) > TimerMaxPayloadBytes {
			return codedInvalid(CodePayloadTooLarge, "%s.payload is %d bytes; the limit is %d", at, len(op.Payload), TimerMaxPayloadBytes)
		}
		if len(op.Payload) == 0 {
			op.Payload = json.RawMessage(`{}`)
		} else if !utf8.Valid(op.Payload) || !json.Valid(op.Payload) {
			// The payload is served in pop answers as JSON text, which invalid UTF-8 would break.
			return codedInvalid(CodeTimersBadRequest, "%s.payload must be the base64 of a JSON value in UTF-8", at)
		}
		if op.Partition == "" {
			op.Partition = DefaultPartition
		}
		if op.TransactionID == "" {
			op.TransactionID = NewMessageID().String()
		}
	}
	return nil
}

// ScheduleTimers applies timer operations in one transaction; results are index-aligned.
func (e *Engine) ScheduleTimers(ctx context.Context, ops []TimerOp) ([]TimerResult, error) {
	if err := validateTimerOps(ops, "operations"); err != nil {
		return nil, err
	}
	var results []TimerResult
	err := e.retryTx(ctx, func(tx pgx.Tx) error {
		var err error
		results, err = applyTimers(ctx, tx, ops)
		return err
	})
	return results, err
}

// CancelTimer cancels one timer; with txn, only a timer carrying that transaction id.
func (e *Engine) CancelTimer(ctx context.Context, queue, timerKey, txn string) (TimerResult, error) {
	res, err := e.ScheduleTimers(ctx, []TimerOp{{Op: TimerCancel, Queue: queue, TimerKey: timerKey, TransactionID: txn}})
	if err != nil {
		return TimerResult{}, err
	}
	return res[0], nil
}

type timerKey struct{ queue, key string }

type timerState struct {
	exists    bool
	partition string
	deliverAt time.Time
	txn       string
	sub       string
	messageID uuid.UUID
	payload   []byte
	attempts  int
	createdAt time.Time
	dirty     bool
}

// applyTimers applies ops inside tx in two round trips: (advisory-lock every
// key in hash order, read the rows) then (upsert and delete what changed).
// The firing loop never takes these advisory locks: it claims rows with SKIP
// LOCKED, so a schedule racing a fire waits for it and then finds the row gone.
func applyTimers(ctx context.Context, tx batchTx, ops []TimerOp) ([]TimerResult, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	results := make([]TimerResult, len(ops))
	queues := make([]string, len(ops))
	keys := make([]string, len(ops))
	for i, op := range ops {
		queues[i], keys[i] = op.Queue, op.TimerKey
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_advisory_xact_lock($1::int4, h) FROM (
			SELECT DISTINCT hashtext(length(q)::text || ':' || q || k) AS h
			FROM unnest($2::text[], $3::text[]) AS x(q, k) ORDER BY 1) s`, int32(timerLockClass), queues, keys)
	b.Queue(`SELECT clock_timestamp()`) // after the locks: a schedule's delay counts from when it holds its key
	b.Queue(`SELECT t.queue, t.timer_key, t.partition, t.deliver_at, t.transaction_id, t.message_id, t.payload,
			t.attempts, t.created_at
		FROM unnest($1::text[], $2::text[]) AS x(q, k)
		JOIN lanes.timers t ON t.queue = x.q AND t.timer_key = x.k
		FOR UPDATE OF t`, queues, keys)
	state := map[timerKey]*timerState{}
	var now time.Time
	br := tx.SendBatch(ctx, b)
	err := func() error {
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&now); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k timerKey
			s := &timerState{exists: true}
			if err := rows.Scan(&k.queue, &k.key, &s.partition, &s.deliverAt, &s.txn, &s.messageID, &s.payload,
				&s.attempts, &s.createdAt); err != nil {
				return err
			}
			state[k] = s
		}
		return rows.Err()
	}()
	if err != nil {
		return nil, err
	}
	for i := range ops {
		op := &ops[i]
		k := timerKey{op.Queue, op.TimerKey}
		s := state[k]
		if s == nil {
			s = &timerState{}
			state[k] = s
		}
		res := &results[i]
		res.Queue, res.TimerKey = op.Queue, op.TimerKey
		if op.Op == TimerCancel {
			if !s.exists || (op.TransactionID != "" && op.TransactionID != s.txn) {
				res.Status = TimerAbsent
				res.TransactionID = op.TransactionID
				continue
			}
			res.OK, res.Status = true, TimerCancelled
			res.TransactionID, res.MessageID = s.txn, s.messageID
			s.exists, s.dirty = false, true
			continue
		}
		res.OK, res.Status = true, TimerScheduled
		if s.exists {
			res.Status = TimerRescheduled
		} else {
			s.createdAt = now
		}
		*s = timerState{exists: true, dirty: true, createdAt: s.createdAt, partition: op.Partition,
			deliverAt: now.Add(op.Delay), txn: op.TransactionID, sub: op.ProducerSub, messageID: NewMessageID(), payload: op.Payload}
		deliverAt := s.deliverAt
		res.TransactionID, res.MessageID, res.DeliverAt = s.txn, s.messageID, &deliverAt
	}
	return results, writeTimerState(ctx, tx, state, now)
}

func writeTimerState(ctx context.Context, tx batchTx, state map[timerKey]*timerState, now time.Time) error {
	keys := make([]timerKey, 0, len(state))
	for k, s := range state {
		if s.dirty {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].queue != keys[j].queue {
			return keys[i].queue < keys[j].queue
		}
		return keys[i].key < keys[j].key
	})
	var upQ, upK, upP, upTxn, upSub, delQ, delK []string
	var upAt, upCreated []time.Time
	var upMsg []uuid.UUID
	var upPayload [][]byte
	for _, k := range keys {
		s := state[k]
		if !s.exists {
			delQ, delK = append(delQ, k.queue), append(delK, k.key)
			continue
		}
		upQ, upK, upP, upTxn = append(upQ, k.queue), append(upK, k.key), append(upP, s.partition), append(upTxn, s.txn)
		upAt, upCreated = append(upAt, s.deliverAt), append(upCreated, s.createdAt)
		upMsg, upPayload, upSub = append(upMsg, s.messageID), append(upPayload, s.payload), append(upSub, s.sub)
	}
	b := &pgx.Batch{}
	if len(upQ) > 0 {
		b.Queue(`INSERT INTO lanes.timers (queue, timer_key, partition, deliver_at, transaction_id, message_id, payload,
				attempts, created_at, updated_at, producer_sub)
			SELECT x.q, x.k, x.p, x.at, x.txn, x.m, x.pl, 0, x.cr, $9, nullif(x.sub, '')
			FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::uuid[], $7::bytea[],
				$8::timestamptz[], $10::text[]) AS x(q, k, p, at, txn, m, pl, cr, sub)
			ON CONFLICT (queue, timer_key) DO UPDATE SET partition = EXCLUDED.partition, deliver_at = EXCLUDED.deliver_at,
				transaction_id = EXCLUDED.transaction_id, message_id = EXCLUDED.message_id, payload = EXCLUDED.payload,
				attempts = 0, last_error = NULL, updated_at = EXCLUDED.updated_at, producer_sub = EXCLUDED.producer_sub`,
			upQ, upK, upP, upAt, upTxn, uuidArray(upMsg), upPayload, upCreated, now, upSub)
	}
	if len(delQ) > 0 {
		b.Queue(`DELETE FROM lanes.timers USING unnest($1::text[], $2::text[]) AS x(q, k)
			WHERE timers.queue = x.q AND timers.timer_key = x.k`, delQ, delK)
	}
	if b.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, b).Close()
}

// GetTimer returns the timer, or nil when there is none.
func (e *Engine) GetTimer(ctx context.Context, queue, timerKey string) (*Timer, error) {
	list, err := e.queryTimers(ctx, `WHERE queue = $1 AND timer_key = $2`, queue, timerKey)
	if err != nil || len(list) == 0 {
		return nil, err
	}
	return &list[0], nil
}

// ListTimers pages through a queue's timers in key order.
func (e *Engine) ListTimers(ctx context.Context, queue, prefix, after string, limit int) ([]Timer, bool, error) {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	// The page stops before the first timer whose payload, sent as base64,
	// would take it past the listing byte budget (after at least one); the
	// sizes are summed in the database, so the timers past it are never sent.
	// matched counts the page's timers before that cut, one past limit included.
	rows, err := e.pool.Query(ctx, `SELECT `+timerColumns+`, sized.matched FROM lanes.timers
		JOIN (SELECT timer_key AS k, count(*) OVER () AS matched, row_number() OVER w AS n,
				sum((octet_length(payload) + 2) / 3 * 4) OVER w AS upto
			FROM (SELECT timer_key, payload FROM lanes.timers
				WHERE queue = $1 AND timer_key > $2 AND starts_with(timer_key, $3)
				ORDER BY timer_key LIMIT $4) page
			WINDOW w AS (ORDER BY timer_key ROWS UNBOUNDED PRECEDING)) sized ON queue = $1 AND timer_key = sized.k
		WHERE sized.n = 1 OR sized.upto <= $5
		ORDER BY sized.n`, queue, after, prefix, limit+1, e.listMaxBytes())
	if err != nil {
		return nil, false, err
	}
	var matched int
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Timer, error) { return scanTimer(r, &matched) })
	if err != nil {
		return nil, false, err
	}
	if len(list) > limit {
		return list[:limit], true, nil
	}
	return list, len(list) < matched, nil
}

// CountTimers counts a queue's timers whose key starts with prefix.
func (e *Engine) CountTimers(ctx context.Context, queue, prefix string) (int64, error) {
	var n int64
	err := e.pool.QueryRow(ctx, `SELECT count(*) FROM lanes.timers WHERE queue = $1 AND starts_with(timer_key, $2)`,
		queue, prefix).Scan(&n)
	return n, err
}

const timerColumns = `queue, timer_key, partition, deliver_at, transaction_id, message_id, payload,
	attempts, coalesce(last_error, ''), created_at, updated_at, coalesce(producer_sub, '')`

func (e *Engine) queryTimers(ctx context.Context, where string, args ...any) ([]Timer, error) {
	rows, err := e.pool.Query(ctx, `SELECT `+timerColumns+` FROM lanes.timers `+where, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Timer, error) { return scanTimer(r) })
}

// scanTimer scans the timerColumns of r, then into more, the columns the
// query selects after them.
func scanTimer(r pgx.Row, more ...any) (Timer, error) {
	var t Timer
	var payload []byte
	err := r.Scan(append([]any{&t.Queue, &t.TimerKey, &t.Partition, &t.DeliverAt, &t.TransactionID, &t.MessageID, &payload,
		&t.Attempts, &t.LastError, &t.CreatedAt, &t.UpdatedAt, &t.ProducerSub}, more...)...)
	t.Payload = payload
	return t, err
}

// PausePushesWhen makes the pushes the engine makes itself wait while paused
// reports true (push maintenance): due timers fire once it reports false, and
// a transaction bundle carrying pushes answers ErrPushesPaused.
func (e *Engine) PausePushesWhen(paused func() bool) { e.pushesPaused = paused }

func (e *Engine) pushesArePaused() bool { return e.pushesPaused != nil && e.pushesPaused() }

// FireDueTimers delivers up to one batch of due timers in one transaction:
// the rows are claimed with SKIP LOCKED and deleted, and their frames pushed,
// before the commit, so each timer fires exactly once across every broker.
// It returns how many timers fired; none while pushes are paused, since a
// timer firing is a push the broker makes.
func (e *Engine) FireDueTimers(ctx context.Context) (int, error) {
	if e.pushesArePaused() {
		return 0, nil
	}
	fired := 0
	var w *pushWrite
	var firedResults []PushResult
	// lateSeconds is, per fired timer, how long after its deliver_at the
	// firing statement ran, by the database's clock (every broker's alike).
	var lateSeconds []float64
	err := e.retryTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `DELETE FROM lanes.timers t WHERE (t.queue, t.timer_key) IN (
				SELECT queue, timer_key FROM lanes.timers WHERE deliver_at <= now()
				ORDER BY deliver_at LIMIT $1 FOR UPDATE SKIP LOCKED)
			RETURNING t.queue, t.partition, t.transaction_id, t.message_id, t.payload, coalesce(t.producer_sub, ''),
				extract(epoch FROM clock_timestamp() - t.deliver_at)::float8`, timerFireBatch)
		if err != nil {
			return err
		}
		var items []PushItem
		var ids []uuid.UUID
		lateSeconds = lateSeconds[:0]
		for rows.Next() {
			var it PushItem
			var id uuid.UUID
			var payload []byte
			var late float64
			if err := rows.Scan(&it.Queue, &it.Partition, &it.TransactionID, &id, &payload, &it.ProducerSub, &late); err != nil {
				rows.Close()
				return err
			}
			it.Payload = payload
			items = append(items, it)
			ids = append(ids, id)
			lateSeconds = append(lateSeconds, late)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		fired = len(items)
		if fired == 0 {
			return errRollback
		}
		results := make([]PushResult, len(items))
		slots := make([]pushSlot, len(items))
		for i := range items {
			slots[i] = pushSlot{item: &items[i], result: &results[i], messageID: ids[i]}
		}
		w, firedResults = newPushWrite(slots, false), results
		return w.writeInTx(ctx, tx)
	})
	if errors.Is(err, errRollback) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	e.countStoredResults(StoredByTimer, firedResults)
	if observe := e.timerFireObserver.Load(); observe != nil {
		for _, late := range lateSeconds {
			(*observe)(time.Duration(late * float64(time.Second)))
		}
	}
	w.wake(e, nil)
	return fired, nil
}

// ObserveTimerFires has f told, for every timer this engine fires, how long
// after its deliver time it fired (once per timer, after the commit).
func (e *Engine) ObserveTimerFires(f func(late time.Duration)) { e.timerFireObserver.Store(&f) }

// lockInTx runs the lock phase (provision, lock, probe) inside tx: one round trip.
func (w *pushWrite) lockInTx(ctx context.Context, tx pgx.Tx) error {
	b := &pgx.Batch{}
	w.queueLock(b)
	br := tx.SendBatch(ctx, b)
	err := w.readLock(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeInTx runs every phase of the write inside tx: two round trips.
func (w *pushWrite) writeInTx(ctx context.Context, tx pgx.Tx) error {
	if err := w.lockInTx(ctx, tx); err != nil {
		return err
	}
	b := &pgx.Batch{}
	w.queueWrites(b)
	if b.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, b).Close()
}

// StartTimers runs the firing loop every interval until the engine closes.
// Several brokers may run it at once.
func (e *Engine) StartTimers(interval time.Duration) {
	if interval <= 0 {
		return
	}
	failures := failurelog.New(e.log, slog.LevelWarn, "timer firing failed", "")
	e.runEvery(interval, func() {
		for {
			ctx, cancel := context.WithTimeout(e.halt, 30*time.Second)
			n, err := e.FireDueTimers(ctx)
			cancel()
			if err != nil {
				failures.Failed(err)
			} else {
				failures.Succeeded()
			}
			if err != nil || n < timerFireBatch {
				return
			}
		}
	}, nil)
}
