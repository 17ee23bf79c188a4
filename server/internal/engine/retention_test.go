package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

func configure(t testing.TB, e *Engine, q string, opts map[string]any) {
	t.Helper()
	raw := map[string]json.RawMessage{}
	for k, v := range opts {
		b, _ := json.Marshal(v)
		raw[k] = b
	}
	if _, err := e.Configure(context.Background(), ConfigureRequest{Queue: q, Options: raw}); err != nil {
		t.Fatal(err)
	}
}

// sweep runs one pass as the sweeper; the lease is released afterwards so the
// next test's engine can take it.
func sweep(t testing.TB, e *Engine) RetentionStats {
	t.Helper()
	st, err := e.RetentionPass(context.Background())
	if err != nil {
		t.Fatalf("retention pass: %v", err)
	}
	if !st.Leader {
		t.Fatalf("engine did not get the sweeper lease")
	}
	e.releaseRetentionLease(context.Background())
	return st
}

// pushSegments pushes each id as its own request, so each becomes its own segment.
func pushSegments(t testing.TB, e *Engine, q, p string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		mustPush(t, e, items(q, p, id)...)
	}
}

// elapseRecheckDelay stands in for waiting retentionRecheckDelay: a partition
// whose expired head a pass kept is a candidate again only that long after.
func elapseRecheckDelay(t testing.TB, e *Engine, pid uuid.UUID) {
	t.Helper()
	if _, err := e.pool.Exec(context.Background(), `UPDATE lanes.partitions
		SET oldest_segment_at = oldest_segment_at - make_interval(secs => $2) WHERE id = $1`,
		pid, retentionRecheckDelay.Seconds()); err != nil {
		t.Fatal(err)
	}
}

type partitionState struct {
	id                 uuid.UUID
	logStart, segments int64
	oldestSegmentAt    time.Time
}

func partitionOf(t testing.TB, e *Engine, q, p string) partitionState {
	t.Helper()
	var s partitionState
	if err := e.pool.QueryRow(context.Background(), `SELECT p.id, p.log_start, p.oldest_segment_at,
			(SELECT count(*) FROM lanes.segments s WHERE s.partition_id = p.id)
		FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $1 AND p.name = $2`, q, p).
		Scan(&s.id, &s.logStart, &s.oldestSegmentAt, &s.segments); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRetentionByAgeDeletesWholeSegmentsAndKeepsDeadLetters(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	configure(t, e, q, map[string]any{"retentionEnabled": true, "retentionSeconds": 2})
	pushSegments(t, e, q, "p", "old-0", "old-1", "old-2")
	// Dead-letter old-0 so a DLQ row points into the doomed segments.
	b := mustPop(t, e, PopRequest{Queue: q, Batch: 1})
	if r := mustAck(t, e, ack(b.Messages[0], "dlq")); !r[0].DLQ {
		t.Fatalf("dlq ack: %+v", r[0])
	}
	// A window of 2 s, not 1: the second pass below must come while new-3 is still young, which
	// a loaded machine's first pass and pop can take past one second.
	time.Sleep(2200 * time.Millisecond)
	pushSegments(t, e, q, "p", "new-3")

	st := sweep(t, e)
	ps := partitionOf(t, e, q, "p")
	if ps.logStart != 3 || ps.segments != 1 {
		t.Fatalf("after the pass log_start=%d segments=%d, want 3 and 1 (stats %+v)", ps.logStart, ps.segments, st)
	}
	var dead int
	_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM lanes.dlq WHERE partition_id = $1`, ps.id).Scan(&dead)
	if dead != 1 {
		t.Fatalf("dead letters must survive retention, found %d", dead)
	}
	// The queue-mode cursor sits at 0, below log_start: it resumes at the first retained offset.
	got := mustPop(t, e, PopRequest{Queue: q, Batch: 10})
	if ids := txnIDs(got.Messages); !reflect.DeepEqual(ids, []string{"new-3"}) {
		t.Fatalf("pop after retention: %v", ids)
	}
	// A second pass finds nothing more to delete here.
	sweep(t, e)
	if again := partitionOf(t, e, q, "p"); again.segments != 1 {
		t.Fatalf("second pass deleted the young segment")
	}
}

func TestCompletedRetentionIsHeldByTheSlowestGroup(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	configure(t, e, q, map[string]any{"retentionEnabled": true, "completedRetentionSeconds": 1})
	lonely := queueName(t)
	configure(t, e, lonely, map[string]any{"retentionEnabled": true, "completedRetentionSeconds": 1})
	pushSegments(t, e, lonely, "p", "x0")

	// Both groups subscribe before the data arrives.
	for _, g := range []string{"fast", "abandoned"} {
		mustPop(t, e, PopRequest{Queue: q, Group: g, SubscriptionMode: "all"})
	}
	pushSegments(t, e, q, "p", "m0", "m1")
	fast := mustPop(t, e, PopRequest{Queue: q, Group: "fast", Batch: 10})
	mustAck(t, e, ack(fast.Messages[0], "completed"), ack(fast.Messages[1], "completed"))
	time.Sleep(1200 * time.Millisecond)

	sweep(t, e)
	if ps := partitionOf(t, e, q, "p"); ps.segments != 2 || ps.logStart != 0 {
		t.Fatalf("an abandoned group must hold the data: %+v", ps)
	}
	if ps := partitionOf(t, e, lonely, "p"); ps.segments != 1 {
		t.Fatalf("a partition with no groups loses nothing: %+v", ps)
	}

	slow := mustPop(t, e, PopRequest{Queue: q, Group: "abandoned", Batch: 1})
	mustAck(t, e, ack(slow.Messages[0], "completed"))
	elapseRecheckDelay(t, e, partitionOf(t, e, q, "p").id)
	sweep(t, e)
	if ps := partitionOf(t, e, q, "p"); ps.segments != 1 || ps.logStart != 1 {
		t.Fatalf("only what every group committed goes: %+v", ps)
	}
}

func TestMaxWaitDeletesLeasedDataAndTheLateAckFailsCleanly(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	configure(t, e, q, map[string]any{"maxWaitTimeSeconds": 1, "dedupWindowSeconds": 0})
	pushSegments(t, e, q, "p", "stale-0", "stale-1")
	leased := mustPop(t, e, PopRequest{Queue: q, Batch: 10, LeaseSeconds: 60})
	if len(leased.Messages) != 2 {
		t.Fatalf("leased %d", len(leased.Messages))
	}
	time.Sleep(1200 * time.Millisecond)
	sweep(t, e)
	if ps := partitionOf(t, e, q, "p"); ps.segments != 0 || ps.logStart != 2 {
		t.Fatalf("maxWait must delete under a live lease (retentionEnabled off): %+v", ps)
	}
	// The worker finishes late: a failed ack of deleted data answers per item, no error.
	res, err := e.Ack(context.Background(), []AckItem{ack(leased.Messages[0], "failed")})
	if err != nil {
		t.Fatalf("late ack: %v", err)
	}
	t.Logf("late ack result: %+v", res[0])
	var dead int
	_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM lanes.dlq WHERE transaction_id = 'stale-0'`).Scan(&dead)
	if dead != 0 {
		t.Fatalf("a deleted message cannot be dead-lettered")
	}
	pushSegments(t, e, q, "p", "fresh")
	time.Sleep(10 * time.Millisecond)
	// Whether the lease still blocks or not, deleted data never comes back.
	if _, err := e.pool.Exec(context.Background(), `UPDATE lanes.consumers SET lease_expires_at = now() WHERE partition_id = $1`, leased.PartitionID); err != nil {
		t.Fatal(err)
	}
	got := mustPop(t, e, PopRequest{Queue: q, Batch: 10})
	if ids := txnIDs(got.Messages); !reflect.DeepEqual(ids, []string{"fresh"}) {
		t.Fatalf("after maxWait only new data is delivered: %v", ids)
	}
}

func TestPopOfAFullyDeletedSpanSealsTheCursor(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	configure(t, e, q, map[string]any{"retentionEnabled": true, "retentionSeconds": 1})
	pushSegments(t, e, q, "p", "a", "b")
	time.Sleep(1200 * time.Millisecond)
	sweep(t, e)
	if got := mustPop(t, e, PopRequest{Queue: q, Batch: 10}); len(got.Messages) != 0 {
		t.Fatalf("deleted data delivered: %v", txnIDs(got.Messages))
	}
	var committed int64
	_ = e.pool.QueryRow(context.Background(), `SELECT committed FROM lanes.consumers WHERE partition_id = $1`, partitionOf(t, e, q, "p").id).Scan(&committed)
	if committed != 1 {
		t.Fatalf("empty span should seal at the tail, committed=%d", committed)
	}
}

func TestTransactionIndexIsPurgedOnlyAfterItsWindowAndBelowLogStart(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	configure(t, e, q, map[string]any{"retentionEnabled": true, "retentionSeconds": 1, "dedupWindowSeconds": 0})
	pushSegments(t, e, q, "p", "t0", "t1")
	time.Sleep(1200 * time.Millisecond)
	pushSegments(t, e, q, "p", "t2")
	sweep(t, e)
	ps := partitionOf(t, e, q, "p")
	countTxns := func() int {
		var n int
		_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM lanes.txns WHERE partition_id = $1`, ps.id).Scan(&n)
		return n
	}
	if n := countTxns(); n != 3 {
		t.Fatalf("txns must outlive their segments for the 900 s floor, have %d", n)
	}
	// Age everything past the 900 s floor, as if a quarter of an hour had passed.
	ctx := context.Background()
	_, _ = e.pool.Exec(ctx, `UPDATE lanes.txns SET created_at = created_at - interval '20 minutes' WHERE partition_id = $1`, ps.id)
	_, _ = e.pool.Exec(ctx, `UPDATE lanes.txns_expiry SET purge_after = purge_after - interval '20 minutes' WHERE partition_id = $1`, ps.id)
	st := sweep(t, e)
	if n := countTxns(); n != 1 || st.TxnsPurged < 2 {
		t.Fatalf("deleted offsets' txns should go, the retained one stay: have %d (stats %+v)", n, st)
	}
}

func TestRetentionCandidatesSkipPartitionsWithNothingExpired(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	configure(t, e, q, map[string]any{"retentionEnabled": true, "retentionSeconds": 3600})
	pushSegments(t, e, q, "young", "y")
	ids, err := e.retentionCandidates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	young := partitionOf(t, e, q, "young").id
	for _, id := range ids {
		if id == young {
			t.Fatalf("a partition written now is not a candidate for a 1 h window")
		}
	}
	// Backdate the head: now it is one.
	_, _ = e.pool.Exec(context.Background(), `UPDATE lanes.segments SET created_at = created_at - interval '2 hours' WHERE partition_id = $1`, young)
	_, _ = e.pool.Exec(context.Background(), `UPDATE lanes.partitions SET oldest_segment_at = oldest_segment_at - interval '2 hours' WHERE id = $1`, young)
	ids, _ = e.retentionCandidates(context.Background())
	found := false
	for _, id := range ids {
		found = found || id == young
	}
	if !found {
		t.Fatalf("an expired head must make the partition a candidate")
	}
}

func TestOnlyOneEngineSweepsAtATime(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	t.Cleanup(func() { a.releaseRetentionLease(context.Background()); b.releaseRetentionLease(context.Background()) })
	for round := 0; round < 5; round++ {
		var wg sync.WaitGroup
		leaders := make([]bool, 2)
		for i, e := range []*Engine{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := e.RetentionPass(context.Background())
				if err != nil {
					t.Error(err)
				}
				leaders[i] = st.Leader
			}()
		}
		wg.Wait()
		if leaders[0] == leaders[1] {
			t.Fatalf("round %d: leaders %v, want exactly one", round, leaders)
		}
	}
	// The holder lets go (shutdown); the other takes over at its next pass.
	holder, other := a, b
	if st, _ := b.RetentionPass(context.Background()); st.Leader {
		holder, other = b, a
	}
	holder.releaseRetentionLease(context.Background())
	if st, err := other.RetentionPass(context.Background()); err != nil || !st.Leader {
		t.Fatalf("after release the other engine should sweep: %+v %v", st, err)
	}
}

// A stop cancels a pass's lease acquire on the client side only: a starved
// database can run it after the stop's release. That late acquire must not
// take the lease back (it would keep every other broker from sweeping for the
// lease's 30 s), while another engine, and this engine's own next pass, can.
func TestAnAcquireThatRunsAfterTheReleaseDoesNotRetakeTheLease(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	ctx := context.Background()
	t.Cleanup(func() { a.releaseRetentionLease(ctx); b.releaseRetentionLease(ctx) })
	a.releaseRetentionLease(ctx) // whatever an earlier test left: a takes the lease next
	if st, err := a.RetentionPass(ctx); err != nil || !st.Leader {
		t.Fatalf("a should sweep: %+v %v", st, err)
	}
	sentBeforeRelease := a.retentionHolder()
	a.releaseRetentionLease(ctx)
	if got, err := a.acquireRetentionLeaseAs(ctx, sentBeforeRelease); err != nil || got {
		t.Fatalf("the acquire sent before the release took the lease back (%v, %v)", got, err)
	}
	if st, err := b.RetentionPass(ctx); err != nil || !st.Leader {
		t.Fatalf("after a's release b should sweep at once: %+v %v", st, err)
	}
	b.releaseRetentionLease(ctx)
	if st, err := a.RetentionPass(ctx); err != nil || !st.Leader {
		t.Fatalf("a's next pass should sweep once b let go: %+v %v", st, err)
	}
	// A late acquire that finds no row at all (nothing to mark) is stopped too.
	if _, err := a.pool.Exec(ctx, `DELETE FROM lanes.leader_leases WHERE name = $1`, retentionLeaseName); err != nil {
		t.Fatal(err)
	}
	sentBeforeRelease = a.retentionHolder()
	a.releaseRetentionLease(ctx)
	if got, err := a.acquireRetentionLeaseAs(ctx, sentBeforeRelease); err != nil || got {
		t.Fatalf("with no row left, the late acquire took the lease (%v, %v)", got, err)
	}
	if st, err := b.RetentionPass(ctx); err != nil || !st.Leader {
		t.Fatalf("b should sweep: %+v %v", st, err)
	}
}

// Two brokers in two containers can share a hostname and a pid (each its
// process 1), so only the random broker id keeps their sweeper leases apart.
func TestRetentionHolderIsUniquePerBrokerNotPerProcess(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	if !strings.HasSuffix(a.retentionHolder(), ":"+a.brokerID) || a.retentionHolder() == b.retentionHolder() {
		t.Fatalf("holders %q and %q: want each to end in its broker id (%s, %s)",
			a.retentionHolder(), b.retentionHolder(), a.brokerID, b.brokerID)
	}
}

func TestStartRetentionSweepsInTheBackground(t *testing.T) {
	sweepAnExpiredSegmentInTheBackground(t, newEngine(t), 100*time.Millisecond)
}

// sweepAnExpiredSegmentInTheBackground starts e's retention loop every
// interval and waits until it has deleted a segment written past its queue's
// one-second retention.
func sweepAnExpiredSegmentInTheBackground(t *testing.T, e *Engine, every time.Duration) {
	t.Helper()
	q := queueName(t)
	configure(t, e, q, map[string]any{"maxWaitTimeSeconds": 1})
	pushSegments(t, e, q, "p", "bg")
	e.StartRetention(every)
	deadline := time.Now().Add(5 * time.Second)
	for partitionOf(t, e, q, "p").segments != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the background loop did not delete the expired segment")
		}
		time.Sleep(every)
	}
}

// A dlq ack of a leased message that retention deleted moves the cursor but
// files nothing, so it must not answer dlq:true; the same through a bundle.
func TestDeadLetteringADeletedMessageSaysNothingWasFiled(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	configure(t, e, q, map[string]any{"retentionEnabled": true, "retentionSeconds": 1})
	pushSegments(t, e, q, "by-ack", "gone-ack")
	pushSegments(t, e, q, "by-bundle", "gone-bundle")
	byAck := mustPop(t, e, PopRequest{Queue: q, Partition: "by-ack", Batch: 1, LeaseSeconds: 60})
	byBundle := mustPop(t, e, PopRequest{Queue: q, Partition: "by-bundle", Batch: 1, LeaseSeconds: 60})
	if len(byAck.Messages) != 1 || len(byBundle.Messages) != 1 {
		t.Fatalf("leased %d and %d messages, want 1 and 1", len(byAck.Messages), len(byBundle.Messages))
	}
	time.Sleep(1200 * time.Millisecond)
	sweep(t, e)

	r := mustAck(t, e, ack(byAck.Messages[0], "dlq"))[0]
	if !r.Success || r.DLQ || r.Error != errDeletedBeforeDLQ {
		t.Fatalf("dlq ack of a deleted message: %+v, want success, dlq false and %q", r, errDeletedBeforeDLQ)
	}
	nack := ack(byBundle.Messages[0], "dlq")
	bundle := mustTransaction(t, e, TransactionRequest{Ops: []TxOp{{Index: 0, Ack: &nack}}})
	if !bundle.Success || bundle.Results[0].Ack.DLQ || bundle.Results[0].Ack.Error != errDeletedBeforeDLQ {
		t.Fatalf("bundle dlq ack of a deleted message: %+v %+v", bundle, bundle.Results[0].Ack)
	}
	var dead int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM lanes.dlq
		WHERE transaction_id IN ('gone-ack', 'gone-bundle')`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if dead != 0 {
		t.Fatalf("%d dead letters filed for deleted messages", dead)
	}
	for _, p := range []string{"by-ack", "by-bundle"} {
		var committed int64
		if err := e.pool.QueryRow(context.Background(), `SELECT committed FROM lanes.consumers WHERE partition_id = $1`,
			partitionOf(t, e, q, p).id).Scan(&committed); err != nil {
			t.Fatal(err)
		}
		if committed != 0 {
			t.Fatalf("partition %s: the ack must still move the cursor past the message, committed=%d", p, committed)
		}
	}
}

// totalConsumed counts what was delivered: messages retention deleted before a
// group reached them are skipped, not consumed, on the autoAck claim (sealed
// or not) and on a leased claim and its ack alike.
func TestMessagesDeletedBeforeDeliveryAreNotCountedAsConsumed(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	configure(t, e, q, map[string]any{"retentionEnabled": true, "retentionSeconds": 1})
	pushSegments(t, e, q, "p", "m0", "m1", "m2", "m3", "m4")
	pop := func(group string, autoAck bool) *PopResult {
		return mustPop(t, e, PopRequest{Queue: q, Group: group, SubscriptionMode: "all", Batch: 1, AutoAck: autoAck})
	}
	consumed := func(group string) int64 {
		t.Helper()
		cursors, _, err := e.GroupCursors(context.Background(), group, RowPage{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cursors {
			if c.Queue == q {
				return c.TotalConsumed
			}
		}
		t.Fatalf("group %s has no cursor on %s", group, q)
		return 0
	}
	pop("auto", true)
	mustAck(t, e, ack(pop("leased", false).Messages[0], "completed"))
	time.Sleep(1200 * time.Millisecond)
	sweep(t, e) // m0..m4 go; each group consumed m0 only

	if got := pop("auto", true); len(got.Messages) != 0 {
		t.Fatalf("deleted data delivered: %v", txnIDs(got.Messages))
	}
	if n := consumed("auto"); n != 1 {
		t.Fatalf("autoAck group: totalConsumed %d after a pop that found only deleted data, want 1", n)
	}
	pushSegments(t, e, q, "p", "fresh")
	if got := txnIDs(pop("auto", true).Messages); !reflect.DeepEqual(got, []string{"fresh"}) {
		t.Fatalf("autoAck pop after retention: %v", got)
	}
	leased := pop("leased", false)
	if got := txnIDs(leased.Messages); !reflect.DeepEqual(got, []string{"fresh"}) {
		t.Fatalf("leased pop after retention: %v", got)
	}
	mustAck(t, e, ack(leased.Messages[0], "completed"))
	for _, g := range []string{"auto", "leased"} {
		if n := consumed(g); n != 2 {
			t.Fatalf("group %s: totalConsumed %d, want 2 (m0 and fresh)", g, n)
		}
	}
}

// Lanes has no sinks, so a retentionSinkHold is never released by a commit:
// every rule waits for retentionSinkHoldMaxSeconds, maxWaitTimeSeconds included.
func TestASinkHoldKeepsSegmentsForItsMaximum(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	configure(t, e, q, map[string]any{"retentionEnabled": true, "retentionSeconds": 1, "maxWaitTimeSeconds": 1,
		"retentionSinkHold": "archive", "retentionSinkHoldMaxSeconds": 60})
	pushSegments(t, e, q, "p", "held-0", "held-1")
	time.Sleep(1200 * time.Millisecond)
	sweep(t, e)
	ps := partitionOf(t, e, q, "p")
	if ps.segments != 2 || ps.logStart != 0 {
		t.Fatalf("the hold must keep segments younger than its maximum: %+v", ps)
	}
	candidates, err := e.retentionCandidates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(candidates, ps.id) {
		t.Fatalf("a held partition is no candidate before the hold's maximum: passes would step it for nothing")
	}
	// held-0 passes the hold's maximum, as if two minutes had gone by.
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `UPDATE lanes.segments SET created_at = created_at - interval '2 minutes'
		WHERE partition_id = $1 AND base_offset = 0`, ps.id); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE lanes.partitions SET oldest_segment_at = oldest_segment_at - interval '2 minutes'
		WHERE id = $1`, ps.id); err != nil {
		t.Fatal(err)
	}
	sweep(t, e)
	if ps := partitionOf(t, e, q, "p"); ps.segments != 1 || ps.logStart != 1 {
		t.Fatalf("past the hold's maximum the segment goes, the younger one stays: %+v", ps)
	}
}

// A group subscribed to a discovery scope (mode all) before the queue existed
// has not met the queue yet; completed retention waits for it as it waits for
// a group registered on the queue without a cursor. Without a sweep (the
// control) and after one, the discovery group gets both messages.
func TestCompletedRetentionWaitsForAGroupSubscribedByDiscovery(t *testing.T) {
	for _, swept := range []bool{false, true} {
		t.Run(fmt.Sprintf("swept=%v", swept), func(t *testing.T) {
			e := newEngine(t)
			ns := queueName(t)
			q := ns + ".t"
			mustPop(t, e, PopRequest{Namespace: ns, Group: "dg", SubscriptionMode: "all"})
			configure(t, e, q, map[string]any{"retentionEnabled": true, "completedRetentionSeconds": 1})
			pushSegments(t, e, q, "p", "m0", "m1")
			fast := mustPop(t, e, PopRequest{Queue: q, Group: "fast", SubscriptionMode: "all", Batch: 10})
			mustAck(t, e, ack(fast.Messages[0], "completed"), ack(fast.Messages[1], "completed"))
			if swept {
				time.Sleep(1200 * time.Millisecond)
				sweep(t, e)
			}
			got := mustPop(t, e, PopRequest{Namespace: ns, Group: "dg", Batch: 10})
			if ids := txnIDs(got.Messages); !reflect.DeepEqual(ids, []string{"m0", "m1"}) {
				t.Fatalf("discovery group dg got %v, want m0 and m1: completed retention deleted what dg had not read (%+v)",
					ids, partitionOf(t, e, q, "p"))
			}
		})
	}
}

// An expiry entry goes only with the transaction ids it purged: ids still
// inside the queue's current window (the window was raised after their
// segment went, or a row was stamped a moment after its segment) stay listed
// and are purged once that window passes, instead of staying in lanes.txns
// for good. SQL moves the clock back in place of the hours.
func TestTransactionIdsOutlivingTheirExpiryEntryArePurgedLater(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	q := queueName(t)
	configure(t, e, q, map[string]any{"retentionEnabled": true, "retentionSeconds": 1})
	pushSegments(t, e, q, "p", "t1", "t2", "t3")
	time.Sleep(1200 * time.Millisecond)
	sweep(t, e)
	pid := partitionOf(t, e, q, "p").id
	countTxns := func() int {
		t.Helper()
		var n int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM lanes.txns WHERE partition_id = $1`, pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	elapse := func(d string) {
		t.Helper()
		for _, table := range []string{"lanes.txns SET created_at = created_at", "lanes.txns_expiry SET purge_after = purge_after"} {
			if _, err := e.pool.Exec(ctx, `UPDATE `+table+` - $2::interval WHERE partition_id = $1`, pid, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := countTxns(); n != 3 {
		t.Fatalf("the deleted segments' transaction ids must stay for the dedup window, have %d", n)
	}
	// t3's row was stamped a minute after its segment: its entry falls due while t3 is inside the window.
	if _, err := e.pool.Exec(ctx, `UPDATE lanes.txns SET created_at = created_at + interval '1 minute'
		WHERE partition_id = $1 AND transaction_id = 't3'`, pid); err != nil {
		t.Fatal(err)
	}
	configure(t, e, q, map[string]any{"retentionEnabled": true, "retentionSeconds": 1, "dedupWindowSeconds": 7200})
	elapse("3601 seconds") // past the window the entries were written with, inside the raised one
	sweep(t, e)
	if n := countTxns(); n != 3 {
		t.Fatalf("ids inside the raised 2 h window must stay, have %d", n)
	}
	elapse("3600 seconds") // t1 and t2 are now past 2 h; t3 is a minute short of it
	if st := sweep(t, e); st.TxnsPurged != 2 || countTxns() != 1 {
		t.Fatalf("past the raised window t1 and t2 go and t3 stays: purged %d, %d left", st.TxnsPurged, countTxns())
	}
	elapse("2 minutes")
	if st := sweep(t, e); st.TxnsPurged != 1 || countTxns() != 0 {
		t.Fatalf("t3 goes once it passes the window: purged %d, %d left", st.TxnsPurged, countTxns())
	}
	var entries int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM lanes.txns_expiry WHERE partition_id = $1`, pid).Scan(&entries); err != nil {
		t.Fatal(err)
	}
	if entries != 0 {
		t.Fatalf("%d expiry entries left after every id was purged", entries)
	}
}

// Partitions whose expired head the completed rule holds (here a group that
// has not read them) no longer take every pass's candidate slots: a partition
// of the same queue behind them and another queue's partition are swept within
// a few passes of a cap smaller than the held set, and the held heads stay.
// Its own database: on the shared one, other tests' emptied partitions fall
// due again a second after each look and take the cap's slots first.
func TestHeldPartitionsDoNotStarveTheRestOfTheSweep(t *testing.T) {
	e := newEngineOn(t, newSchemaDatabase(t))
	e.retentionPassPartitions = 3
	held, other := queueName(t), queueName(t)
	configure(t, e, held, map[string]any{"retentionEnabled": true, "completedRetentionSeconds": 1})
	configure(t, e, other, map[string]any{"retentionEnabled": true, "retentionSeconds": 1})
	mustPop(t, e, PopRequest{Queue: held, Group: "g", SubscriptionMode: "all"})
	for i := range 6 {
		pushSegments(t, e, held, fmt.Sprintf("held-%d", i), fmt.Sprintf("h%d", i))
	}
	pushSegments(t, e, held, "read", "r")
	read := mustPop(t, e, PopRequest{Queue: held, Partition: "read", Group: "g", Batch: 1})
	mustAck(t, e, ack(read.Messages[0], "completed"))
	pushSegments(t, e, other, "p", "o")
	time.Sleep(1200 * time.Millisecond)

	passes := map[string]int{}
	for pass := 1; pass <= 10 && len(passes) < 2; pass++ {
		if st := sweep(t, e); st.Candidates > 3 {
			t.Fatalf("pass %d stepped %d partitions, over its cap of 3", pass, st.Candidates)
		}
		for name, ps := range map[string]partitionState{"read": partitionOf(t, e, held, "read"), "other": partitionOf(t, e, other, "p")} {
			if _, done := passes[name]; !done && ps.segments == 0 {
				passes[name] = pass
			}
		}
	}
	if len(passes) < 2 {
		t.Fatalf("after 10 passes only %v were swept: the held partitions kept the sweep from the rest", passes)
	}
	t.Logf("swept at pass: %v", passes)
	for i := range 6 {
		if ps := partitionOf(t, e, held, fmt.Sprintf("held-%d", i)); ps.segments != 1 {
			t.Fatalf("held-%d lost what group g has not read: %+v", i, ps)
		}
	}
}

// A pass judges the heads of its candidates a chunk of retentionReadChunk at a
// time in one statement each, not three statements a partition: rechecking
// held partitions costs a few statements, however many there are, and leaves
// them due again only after retentionRecheckDelay. Its own database, so that
// its passes meet only its partitions: on the shared one, other tests'
// emptied partitions (due again a second after each look) and expired heads
// joined them, with steps of their own, whenever a pass was slow.
func TestRecheckOfHeldPartitionsCostsOneStatementAChunk(t *testing.T) {
	var c tripCounter
	e := newCountedEngineOn(t, newSchemaDatabase(t), &c)
	q := queueName(t)
	configure(t, e, q, map[string]any{"retentionEnabled": true, "completedRetentionSeconds": 1})
	held := 2*retentionReadChunk + 1
	insertOneSegmentPartitions(t, e, q, held, held)
	if st := sweep(t, e); st.Candidates != held || st.Segments != 0 {
		t.Fatalf("the first pass: %+v, want %d candidates and nothing deleted", st, held)
	}
	if _, err := e.pool.Exec(context.Background(), `UPDATE lanes.partitions p SET oldest_segment_at = oldest_segment_at - make_interval(secs => $2)
		FROM lanes.queues q WHERE q.id = p.queue_id AND q.name = $1`, q, retentionRecheckDelay.Seconds()); err != nil {
		t.Fatal(err)
	}
	c.take()
	st := sweep(t, e)
	_, statements := c.take()
	if st.Candidates != held || st.Segments != 0 {
		t.Fatalf("the recheck pass: %+v, want %d candidates and nothing deleted", st, held)
	}
	// Besides the three chunks: the lease, its release, the candidates (two
	// statements) and the transaction-index purge (begin, query, commit).
	chunks := (st.Candidates + retentionReadChunk - 1) / retentionReadChunk
	if want := int64(chunks + 7); statements != want {
		t.Fatalf("the recheck of %d partitions sent %d statements, want %d (one a chunk of %d)",
			st.Candidates, statements, want, retentionReadChunk)
	}
	if st := sweep(t, e); st.Candidates != 0 {
		t.Fatalf("%d partitions are candidates again right after their recheck", st.Candidates)
	}
}

// A segment past its window that no longer decodes is deleted like any other,
// its transaction ids read from the transaction index for the dedup window:
// before, its decode error ended the whole pass, and the partition, due first
// at every pass, stopped retention for every queue.
func TestRetentionDeletesASegmentThatDoesNotDecode(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	configure(t, e, q, map[string]any{"retentionEnabled": true, "retentionSeconds": 1})
	pushSegments(t, e, q, "bad", "bad-0", "bad-1")
	pushSegments(t, e, q, "good", "good-0")
	bad := partitionOf(t, e, q, "bad")
	if _, err := e.pool.Exec(context.Background(), `UPDATE lanes.segments SET frames = substring(frames FROM 1 FOR 20)
		WHERE partition_id = $1 AND base_offset = 0`, bad.id); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond)

	sweep(t, e)
	if ps := partitionOf(t, e, q, "bad"); ps.logStart != 2 || ps.segments != 0 {
		t.Fatalf("the partition with the corrupt segment: log_start=%d segments=%d, want 2 and 0", ps.logStart, ps.segments)
	}
	if ps := partitionOf(t, e, q, "good"); ps.logStart != 1 || ps.segments != 0 {
		t.Fatalf("the other partition: log_start=%d segments=%d, want 1 and 0", ps.logStart, ps.segments)
	}
	var ids []string
	if err := e.pool.QueryRow(context.Background(), `SELECT coalesce(array_agg(t ORDER BY t), '{}') FROM lanes.txns_expiry x,
		unnest(x.transaction_ids) t WHERE x.partition_id = $1`, bad.id).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ids, []string{"bad-0", "bad-1"}) {
		t.Fatalf("transaction ids kept for the dedup window: %v", ids)
	}
}

// The sweeper's candidate read turns JIT off for itself without a warning in
// PostgreSQL's log: SET LOCAL outside a transaction block logged one on every
// pass of the broker holding the sweeper lease.
func TestRetentionCandidatesLogNoWarningInPostgres(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(testDSN)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var notices []string
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		notices = append(notices, n.Severity+": "+n.Message)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := New(pool, Config{})
	t.Cleanup(func() { e.Close(); pool.Close() })
	if _, err := e.retentionCandidates(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notices) > 0 {
		t.Fatalf("the candidate read sent PostgreSQL notices: %v", notices)
	}
}

// model.md: deletion is whole-segment. completedRetentionSeconds keeps a
// segment the slowest group has only partly committed, and lets it go once the
// group committed all of it.
func TestCompletedRetentionKeepsAHalfConsumedSegmentWhole(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	configure(t, e, q, map[string]any{"retentionEnabled": true, "completedRetentionSeconds": 1})
	mustPop(t, e, PopRequest{Queue: q, Group: "g", SubscriptionMode: "all"})
	mustPush(t, e, items(q, "p", "m0", "m1", "m2")...)
	b := mustPop(t, e, PopRequest{Queue: q, Group: "g", Batch: 2})
	mustAck(t, e, ack(b.Messages[1], "completed"))
	time.Sleep(1200 * time.Millisecond)
	sweep(t, e)
	if ps := partitionOf(t, e, q, "p"); ps.segments != 1 || ps.logStart != 0 {
		t.Fatalf("a half-consumed segment must be kept whole: %+v", ps)
	}
	rest := mustPop(t, e, PopRequest{Queue: q, Group: "g", Batch: 10})
	if got := txnIDs(rest.Messages); len(got) != 1 || got[0] != "m2" {
		t.Fatalf("rest %v", got)
	}
	mustAck(t, e, ack(rest.Messages[0], "completed"))
	elapseRecheckDelay(t, e, partitionOf(t, e, q, "p").id)
	sweep(t, e)
	if ps := partitionOf(t, e, q, "p"); ps.segments != 0 || ps.logStart != 3 {
		t.Fatalf("a consumed segment goes: %+v", ps)
	}
}

// model.md: a queue has no retention until it is configured. A queue a push
// created, and one given windows without retentionEnabled, lose nothing, even
// what every group consumed.
func TestAQueueWithoutRetentionEnabledDeletesNothing(t *testing.T) {
	e := newEngine(t)
	pushed, windowed := queueName(t), queueName(t)
	configure(t, e, windowed, map[string]any{"retentionSeconds": 1, "completedRetentionSeconds": 1})
	for _, q := range []string{pushed, windowed} {
		pushSegments(t, e, q, "p", "m0")
		b := mustPop(t, e, PopRequest{Queue: q, Batch: 10})
		mustAck(t, e, ack(b.Messages[0], "completed"))
	}
	time.Sleep(1200 * time.Millisecond)
	sweep(t, e)
	for _, q := range []string{pushed, windowed} {
		if ps := partitionOf(t, e, q, "p"); ps.segments != 1 || ps.logStart != 0 {
			t.Fatalf("%s lost data without retention enabled: %+v", q, ps)
		}
	}
}
