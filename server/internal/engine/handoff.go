package engine

import (
	"context"

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
	// continued: the claim is continueLeaseSQL, not the serving order's walk;
	// when it takes nothing the pop claims for itself.
	continued bool
}

// queueCommit queues the COMMIT of a transaction that writes w (nil: one
// that pushes nothing) and, after it, the claim for the oldest idle parked
// pop of a queue w touched whose group has a cached claim plan. It returns
// that hand-off, or nil when no pop qualifies.
func (e *Engine) queueCommit(tx *connTx, b *pgx.Batch, w *pushWrite) *handOff {
	commit := b.Queue("COMMIT")
	if w == nil {
		return nil
	}
	for queue, parts := range w.touched {
		if ho := e.queueHandOff(tx, b, commit, queue, parts, "", nil); ho != nil {
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
func (e *Engine) queueAckCommit(tx *connTx, b *pgx.Batch, a indexedAck) *handOff {
	commit := b.Queue("COMMIT")
	if !a.endsFullBacklog {
		return nil
	}
	var cont *indexedAck
	if a.onlyPartition {
		cont = &a
	}
	return e.queueHandOff(tx, b, commit, a.queue, []string{a.partitionName}, a.group, cont)
}

// continueLeaseSQL leases the next batch of one partition to a parked pop of
// the group whose lease on it an ack just ended ($1 partition, $2 group, $3
// batch, $4 lease seconds or 0 for the queue's, $5 lease id; $6 and $7 the
// cached plan's queue and claim epoch, checked first), and reads the
// segments covering it, in the rows the claim statement returns. It stands
// in for that statement when the ended lease's claim saw no other partition
// of the group claimable, so the serving order has nothing to choose: it
// probes one cursor, one partition and one queue instead of starting a plan
// of some ninety nodes, the consume path's largest cost in PostgreSQL. It
// takes nothing (and the pop claims for itself) where that statement would
// judge more than the cursor and the log: a queue with delayedProcessing or
// windowBuffer. The cursor is locked SKIP LOCKED, as every pop's is; the
// claim floor is left as it is (it only ever trails).
const continueLeaseSQL = `WITH plan AS (
		-- the cached plan's guard, as the claim statement checks it
		SELECT lanes.expect(EXISTS (SELECT 1 FROM lanes.consumer_groups g
			JOIN lanes.queues q ON q.id = g.queue_id
			WHERE g.consumer_group = $2 AND g.queue_id = $6
			  AND g.seeded_version >= q.partition_version AND g.claim_epoch = $7),
			'` + stalePopPlanCode + `', 'the cached pop plan is stale') AS holds),
	locked AS (
		SELECT c.partition_id, c.committed, c.lease_expires_at IS NOT NULL AS lease_expired FROM lanes.consumers c
		WHERE c.partition_id = $1 AND c.consumer_group = $2
		  AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= now())
		  AND (SELECT holds FROM plan)
		FOR UPDATE SKIP LOCKED),
	span AS MATERIALIZED (
		-- The batch before the byte budget: from the cursor, up to the log
		-- start as the claim statement moves it, at most $3 messages.
		SELECT x.*, least(x.last_offset, x.lo + $3::int8 - 1) AS hi
		FROM (SELECT l.partition_id AS pid, greatest(l.committed + 1, p.log_start) AS lo, p.log_start, p.last_offset,
				p.name AS pname, q.name AS qname, l.lease_expired,
				CASE WHEN $4::int4 > 0 THEN $4::int4 WHEN q.lease_time > 0 THEN q.lease_time ELSE 60 END AS lease
			FROM locked l
			JOIN lanes.partitions p ON p.id = l.partition_id
			JOIN lanes.queues q ON q.id = p.queue_id
			WHERE q.delayed_processing = 0 AND q.window_buffer = 0) x
		WHERE x.lo <= x.last_offset),
	spans AS MATERIALIZED (
		-- The span's segments, read once: cut by their sizes, and returned up
		-- to the cut (see the claim statement's spans).
		SELECT sg.base_offset, sg.end_offset, sg.created_at, sg.frames, octet_length(sg.frames)::int8 AS bytes
		FROM span t
		CROSS JOIN LATERAL (` + segmentsCoveringSpan + `) sg),
	leased AS (
		UPDATE lanes.consumers c SET
			-- up to the log start, as the claim statement moves it
			committed = greatest(c.committed, t.log_start - 1),
			-- least ignores the byte budget's cut when there is none ($8 NULL)
			batch_end = least(t.hi, ` + continuedByteCut + `),
			lease_id = $5::uuid,
			lease_expires_at = now() + make_interval(secs => t.lease),
			last_consumed_at = now()
		FROM span t
		WHERE c.partition_id = t.pid AND c.consumer_group = $2
		  AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= now())
		RETURNING c.partition_id AS pid, t.lo, c.batch_end AS hi, t.pname, t.qname, t.lease, t.lease_expired)
	SELECT 1, NULL::int8, NULL::int8, now(), t.pid, t.pname, t.qname, t.lo, t.hi, t.lease, false, t.lease_expired,
		sg.base_offset, sg.end_offset, sg.created_at, sg.frames
	FROM leased t
	LEFT JOIN spans sg ON sg.base_offset <= t.hi
	ORDER BY sg.base_offset`

// continuedByteCut is where continueLeaseSQL's batch ends under the answer's
// byte budget ($8, NULL: none), as the claim statement cuts it (sized): the
// last whole segment begun under the budget.
const continuedByteCut = `(SELECT max(z.end_offset) FILTER (WHERE z.before < $8::int8)
		FROM (SELECT s.end_offset, coalesce(sum(s.bytes) OVER (ORDER BY s.base_offset
				ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
			FROM spans s
			WHERE $8::int8 IS NOT NULL) z)`

// continues reports whether the hand-off for req after the ack a may run
// continueLeaseSQL: a leased pop with a batch of its own, of a's queue, that
// may take a's partition. Every claimFullScanEvery-th such hand-off runs the
// claim statement instead, so the serving order is consulted now and then
// even while one partition keeps its lane busy.
func (e *Engine) continues(a *indexedAck, req *PopRequest) bool {
	return a != nil && !req.AutoAck && req.Batch > 0 && req.Queue == a.queue &&
		(req.Partition == "" || req.Partition == a.partitionName) &&
		e.continuations.Add(1)%claimFullScanEvery != 0
}

// queueHandOff takes the oldest idle parked pop of queue that a write to
// partitions may serve (of group only, when group is set) and whose group has
// a cached claim plan, and queues its claim after commit.
func (e *Engine) queueHandOff(tx *connTx, b *pgx.Batch, commit *pgx.QueuedQuery, queue string, partitions []string, group string, after *indexedAck) *handOff {
	if e.popsArePaused() {
		return nil
	}
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
	beginPop(tx, b, &ho.req)
	if e.continues(after, &ho.req) {
		ho.continued = true
		b.Queue(continueLeaseSQL, after.partition, ho.req.Group, int64(ho.req.Batch), int32(ho.req.LeaseSeconds),
			ho.leaseID, ho.plan.id, ho.plan.claimEpoch, e.popByteBudget()).Query(ho.d.scan)
		b.Queue("COMMIT")
	} else {
		e.queueClaimAndCommit(b, &ho.req, []*popQueue{&ho.plan}, ho.leaseID, true, &ho.d)
	}
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

// send sends b, a write's batch ending with the claim ho runs for a parked
// pop (none when ho is nil), and finishes ho. Such a batch runs to its end
// whatever becomes of the write's request, as a pop's own claim does
// (claimOnce): cut short, the claim may commit with its pop never told, a
// lease held for nobody until it expires.
func (ho *handOff) send(ctx context.Context, e *Engine, tx *connTx, b *pgx.Batch) error {
	if ho != nil {
		var cancel context.CancelFunc
		ctx, cancel = e.claimContext(ctx)
		defer cancel()
	}
	return ho.finish(e, tx.SendBatch(ctx, b).Close())
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
		if !hasSQLState(batchErr, stalePopPlanCode) {
			e.handOffFailures.Failed(batchErr)
		}
		return nil
	}
	if ho.continued && len(ho.d.taken) == 0 {
		handOffDone(ho.wt, nil) // the cursor was taken or the queue needs the claim statement
		return nil
	}
	e.popPlans.advanceFloor(ho.req.Queue, ho.req.Group, ho.plan.claimEpoch, ho.plan.generation, &ho.d)
	res, err := e.deliverClaim(context.Background(), &ho.req, ho.leaseID, &ho.d)
	if err != nil {
		res = nil // the corrupt partition's claim was given back: the pop claims for itself
		e.hot.handOffsGivenBack.Add(1)
	} else {
		ho.groupWakes = res.leftBehind(othersRunning)
		e.hot.handOffs.Add(1)
		if ho.continued {
			e.hot.handOffsContinued.Add(1)
		}
	}
	handOffDone(ho.wt, res)
	return nil
}
