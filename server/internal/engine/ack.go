package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// AckStatus is a normalised acknowledgement status.
type AckStatus int

// Precedence at an equal offset: dlq > failed > retry > completed.
const (
	AckCompleted AckStatus = iota
	AckRetry
	AckFailed
	AckDLQ
)

// NormalizeAckStatus maps a wire status to its meaning: absent, completed,
// success, acked and ok complete; retry and dlq are themselves; anything else fails.
func NormalizeAckStatus(s string) AckStatus {
	switch s {
	case "", "completed", "success", "acked", "ok":
		return AckCompleted
	case "retry":
		return AckRetry
	case "dlq":
		return AckDLQ
	default:
		return AckFailed
	}
}

// AckItem acknowledges one message of one (partition, group).
type AckItem struct {
	TransactionID string
	PartitionID   string
	Status        string
	Group         string
	LeaseID       string
	Error         string
}

// AckResult reports one item; Success means the instruction was executed.
type AckResult struct {
	Index         int
	TransactionID string
	Success       bool
	Error         string
	LeaseReleased bool
	DLQ           bool
	Noop          bool
	Dropped       bool
}

const (
	errAlreadyCommitted  = "already committed: the cursor moved past this message before this ack"
	errUnresolvable      = "unresolvable: transaction not in the ack window (hash purged or never pushed); if leased, the message redelivers"
	errInvalidLease      = "invalid or expired lease"
	errConsumerNotFound  = "consumer not found"
	errRetriesExhausted  = "Retries exhausted"
	errDeletedBeforeDLQ  = "message deleted by retention before it could be dead-lettered"
	errCorruptBeforeDLQ  = "message not dead-lettered: its stored segment no longer decodes (the broker log names its offsets)"
	errDeadLetterNotHead = "dead-lettering waits until the earlier messages of the lease are acknowledged; the batch redelivers from the first unacknowledged message"
)

// Ack applies acknowledgements in one transaction. Items are grouped by
// (partition, group, lease) and each group is one offset commit.
func (e *Engine) Ack(ctx context.Context, items []AckItem) ([]AckResult, error) {
	results := make([]AckResult, len(items))
	if len(items) == 0 {
		return results, nil
	}
	for i := range items {
		if err := checkAckText(&items[i], "acknowledgments", i); err != nil {
			return nil, err
		}
	}
	reset := func() {
		for i := range items {
			results[i] = AckResult{Index: i, TransactionID: items[i].TransactionID}
		}
	}
	reset()
	done, err := e.ackInOneTrip(ctx, items, results)
	if err != nil && !IsRetryable(err) {
		return nil, err
	}
	if done {
		e.hot.acksOneTrip.Add(1)
		return results, nil
	}
	ackErr := retryTransient(func() error {
		reset()
		return e.ackPipelined(ctx, items, results)
	})
	if ackErr != nil {
		return nil, ackErr
	}
	e.hot.acksGeneral.Add(1)
	return results, nil
}

// indexedAck is an ack request every item of which completes a message that
// one lease of this broker delivered from one partition: the lease index
// resolves them to the span [lo, hi].
type indexedAck struct {
	partition     uuid.UUID
	partitionName string
	group, lease  string
	queue         string
	lo, hi        int64
	// endsFullBacklog: the ack ends a lease that took a full batch from this
	// partition alone, so the ack claims the next one for a parked pop
	// (queueAckCommit).
	endsFullBacklog bool
	// onlyPartition: the claim that granted the lease saw no other partition
	// of the group claimable, so the next batch may continue this partition.
	onlyPartition bool
}

// resolveIndexedAck reports whether items form an indexedAck; an item naming
// no lease takes defaultLease.
func resolveIndexedAck(items []AckItem, leases *leaseIndex, defaultLease string) (indexedAck, bool) {
	first := items[0]
	lease := first.LeaseID
	if lease == "" {
		lease = defaultLease
	}
	if lease == "" {
		return indexedAck{}, false
	}
	partition, err := uuid.Parse(first.PartitionID)
	if err != nil {
		return indexedAck{}, false
	}
	group := ackGroup(first)
	txns := make([]string, len(items))
	for i, it := range items {
		itemLease := it.LeaseID
		if itemLease == "" {
			itemLease = defaultLease
		}
		if itemLease != lease || ackGroup(it) != group || NormalizeAckStatus(it.Status) != AckCompleted {
			return indexedAck{}, false
		}
		if it.PartitionID != first.PartitionID {
			if p, err := uuid.Parse(it.PartitionID); err != nil || p != partition {
				return indexedAck{}, false
			}
		}
		txns[i] = it.TransactionID
	}
	r, ok := leases.resolveAll(lease, partition, txns)
	if !ok {
		return indexedAck{}, false
	}
	return indexedAck{partition: partition, partitionName: r.partition, group: group, lease: lease, queue: r.queue,
		lo: r.lo, hi: r.hi, endsFullBacklog: r.endsFullBacklog, onlyPartition: r.onlyPartition}, true
}

// ackOneTripSQL commits an indexedAck: the clamp rule comes down to "the
// cursor moves to hi ($3), the lease goes when that is the batch end". Its
// WHERE clause checks in the database what that follows from: the lease ($4)
// is the cursor's and live, the cursor is below lo ($5), the batch end at or
// above hi. It returns one row when it moved the cursor, none otherwise. The
// cursor always moves (committed < lo <= hi), so the head changes and the
// retry budget, which is the head message's, starts afresh.
const ackOneTripSQL = `UPDATE lanes.consumers c SET committed = $3,
		lease_id = CASE WHEN $3 >= c.batch_end THEN NULL ELSE c.lease_id END,
		lease_expires_at = CASE WHEN $3 >= c.batch_end THEN NULL ELSE c.lease_expires_at END,
		retry_count = 0,
		total_consumed = c.total_consumed + ($3 - c.committed),
		last_consumed_at = now()
	WHERE c.partition_id = $1 AND c.consumer_group = $2
	  AND c.lease_id = $4::uuid AND c.lease_expires_at > now()
	  AND c.committed < $5 AND c.batch_end >= $3
	RETURNING c.lease_id IS NULL AS released, (SELECT p.last_offset FROM lanes.partitions p WHERE p.id = c.partition_id) AS last_offset`

func (a indexedAck) args() []any {
	return []any{a.partition, a.group, a.hi, a.lease, a.lo}
}

// committed follows the commit of a: the lease's index entries go when it
// released the lease, and a parked pop of the group wakes if the partition
// still holds messages, unless ho claimed for one in the ack's round trip:
// then the group is woken only for what that claim left.
func (a indexedAck) committed(e *Engine, released bool, lastOffset int64, ho *handOff) {
	if g, n, ok := ho.wakes(a.queue); ok && g == a.group {
		if released {
			e.leases.forget(a.lease, a.partition)
		}
		e.waiters.wakeGroup(a.queue, a.group, n)
		return
	}
	if released {
		leaseReleased(e.waiters, e.leases, a.lease, a.partition, a.queue, a.group, lastOffset > a.hi)
	}
}

// ackInOneTrip commits, in one round trip, the common ack: an indexedAck
// (ackOneTripSQL). Anything else (another lease state, a nack, an id the index
// lacks) reports done false and the ack runs the general way.
func (e *Engine) ackInOneTrip(ctx context.Context, items []AckItem, results []AckResult) (bool, error) {
	ack, ok := resolveIndexedAck(items, e.leases, "")
	if !ok {
		return false, nil
	}
	tx, done, err := e.acquireHotTx(ctx)
	if err != nil {
		return false, err
	}
	defer done()
	tx.open = true // begun by the batch below, which commits it too
	var released, matched bool
	var lastOffset int64
	b := &pgx.Batch{}
	e.beginAck(tx, b)
	b.Queue(ackOneTripSQL, ack.args()...).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&released, &lastOffset)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		matched = err == nil
		return err
	})
	ho := e.queueAckCommit(tx, b, ack)
	if err := ho.send(ctx, e, tx, b); err != nil {
		return false, err
	}
	tx.open = false
	if !matched {
		// The general ack that follows wakes for its own release; what a
		// hand-off claim left is woken here.
		if g, n, ok := ho.wakes(ack.queue); ok {
			e.waiters.wakeGroup(ack.queue, g, n)
		}
		return false, nil
	}
	for i := range results {
		results[i].Success, results[i].LeaseReleased = true, released
	}
	ack.committed(e, released, lastOffset, ho)
	return true, nil
}

// beginAck is beginHot for a plain ack (not a transaction bundle's). Unless
// AckSyncCommit is set, the ack commits without waiting for the WAL flush,
// set in the same statement: an ack is an offset commit, and if the database
// crashes before the WAL writer flushes it (within three wal_writer_delay
// periods, or at the next durable commit, whichever comes first), the cursor
// is back where it was and the span redelivers, the same outcome as a lost
// lease or an expired one, which at-least-once allows. What a durable commit
// after it depends on is flushed with it: WAL is flushed in order. A broker
// crash loses nothing here: the commit is PostgreSQL's, not the broker's.
func (e *Engine) beginAck(tx *connTx, b *pgx.Batch) {
	if e.cfg.AckSyncCommit {
		tx.beginHot(b)
		return
	}
	tx.beginHotNoFlushWait(b)
}

// ackPipelined runs one ack request in two round trips: (begin, lock the
// cursors, resolve the transaction ids) and (write the cursors, commit).
// Filing a dead letter adds a read of the poison message's segment, and an id
// neither the lease index nor lanes.txns places in a leased span a read of the
// span (resolveSpans).
func (e *Engine) ackPipelined(ctx context.Context, items []AckItem, results []AckResult) error {
	plan := planAcks(items, results, e.leases)
	if plan.empty() {
		return nil
	}
	tx, done, err := e.acquireHotTx(ctx)
	if err != nil {
		return err
	}
	defer done()
	b := &pgx.Batch{}
	e.beginAck(tx, b)
	plan.queueReads(b)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	tx.open = true
	if err := plan.resolveSpans(ctx, tx, items, e.leases); err != nil {
		return err
	}
	plan.duplicateCompletedIsNoop = true
	dlqs := plan.apply(items, results)
	if len(dlqs) > 0 {
		corrupt, err := fileDeadLetters(ctx, tx, dlqs, results)
		if err != nil {
			return err
		}
		e.reportDeadLettersNotFiled(corrupt)
	}
	b = &pgx.Batch{}
	if len(dlqs) > 0 && !e.cfg.AckSyncCommit {
		// A dead letter is a stored copy of the message: its commit waits for
		// the flush like a push's.
		b.Queue(syncCommitOn)
	}
	plan.queueWrites(b)
	b.Queue("COMMIT")
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	tx.open = false
	plan.afterRelease(e.waiters, e.leases)
	return nil
}

// afterRelease runs leaseReleased once the ack committed, for each cursor
// whose lease it released.
func (p *ackPlan) afterRelease(w *waiters, leases *leaseIndex) {
	for k, row := range p.rows {
		if !row.touched || row.initialLease == "" || row.leaseID != "" {
			continue
		}
		leaseReleased(w, leases, row.initialLease, k.p, row.queue, k.g, row.lastOffset > row.committed)
	}
}

// leaseReleased follows an ack that released lease on partition: its index
// entries go, and a partition still holding messages (backlog) goes to one
// parked pop of the group, since only pushes wake parked pops otherwise.
func leaseReleased(w *waiters, leases *leaseIndex, lease string, partition uuid.UUID, queue, group string, backlog bool) {
	leases.forget(lease, partition)
	if backlog {
		w.wakeGroup(queue, group, 1)
	}
}

// ackGroup is the consumer group an ack item names, queue mode when none.
func ackGroup(it AckItem) string {
	if it.Group == "" {
		return QueueModeGroup
	}
	return it.Group
}

// ackRef is one ack item inside its group.
type ackRef struct {
	index  int
	status AckStatus
	offset int64
	known  bool
}

type ackGroupKey struct {
	partition uuid.UUID
	group     string
	lease     string
}

type consumerRow struct {
	committed, batchEnd    int64
	leaseID                string
	leaseLive              bool
	retryCount, retryLimit int
	dlqEnabled             bool
	dedup                  bool // the queue's dedup window is on
	lastOffset             int64
	initialCommitted       int64
	initialLease           string
	queue                  string
	touched                bool
}

// ackSummary tells a transaction bundle whether any ack was rejected.
type ackSummary struct{ rejected bool }

type cursorKey struct {
	p uuid.UUID
	g string
}

// ackPlan is one ack request grouped by (partition, group, lease), with the
// cursor rows and transaction-id offsets its reads fill in.
type ackPlan struct {
	sum     ackSummary
	groups  map[ackGroupKey][]ackRef
	keys    []ackGroupKey
	lockP   []uuid.UUID
	lockG   []string
	resP    []uuid.UUID
	resT    []string
	rows    map[cursorKey]*consumerRow
	offsets map[cursorKey]int64 // (partition, transaction id) -> offset
	// spans holds, per cursor with a leased span, the offsets within
	// (committed, batch_end] of each id its acks name, lowest first
	// (resolveSpans); nil where lanes.txns alone resolves them.
	spans map[cursorKey]map[string][]int64
	// duplicateCompletedIsNoop answers a completed ack the cursor already
	// covers as a noop even when its lease is gone (a retried ack request).
	// A transaction leaves it off: its ack of a message someone else acked
	// must roll back, or two pipeline workers both push a successor.
	duplicateCompletedIsNoop bool
}

// planAcks groups items; an item under a lease the index knows is resolved
// here, every other one goes to the lanes.txns probe.
func planAcks(items []AckItem, results []AckResult, leases *leaseIndex) *ackPlan {
	p := &ackPlan{groups: map[ackGroupKey][]ackRef{}, rows: map[cursorKey]*consumerRow{}, offsets: map[cursorKey]int64{}}
	for i, it := range items {
		pid, err := uuid.Parse(it.PartitionID)
		if err != nil {
			results[i].Error = fmt.Sprintf("invalid partitionId %q", it.PartitionID)
			p.sum.rejected = true
			continue
		}
		k := ackGroupKey{pid, ackGroup(it), it.LeaseID}
		p.groups[k] = append(p.groups[k], ackRef{index: i, status: NormalizeAckStatus(it.Status)})
	}
	for k := range p.groups {
		p.keys = append(p.keys, k)
	}
	sort.Slice(p.keys, func(i, j int) bool {
		a, b := p.keys[i], p.keys[j]
		if c := compareUUID(a.partition, b.partition); c != 0 {
			return c < 0
		}
		if a.group != b.group {
			return a.group < b.group
		}
		return a.lease < b.lease
	})
	for i, k := range p.keys {
		if i == 0 || k.partition != p.keys[i-1].partition || k.group != p.keys[i-1].group {
			p.lockP = append(p.lockP, k.partition)
			p.lockG = append(p.lockG, k.group)
		}
		for _, r := range p.groups[k] {
			txn := items[r.index].TransactionID
			if k.lease != "" {
				if offs, ok := leases.lookup(k.lease, k.partition, txn); ok {
					// The newest copy, as lanes.txns would say; resolveSpans
					// picks the copy an ack within the lease's span names.
					p.offsets[cursorKey{k.partition, txn}] = offs[len(offs)-1]
					continue
				}
			}
			p.resP = append(p.resP, k.partition)
			p.resT = append(p.resT, txn)
		}
	}
	return p
}

func (p *ackPlan) empty() bool { return len(p.keys) == 0 }

// includePushes lets a bundle's acks see the bundle's own pushes, as in the
// reference's order (pushes, then acks): a transaction id the bundle pushes
// resolves to the offset it now takes, and each pushed partition's log ends
// where the pushes leave it. The cursors were read before the pushes were
// written (both in the bundle's first round trip).
func (p *ackPlan) includePushes(w *pushWrite) {
	q := w.queued
	for i, txn := range q.txIDs {
		p.offsets[cursorKey{q.txPartitions[i], txn}] = q.txOffsets[i]
	}
	for i, pid := range q.partitions {
		for k, row := range p.rows {
			if k.p == pid && q.lastOffsets[i] > row.lastOffset {
				row.lastOffset = q.lastOffsets[i]
			}
		}
	}
}

// withBundleLeases gives each bundle ack that names no lease the live lease
// holding its cursor (read under lock by queueReads), else the bundle's single
// required lease, else none (a lease-less ack), and regroups the plan by
// lease. Acks naming no lease were resolved through lanes.txns in the same
// reads, so the regrouped plan needs no further round trip.
func (p *ackPlan) withBundleLeases(items []AckItem, results []AckResult, required string, leases *leaseIndex) *ackPlan {
	changed := false
	for i := range items {
		if items[i].LeaseID != "" {
			continue
		}
		pid, err := uuid.Parse(items[i].PartitionID)
		if err != nil {
			continue
		}
		// An expired lease is no current holder: adopting it would reject an
		// ack that a plain lease-less ack of the same message commits.
		if row := p.rows[cursorKey{pid, ackGroup(items[i])}]; row != nil && row.leaseID != "" && row.leaseLive {
			items[i].LeaseID = row.leaseID
		} else {
			items[i].LeaseID = required
		}
		changed = changed || items[i].LeaseID != ""
	}
	if !changed {
		return p
	}
	regrouped := planAcks(items, results, leases)
	regrouped.rows = p.rows
	for k, off := range p.offsets {
		if _, ok := regrouped.offsets[k]; !ok {
			regrouped.offsets[k] = off
		}
	}
	return regrouped
}

// queueReads locks every cursor row once, in key order, and resolves the
// transaction ids the lease index did not; both go out in one round trip.
func (p *ackPlan) queueReads(b *pgx.Batch) {
	b.Queue(`SELECT c.partition_id, c.consumer_group, c.committed, c.batch_end,
			coalesce(c.lease_id::text, ''), coalesce(c.lease_expires_at > now(), false), c.retry_count,
			q.retry_limit, (q.dead_letter_queue OR q.dlq_after_max_retries), q.dedup_window_seconds > 0, p.last_offset, q.name
		FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS x(pid, g, ord)
		CROSS JOIN LATERAL (SELECT * FROM lanes.consumers c
			WHERE c.partition_id = x.pid AND c.consumer_group = x.g FOR UPDATE) c
		CROSS JOIN LATERAL (SELECT p.last_offset, p.queue_id FROM lanes.partitions p WHERE p.id = x.pid OFFSET 0) p
		CROSS JOIN LATERAL (SELECT * FROM lanes.queues q WHERE q.id = p.queue_id OFFSET 0) q
		ORDER BY x.ord`, uuidArray(p.lockP), textArray(p.lockG)).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var k cursorKey
			var r consumerRow
			if err := rows.Scan(&k.p, &k.g, &r.committed, &r.batchEnd, &r.leaseID, &r.leaseLive, &r.retryCount,
				&r.retryLimit, &r.dlqEnabled, &r.dedup, &r.lastOffset, &r.queue); err != nil {
				return err
			}
			r.initialCommitted = r.committed
			r.initialLease = r.leaseID
			p.rows[k] = &r
		}
		return rows.Err()
	})
	if len(p.resP) == 0 {
		return
	}
	b.Queue(`SELECT t.partition_id, t.transaction_id, t.message_offset
		FROM unnest($1::uuid[], $2::text[]) AS x(pid, t)
		CROSS JOIN LATERAL (SELECT t.partition_id, t.transaction_id, t.message_offset FROM lanes.txns t
			WHERE t.partition_id = x.pid AND t.transaction_id = x.t OFFSET 0) t`, uuidArray(p.resP), textArray(p.resT)).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k cursorKey
				var off int64
				if err := rows.Scan(&k.p, &k.g, &off); err != nil {
					return err
				}
				p.offsets[k] = off
			}
			return rows.Err()
		})
}

// apply runs the clamp rule for every group in memory and returns the dead
// letters to file.
func (p *ackPlan) apply(items []AckItem, results []AckResult) []dlqFiling {
	var dlqs []dlqFiling
	for _, k := range p.keys {
		refs := p.groups[k]
		row := p.rows[cursorKey{k.partition, k.group}]
		if row == nil {
			for _, r := range refs {
				results[r.index].Error = errConsumerNotFound
			}
			p.sum.rejected = true
			continue
		}
		if k.lease != "" && (row.leaseID != k.lease || !row.leaseLive) {
			if p.duplicateCompletedIsNoop && p.allCompletedAtOrBelow(row.committed, k.partition, refs, items) {
				// A retried ack of a batch that its first try completed (and
				// so released): the cursor already covers it, so it is the
				// harmless duplicate an ack retry must be, not a lease error.
				for _, r := range refs {
					results[r.index].Success, results[r.index].Noop = true, true
				}
				continue
			}
			for _, r := range refs {
				results[r.index].Error = errInvalidLease
			}
			p.sum.rejected = true
			continue
		}
		// With a lease, resolution is bounded to the leased span; without, to the log.
		upper := row.lastOffset
		if row.batchEnd > row.committed && (k.lease != "" || row.leaseLive) {
			upper = row.batchEnd
		}
		p.resolveRefs(k, refs, items, upper)
		f, rejected := commitGroup(row, k, refs, items, results)
		if rejected {
			p.sum.rejected = true
		}
		if f != nil {
			dlqs = append(dlqs, *f)
		}
	}
	return dlqs
}

// allCompletedAtOrBelow reports whether every ack of refs is completed and
// names a message at or below committed.
func (p *ackPlan) allCompletedAtOrBelow(committed int64, partition uuid.UUID, refs []ackRef, items []AckItem) bool {
	for _, r := range refs {
		off, ok := p.offsets[cursorKey{partition, items[r.index].TransactionID}]
		if r.status != AckCompleted || !ok || off > committed {
			return false
		}
	}
	return true
}

// queueWrites adds the one statement that writes the final state of every
// cursor touched.
func (p *ackPlan) queueWrites(b *pgx.Batch) {
	var updP []uuid.UUID
	var updG []string
	var updC, updE, updD []int64
	var updRelease []bool
	var updRetry []int32
	for i := range p.lockP {
		row := p.rows[cursorKey{p.lockP[i], p.lockG[i]}]
		if row == nil || !row.touched {
			continue
		}
		updP = append(updP, p.lockP[i])
		updG = append(updG, p.lockG[i])
		updC = append(updC, row.committed)
		updE = append(updE, row.batchEnd)
		updRelease = append(updRelease, row.leaseID == "")
		updRetry = append(updRetry, int32(row.retryCount))
		updD = append(updD, max(row.committed-row.initialCommitted, 0))
	}
	if len(updP) == 0 {
		return
	}
	b.Queue(`UPDATE lanes.consumers c SET committed = x.committed, batch_end = x.batch_end,
			lease_id = CASE WHEN x.release THEN NULL ELSE c.lease_id END,
			lease_expires_at = CASE WHEN x.release THEN NULL ELSE c.lease_expires_at END,
			retry_count = x.retry, total_consumed = c.total_consumed + x.consumed,
			last_consumed_at = CASE WHEN x.consumed > 0 THEN now() ELSE c.last_consumed_at END
		FROM (SELECT x.*, k.ctid AS row_ctid
			FROM unnest($1::uuid[], $2::text[], $3::int8[], $4::int8[], $5::bool[], $6::int4[], $7::int8[])
				AS x(pid, g, committed, batch_end, release, retry, consumed)
			-- the rows are locked by this transaction, so their ctid is stable;
			-- a TID probe per row keeps the plan independent of statistics
			CROSS JOIN LATERAL (SELECT ctid FROM lanes.consumers
				WHERE partition_id = x.pid AND consumer_group = x.g OFFSET 0) k) x
		WHERE c.ctid = x.row_ctid`,
		uuidArray(updP), textArray(updG), int8Array(updC), int8Array(updE), updRelease, updRetry, int8Array(updD))
}

type dlqFiling struct {
	// resultIndex is the poison ack's result, which fileDeadLetters tells
	// whether a dead letter was filed.
	resultIndex int
	partition   uuid.UUID
	group       string
	offset      int64
	reason      string
	retryCount  int
}

// commitGroup applies the clamp rule to one (partition, group) and mutates row
// to its new state. It returns the dead-letter filing to write, if any.
func commitGroup(row *consumerRow, k ackGroupKey, refs []ackRef, items []AckItem, results []AckResult) (*dlqFiling, bool) {
	start := row.committed
	row.touched = true
	rejected := false
	highCompleted := int64(-1 << 62)
	lowNack := int64(1 << 62)
	nackStatus := AckCompleted
	nackIndex := -1
	for _, r := range refs {
		res := &results[r.index]
		if !r.known {
			res.Error = errUnresolvable
			rejected = true
			continue
		}
		if r.offset <= start {
			if r.status == AckCompleted {
				res.Success, res.Noop = true, true
			} else {
				res.Error = errAlreadyCommitted
				rejected = true
			}
			continue
		}
		res.Success = true
		if r.status == AckCompleted {
			highCompleted = max(highCompleted, r.offset)
			continue
		}
		if r.offset < lowNack || (r.offset == lowNack && r.status > nackStatus) {
			lowNack, nackStatus, nackIndex = r.offset, r.status, r.index
		}
	}
	newCommitted := start
	if highCompleted > newCommitted {
		newCommitted = highCompleted
	}
	if nackIndex >= 0 && lowNack-1 < newCommitted {
		newCommitted = lowNack - 1
	}
	if row.batchEnd > start && newCommitted > row.batchEnd && row.leaseID != "" {
		newCommitted = row.batchEnd
	}
	row.committed = max(newCommitted, start)

	release := func() {
		// leaseReleased reports a live lease this ack ended; a lease-less nack
		// with nothing leased, or under an expired lease, released none.
		held := row.leaseID != "" && row.leaseLive
		row.leaseID = ""
		row.batchEnd = row.committed
		if !held {
			return
		}
		for _, r := range refs {
			if results[r.index].Success {
				results[r.index].LeaseReleased = true
			}
		}
	}
	if row.committed > start {
		// The retry budget is the head message's: a new head starts afresh.
		row.retryCount = 0
	}
	var filing *dlqFiling
	switch {
	case nackIndex < 0:
		if row.committed >= row.batchEnd && row.committed > start {
			if row.leaseID != "" {
				release()
			} else {
				row.batchEnd = row.committed
			}
		}
	case nackStatus == AckRetry:
		release()
	case nackStatus == AckFailed && row.retryCount < row.retryLimit:
		row.retryCount++
		release()
	case lowNack > row.committed+1:
		// dlq, or failed with the budget spent, below messages nobody
		// acknowledged: moving past the poison would skip them unseen, so the
		// batch redelivers from the first of them and the poison waits.
		release()
		results[nackIndex].Error = errDeadLetterNotHead
	default: // dlq the head now, or failed with the budget spent
		reason := dlqReason(refs, items, nackIndex, lowNack)
		retries := row.retryCount
		row.committed = lowNack
		row.retryCount = 0
		release()
		if nackStatus == AckDLQ || row.dlqEnabled {
			filing = &dlqFiling{resultIndex: nackIndex, partition: k.partition, group: k.group, offset: lowNack,
				reason: reason, retryCount: retries}
		} else {
			results[nackIndex].Dropped = true
		}
	}
	return filing, rejected
}

// dlqReason picks the error recorded with a dead letter: the poison message's
// own, then the first given, then "Retries exhausted".
func dlqReason(refs []ackRef, items []AckItem, poisonIndex int, _ int64) string {
	if msg := items[poisonIndex].Error; msg != "" {
		return msg
	}
	for _, r := range refs {
		if msg := items[r.index].Error; msg != "" && r.status != AckCompleted {
			return msg
		}
	}
	return errRetriesExhausted
}

// fileDeadLetters copies each poison message, payload included, into lanes.dlq,
// and reports on each filing's ack result whether it did: dlq true when the
// letter was filed, an error when retention had deleted the message first
// (the ack still succeeds: the cursor moves past it either way).
func fileDeadLetters(ctx context.Context, tx dbtx, filings []dlqFiling, results []AckResult) ([]*CorruptSegmentError, error) {
	var corrupt []*CorruptSegmentError
	for _, f := range filings {
		filed, bad, err := fileDeadLetter(ctx, tx, f)
		switch {
		case err != nil:
			return nil, err
		case bad != nil:
			// The message can no longer be copied; the ack still moves the
			// cursor, as for a message retention deleted, rather than failing
			// every ack of the request and leaving the lease to expire.
			corrupt = append(corrupt, bad)
			results[f.resultIndex].Error = errCorruptBeforeDLQ
		case filed:
			results[f.resultIndex].DLQ = true
		default:
			results[f.resultIndex].Error = errDeletedBeforeDLQ
		}
	}
	return corrupt, nil
}

// fileDeadLetter files one poison message; false means retention deleted it,
// and a CorruptSegmentError that its segment no longer decodes.
func fileDeadLetter(ctx context.Context, tx dbtx, f dlqFiling) (bool, *CorruptSegmentError, error) {
	var base, end int64
	var blob []byte
	var createdAt any
	err := tx.QueryRow(ctx, `SELECT base_offset, end_offset, created_at, frames FROM lanes.segments
		WHERE partition_id = $1 AND base_offset <= $2 ORDER BY base_offset DESC LIMIT 1`, f.partition, f.offset).
		Scan(&base, &end, &createdAt, &blob)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, err
	}
	if f.offset > end {
		return false, nil, nil // its segment went; this one ends before it
	}
	frames, err := decodeFrames(blob, int(end-base+1))
	if err != nil {
		return false, &CorruptSegmentError{PartitionID: f.partition, SegmentBase: base, SegmentEnd: end, Err: err}, nil
	}
	i := int(f.offset - base)
	if i >= len(frames) {
		return false, nil, nil
	}
	fr := frames[i]
	// payload_text keeps the bytes (jsonb would rewrite them); the jsonb copy
	// is for brokers older than 090, which read only that column.
	var jsonbPayload any
	if jsonbProblem(fr.Payload) == "" {
		jsonbPayload = string(fr.Payload)
	}
	textPayload := string(fr.Payload)
	if _, err := tx.Exec(ctx, `INSERT INTO lanes.dlq (partition_id, consumer_group, message_offset, message_id,
				transaction_id, trace_id, payload, payload_text, error, retry_count, created_at, producer_sub)
			VALUES ($1, $2, $3, $4, $5, nullif($6, ''), $7::jsonb, $8::text, $9, $10, $11, nullif($12, ''))`,
		f.partition, f.group, f.offset, fr.MessageID, fr.TransactionID, fr.TraceID, jsonbPayload, textPayload, f.reason,
		f.retryCount, createdAt, fr.ProducerSub); err != nil {
		return false, nil, err
	}
	return true, nil, nil
}

func compareUUID(a, b uuid.UUID) int {
	for i := range a {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// checkAckText rejects an ack whose strings PostgreSQL cannot take as text
// parameters (a NUL byte or invalid UTF-8 fails the statement). Lengths are
// not checked: an ack only looks ids up, and an id too long to be stored is
// simply not found. The item's field names (list[index].field) are built only
// for an error: building them for every item was a tenth of the broker's CPU
// on the consume path.
func checkAckText(a *AckItem, list string, index int) error {
	for _, f := range [...]struct{ name, value string }{
		{"transactionId", a.TransactionID}, {"partitionId", a.PartitionID}, {"status", a.Status},
		{"consumerGroup", a.Group}, {"leaseId", a.LeaseID}, {"error", a.Error},
	} {
		if storedTextProblem(f.value, 0) != "" {
			return CheckStoredText(ackFieldName(list, index, f.name), f.value, 0)
		}
	}
	if blankNameProblem(a.Group) != "" {
		return CheckGroupAddress(ackFieldName(list, index, "consumerGroup"), a.Group)
	}
	return nil
}

// ackFieldName names field of the index-th ack of list, as errors quote it.
func ackFieldName(list string, index int, field string) string {
	return fmt.Sprintf("%s[%d].%s", list, index, field)
}

// reportDeadLettersNotFiled logs the segments whose messages an ack could not
// dead-letter because they no longer decode.
func (e *Engine) reportDeadLettersNotFiled(corrupt []*CorruptSegmentError) {
	for _, c := range corrupt {
		e.reportCorruptSegment(c, "deadLetterNotFiled", true)
	}
}
