package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
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
//  5. pushes       segments, txns, last_offset
//  6. consumers    of every ack, ascending (partition_id, consumer_group) (as a plain ack)
//
// A plain push takes only 3–5, an ack only 6, a pop only consumer rows with
// SKIP LOCKED, the timer loop timer rows with SKIP LOCKED then 3–5.
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
	requiredLease := singleLease(req.RequiredLeases)

	var w *pushWrite
	bundle := func(tx pgx.Tx) error {
		res.Success, res.Reason, res.Error, res.KVFailure = false, "", "", nil
		res.Results = res.Results[:0]
		var err error
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

		pushResults := make([]PushResult, len(pushes))
		slots := make([]pushSlot, len(pushes))
		for j, i := range pushes {
			item := *req.Ops[i].Push
			pushResults[j] = PushResult{Index: req.Ops[i].Index, TransactionID: item.TransactionID, Queue: item.Queue}
			slots[j] = pushSlot{item: &item, result: &pushResults[j]}
		}
		if len(slots) > 0 {
			w = e.newCachedPushWrite(slots, true)
			if err := w.lockInTx(ctx, tx); err != nil {
				return err
			}
			if si, dup := w.duplicateInLog(); dup {
				it := slots[si].item
				res.fail(TxReasonDuplicate, fmt.Sprintf("duplicate push: transactionId %q is already in %s/%s",
					it.TransactionID, it.Queue, it.Partition))
				return errRollback
			}
			b := &pgx.Batch{}
			w.queueWrites(b)
			if b.Len() > 0 {
				if err := tx.SendBatch(ctx, b).Close(); err != nil {
					return err
				}
			}
		}

		ackItems := make([]AckItem, len(acks))
		for j, i := range acks {
			ackItems[j] = *req.Ops[i].Ack
		}
		if err := resolveBundleLeases(ctx, tx, ackItems, requiredLease); err != nil {
			return err
		}
		ackResults := make([]AckResult, len(ackItems))
		for j := range ackItems {
			ackResults[j] = AckResult{Index: req.Ops[acks[j]].Index, TransactionID: ackItems[j].TransactionID}
		}
		if len(ackItems) > 0 {
			sum, err := applyAcks(ctx, tx, ackItems, ackResults, e.leases)
			if err != nil {
				return err
			}
			if sum.rejected {
				res.fail(TxReasonAckRejected, firstAckError(ackResults))
				return errRollback
			}
		}

		// Results in request order: pushes and acks interleave as the operations did.
		pi, ai := 0, 0
		for i := range req.Ops {
			if req.Ops[i].Push != nil {
				r := pushResults[pi]
				res.Results = append(res.Results, TxOpResult{Index: req.Ops[i].Index, Push: &r,
					Duplicate: r.Status == PushDuplicate})
				pi++
			} else {
				r := ackResults[ai]
				res.Results = append(res.Results, TxOpResult{Index: req.Ops[i].Index, Ack: &r})
				ai++
			}
		}
		res.Success = true
		return nil
	}
	err := e.retryTx(ctx, bundle)
	if e.forgetStalePartitions(err) {
		// A cached partition's queue was deleted: run again, provisioning.
		err = e.retryTx(ctx, bundle)
	}
	switch {
	case errors.Is(err, errRollback):
		res.Results, res.KV, res.Timers = []TxOpResult{}, nil, nil
		return res, nil
	case err != nil:
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			e.log.Error("transaction bundle failed", "err", err)
			res.Results, res.KV, res.Timers = []TxOpResult{}, nil, nil
			return res.fail(TxReasonDBError, "database error: "+pgErr.Message), nil
		}
		return nil, err
	}
	if w != nil && res.Success {
		e.knownPartitions.add(w.parts)
		w.wake(e)
	}
	return res, nil
}

func (r *TransactionResult) fail(reason, msg string) *TransactionResult {
	r.Success, r.Reason, r.Error = false, reason, msg
	r.Results = []TxOpResult{}
	return r
}

// normalizeTxPush applies the bundle's defaults: partition Default, payload
// {} when missing, a minted transaction id.
func normalizeTxPush(it *PushItem, index int) error {
	if strings.TrimSpace(it.Queue) == "" {
		return invalid(fmt.Sprintf("operations[%d].queue", index), "operations[%d]: a push needs a queue", index)
	}
	if len(it.Payload) == 0 {
		it.Payload = json.RawMessage(`{}`)
	}
	if it.Partition == "" {
		it.Partition = DefaultPartition
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

// resolveBundleLeases fills the lease of acks that name none: the current
// holder of the (partition, group) cursor, else the single distinct value of
// requiredLeases, else none (lease-less). The check itself happens under the
// cursor lock in applyAcks, so a lease that expired or moved meanwhile rejects.
func resolveBundleLeases(ctx context.Context, tx pgx.Tx, items []AckItem, required string) error {
	var pids []uuid.UUID
	var groups []string
	for i := range items {
		if items[i].Group == "" {
			items[i].Group = QueueModeGroup
		}
		if items[i].LeaseID != "" {
			continue
		}
		if pid, err := uuid.Parse(items[i].PartitionID); err == nil {
			pids = append(pids, pid)
			groups = append(groups, items[i].Group)
		}
	}
	if len(pids) == 0 {
		return nil
	}
	type cg struct {
		p uuid.UUID
		g string
	}
	holders := map[cg]string{}
	rows, err := tx.Query(ctx, `SELECT c.partition_id, c.consumer_group, c.lease_id::text
		FROM unnest($1::uuid[], $2::text[]) AS x(pid, g)
		JOIN lanes.consumers c ON c.partition_id = x.pid AND c.consumer_group = x.g
		WHERE c.lease_id IS NOT NULL`, uuidArray(pids), groups)
	if err != nil {
		return err
	}
	for rows.Next() {
		var k cg
		var lease string
		if err := rows.Scan(&k.p, &k.g, &lease); err != nil {
			rows.Close()
			return err
		}
		holders[k] = lease
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for i := range items {
		if items[i].LeaseID != "" {
			continue
		}
		pid, err := uuid.Parse(items[i].PartitionID)
		if err != nil {
			continue
		}
		if h, ok := holders[cg{pid, items[i].Group}]; ok {
			items[i].LeaseID = h
		} else {
			items[i].LeaseID = required
		}
	}
	return nil
}

func firstAckError(results []AckResult) string {
	for _, r := range results {
		if !r.Success && r.Error != "" {
			return fmt.Sprintf("ack of transactionId %q rejected: %s; transaction rolled back", r.TransactionID, r.Error)
		}
	}
	return "ack rejected; transaction rolled back"
}
