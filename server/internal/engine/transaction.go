package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TxOp is one operation of a transaction bundle: exactly one of Push or Ack.
type TxOp struct {
	// Index is the operation's position in the request; a nested push shares
	// it among its items.
	Index int
	Push  *PushItem
	Ack   *AckItem
}

// TransactionRequest is a bundle: pushes, acks and the kv and timers riders,
// committed together or not at all.
type TransactionRequest struct {
	Ops            []TxOp
	RequiredLeases []string
	KV             []KVOp
	Timers         []TimerOp
}

// Why a bundle rolled back (closed set).
const (
	TxReasonBadRequest      = "bad_request"
	TxReasonDuplicate       = "duplicate"
	TxReasonAckRejected     = "ack_rejected"
	TxReasonKVPrecondition  = "kv_precondition"
	TxReasonTimerHorizon    = "timer_horizon_exceeded"
	TxReasonPayloadTooLarge = "payload_too_large"
	TxReasonDBError         = "db_error"
)

// TxOpResult reports one push item or one ack of a committed bundle.
type TxOpResult struct {
	Index int
	Push  *PushResult
	// Duplicate marks a push whose transaction id repeats an earlier push of
	// the same bundle to the same partition (the first wins).
	Duplicate bool
	Ack       *AckResult
}

// TransactionResult is the outcome of a bundle. When Success is false nothing
// was committed and Reason says why.
type TransactionResult struct {
	ID      string
	Success bool
	Reason  string
	Error   string
	Results []TxOpResult
	KV      []KVResult
	Timers  []TimerResult
	// KVFailure is set with Reason kv_precondition: the op that lost and the winner's value.
	KVFailure *KVPreconditionError
}

// Transaction commits a bundle in one PostgreSQL transaction. Locks are taken
// in one fixed order, shared with plain pushes, pops and acks, so concurrent
// bundles over overlapping partitions wait for each other instead of deadlocking:
//
//  1. kv keys      advisory locks (kvLockClass, hash) ascending, then the rows
//  2. timer keys   advisory locks (timerLockClass, hash) ascending, then the rows
//  3. provision    missing queue and partition rows
//  4. partitions   of every push, ascending by id, FOR UPDATE (as a plain push)
//  5. consumers    of every ack, ascending (partition_id, consumer_group) (as a plain ack)
//
// and then writes segments, txns, last_offset and the cursors under those
// locks. A plain push takes only 3–4, an ack only 5, a pop only consumer rows
// with SKIP LOCKED, the timer loop timer rows with SKIP LOCKED then 3–4.
// A duplicate push, a rejected ack, a lost required kv precondition or a timer
// beyond the horizon rolls everything back; that is a result, not an error.
func (e *Engine) Transaction(ctx context.Context, req TransactionRequest) (*TransactionResult, error) {
	res := &TransactionResult{ID: NewMessageID().String()}
	if len(req.Ops) == 0 && len(req.KV) == 0 && len(req.Timers) == 0 {
		return nil, invalid("operations", "operations is empty and the bundle carries no kv or timers")
	}
	var pushes, acks []int
	for i := range req.Ops {
		op := &req.Ops[i]
		switch {
		case op.Push != nil:
			if err := normalizeTxPush(op.Push, op.Index); err != nil {
				return nil, err
			}
			pushes = append(pushes, i)
		case op.Ack != nil:
			if op.Ack.TransactionID == "" || op.Ack.PartitionID == "" {
				return nil, invalid(fmt.Sprintf("operations[%d]", op.Index),
					"operations[%d]: an ack needs transactionId and partitionId", op.Index)
			}
			if err := checkAckText(op.Ack, "operations", op.Index); err != nil {
				return nil, err
			}
			acks = append(acks, i)
		default:
			return nil, invalid(fmt.Sprintf("operations[%d]", op.Index), "operations[%d] is neither a push nor an ack", op.Index)
		}
	}
	if err := validateKVOps(req.KV, "kv", true); err != nil {
		return nil, err
	}
	if err := validateTimerOps(req.Timers, "timers"); err != nil {
		var coded *CodedInputError
		if errors.As(err, &coded) && coded.Code == CodeTimerHorizonExceeded {
			return res.fail(TxReasonTimerHorizon, coded.Message), nil
		}
		if errors.As(err, &coded) && coded.Code == CodePayloadTooLarge {
			return res.fail(TxReasonPayloadTooLarge, coded.Message), nil
		}
		return nil, err
	}
	if len(pushes) > 0 && e.pushesArePaused() {
		return nil, ErrPushesPaused
	}
	run := &bundleRun{req: &req, pushes: pushes, acks: acks, requiredLease: singleLease(req.RequiredLeases), res: res}
	oneTrip, err := run.inOneTrip(ctx, e)
	if err == nil && !oneTrip {
		attempt := func() error { return run.attempt(ctx, e) }
		err = retryTransient(attempt)
		if e.forgetStalePartitions(err) {
			// A cached partition's queue was deleted: run again, provisioning.
			err = retryTransient(attempt)
		}
	}
	switch {
	case errors.Is(err, errRollback):
		res.Results, res.KV, res.Timers = []TxOpResult{}, nil, nil
		return res, nil
	case err != nil && IsUnreachable(err):
		// The database went away (a restart ends sessions with FATAL 57P01,
		// refuses them with 57P03): the route's 500 database_unavailable,
		// which clients retry, as every other route answers an outage.
		return nil, err
	case err != nil:
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			res.Results, res.KV, res.Timers = []TxOpResult{}, nil, nil
			if isDataError(err) {
				// A value of the bundle the input checks let through: the
				// sender's mistake, not the database's.
				return res.fail(TxReasonBadRequest, "bad request: "+pgErr.Message), nil
			}
			e.bundleFailures.Failed(err)
			return res.fail(TxReasonDBError, "database error: "+pgErr.Message), nil
		}
		return nil, err
	}
	if oneTrip {
		e.hot.bundlesOneTrip.Add(1)
	} else {
		e.hot.bundlesGeneral.Add(1)
	}
	run.committed(e)
	for _, r := range res.Results {
		if r.Push != nil && r.Push.Status == PushQueued {
			e.countStored(StoredByTransaction, 1)
		}
	}
	return res, nil
}

// bundleRun is one bundle's work and what its last attempt wrote.
type bundleRun struct {
	req           *TransactionRequest
	pushes, acks  []int // indexes into req.Ops
	requiredLease string
	res           *TransactionResult
	// committed wakes parked pops for what the committed attempt pushed and
	// released, and updates the broker's caches.
	committed func(e *Engine)
}

// inOneTrip commits, in one round trip, the common bundle: pushes to
// partitions this broker knows, each transaction id once per partition and bet
// new (as an unprobed push write, pushOneTripSQL), and acks that complete
// messages of one lease this broker granted, from one partition, all above the
// cursor (an indexedAck, as a plain ack's ackInOneTrip). What the verdicts
// follow from is checked in the database, and a failed check aborts the whole
// transaction: a stored transaction id on txns_pkey, a partition gone in
// lanes.expect, a cursor not as the lease index says in lanes.expect. Nothing
// is then committed and done is false: the bundle
// runs the general way, which gives the verdict.
func (r *bundleRun) inOneTrip(ctx context.Context, e *Engine) (done bool, err error) {
	req := r.req
	if len(req.KV) > 0 || len(req.Timers) > 0 {
		return false, nil
	}
	var ack indexedAck
	ackItems, ackResults := r.ackItems()
	if len(ackItems) > 0 {
		var ok bool
		if ack, ok = resolveIndexedAck(ackItems, e.leases, r.requiredLease); !ok {
			return false, nil
		}
	}
	pushResults := make([]PushResult, len(r.pushes))
	var w *pushWrite
	if len(r.pushes) > 0 {
		if time.Now().UnixNano() <= e.unprobedPausedUntil.Load() {
			return false, nil
		}
		w = e.newCachedPushWrite(r.pushSlots(pushResults), true)
		if w.knownIDs == nil || !w.fitsOneTrip() {
			return false, nil
		}
		w.unprobed = true
	}

	tx, release, err := e.acquireHotTx(ctx)
	if err != nil {
		return false, err
	}
	defer release()
	tx.open = true // begun by the batch below, which commits it too
	b := &pgx.Batch{}
	tx.beginHot(b)
	if w != nil {
		w.queueOneTrip(b)
	}
	var released bool
	var lastOffset int64
	if len(ackItems) > 0 {
		b.Queue(`WITH acked AS (`+ackOneTripSQL+`)
			SELECT lanes.expect(count(*) = 1, '`+ackLeaseMismatchCode+`', 'the cursor is not as the lease index says'),
				coalesce(bool_or(a.released), false), coalesce(max(a.last_offset), 0)
			FROM acked a`, ack.args()...).QueryRow(func(row pgx.Row) error {
			var matched bool
			return row.Scan(&matched, &released, &lastOffset)
		})
	}
	ho := e.queueCommit(tx, b, w)
	if err := ho.send(ctx, e, tx, b); err != nil {
		switch {
		case hasSQLState(err, partitionGoneCode):
			e.knownPartitions.clear()
			return false, nil
		case hasSQLState(err, ackLeaseMismatchCode),
			e.pauseUnprobedWrites(err), IsRetryable(err):
			return false, nil
		}
		return false, err
	}
	tx.open = false

	for j := range ackResults {
		ackResults[j].Success, ackResults[j].LeaseReleased = true, released
	}
	r.collectResults(pushResults, ackResults)
	r.committed = func(e *Engine) {
		if w != nil {
			w.wake(e, ho)
		}
		if len(ackItems) > 0 {
			ack.committed(e, released, lastOffset, nil) // the bundle's hand-off is its push's
		}
	}
	return true, nil
}

// pushSlots gives each push of the bundle its slot, with its verdict going to
// results.
func (r *bundleRun) pushSlots(results []PushResult) []pushSlot {
	slots := make([]pushSlot, len(r.pushes))
	for j, i := range r.pushes {
		op := r.req.Ops[i]
		item := *op.Push
		results[j] = PushResult{Index: op.Index, TransactionID: item.TransactionID, Queue: item.Queue}
		slots[j] = pushSlot{item: &item, result: &results[j]}
	}
	return slots
}

// ackItems copies the bundle's acks (group defaulted to queue mode) and gives
// each its result.
func (r *bundleRun) ackItems() ([]AckItem, []AckResult) {
	items := make([]AckItem, len(r.acks))
	results := make([]AckResult, len(r.acks))
	for j, i := range r.acks {
		op := r.req.Ops[i]
		items[j] = *op.Ack
		items[j].Group = ackGroup(items[j])
		results[j] = AckResult{Index: op.Index, TransactionID: items[j].TransactionID}
	}
	return items, results
}

// collectResults reports a committed bundle: its results in request order,
// pushes and acks interleaved as the operations were.
func (r *bundleRun) collectResults(pushResults []PushResult, ackResults []AckResult) {
	res := r.res
	res.Results = res.Results[:0]
	pi, ai := 0, 0
	for _, op := range r.req.Ops {
		if op.Push != nil {
			pr := pushResults[pi]
			res.Results = append(res.Results, TxOpResult{Index: op.Index, Push: &pr, Duplicate: pr.Status == PushDuplicate})
			pi++
		} else {
			ar := ackResults[ai]
			res.Results = append(res.Results, TxOpResult{Index: op.Index, Ack: &ar})
			ai++
		}
	}
	res.Success = true
}

// attempt runs the bundle in one transaction. Pushes and acks take two round
// trips: (begin, lock the push partitions and probe their dedup windows, lock
// and read the ack cursors) and (write segments, txns and cursors, commit); kv
// and timer riders come first, as the lock order has them, in round trips of
// their own. A duplicate push, a rejected ack or a lost kv precondition
// returns errRollback with the verdict in r.res.
func (r *bundleRun) attempt(ctx context.Context, e *Engine) error {
	res, req := r.res, r.req
	res.Success, res.Reason, res.Error, res.KVFailure = false, "", "", nil
	res.Results = res.Results[:0]

	tx, done, err := e.acquireTx(ctx)
	if err != nil {
		return err
	}
	defer done()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	if len(req.KV) > 0 || len(req.Timers) > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		tx.open = true
		var lost *KVPreconditionError
		if res.KV, lost, err = applyKV(ctx, tx, req.KV); err != nil {
			return err
		}
		if lost != nil {
			res.KVFailure = lost
			res.fail(TxReasonKVPrecondition, lost.Error())
			return errRollback
		}
		if res.Timers, err = applyTimers(ctx, tx, req.Timers); err != nil {
			return err
		}
		b = &pgx.Batch{}
	}
	leading := b.Len()
	// Set after the riders: their statements are not written for these settings.
	b.Queue(hotPlanSettings)
	leading++

	pushResults := make([]PushResult, len(r.pushes))
	var w *pushWrite
	if len(r.pushes) > 0 {
		w = e.newCachedPushWrite(r.pushSlots(pushResults), true)
		w.queueLock(b)
	}
	ackItems, ackResults := r.ackItems()
	var acks *ackPlan
	if len(ackItems) > 0 {
		// Cursors are locked after the push partitions, as the lock order has it.
		acks = planAcks(ackItems, ackResults, e.leases)
		if !acks.empty() {
			acks.queueReads(b)
		}
	}
	br := tx.SendBatch(ctx, b)
	tx.open = true
	err = func() error {
		defer br.Close()
		for range leading {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		if w != nil {
			if err := w.readLock(br); err != nil {
				return err
			}
		}
		return br.Close() // runs the ack reads' callbacks
	}()
	if err != nil {
		return err
	}

	if w != nil {
		if si, dup := w.duplicateInLog(); dup {
			it := w.slots[si].item
			res.fail(TxReasonDuplicate, fmt.Sprintf("duplicate push: transactionId %q is already in %s/%s",
				it.TransactionID, it.Queue, it.Partition))
			return errRollback
		}
	}
	b = &pgx.Batch{}
	if w != nil {
		w.queueWrites(b)
	}
	var dlqs []dlqFiling
	if acks != nil {
		if w != nil {
			acks.includePushes(w)
		}
		acks = acks.withBundleLeases(ackItems, ackResults, r.requiredLease, e.leases)
		if err := acks.resolveSpans(ctx, tx, ackItems, e.leases); err != nil {
			return err
		}
		dlqs = acks.apply(ackItems, ackResults)
		if acks.sum.rejected {
			res.fail(TxReasonAckRejected, firstAckError(ackResults))
			return errRollback
		}
	}
	if len(dlqs) > 0 {
		// Dead letters copy their message from the log, which includes the
		// bundle's own pushes: those are written first.
		if b.Len() > 0 {
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
			b = &pgx.Batch{}
		}
		corrupt, err := fileDeadLetters(ctx, tx, dlqs, ackResults)
		if err != nil {
			return err
		}
		e.reportDeadLettersNotFiled(corrupt)
	}
	if acks != nil {
		acks.queueWrites(b)
	}
	ho := e.queueCommit(tx, b, w)
	if err := ho.send(ctx, e, tx, b); err != nil {
		return err
	}
	tx.open = false

	r.collectResults(pushResults, ackResults)
	r.committed = func(e *Engine) {
		if w != nil {
			e.knownPartitions.add(w.parts)
			w.wake(e, ho)
		}
		if acks != nil {
			acks.afterRelease(e.waiters, e.leases)
		}
	}
	return nil
}

func (r *TransactionResult) fail(reason, msg string) *TransactionResult {
	r.Success, r.Reason, r.Error = false, reason, msg
	r.Results = []TxOpResult{}
	return r
}

// normalizeTxPush applies the bundle's defaults: partition Default, payload
// {} when missing, a minted transaction id.
func normalizeTxPush(it *PushItem, index int) error {
	if len(it.Payload) == 0 {
		it.Payload = json.RawMessage(`{}`)
	}
	if it.Partition == "" {
		it.Partition = DefaultPartition
	}
	if err := checkPushText(it, "operations", index); err != nil {
		return err
	}
	if it.TransactionID == "" {
		it.TransactionID = NewMessageID().String()
	}
	return nil
}

// singleLease is the one distinct value of requiredLeases, or "".
func singleLease(leases []string) string {
	one := ""
	for _, l := range leases {
		if l == "" || l == one {
			continue
		}
		if one != "" {
			return ""
		}
		one = l
	}
	return one
}

func firstAckError(results []AckResult) string {
	for _, r := range results {
		if !r.Success && r.Error != "" {
			return fmt.Sprintf("ack of transactionId %q rejected: %s; transaction rolled back", r.TransactionID, r.Error)
		}
	}
	return "ack rejected; transaction rolled back"
}
