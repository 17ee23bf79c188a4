package engine

import (
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// handOff is the claim of one parked pop run in the commit round trip of a
// write that made work claimable for it: a push (or a transaction bundle that
// pushes), or an ack that ended a lease with more waiting behind it. Its
// one-trip claim statement and commit are queued after the write's COMMIT,
// so the pop gets its batch without the two more hops between broker and
// PostgreSQL its own claim after a wake would cost. The claim runs only after
// the write committed (a failed statement skips the rest of the pipeline), so
// nothing is delivered that the write did not make claimable.
type handOff struct {
	wt      *waiter
	req     PopRequest
	plan    popQueue
	leaseID string
	d       delivery
	// writeCommitted is set when the write's COMMIT answered: an error after
	// it is the claim's, and the write stands.
	writeCommitted bool
	// groupWakes is how many parked pops of the handed pop's group the
	// write still wakes: what the claim saw claimable and left (leftBehind),
	// or -1 when the claim failed and the group is woken as usual.
	groupWakes int
}

// queueCommit queues the COMMIT of a transaction that writes w (nil: one
// that pushes nothing) and, after it, the claim for the oldest idle parked
// pop of a queue w touched whose group has a cached claim plan. It returns
// that hand-off, or nil when no pop qualifies.
func (e *Engine) queueCommit(b *pgx.Batch, w *pushWrite) *handOff {
	commit := b.Queue("COMMIT")
	if w == nil {
		return nil
	}
	for queue, parts := range w.touched {
		if ho := e.queueHandOff(b, commit, queue, parts, ""); ho != nil {
			return ho
		}
	}
	return nil
}

// queueAckCommit queues the COMMIT of a one-trip ack and, when the ack ends
// a lease that took a full batch from one partition (more is likely
// waiting), the claim for the oldest idle parked pop of the group that may
// take that partition. The pop the ack would wake claims in the ack's round
// trip instead.
func (e *Engine) queueAckCommit(b *pgx.Batch, a indexedAck) *handOff {
	commit := b.Queue("COMMIT")
	if !a.endsFullBacklog {
		return nil
	}
	return e.queueHandOff(b, commit, a.queue, []string{a.partitionName}, a.group)
}

// queueHandOff takes the oldest idle parked pop of queue that a write to
// partitions may serve (of group only, when group is set) and whose group has
// a cached claim plan, and queues its claim after commit.
func (e *Engine) queueHandOff(b *pgx.Batch, commit *pgx.QueuedQuery, queue string, partitions []string, group string) *handOff {
	var plan popQueue
	wt, req := e.waiters.takeForHandOff(queue, partitions, func(g string) bool {
		if group != "" && g != group {
			return false
		}
		var ok bool
		plan, ok = e.popPlans.get(queue, g)
		return ok
	})
	if wt == nil {
		return nil
	}
	req.claimsAhead = 0 // the partition released in this round trip is the one to take
	ho := &handOff{wt: wt, req: req, plan: plan, leaseID: newLeaseID(&req), groupWakes: -1}
	commit.Exec(func(pgconn.CommandTag) error {
		ho.writeCommitted = true
		return nil
	})
	beginPop(b, &ho.req)
	e.queueClaimAndCommit(b, &ho.req, []*popQueue{&ho.plan}, ho.leaseID, true, &ho.d)
	e.waiters.claimStarted(req.Queue, req.Group)
	return ho
}

// wakes reports how many parked pops of group on queue a commit that ran ho
// still wakes per its touched partitions: what ho's claim left, or all of
// them (ok false) when ho is nil, failed, or served another queue.
func (ho *handOff) wakes(queue string) (group string, n int, ok bool) {
	if ho == nil || ho.groupWakes < 0 || ho.req.Queue != queue {
		return "", 0, false
	}
	return ho.req.Group, ho.groupWakes, true
}

// finish hands the claim's answer to the pop and returns the write's own
// outcome from the batch's error (batchErr itself when ho is nil). A claim
// that failed after the write committed (a stale plan, a lost connection)
// leaves the pop to claim for itself, as a woken pop does; the caller's
// connection cleanup rolls back what it left open. A claim that found
// nothing (the partition leased to another pop of the group) sends the pop
// back to waiting without a claim of its own: it would find the same.
func (ho *handOff) finish(e *Engine, batchErr error) error {
	if ho == nil {
		return batchErr
	}
	othersRunning := e.waiters.claimEnded(ho.req.Queue, ho.req.Group)
	if batchErr != nil {
		handOffDone(ho.wt, nil)
		if !ho.writeCommitted {
			return batchErr
		}
		var pgErr *pgconn.PgError
		if !errors.As(batchErr, &pgErr) || pgErr.Code != stalePopPlanCode {
			e.log.Warn("claim for a parked pop after a write failed; the pop claims for itself", "err", batchErr)
		}
		return nil
	}
	e.popPlans.advanceFloor(ho.req.Queue, ho.req.Group, ho.plan.claimEpoch, ho.d.floor)
	res, err := e.deliver(&ho.req, ho.leaseID, &ho.d)
	if err != nil {
		e.log.Warn("reading the claim for a parked pop failed", "err", err)
		res = nil
	} else {
		ho.groupWakes = res.leftBehind(othersRunning)
		e.hot.handOffs.Add(1)
	}
	handOffDone(ho.wt, res)
	return nil
}
