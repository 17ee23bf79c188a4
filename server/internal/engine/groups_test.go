package engine

import (
	"context"
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// idlePartitions adds n partitions to queue that each hold one message the
// group has already consumed (written directly: pushing 100,000 partitions one
// segment each would dominate the test).
func idlePartitions(t testing.TB, e *Engine, queue, group string, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `WITH q AS (SELECT id FROM lanes.queues WHERE name = $1),
		p AS (INSERT INTO lanes.partitions (queue_id, name, last_offset, last_write_at)
			SELECT q.id, 'idle-' || i, 0, now() - interval '1 hour' FROM q, generate_series(1, $3) i RETURNING id)
		INSERT INTO lanes.consumers (partition_id, consumer_group, committed, batch_end, last_consumed_at)
		SELECT p.id, $2, 0, 0, now() - interval '1 hour' FROM p`, queue, group, n); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE lanes.queues SET partition_version = partition_version + 1 WHERE name = $1`, queue); err != nil {
		t.Fatal(err)
	}
	// Statistics as a long-running deployment would have them.
	if _, err := e.pool.Exec(ctx, `VACUUM ANALYZE lanes.partitions, lanes.consumers`); err != nil {
		t.Fatal(err)
	}
}

func claimFloor(t testing.TB, e *Engine, queue, group string) int64 {
	t.Helper()
	var floor int64
	if err := e.pool.QueryRow(context.Background(), `SELECT g.claim_floor::text::int8 FROM lanes.consumer_groups g
		JOIN lanes.queues q ON q.id = g.queue_id WHERE q.name = $1 AND g.consumer_group = $2`, queue, group).Scan(&floor); err != nil {
		t.Fatal(err)
	}
	return floor
}

func drain(t testing.TB, e *Engine, req PopRequest) []string {
	t.Helper()
	var got []string
	for {
		res := mustPop(t, e, req)
		if len(res.Messages) == 0 {
			sort.Strings(got)
			return got
		}
		for _, m := range res.Messages {
			got = append(got, m.TransactionID)
			if !req.AutoAck {
				mustAck(t, e, AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID.String(), Group: req.Group, LeaseID: m.LeaseID})
			}
		}
	}
}

// The claim floor skips partitions the group has fully consumed, and every way
// a skipped partition can get work again still finds it.
func TestClaimFloorSkipsConsumedPartitionsButNeverLosesWork(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	req := PopRequest{Queue: q, Group: "g", SubscriptionMode: "all", Partitions: 0, Batch: 1000}
	mustPop(t, e, req)
	mustPush(t, e, items(q, "held", "h1")...)
	for i := 0; i < 20; i++ {
		mustPush(t, e, items(q, fmt.Sprintf("p%02d", i), fmt.Sprintf("m%02d", i))...)
	}
	// "held" is leased and never acked: the floor must not pass it.
	held := mustPop(t, e, PopRequest{Queue: q, Partition: "held", Group: "g", LeaseSeconds: 1})
	if len(held.Messages) != 1 {
		t.Fatalf("held: %v", txnIDs(held.Messages))
	}
	if got := drain(t, e, req); len(got) != 20 {
		t.Fatalf("drained %d", len(got))
	}
	mustPush(t, e, items(q, "p00", "later")...)
	drain(t, e, req)
	stuck := claimFloor(t, e, q, "g")
	time.Sleep(1100 * time.Millisecond) // held's lease expires
	if got := drain(t, e, req); len(got) != 1 || got[0] != "h1" {
		t.Fatalf("expired lease below the floor: %v", got)
	}
	// The floor never passes the oldest transaction running anywhere in the
	// cluster (other test packages share it), so give it a few pops to move.
	floor := stuck
	for try := 0; try < 50 && floor <= stuck; try++ {
		drain(t, e, req)
		if floor = claimFloor(t, e, q, "g"); floor <= stuck {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if floor <= stuck {
		t.Fatalf("floor did not advance once everything was consumed: %d -> %d", stuck, floor)
	}

	// A write to a partition far below the floor is found.
	mustPush(t, e, items(q, "p03", "again")...)
	if got := drain(t, e, req); len(got) != 1 || got[0] != "again" {
		t.Fatalf("write below the floor: %v", got)
	}
	// A seek backwards resets the floor: every partition is replayed.
	if _, err := e.Seek(context.Background(), SeekRequest{Group: "g", Queue: q, Timestamp: &time.Time{}}); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, e, req); len(got) != 23 {
		t.Fatalf("replay after seek: %d messages %v", len(got), got)
	}
	// Deleting the group (keeping its "all" subscription) re-seeds below the floor too.
	if _, err := e.DeleteGroup(context.Background(), "g", q, false); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, e, req); len(got) != 23 {
		t.Fatalf("re-seeded group read %d", len(got))
	}
}

func TestReadyPartitionsCountsBeyondTheWidth(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	for i := 0; i < 7; i++ {
		mustPush(t, e, items(q, fmt.Sprintf("p%d", i), "x")...)
	}
	res := mustPop(t, e, PopRequest{Queue: q, Partitions: 2, AutoAck: true})
	if res.PartitionsClaimed != 2 || res.ReadyPartitions != 7 {
		t.Fatalf("claimed %d, ready %d; want 2 of 7", res.PartitionsClaimed, res.ReadyPartitions)
	}
}

// TestMeasurePopLatencyWithManyIdlePartitions reports pop latency with 10 busy
// partitions among 100,000 idle ones and among none. Run with LANES_MEASURE=1.
func TestMeasurePopLatencyWithManyIdlePartitions(t *testing.T) {
	if os.Getenv("LANES_MEASURE") == "" {
		t.Skip("set LANES_MEASURE=1 to measure")
	}
	e := newEngine(t)
	if ms := os.Getenv("LANES_MEASURE_LOG_MS"); ms != "" {
		cfg, err := pgxpool.ParseConfig(testDSN)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["log_min_duration_statement"] = ms
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		e = New(pool, Config{})
		t.Cleanup(func() { e.Close(); pool.Close() })
	}
	measure := func(idle, rounds int, resetFloor bool) (p50, p99 time.Duration) {
		q := queueName(t)
		req := PopRequest{Queue: q, Group: "g", SubscriptionMode: "all", Partitions: 10, Batch: 100}
		mustPop(t, e, req)
		if idle > 0 {
			idlePartitions(t, e, q, "g", idle)
		}
		var lat []time.Duration
		for round := 0; round < rounds; round++ {
			for b := 0; b < 10; b++ {
				mustPush(t, e, items(q, fmt.Sprintf("busy-%d", b), fmt.Sprintf("r%d-b%d", round, b))...)
			}
			if resetFloor {
				if _, err := e.pool.Exec(context.Background(), `UPDATE lanes.consumer_groups g SET claim_floor = '0'
					FROM lanes.queues q WHERE q.id = g.queue_id AND q.name = $1`, q); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			res := mustPop(t, e, req)
			lat = append(lat, time.Since(start))
			acks := make([]AckItem, len(res.Messages))
			for i, m := range res.Messages {
				acks[i] = AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID.String(), Group: "g", LeaseID: m.LeaseID}
			}
			mustAck(t, e, acks...)
		}
		lat = lat[rounds/10:] // warm-up
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		return lat[len(lat)/2], lat[len(lat)*99/100]
	}
	p50, p99 := measure(0, 200, false)
	t.Logf("10 busy among 10:            p50 %v  p99 %v", p50, p99)
	p50, p99 = measure(100000, 200, false)
	t.Logf("10 busy among 100,010:       p50 %v  p99 %v", p50, p99)
	p50, p99 = measure(100000, 30, true)
	t.Logf("same, claim floor disabled:  p50 %v  p99 %v", p50, p99)
}

// A windowed claim takes the oldest-written claimable partition first when it
// drains it in that claim, even if it was served more recently than the others:
// it holds the group's claim floor. One with more work than the batch does not
// jump the line, so a large backlog cannot crowd the others out.
func TestAWindowedClaimFirstDrainsThePartitionHoldingTheFloor(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	serve := func(partition string) {
		t.Helper()
		if res := mustPop(t, e, PopRequest{Queue: q, Partition: partition, Group: "g", SubscriptionMode: "all", Batch: 10, AutoAck: true}); len(res.Messages) == 0 {
			t.Fatalf("nothing to serve in %s", partition)
		}
	}
	windowed := PopRequest{Queue: q, Group: "g", SubscriptionMode: "all", Partitions: 1, Batch: 2, AutoAck: true}
	for _, c := range []struct {
		name    string
		oldWork []string
		want    string
	}{
		{"drained in one claim: served first", []string{"o1"}, "o1"},
		{"more than the batch: least recently served first", []string{"o2", "o3", "o4"}, "a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// a and b were served long ago, old just now.
			mustPush(t, e, items(q, "a", "a-seed-"+c.name)...)
			mustPush(t, e, items(q, "b", "b-seed-"+c.name)...)
			serve("a")
			serve("b")
			mustPush(t, e, items(q, "old", "old-seed-"+c.name)...)
			serve("old")
			// old is written first, then a and b.
			mustPush(t, e, items(q, "old", c.oldWork...)...)
			mustPush(t, e, items(q, "a", "a-"+c.name)...)
			mustPush(t, e, items(q, "b", "b-"+c.name)...)
			got := mustPop(t, e, windowed)
			if len(got.Messages) == 0 {
				t.Fatal("the windowed pop found nothing")
			}
			first := got.Messages[0].TransactionID
			if c.want == "a" {
				if got.Partition != "a" {
					t.Fatalf("served %s first (%s), want the least recently served a", got.Partition, first)
				}
			} else if first != c.want {
				t.Fatalf("served %s first (%s), want %s", got.Partition, first, c.want)
			}
			drain(t, e, PopRequest{Queue: q, Group: "g", SubscriptionMode: "all", Batch: 100, AutoAck: true})
		})
	}
}

// Claims of one group running together would all lock the least recently
// served partition first; each starts past the ones the claims already running
// take, wrapping round when they take them all.
func TestAClaimStartsPastThePartitionsItsGroupsRunningClaimsTake(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	for _, p := range []string{"a", "b", "c"} {
		mustPush(t, e, items(q, p, p+"-seed")...)
		// served in the order a, b, c: a least recently
		if res := mustPop(t, e, PopRequest{Queue: q, Partition: p, Group: "g", SubscriptionMode: "all", Batch: 10, AutoAck: true}); len(res.Messages) != 1 {
			t.Fatalf("seeding %s delivered %d messages", p, len(res.Messages))
		}
	}
	for _, p := range []string{"a", "b", "c"} {
		// more than two claims' batches, so no partition drains in one claim
		// (which would serve it first: see the floor test above)
		mustPush(t, e, items(q, p, p+"-1", p+"-2", p+"-3", p+"-4", p+"-5")...)
	}
	running := 0
	claimsRunning := func(n int) {
		for ; running < n; running++ {
			e.waiters.claimStarted(q, "g")
		}
		for ; running > n; running-- {
			e.waiters.claimEnded(q, "g")
		}
	}
	t.Cleanup(func() { claimsRunning(0) })
	pop := PopRequest{Queue: q, Group: "g", SubscriptionMode: "all", Partitions: 1, Batch: 2, AutoAck: true}
	for _, c := range []struct {
		running int
		want    string
	}{
		{1, "b"}, // a is the running claim's: take the next
		{3, "a"}, // three ahead of three ready (a, c, b): round to the first
		{0, "c"}, // none ahead: least recently served first
	} {
		claimsRunning(c.running)
		got := mustPop(t, e, pop)
		if got.Partition != c.want {
			t.Fatalf("with %d claims running: claimed %q, want %q", c.running, got.Partition, c.want)
		}
	}
}

// A claim stores the floor it computes only while the broker knows one the
// database lacks; a pinned pop never stores, and a pop over several queues
// (whose floors no plan remembers) always does.
func TestAClaimStoresTheFloorOnlyWhileTheDatabaseTrailsIt(t *testing.T) {
	wildcard := &PopRequest{Queue: "q"}
	pinned := &PopRequest{Queue: "q", Partition: "p"}
	for _, c := range []struct {
		name   string
		req    *PopRequest
		queues []*popQueue
		want   bool
	}{
		{"floor unchanged since it was stored", wildcard, []*popQueue{{claimFloor: 7, storedFloor: 7}}, false},
		{"a claim computed a floor the database lacks", wildcard, []*popQueue{{claimFloor: 9, storedFloor: 7}}, true},
		{"a pinned pop", pinned, []*popQueue{{claimFloor: 9, storedFloor: 7}}, false},
		{"several queues", wildcard, []*popQueue{{claimFloor: 7, storedFloor: 7}, {claimFloor: 7, storedFloor: 7}}, true},
	} {
		if got := claimStoresFloor(c.req, c.queues); got != c.want {
			t.Errorf("%s: claimStoresFloor = %v, want %v", c.name, got, c.want)
		}
	}
}

// After a claim computes a floor ahead of the stored one, the plan remembers
// both, so the next claim walks from the new floor and stores it.
func TestAdvanceFloorRemembersTheComputedAndTheStoredFloor(t *testing.T) {
	var c popPlanCache
	c.plans = map[popPlanKey]popQueue{{"q", "g"}: {claimFloor: 5, storedFloor: 5, claimEpoch: 1}}
	ptr := func(v int64) *int64 { return &v }
	c.advanceFloor("q", "g", 1, 0, &delivery{floor: ptr(5), computedFloor: ptr(8)})
	if q := c.plans[popPlanKey{"q", "g"}]; q.claimFloor != 8 || q.storedFloor != 5 {
		t.Fatalf("after a claim that computed 8 and stored nothing: floor %d stored %d, want 8 5", q.claimFloor, q.storedFloor)
	}
	c.advanceFloor("q", "g", 1, 0, &delivery{floor: ptr(8), computedFloor: ptr(8)})
	if q := c.plans[popPlanKey{"q", "g"}]; q.claimFloor != 8 || q.storedFloor != 8 {
		t.Fatalf("after the claim that stored 8: floor %d stored %d, want 8 8", q.claimFloor, q.storedFloor)
	}
	c.advanceFloor("q", "g", 2, 0, &delivery{floor: ptr(20), computedFloor: ptr(20)})
	if q := c.plans[popPlanKey{"q", "g"}]; q.claimFloor != 8 {
		t.Fatalf("a claim of another epoch moved the plan's floor to %d", q.claimFloor)
	}
	// Another broker stored a higher floor: this plan follows it and has nothing to store.
	c.advanceFloor("q", "g", 1, 0, &delivery{floor: ptr(12), computedFloor: ptr(10)})
	if q := c.plans[popPlanKey{"q", "g"}]; q.claimFloor != 12 || q.storedFloor != 12 {
		t.Fatalf("after another broker stored 12: floor %d stored %d, want 12 12", q.claimFloor, q.storedFloor)
	}
}

// forgetAll (the broker lost its database: a crash may have moved cursors back)
// drops every plan, and a pop begun before it caches nothing of what it saw.
func TestForgetAllDropsPlansAndWhatEarlierPopsSaw(t *testing.T) {
	var c popPlanCache
	ptr := func(v int64) *int64 { return &v }
	req := &PopRequest{Queue: "q", Group: "g"}
	before := c.currentGeneration()
	c.remember(req, []*popQueue{{claimFloor: 5, storedFloor: 5, claimEpoch: 1}}, before)
	if _, ok := c.get("q", "g"); !ok {
		t.Fatal("remember cached no plan")
	}
	c.forgetAll()
	if _, ok := c.get("q", "g"); ok {
		t.Fatal("a plan outlived forgetAll")
	}
	c.remember(req, []*popQueue{{claimFloor: 9, storedFloor: 5, claimEpoch: 1}}, before)
	if _, ok := c.get("q", "g"); ok {
		t.Fatal("a pop begun before forgetAll cached its plan")
	}
	after := c.currentGeneration()
	c.remember(req, []*popQueue{{claimFloor: 5, storedFloor: 5, claimEpoch: 1}}, after)
	c.advanceFloor("q", "g", 1, before, &delivery{floor: ptr(5), computedFloor: ptr(9)})
	if q, _ := c.get("q", "g"); q.claimFloor != 5 {
		t.Fatalf("a claim begun before forgetAll moved the new plan's floor to %d", q.claimFloor)
	}
	c.advanceFloor("q", "g", 1, after, &delivery{floor: ptr(5), computedFloor: ptr(9)})
	if q, _ := c.get("q", "g"); q.claimFloor != 9 {
		t.Fatalf("a claim on the new plan left its floor at %d, want 9", q.claimFloor)
	}
}
