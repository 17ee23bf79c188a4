package engine

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// ParkedPops counts the long polls parked on this engine right now.
func (e *Engine) ParkedPops() int {
	return e.waiters.count()
}

// ClaimsRunning counts the queue pop checks running on this engine right now,
// each from before its pop-maintenance test until its claim ends. Once it has
// been 0 after pop maintenance went on, no check from before the switch can
// still claim.
func (e *Engine) ClaimsRunning() int {
	return e.waiters.claimsRunning()
}

// HotPathStats counts how often this engine's fast paths held.
type HotPathStats struct {
	// AcksOneTrip and AcksGeneral count ack requests committed in one round
	// trip (ackInOneTrip) and the general way.
	AcksOneTrip, AcksGeneral uint64
	// UnprobedPushConflicts counts unprobed push writes that met a stored
	// transaction id and ran again probed (pauseUnprobedWrites).
	UnprobedPushConflicts uint64
	// PushCommitsOneTrip and PushCommitsGeneral count push group commits
	// written in one round trip (pushOneTripSQL) and the general way.
	PushCommitsOneTrip, PushCommitsGeneral uint64
	// PopsOneTrip and PopsGeneral count pop transactions committed in one
	// round trip on a cached plan (popInOneTrip) and the general way.
	PopsOneTrip, PopsGeneral uint64
	// BundlesOneTrip and BundlesGeneral count transaction bundles committed in
	// one round trip (bundleRun.inOneTrip) and the general way.
	BundlesOneTrip, BundlesGeneral uint64
	// HandOffs counts claims for a parked pop run in the commit round trip
	// of a push or an ack (handOff); they are not among the pop transactions.
	HandOffs uint64
	// HandOffsContinued counts the hand-offs of acks that leased the next
	// batch of the acked partition with continueLeaseSQL (among HandOffs).
	HandOffsContinued uint64
}

// HotPathStats reads the counters since the engine started.
func (e *Engine) HotPathStats() HotPathStats {
	return HotPathStats{AcksOneTrip: e.hot.acksOneTrip.Load(), AcksGeneral: e.hot.acksGeneral.Load(),
		UnprobedPushConflicts: e.hot.unprobedConflicts.Load(),
		PushCommitsOneTrip:    e.hot.pushOneTrip.Load(), PushCommitsGeneral: e.hot.pushGeneral.Load(),
		PopsOneTrip: e.hot.popsOneTrip.Load(), PopsGeneral: e.hot.popsGeneral.Load(),
		BundlesOneTrip: e.hot.bundlesOneTrip.Load(), BundlesGeneral: e.hot.bundlesGeneral.Load(),
		HandOffs: e.hot.handOffs.Load(), HandOffsContinued: e.hot.handOffsContinued.Load()}
}

type hotPathCounters struct {
	acksOneTrip, acksGeneral, unprobedConflicts atomic.Uint64
	pushOneTrip, pushGeneral                    atomic.Uint64
	popsOneTrip, popsGeneral                    atomic.Uint64
	bundlesOneTrip, bundlesGeneral              atomic.Uint64
	handOffs, handOffsContinued                 atomic.Uint64
}

// QueueLag is the backlog of one consumer group on one queue: messages past
// its cursors, summed over the partitions it has cursors on.
type QueueLag struct {
	Queue    string
	Group    string
	Messages int64
}

// QueueLags computes every (queue, group) backlog from the watermarks
// (last_offset − committed, floored at the retention start), largest first,
// at most limit rows. One aggregate over the cursor rows; meant for a
// periodic collector, not for every scrape.
func (e *Engine) QueueLags(ctx context.Context, limit int) ([]QueueLag, error) {
	rows, err := e.pool.Query(ctx, `SELECT q.name, c.consumer_group,
			sum(greatest(p.last_offset - greatest(c.committed, p.log_start - 1), 0))::bigint AS lag
		FROM lanes.consumers c
		JOIN lanes.partitions p ON p.id = c.partition_id
		JOIN lanes.queues q ON q.id = p.queue_id
		GROUP BY q.name, c.consumer_group
		ORDER BY lag DESC, q.name, c.consumer_group
		LIMIT $1`, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (QueueLag, error) {
		var l QueueLag
		err := r.Scan(&l.Queue, &l.Group, &l.Messages)
		return l, err
	})
}
