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
	// HandOffsGivenBack counts hand-off claims that read a segment which
	// does not decode and gave their claim back (not among HandOffs).
	HandOffsGivenBack uint64
}

// HotPathStats reads the counters since the engine started.
func (e *Engine) HotPathStats() HotPathStats {
	return HotPathStats{AcksOneTrip: e.hot.acksOneTrip.Load(), AcksGeneral: e.hot.acksGeneral.Load(),
		UnprobedPushConflicts: e.hot.unprobedConflicts.Load(),
		PushCommitsOneTrip:    e.hot.pushOneTrip.Load(), PushCommitsGeneral: e.hot.pushGeneral.Load(),
		PopsOneTrip: e.hot.popsOneTrip.Load(), PopsGeneral: e.hot.popsGeneral.Load(),
		BundlesOneTrip: e.hot.bundlesOneTrip.Load(), BundlesGeneral: e.hot.bundlesGeneral.Load(),
		HandOffs: e.hot.handOffs.Load(), HandOffsContinued: e.hot.handOffsContinued.Load(),
		HandOffsGivenBack: e.hot.handOffsGivenBack.Load()}
}

// LeasesExpired counts the partition leases that ran out before their ack
// and that a claim of this engine took over since it started: one per
// partition (and group) of a pop's lease, counted when a later pop or a
// hand-off claims the partition again, at that claim's commit. A lease that
// runs out and is never claimed again (an idle queue, a seek, a lease-less
// ack after its expiry) is not counted.
func (e *Engine) LeasesExpired() uint64 { return e.expiredLeases.Load() }

type hotPathCounters struct {
	acksOneTrip, acksGeneral, unprobedConflicts atomic.Uint64
	pushOneTrip, pushGeneral                    atomic.Uint64
	popsOneTrip, popsGeneral                    atomic.Uint64
	bundlesOneTrip, bundlesGeneral              atomic.Uint64
	handOffs, handOffsContinued                 atomic.Uint64
	handOffsGivenBack                           atomic.Uint64
}

// QueueLag is the backlog of one consumer group on one queue.
type QueueLag struct {
	Queue    string
	Group    string
	Messages int64
}

// QueueCount is a per-queue figure (pending messages, dead letters).
type QueueCount struct {
	Queue    string
	Messages int64
}

// Backlog is what the periodic collector exports, each list largest first.
type Backlog struct {
	// Lags: per (queue, group), messages past the group's cursors on every
	// partition of the queue; a partition without a cursor counts from where
	// the group's first pop there would seed it (seedCursorSQL).
	Lags []QueueLag
	// Pending: per queue, messages past the queue-mode cursors (all retained
	// messages of partitions without one: group-less pops start at the start).
	Pending []QueueCount
	// DeadLetters: per queue, dead-letter rows.
	DeadLetters []QueueCount
	// Timers counts the stored timers of every queue.
	Timers TimerCounts
}

// TimerCounts is the cluster's timers not fired yet.
type TimerCounts struct {
	// Waiting: every stored timer (scheduled, not yet fired), Due among them.
	Waiting int64
	// Due: timers whose deliver time has passed, not fired yet.
	Due int64
}

// backlogLagSQL sums, per (queue, group), last_offset − cursor floored at the
// retention start, over every partition of the queue: the cursor rows, plus
// the partitions a group has no cursor on yet, counted from where its next pop
// would seed them. Only a group seeded below its queue's partition_version can
// lack cursors (seedCursors covers every partition of the version it stores,
// the claim's plan relies on the same), and of those only one with fewer
// cursors than its queue has partitions, so the per-partition probe runs for
// those alone: a 100k-partition queue whose groups hold a cursor everywhere
// costs the one pass over the cursors, seeded or not (the probes were 2/3 of
// the statement's time on 500,000 cursors of unseeded groups).
var backlogLagSQL = `WITH cursor_lag AS (
		SELECT p.queue_id, c.consumer_group, sum(greatest(p.last_offset - greatest(c.committed, p.log_start - 1), 0)) AS lag,
			count(*) AS cursors
		FROM lanes.consumers c
		JOIN lanes.partitions p ON p.id = c.partition_id
		GROUP BY p.queue_id, c.consumer_group),
	-- MATERIALIZED: else the partition count ran before the seeded filter, for every group.
	unseeded AS MATERIALIZED (
		SELECT g.* FROM lanes.consumer_groups g
		JOIN lanes.queues gq ON gq.id = g.queue_id AND g.seeded_version < gq.partition_version),
	partition_counts AS (
		SELECT p.queue_id, count(*) AS partitions FROM lanes.partitions p
		WHERE p.queue_id IN (SELECT queue_id FROM unseeded)
		GROUP BY p.queue_id),
	lacking AS (
		SELECT g.* FROM unseeded g
		JOIN partition_counts pc ON pc.queue_id = g.queue_id
		LEFT JOIN cursor_lag cl ON cl.queue_id = g.queue_id AND cl.consumer_group = g.consumer_group
		WHERE coalesce(cl.cursors, 0) < pc.partitions),
	seed_lag AS (
		SELECT p.queue_id, g.consumer_group,
			greatest(p.last_offset - greatest(` + seedCursorSQL(seedModeSQL("g"), "g.subscription_timestamp") + `, p.log_start - 1), 0) AS lag
		FROM lacking g
		JOIN lanes.partitions p ON p.queue_id = g.queue_id
		-- OFFSET 0 keeps this a per-partition index probe: flattened into an
		-- anti-join it hashed every cursor.
		LEFT JOIN LATERAL (SELECT 1 AS found FROM lanes.consumers c
			WHERE c.partition_id = p.id AND c.consumer_group = g.consumer_group OFFSET 0) cur ON true
		WHERE cur.found IS NULL),
	per_group AS (
		SELECT queue_id, consumer_group, sum(lag)::bigint AS lag FROM (
			SELECT queue_id, consumer_group, lag FROM cursor_lag
			UNION ALL
			SELECT queue_id, consumer_group, lag FROM seed_lag) both_parts
		GROUP BY queue_id, consumer_group)
	SELECT q.name, x.consumer_group, x.lag
	FROM per_group x
	JOIN lanes.queues q ON q.id = x.queue_id
	ORDER BY x.lag DESC, q.name, x.consumer_group
	LIMIT $1`

const backlogPendingSQL = `SELECT q.name,
		sum(greatest(p.last_offset - greatest(c.committed, p.log_start - 1), 0))::bigint AS pending
	FROM lanes.partitions p
	JOIN lanes.queues q ON q.id = p.queue_id
	LEFT JOIN lanes.consumers c ON c.partition_id = p.id AND c.consumer_group = '` + QueueModeGroup + `'
	GROUP BY q.name
	ORDER BY pending DESC, q.name
	LIMIT $1`

const backlogDeadLettersSQL = `SELECT q.name, count(*) AS n
	FROM lanes.dlq d
	JOIN lanes.partitions p ON p.id = d.partition_id
	JOIN lanes.queues q ON q.id = p.queue_id
	GROUP BY q.name
	ORDER BY n DESC, q.name
	LIMIT $1`

// Backlog computes the lag, pending and dead-letter figures from the
// watermarks, at most limit rows each, and counts the timers, in one read-only
// transaction. Aggregates over every partition and timer: meant for a
// periodic collector, not for every scrape.
func (e *Engine) Backlog(ctx context.Context, limit int) (Backlog, error) {
	var out Backlog
	b := &pgx.Batch{}
	// The planner's estimate of the seed lookups starts JIT compilation,
	// which cost more than the whole aggregate on 100k partitions.
	b.Queue("SET LOCAL jit = off")
	// The cursor pass hashes every partition: at 4 MB it spilled in two
	// batches from 100k partitions on (a fifth of the statement's CPU).
	b.Queue("SET LOCAL work_mem = '32MB'")
	// One process: parallel workers cut the wall time, not the CPU, and the
	// collector spaces refreshes by their wall time (metrics.RunLagCollector).
	b.Queue("SET LOCAL max_parallel_workers_per_gather = 0")
	b.Queue(backlogLagSQL, limit).Query(func(rows pgx.Rows) (err error) {
		out.Lags, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (QueueLag, error) {
			var l QueueLag
			return l, r.Scan(&l.Queue, &l.Group, &l.Messages)
		})
		return err
	})
	perQueue := func(into *[]QueueCount) func(pgx.Rows) error {
		return func(rows pgx.Rows) (err error) {
			*into, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (QueueCount, error) {
				var c QueueCount
				return c, r.Scan(&c.Queue, &c.Messages)
			})
			return err
		}
	}
	b.Queue(backlogPendingSQL, limit).Query(perQueue(&out.Pending))
	b.Queue(backlogDeadLettersSQL, limit).Query(perQueue(&out.DeadLetters))
	b.Queue(`SELECT count(*), count(*) FILTER (WHERE deliver_at <= now()) FROM lanes.timers`).QueryRow(func(r pgx.Row) error {
		return r.Scan(&out.Timers.Waiting, &out.Timers.Due)
	})
	err := pgx.BeginTxFunc(ctx, e.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return Backlog{}, err
	}
	return out, nil
}
