package engine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// DeadLetter is one row of lanes.dlq with the names of its queue and partition
// (empty when the partition no longer exists).
type DeadLetter struct {
	ID            uuid.UUID
	PartitionID   uuid.UUID
	Queue         string
	Partition     string
	Group         string
	Offset        int64
	MessageID     uuid.UUID
	TransactionID string
	TraceID       string
	// ProducerSub is the JWT subject that pushed the message ("" without auth);
	// a replay pushes the message under it again.
	ProducerSub string
	Payload     json.RawMessage
	Error       string
	RetryCount  int
	CreatedAt   time.Time
	FailedAt    time.Time
}

// DLQFilter selects dead letters; empty fields do not filter. A page starts
// after Offset rows, or, when After is set, strictly after the row it names.
type DLQFilter struct {
	Queue, Group, Partition string
	From, To                *time.Time
	Limit, Offset           int
	After                   *DeadLetterKey
}

// DeadLetterKey is a dead letter's place in the listing's order (newest
// failure first, then id): unlike an offset, rows replayed or filed before it
// do not move it.
type DeadLetterKey struct {
	FailedAt time.Time
	ID       uuid.UUID
}

// Key is the place of d in the dead-letter listing.
func (d *DeadLetter) Key() DeadLetterKey {
	return DeadLetterKey{FailedAt: d.FailedAt, ID: d.ID}
}

const deadLetterColumns = `d.id, d.partition_id, coalesce(q.name, ''), coalesce(p.name, ''), d.consumer_group,
	d.message_offset, d.message_id, d.transaction_id, coalesce(d.trace_id, ''), coalesce(d.producer_sub, ''), coalesce(d.payload_text, d.payload::text), coalesce(d.error, ''),
	d.retry_count, d.created_at, d.failed_at`

const deadLetterFrom = ` FROM lanes.dlq d
	LEFT JOIN lanes.partitions p ON p.id = d.partition_id
	LEFT JOIN lanes.queues q ON q.id = p.queue_id `

// scanDeadLetter scans the deadLetterColumns of row, then into more, the
// columns the query selects after them.
func scanDeadLetter(row pgx.Row, more ...any) (DeadLetter, error) {
	var d DeadLetter
	var payload []byte
	err := row.Scan(append([]any{&d.ID, &d.PartitionID, &d.Queue, &d.Partition, &d.Group, &d.Offset, &d.MessageID,
		&d.TransactionID, &d.TraceID, &d.ProducerSub, &payload, &d.Error, &d.RetryCount, &d.CreatedAt, &d.FailedAt}, more...)...)
	if payload == nil {
		payload = []byte("null")
	}
	d.Payload = payload
	return d, err
}

// DeadLetterPage is a page of ListDeadLetters.
type DeadLetterPage struct {
	Rows []DeadLetter
	// Truncated: more dead letters matched past the page, which stopped at
	// its limit or its byte budget; the next page starts at NextOffset, or
	// after the Key of the page's last row.
	Truncated  bool
	NextOffset int
}

// ListDeadLetters pages through dead letters, newest failure first. The page
// stops before the first row whose payload would take it past the listing
// byte budget (Config.ListMaxBytes), after at least one row; the sizes are
// summed in the database (a missing payload as the null sent for it), so the
// rows past the budget are never sent.
func (e *Engine) ListDeadLetters(ctx context.Context, f DLQFilter) (DeadLetterPage, error) {
	if err := CheckGroupAddress("consumerGroup", f.Group); err != nil {
		return DeadLetterPage{}, err
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	if f.After != nil {
		f.Offset = 0
	}
	args := []any{f.Queue, f.Group, f.Partition, f.From, f.To, f.Limit, f.Offset, e.listMaxBytes()}
	// The key's condition is written in only when there is one, as plain
	// comparisons: the scan of dlq_failed_idx then starts at the key and the
	// LIMIT stops it, where an "$9 IS NULL OR" form would filter every newer row.
	after := ""
	if f.After != nil {
		after = ` AND d.failed_at <= $9 AND (d.failed_at < $9 OR d.id > $10)`
		args = append(args, f.After.FailedAt, f.After.ID)
	}
	rows, err := e.pool.Query(ctx, `WITH page AS (
			SELECT d.partition_id, d.id, d.failed_at`+deadLetterFrom+`
			WHERE ($1 = '' OR q.name = $1) AND ($2 = '' OR d.consumer_group = $2) AND ($3 = '' OR p.name = $3)
			  AND ($4::timestamptz IS NULL OR d.failed_at >= $4) AND ($5::timestamptz IS NULL OR d.failed_at <= $5)`+after+`
			ORDER BY d.failed_at DESC, d.id
			LIMIT $6::int8 + 1 OFFSET $7),
		sized AS (
			SELECT page.partition_id, page.id, count(*) OVER () AS matched,
				row_number() OVER w AS n, sum(coalesce(octet_length(coalesce(d.payload_text, d.payload::text)), 4)) OVER w AS upto
			FROM page JOIN lanes.dlq d ON d.partition_id = page.partition_id AND d.id = page.id
			WINDOW w AS (ORDER BY page.failed_at DESC, page.id ROWS UNBOUNDED PRECEDING))
		SELECT `+deadLetterColumns+`, sized.matched FROM sized
		JOIN lanes.dlq d ON d.partition_id = sized.partition_id AND d.id = sized.id
		LEFT JOIN lanes.partitions p ON p.id = d.partition_id
		LEFT JOIN lanes.queues q ON q.id = p.queue_id
		WHERE sized.n <= $6 AND (sized.n = 1 OR sized.upto <= $8)
		ORDER BY sized.n`, args...)
	if err != nil {
		return DeadLetterPage{}, err
	}
	var matched int
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeadLetter, error) {
		return scanDeadLetter(r, &matched)
	})
	if err != nil {
		return DeadLetterPage{}, err
	}
	page := DeadLetterPage{Rows: list}
	if len(list) < matched {
		page.Truncated, page.NextOffset = true, f.Offset+len(list)
	}
	return page, nil
}

// PurgeDeadLetters deletes every dead letter of queue (optionally of one group).
func (e *Engine) PurgeDeadLetters(ctx context.Context, queue, group string) (int64, error) {
	if strings.TrimSpace(queue) == "" {
		return 0, invalid("queue", "queue is required")
	}
	if err := CheckGroupAddress("consumerGroup", group); err != nil {
		return 0, err
	}
	tag, err := e.pool.Exec(ctx, `DELETE FROM lanes.dlq d USING lanes.partitions p, lanes.queues q
		WHERE d.partition_id = p.id AND p.queue_id = q.id AND q.name = $1 AND ($2 = '' OR d.consumer_group = $2)`,
		queue, group)
	return tag.RowsAffected(), err
}

// DeleteDeadLetters deletes the dead letters at one message address (every group);
// ErrNotFound when there were none. Live messages cannot be deleted one by one.
func (e *Engine) DeleteDeadLetters(ctx context.Context, partitionID uuid.UUID, transactionID string) (int64, error) {
	tag, err := e.pool.Exec(ctx, `DELETE FROM lanes.dlq WHERE partition_id = $1 AND transaction_id = $2`,
		partitionID, transactionID)
	if err != nil {
		return 0, err
	}
	if tag.RowsAffected() == 0 {
		return 0, ErrNotFound
	}
	return tag.RowsAffected(), nil
}

// ReplayOutcome is what a replay did.
type ReplayOutcome string

const (
	// ReplayMoved: the message was pushed and its dead-letter row deleted.
	ReplayMoved ReplayOutcome = "moved"
	// ReplayDuplicate: the dedup window already holds dlq:<id>; nothing written, row kept.
	ReplayDuplicate ReplayOutcome = "duplicate"
	// ReplayGone: no such dead-letter row (deleted or replayed meanwhile).
	ReplayGone ReplayOutcome = "gone"
)

// ReplayTarget optionally redirects a replay; nil keeps the row's own queue or partition.
type ReplayTarget struct {
	Queue, Partition *string
}

// ReplayResult reports a replay. Queue and Partition are the destination.
type ReplayResult struct {
	Outcome       ReplayOutcome
	Row           DeadLetter
	Queue         string
	Partition     string
	MessageID     uuid.UUID
	TransactionID string
}

// ErrReplayDestinationGone reports a dead letter whose partition no longer exists
// and no destination was given.
var ErrReplayDestinationGone = errors.New("the dead letter's partition no longer exists; give a destination queue")

// ReplayDeadLetter moves dead-letter row id back to its partition's tail (or to
// target) under transaction id dlq:<id>: push and row delete are one transaction,
// so concurrent replays of one row move it exactly once.
func (e *Engine) ReplayDeadLetter(ctx context.Context, id uuid.UUID, target ReplayTarget) (*ReplayResult, error) {
	return e.replay(ctx, target, `SELECT `+deadLetterColumns+deadLetterFrom+`WHERE d.id = $1 FOR UPDATE OF d`, id)
}

// RetryDeadLetter replays the newest dead letter at a message address.
func (e *Engine) RetryDeadLetter(ctx context.Context, partitionID uuid.UUID, transactionID string) (*ReplayResult, error) {
	return e.replay(ctx, ReplayTarget{}, `SELECT `+deadLetterColumns+deadLetterFrom+`
		WHERE d.partition_id = $1 AND d.transaction_id = $2
		ORDER BY d.failed_at DESC LIMIT 1 FOR UPDATE OF d`, partitionID, transactionID)
}

func (e *Engine) replay(ctx context.Context, target ReplayTarget, selectRow string, args ...any) (*ReplayResult, error) {
	if target.Queue != nil {
		if err := checkRequiredName("queue", *target.Queue); err != nil {
			return nil, err
		}
	}
	if target.Partition != nil {
		if err := checkRequiredName("partition", *target.Partition); err != nil {
			return nil, err
		}
	}
	var res *ReplayResult
	err := retryTransient(func() error {
		res = &ReplayResult{}
		return pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			return e.replayInTx(ctx, tx, target, res, selectRow, args)
		})
	})
	if errors.Is(err, errReplayRollback) {
		return res, nil
	}
	if err != nil {
		return nil, err
	}
	if res.Outcome == ReplayMoved {
		e.countStored(StoredByReplay, 1)
		e.waiters.wake(res.Queue, nil)
	}
	return res, nil
}

// errReplayRollback ends a replay transaction that must write nothing.
var errReplayRollback = errors.New("replay rolled back")

func (e *Engine) replayInTx(ctx context.Context, tx pgx.Tx, target ReplayTarget, res *ReplayResult, selectRow string, args []any) error {
	// Lock order: the dead-letter row, then the destination partition row.
	row, err := scanDeadLetter(tx.QueryRow(ctx, selectRow, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		res.Outcome = ReplayGone
		return errReplayRollback
	}
	if err != nil {
		return err
	}
	res.Row = row
	res.Queue, res.Partition = row.Queue, row.Partition
	if target.Queue != nil {
		res.Queue = *target.Queue
	}
	if target.Partition != nil {
		res.Partition = *target.Partition
	}
	if res.Queue == "" {
		return ErrReplayDestinationGone
	}
	if res.Partition == "" {
		res.Partition = DefaultPartition
	}
	res.TransactionID = "dlq:" + row.ID.String()
	// The replayed message keeps its producer's subject: producerSub says who
	// produced it, and a replay moves the same message rather than producing one.
	frame := &Frame{TransactionID: res.TransactionID, TraceID: row.TraceID, ProducerSub: row.ProducerSub, Payload: row.Payload}
	queued, messageID, err := appendOne(ctx, tx, e.brokerID, res.Queue, res.Partition, frame)
	if err != nil {
		return err
	}
	res.MessageID = messageID
	if !queued {
		res.Outcome = ReplayDuplicate
		return errReplayRollback
	}
	// By the whole key: on a table distributed by partition_id this reaches
	// the row's own shard only.
	if _, err := tx.Exec(ctx, `DELETE FROM lanes.dlq WHERE partition_id = $1 AND id = $2`, row.PartitionID, row.ID); err != nil {
		return err
	}
	res.Outcome = ReplayMoved
	return nil
}

// appendOne writes one message at the tail of (queue, partition) inside tx, the
// way a push does: ensure the rows, lock the partition row, probe dedup under the
// lock, write one segment and its transaction-index row, advance the allocator,
// notify. queued is false for a duplicate (messageID is then the original's).
// Kept apart from commitPushes on purpose: the group-commit path batches across
// requests and is being reworked; this is its single-partition equivalent.
func appendOne(ctx context.Context, tx pgx.Tx, sender, queue, partition string, f *Frame) (queued bool, messageID uuid.UUID, err error) {
	ns, task := NamespaceTask(queue)
	if _, err := tx.Exec(ctx, `INSERT INTO lanes.queues (name, namespace, task) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO NOTHING`, queue, ns, task); err != nil {
		return false, uuid.Nil, err
	}
	if _, err := tx.Exec(ctx, `WITH created AS (
			INSERT INTO lanes.partitions (queue_id, name) SELECT id, $2 FROM lanes.queues WHERE name = $1
			ON CONFLICT (queue_id, name) DO NOTHING RETURNING queue_id)
		UPDATE lanes.queues SET partition_version = partition_version + 1
		WHERE id IN (SELECT queue_id FROM created)`, queue, partition); err != nil {
		return false, uuid.Nil, err
	}
	var pid uuid.UUID
	var lastOffset int64
	var window int
	if err := tx.QueryRow(ctx, `SELECT p.id, p.last_offset, q.dedup_window_seconds
		FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
		WHERE q.name = $1 AND p.name = $2 FOR UPDATE OF p`, queue, partition).Scan(&pid, &lastOffset, &window); err != nil {
		return false, uuid.Nil, err
	}
	if window > 0 {
		var orig uuid.UUID
		err := tx.QueryRow(ctx, `SELECT message_id FROM lanes.txns
			WHERE partition_id = $1 AND transaction_id = $2 AND created_at > now() - make_interval(secs => $3)`,
			pid, f.TransactionID, window).Scan(&orig)
		if err == nil {
			return false, orig, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return false, uuid.Nil, err
		}
	}
	f.MessageID = NewMessageID()
	offset := lastOffset + 1
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO lanes.segments (partition_id, base_offset, end_offset, created_at, frames)
		VALUES ($1, $2, $2, clock_timestamp(), $3)`, pid, offset, appendFrame(nil, f))
	b.Queue(`INSERT INTO lanes.txns (partition_id, transaction_id, message_offset, message_id, created_at)
		VALUES ($1, $2, $3, $4, clock_timestamp())
		ON CONFLICT (partition_id, transaction_id) DO UPDATE
		SET message_offset = EXCLUDED.message_offset, message_id = EXCLUDED.message_id, created_at = EXCLUDED.created_at`,
		pid, f.TransactionID, offset, f.MessageID)
	queueAdvance(b, []uuid.UUID{pid}, []int64{offset})
	b.Queue(`SELECT pg_notify($1, $2)`, notifyChannel, notifyPayload(sender, map[string]bool{queue: true}))
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return false, uuid.Nil, err
	}
	return true, f.MessageID, nil
}
