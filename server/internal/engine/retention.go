package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/lanesmq/lanes/server/internal/failurelog"
)

// Retention deletes whole segments from the head of a partition's log and
// advances log_start. Three rules decide which segments go:
//
//   - maxWaitTimeSeconds: age alone, leased or not, whatever retentionEnabled says;
//   - retentionSeconds (with retentionEnabled): age alone, consumed or not;
//   - completedRetentionSeconds (with retentionEnabled): age, and every offset of the
//     segment committed by every group of the partition (no groups: nothing goes;
//     a group subscribed to a discovery scope holding the queue counts from its
//     subscription on, before its first pop meets the queue).
//
// Deletion is a prefix of the log, so log_start stays one number.
//
// A queue with a retentionSinkHold keeps every segment, whatever the rule, until it
// is older than retentionSinkHoldMaxSeconds: the hold names a sink that must commit
// a segment before it goes, Lanes has no sinks, so no commit ever releases it early
// and only the hold's maximum does.
//
// Finding work: partitions.oldest_segment_at is a lower bound on the partition's
// oldest segment, indexed with queue_id. A pass asks, per queue with a rule, for the
// partitions whose bound is older than the queue's shortest window: an index range
// scan that returns only partitions that may hold expired segments, so a pass costs
// what there is to delete, not the number of partitions. (last_write_at cannot do
// this: a partition written every second still has old segments at its head.)
//
// A head the completed rule holds (no group, or a group that has not committed
// it) would stay at the front of that index for as long as it is held, and a
// pass re-checked it, in a locking transaction, before anything behind it. So a
// pass that keeps a head past the queue's shortest window raises the bound to
// where the partition is due again retentionRecheckDelay later: the bound is
// then when the partition next deserves a look, put in head-time terms, and no
// longer a lower bound on that head (nothing else reads it). A pass takes the
// partitions due first, queue by queue in turn (each queue's first, then each
// one's second, ...), up to its cap: a held partition waits behind everything
// that fell due before its recheck, and no queue's backlog takes another
// queue's turn. It judges the candidates' heads without locks, one statement a
// chunk that also moves the bounds of those it keeps (retentionRecheckSQL),
// and takes the partition lock (retentionStep) only where something may go.

const (
	retentionLeaseName = "retention"
	// retentionLeaseTTL outlives a crashed sweeper by at most this long; a live one
	// renews at every pass and every third of it during a pass.
	retentionLeaseTTL = 30 * time.Second
	// retentionStepSegments bounds one delete transaction (and the partition row lock it holds).
	retentionStepSegments = 500
	// retentionReadChunk is how many candidates' heads one statement judges; the
	// bounds it moves keep up to that many partition rows locked while it runs (~10 ms).
	retentionReadChunk = 500
	// defaultRetentionPassPartitions bounds one pass; the rest waits for the next one.
	defaultRetentionPassPartitions = 20000
	// retentionRecheckDelay is how long a partition whose expired head a step kept
	// waits before it is a candidate again; with the pass interval it stays under
	// the minute in which a segment past its window must go once nothing holds it.
	retentionRecheckDelay = 30 * time.Second
	txnsPurgeBatch        = 200
	// txnsMinWindowSeconds keeps transaction ids at least this long for ack resolution.
	txnsMinWindowSeconds = 900
)

// RetentionStats reports one pass.
type RetentionStats struct {
	Leader     bool  // this engine held the sweeper lease and swept
	Candidates int   // partitions whose head may have expired
	Partitions int   // partitions that lost at least one segment
	Segments   int   // segments deleted
	Messages   int64 // messages in those segments
	TxnsPurged int64 // transaction-index rows purged
}

// retentionHolder names this engine in lanes.leader_leases. The random broker
// id tells apart brokers that share a hostname and a pid (two containers, each
// its process 1); the host and pid say which process holds the lease. Each
// release starts a new generation (a "/N" suffix), so a release's marker
// stops only the acquires sent before it.
func (e *Engine) retentionHolder() string {
	host, _ := os.Hostname()
	holder := fmt.Sprintf("%s:%d:%s", host, os.Getpid(), e.brokerID)
	if gen := e.retentionGeneration.Load(); gen > 0 {
		holder += fmt.Sprintf("/%d", gen)
	}
	return holder
}

// StartRetention runs a retention pass every interval until Close. Every broker
// runs the loop; the sweeper lease lets one of them sweep at a time.
func (e *Engine) StartRetention(interval time.Duration) {
	if interval <= 0 {
		interval = 5 * time.Second
	}
	failures := failurelog.New(e.log, slog.LevelWarn, "retention pass failed", "")
	e.runEvery(interval, func() {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-e.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		start := time.Now()
		st, err := e.RetentionPass(ctx)
		// Read before cancel(), which would make every pass look stopped.
		stopping := ctx.Err() != nil
		cancel()
		if e.cfg.OnRetentionPass != nil {
			e.cfg.OnRetentionPass(st, time.Since(start), err)
		}
		if err != nil {
			if !stopping {
				failures.Failed(err)
			}
			return
		}
		failures.Succeeded()
		if st.Segments > 0 || st.TxnsPurged > 0 {
			// DEBUG: a busy queue's retention deletes at every pass, and the
			// lanes_retention_* counters carry the figures.
			e.log.Debug("retention pass", "partitions", st.Partitions, "segments", st.Segments,
				"messages", st.Messages, "txnsPurged", st.TxnsPurged, "took", time.Since(start))
		}
	}, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		e.releaseRetentionLease(ctx)
	})
}

// acquireRetentionLease takes or renews the sweeper lease; false means another
// broker holds it.
func (e *Engine) acquireRetentionLease(ctx context.Context) (bool, error) {
	return e.acquireRetentionLeaseAs(ctx, e.retentionHolder())
}

// acquireRetentionLeaseAs takes or renews the lease for holder. A row another
// holder released is free at once; one released by holder itself is not: that
// acquire was sent before the release and ran after it (below).
func (e *Engine) acquireRetentionLeaseAs(ctx context.Context, holder string) (bool, error) {
	var got string
	err := e.pool.QueryRow(ctx, `INSERT INTO lanes.leader_leases (name, holder, expires_at)
		VALUES ($1, $2, now() + make_interval(secs => $3))
		ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
		WHERE lanes.leader_leases.holder = EXCLUDED.holder OR lanes.leader_leases.expires_at < now()
			OR (starts_with(lanes.leader_leases.holder, $4) AND lanes.leader_leases.holder <> ($4 || EXCLUDED.holder))
		RETURNING holder`, retentionLeaseName, holder, retentionLeaseTTL.Seconds(), retentionReleasedBy).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// retentionReleasedBy marks a released lease row: "released by <holder>". No
// holder starts so (a hostname has no spaces).
const retentionReleasedBy = "released by "

// releaseRetentionLease hands the sweeper lease back at stop. Deleting the row
// would not do: the stop cancels a pass's acquire on the client side only, and
// a starved database can run that acquire after the delete, which then holds
// the lease for its TTL and keeps every other broker from sweeping. The row is
// marked released by this holder instead, for a TTL: that late acquire cannot
// take it, any other holder can at once (brokers older than this marker wait
// for its expiry, as for a crashed holder), and this engine's later passes use
// the next generation's name. Where no row is left, the marker is inserted,
// for the same late acquire; another holder's live lease is left alone.
func (e *Engine) releaseRetentionLease(ctx context.Context) {
	holder := e.retentionHolder()
	e.retentionGeneration.Add(1)
	_, _ = e.pool.Exec(ctx, `INSERT INTO lanes.leader_leases (name, holder, expires_at)
		VALUES ($1, $3::text || $2::text, now() + make_interval(secs => $4))
		ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
		WHERE lanes.leader_leases.holder = $2 OR lanes.leader_leases.expires_at < now()`,
		retentionLeaseName, holder, retentionReleasedBy, retentionLeaseTTL.Seconds())
}

// RetentionPass sweeps once if this engine holds (or wins) the sweeper lease.
func (e *Engine) RetentionPass(ctx context.Context) (RetentionStats, error) {
	var st RetentionStats
	leader, err := e.acquireRetentionLease(ctx)
	if err != nil || !leader {
		return st, err
	}
	st.Leader = true
	renewAt := time.Now().Add(retentionLeaseTTL / 3)
	candidates, err := e.retentionCandidates(ctx)
	if err != nil {
		return st, err
	}
	st.Candidates = len(candidates)
	renew := func() (bool, error) {
		if time.Now().After(renewAt) {
			if leader, err := e.acquireRetentionLease(ctx); err != nil || !leader {
				return false, err
			}
			renewAt = time.Now().Add(retentionLeaseTTL / 3)
		}
		return true, nil
	}
	for chunk := range slices.Chunk(candidates, retentionReadChunk) {
		if leader, err := renew(); err != nil || !leader {
			return st, err
		}
		toStep, err := e.retentionHeadsToStep(ctx, chunk)
		if err != nil {
			return st, fmt.Errorf("retention heads: %w", err)
		}
		for _, pid := range toStep {
			if leader, err := renew(); err != nil || !leader {
				return st, err
			}
			deletedHere := false
			for {
				segs, msgs, more, err := e.retentionStep(ctx, pid)
				if err != nil {
					return st, fmt.Errorf("retention of partition %s: %w", pid, err)
				}
				st.Segments += segs
				st.Messages += msgs
				deletedHere = deletedHere || segs > 0
				if !more {
					break
				}
			}
			if deletedHere {
				st.Partitions++
			}
		}
	}
	for {
		n, more, err := e.purgeExpiredTxns(ctx)
		if err != nil {
			return st, fmt.Errorf("purge transaction index: %w", err)
		}
		st.TxnsPurged += n
		if !more {
			break
		}
	}
	return st, nil
}

// retentionWindowSQL is the queue q's shortest window in seconds, NULL without a
// rule: a partition whose oldest segment is younger has nothing to delete.
const retentionWindowSQL = `(SELECT CASE WHEN q.retention_sink_hold = '' OR r.secs IS NULL THEN r.secs
		-- a sink hold keeps the head at least that long (see the comment at the top)
		ELSE GREATEST(r.secs, q.retention_sink_hold_max_seconds) END
	FROM (SELECT LEAST(
		NULLIF(q.max_wait_time_seconds, 0),
		CASE WHEN q.retention_enabled THEN NULLIF(q.retention_seconds, 0) END,
		CASE WHEN q.retention_enabled THEN NULLIF(q.completed_retention_seconds, 0) END) AS secs) r)`

// retentionCandidates lists partitions of queues with a rule whose oldest segment
// may be past the queue's shortest window, the earliest due first and the queues
// taking turns (see the comment at the top).
func (e *Engine) retentionCandidates(ctx context.Context) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	b := &pgx.Batch{}
	// The planner's estimate of the sort of many candidates starts JIT
	// compilation, which cost ~450 ms against ~30 ms for the query. The batch
	// is one implicit transaction, where SET LOCAL works but logs a WARNING in
	// PostgreSQL on every pass; set_config does the same silently.
	b.Queue("SELECT set_config('jit', 'off', true)")
	b.Queue(`SELECT c.id
		FROM lanes.queues q
		CROSS JOIN LATERAL (SELECT `+retentionWindowSQL+` AS secs) w
		-- LATERAL with ORDER BY … LIMIT keeps the planner on the (queue_id, oldest_segment_at)
		-- index range per queue; a plain join hash-joins over every partition.
		CROSS JOIN LATERAL (SELECT p.id, p.oldest_segment_at + make_interval(secs => w.secs) AS due,
				row_number() OVER (ORDER BY p.oldest_segment_at) AS turn
			FROM lanes.partitions p
			WHERE p.queue_id = q.id AND p.oldest_segment_at < now() - make_interval(secs => w.secs)
			ORDER BY p.oldest_segment_at LIMIT $1) c
		WHERE w.secs IS NOT NULL
		ORDER BY c.turn, c.due
		LIMIT $1`, cmp.Or(e.retentionPassPartitions, defaultRetentionPassPartitions)).Query(func(rows pgx.Rows) (err error) {
		ids, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		return err
	})
	return ids, e.pool.SendBatch(ctx, b).Close()
}

// retentionFloorSQL is the first offset some group has not committed in the
// partition p of queue q, NULL when there are no groups, or a group that will
// read the queue has no cursor here yet (it may start from the head when it
// seeds): one registered on the queue, or one subscribed to a discovery scope
// holding the queue that has not met it yet (its stored subscription may start
// before this head). Only the completed rule reads it.
const retentionFloorSQL = `(CASE WHEN q.retention_enabled AND q.completed_retention_seconds > 0 THEN (
	SELECT CASE WHEN EXISTS (SELECT 1 FROM lanes.consumer_groups cg
				WHERE cg.queue_id = q.id AND NOT EXISTS (SELECT 1 FROM lanes.consumers c2
					WHERE c2.partition_id = p.id AND c2.consumer_group = cg.consumer_group))
			OR EXISTS (SELECT 1 FROM lanes.discovery_subscriptions ds
				WHERE (ds.namespace = '' OR ds.namespace = q.namespace) AND (ds.task = '' OR ds.task = q.task)
					AND NOT EXISTS (SELECT 1 FROM lanes.consumer_groups cg
						WHERE cg.consumer_group = ds.consumer_group AND cg.queue_id = q.id))
		THEN NULL ELSE min(c.committed) + 1 END
	FROM lanes.consumers c WHERE c.partition_id = p.id) END)`

// retentionExpiredSQL says whether the rules of queue q let segment s go now,
// given the partition's floor f.floor (retentionFloorSQL); the rules are the
// ones at the top, in this one place for the sweep's read and its step.
const retentionExpiredSQL = `(CASE
		WHEN q.retention_sink_hold <> '' AND q.retention_sink_hold_max_seconds > 0
			AND s.created_at >= now() - make_interval(secs => q.retention_sink_hold_max_seconds) THEN false
		WHEN q.max_wait_time_seconds > 0
			AND s.created_at < now() - make_interval(secs => q.max_wait_time_seconds) THEN true
		WHEN q.retention_enabled AND q.retention_seconds > 0
			AND s.created_at < now() - make_interval(secs => q.retention_seconds) THEN true
		WHEN q.retention_enabled AND q.completed_retention_seconds > 0
			AND s.created_at < now() - make_interval(secs => q.completed_retention_seconds)
			THEN coalesce(s.end_offset < f.floor, false)
		ELSE false END)`

// retentionRecheckSQL judges the heads of the partitions $1 in one statement,
// without locks: it moves the bound of every partition nothing of which may go
// now (as judge does for a step, see the comment at the top; $2 is
// retentionRecheckDelay), and returns, in the order of $1, those with
// something to delete. Most candidates a pass meets are heads a group holds,
// and a stale read only delays one by retentionRecheckDelay. SKIP LOCKED: a
// partition a push holds keeps its bound until the next pass, and no lock
// order can deadlock with a push's.
const retentionRecheckSQL = `WITH heads AS (
		SELECT k.id, k.turn, s.created_at, ` + retentionExpiredSQL + ` AS expired, ` + retentionWindowSQL + ` AS secs
		FROM unnest($1::uuid[]) WITH ORDINALITY AS k(id, turn)
		JOIN lanes.partitions p ON p.id = k.id
		JOIN lanes.queues q ON q.id = p.queue_id
		-- OFFSET 0: once per partition, not inlined into retentionExpiredSQL
		CROSS JOIN LATERAL (SELECT ` + retentionFloorSQL + ` AS floor OFFSET 0) f
		LEFT JOIN LATERAL (SELECT s.created_at, s.end_offset FROM lanes.segments s
			WHERE s.partition_id = p.id ORDER BY s.base_offset LIMIT 1) s ON true),
	kept AS (SELECT id, CASE WHEN created_at IS NULL THEN now()
			WHEN created_at < now() - make_interval(secs => secs)
				THEN now() + make_interval(secs => $2) - make_interval(secs => secs)
			ELSE created_at END AS bound
		FROM heads WHERE NOT expired),
	moved AS (UPDATE lanes.partitions p SET oldest_segment_at = k.bound
		FROM (SELECT p2.id, k.bound FROM kept k
			JOIN lanes.partitions p2 ON p2.id = k.id AND p2.oldest_segment_at < k.bound
			ORDER BY p2.id FOR UPDATE OF p2 SKIP LOCKED) k
		WHERE p.id = k.id)
	SELECT id FROM heads WHERE expired ORDER BY turn`

type headSegment struct {
	base, end int64
	createdAt time.Time
	expired   bool // retentionExpiredSQL
}

// retentionHead is what the rules make of a partition's head at one instant.
type retentionHead struct {
	pid             uuid.UUID
	gone            bool // the partition was deleted with its queue
	logStart        int64
	completed       int // the queue's completedRetentionSeconds and dedupWindowSeconds,
	dedup           int // for the window its deleted transaction ids are kept
	segments        []headSegment
	expired         int       // segments[:expired] may go (at most retentionStepSegments)
	oldestSegmentAt time.Time // the partition's bound once they are gone (see the comment at the top)
	shortest        *int      // the queue's shortest window (retentionWindowSQL)
	now             time.Time
}

// queueRetentionHead adds to b the reads of a partition's head; judge the
// result once the batch is closed. The first takes the partition row lock,
// which orders a deleting step with pushes (allocator) and other steps.
func queueRetentionHead(b *pgx.Batch, pid uuid.UUID) *retentionHead {
	h := &retentionHead{pid: pid}
	b.Queue(`SELECT p.log_start, q.completed_retention_seconds, q.dedup_window_seconds,
			`+retentionWindowSQL+`, now()
		FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
		WHERE p.id = $1 FOR UPDATE OF p`, pid).Query(func(rows pgx.Rows) error {
		h.gone = !rows.Next()
		if !h.gone {
			if err := rows.Scan(&h.logStart, &h.completed, &h.dedup, &h.shortest, &h.now); err != nil {
				return err
			}
		}
		rows.Close()
		return rows.Err()
	})
	b.Queue(`SELECT s.base_offset, s.end_offset, s.created_at, `+retentionExpiredSQL+`
		FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
		-- OFFSET 0 and LIMIT: the floor once, then the segments, whatever the statistics say
		CROSS JOIN LATERAL (SELECT `+retentionFloorSQL+` AS floor OFFSET 0) f
		CROSS JOIN LATERAL (SELECT s.base_offset, s.end_offset, s.created_at FROM lanes.segments s
			WHERE s.partition_id = p.id ORDER BY s.base_offset LIMIT $2) s
		WHERE p.id = $1 ORDER BY s.base_offset`, pid, retentionStepSegments+1).Query(func(rows pgx.Rows) error {
		var err error
		h.segments, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (headSegment, error) {
			var s headSegment
			err := r.Scan(&s.base, &s.end, &s.createdAt, &s.expired)
			return s, err
		})
		return err
	})
	return h
}

// judge sets what the rules let go of the head and the bound that follows.
func (h *retentionHead) judge() {
	if h.gone {
		return
	}
	k := 0
	for k < len(h.segments) && k < retentionStepSegments && h.segments[k].expired {
		k++
	}
	h.expired = k
	// The new lower bound on the oldest segment: the first survivor, or now when
	// none is left (a later push writes after this transaction's start). A
	// survivor the rules keep although it is past the shortest window is due
	// again retentionRecheckDelay from now, not at the next pass (see the
	// comment at the top; retentionRecheckSQL does the same for the heads it keeps).
	h.oldestSegmentAt = h.now
	if k < len(h.segments) {
		h.oldestSegmentAt = h.segments[k].createdAt
		if h.shortest != nil && h.now.Sub(h.oldestSegmentAt) > time.Duration(*h.shortest)*time.Second {
			h.oldestSegmentAt = h.now.Add(retentionRecheckDelay - time.Duration(*h.shortest)*time.Second)
		}
	}
}

// retentionHeadsToStep judges the heads of pids in one statement
// (retentionRecheckSQL) and returns the partitions that have something to
// delete, for retentionStep, which reads them again under the lock.
func (e *Engine) retentionHeadsToStep(ctx context.Context, pids []uuid.UUID) ([]uuid.UUID, error) {
	rows, err := e.pool.Query(ctx, retentionRecheckSQL, pids, retentionRecheckDelay.Seconds())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
}

// retentionStep deletes up to retentionStepSegments expired segments from the head
// of one partition in one transaction. more reports that a full step was deleted
// and the head may hold more.
func (e *Engine) retentionStep(ctx context.Context, pid uuid.UUID) (segments int, messages int64, more bool, err error) {
	err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		h := queueRetentionHead(b, pid)
		if err := tx.SendBatch(ctx, b).Close(); err != nil || h.gone {
			return err
		}
		h.judge()
		k, head, logStart := h.expired, h.segments, h.logStart
		if k == 0 {
			_, err := tx.Exec(ctx, `UPDATE lanes.partitions SET oldest_segment_at = $2
				WHERE id = $1 AND oldest_segment_at < $2`, pid, h.oldestSegmentAt)
			return err
		}
		last := head[k-1]
		rows, err := tx.Query(ctx, `DELETE FROM lanes.segments WHERE partition_id = $1 AND base_offset <= $2
			RETURNING base_offset, end_offset, frames`, pid, last.base)
		if err != nil {
			return err
		}
		var txnIDs []string
		var corrupt []*CorruptSegmentError
		for rows.Next() {
			var base, end int64
			var blob []byte
			if err := rows.Scan(&base, &end, &blob); err != nil {
				rows.Close()
				return err
			}
			segments++
			messages += end - base + 1
			frames, err := decodeFrames(blob, int(end-base+1))
			if err != nil {
				corrupt = append(corrupt, &CorruptSegmentError{PartitionID: pid, SegmentBase: base, SegmentEnd: end, Err: err})
				continue
			}
			for i := range frames {
				txnIDs = append(txnIDs, frames[i].TransactionID)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, c := range corrupt {
			// Its ids come from the transaction index instead: a segment that
			// does not decode goes like any other, and stops neither this
			// partition's retention nor the pass.
			ids, err := e.corruptSegmentTxnIDs(ctx, tx, c)
			if err != nil {
				return err
			}
			txnIDs = append(txnIDs, ids...)
		}
		newStart := max(last.end+1, logStart)
		if _, err := tx.Exec(ctx, `UPDATE lanes.partitions SET log_start = greatest(log_start, $2), oldest_segment_at = $3
			WHERE id = $1`, pid, newStart, h.oldestSegmentAt); err != nil {
			return err
		}
		// Transaction ids stay for dedup and ack resolution until their window passes.
		window := max(h.dedup, h.completed, txnsMinWindowSeconds)
		if _, err := tx.Exec(ctx, `INSERT INTO lanes.txns_expiry (partition_id, below_offset, purge_after, transaction_ids)
			VALUES ($1, $2, $3::timestamptz + make_interval(secs => $4), $5)`,
			pid, newStart, last.createdAt, window, txnIDs); err != nil {
			return err
		}
		more = k == retentionStepSegments
		return nil
	})
	return segments, messages, more, err
}

// purgeExpiredTxns deletes the transaction-index rows of deleted segments whose
// window has passed, a batch of due expiry entries at a time. The window is the
// queue's current one, so a row can outlive its entry's purge_after (the window
// was raised since, or the row was stamped a moment after its segment): such
// an entry keeps the ids it could not purge yet and falls due again when the
// oldest of them passes the window, rather than going and leaving them behind
// for good.
func (e *Engine) purgeExpiredTxns(ctx context.Context) (purged int64, more bool, err error) {
	err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var entries int
		err := tx.QueryRow(ctx, `WITH due AS (
				SELECT x.id, x.partition_id, x.below_offset, x.transaction_ids,
					make_interval(secs => GREATEST(coalesce(q.dedup_window_seconds, 0),
						coalesce(q.completed_retention_seconds, 0), $2)) AS keep_for
				FROM lanes.txns_expiry x
				LEFT JOIN lanes.partitions p ON p.id = x.partition_id
				LEFT JOIN lanes.queues q ON q.id = p.queue_id
				WHERE x.purge_after <= now()
				ORDER BY x.purge_after LIMIT $1 FOR UPDATE OF x SKIP LOCKED),
			-- the entry's ids whose row is still the deleted copy (a later push may own the id now)
			held AS (SELECT DISTINCT d.id, t.transaction_id, t.created_at, d.keep_for
				FROM due d
				CROSS JOIN LATERAL unnest(d.transaction_ids) AS ids(txn)
				JOIN lanes.txns t ON t.partition_id = d.partition_id AND t.transaction_id = ids.txn
					AND t.message_offset < d.below_offset),
			purged AS (DELETE FROM lanes.txns t
				USING due d
				CROSS JOIN LATERAL unnest(d.transaction_ids) AS ids(txn)
				WHERE t.partition_id = d.partition_id AND t.transaction_id = ids.txn
				  AND t.message_offset < d.below_offset AND t.created_at < now() - d.keep_for
				RETURNING 1),
			young AS (SELECT id, array_agg(transaction_id) AS ids, min(created_at) + keep_for AS purge_after
				FROM held WHERE created_at >= now() - keep_for GROUP BY id, keep_for),
			-- (data-modifying WITH clauses run whether or not the query reads them)
			moved AS (UPDATE lanes.txns_expiry x SET transaction_ids = y.ids, purge_after = y.purge_after
				FROM young y WHERE x.id = y.id RETURNING 1),
			gone AS (DELETE FROM lanes.txns_expiry x USING due d
				WHERE x.id = d.id AND NOT EXISTS (SELECT 1 FROM young y WHERE y.id = d.id) RETURNING 1)
			SELECT (SELECT count(*) FROM due), (SELECT count(*) FROM purged)`,
			txnsPurgeBatch, txnsMinWindowSeconds).
			Scan(&entries, &purged)
		more = entries == txnsPurgeBatch
		return err
	})
	return purged, more, err
}

// corruptSegmentTxnIDs reads from the transaction index the ids of the
// messages of a segment retention deletes without being able to decode it, and
// logs the segment.
func (e *Engine) corruptSegmentTxnIDs(ctx context.Context, tx pgx.Tx, c *CorruptSegmentError) ([]string, error) {
	if err := tx.QueryRow(ctx, `SELECT q.name, p.name FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
		WHERE p.id = $1`, c.PartitionID).Scan(&c.Queue, &c.Partition); err != nil {
		return nil, err
	}
	e.reportCorruptSegment(c, "deletedByRetention", true)
	rows, err := tx.Query(ctx, `SELECT transaction_id FROM lanes.txns
		WHERE partition_id = $1 AND message_offset BETWEEN $2 AND $3`, c.PartitionID, c.SegmentBase, c.SegmentEnd)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
