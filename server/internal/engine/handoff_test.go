package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/testdb"
	"github.com/lanesmq/lanes/server/internal/testlog"
)

// handOffs counts hand-offs (by pushes and acks) since before.
func handOffs(e *Engine, before HotPathStats) uint64 {
	return e.HotPathStats().HandOffs - before.HandOffs
}

// drainGroup registers group on q and pops until nothing is left, so the
// broker holds the group's claim plan and the group's next pops park.
func drainGroup(t *testing.T, e *Engine, q, group string) {
	t.Helper()
	for {
		if res := mustPop(t, e, PopRequest{Queue: q, Group: group, Batch: 100, AutoAck: true, SubscriptionMode: "all"}); len(res.Messages) == 0 {
			return
		}
	}
}

// rateWithoutRechecks is a ParkedRecheckRate that spaces a lone parked pop's
// re-checks 100 s apart: past the timeout of any test's pop.
const rateWithoutRechecks = 0.01

// newEngineWithoutRechecks is an engine whose parked pops do not re-check
// within a 10 s timeout (rateWithoutRechecks). A push
// claims for the oldest idle parked pop, and a pop is not idle while its own
// re-check runs: a push landing then serves the next pop. Parked pops are
// served in arrival order only best-effort, so tests that expect the first of
// two pops (parkTwo) to be served first need e without re-checks, whatever
// the machine's load. So do tests that count a parked pop's claims (popPaths,
// handOffs): on a loaded machine a re-check can run when the write does, and
// the write then wakes the pop instead of claiming for it.
func newEngineWithoutRechecks(t *testing.T) *Engine {
	t.Helper()
	return newEngineWith(t, Config{ParkedRecheckRate: rateWithoutRechecks}, nil)
}

// parkTwo parks two long-poll pops of req, each waiting idle (parkIdle), the
// first before the second arrives. For the first to be the oldest idle pop at
// any moment, e comes from newEngineWithoutRechecks.
func parkTwo(t *testing.T, e *Engine, req PopRequest) (first, second <-chan poppedAt) {
	t.Helper()
	firstDone := parkIdle(t, e, req)
	return firstDone, parkIdle(t, e, req)
}

func stillParked(t *testing.T, done <-chan poppedAt, what string) {
	t.Helper()
	select {
	case p := <-done:
		t.Fatalf("%s returned: %+v %v", what, p.res, p.err)
	case <-time.After(300 * time.Millisecond):
	}
}

// A push claims for an idle parked pop in its own commit round trip: the pop
// gets the message and its lease without a claim of its own, and a second
// parked pop of the group is not woken for the partition the first one took.
func TestAPushClaimsForAParkedPopInItsRoundTrip(t *testing.T) {
	e := newEngineWithoutRechecks(t)
	q := queueName(t)
	mustPush(t, e, items(q, "p", "seed")...)
	drainGroup(t, e, q, "workers")

	req := PopRequest{Queue: q, Group: "workers", Batch: 10, Wait: true, Timeout: 10 * time.Second, LeaseSeconds: 60}
	first, second := parkTwo(t, e, req)

	before := e.HotPathStats()
	pushed := time.Now()
	mustPush(t, e, items(q, "p", "one")...)
	p := wokenBy(t, first, "push", pushed)
	if p.err != nil || p.res == nil || !slices.Equal(txnIDs(p.res.Messages), []string{"one"}) || p.res.LeaseID == "" {
		t.Fatalf("first parked pop: %+v %v", p.res, p.err)
	}
	if n := handOffs(e, before); n != 1 {
		t.Fatalf("hand-offs = %d, want 1", n)
	}
	if oneTrip, general := popPaths(e, before); oneTrip+general != 0 {
		t.Fatalf("the handed pop ran claims of its own: one-trip %d, general %d", oneTrip, general)
	}
	stillParked(t, second, "the second pop of the group, woken for a partition the first took,")

	if r := mustAck(t, e, ack(p.res.Messages[0], "completed")); !r[0].Success {
		t.Fatalf("ack under the handed lease: %+v", r[0])
	}
	pushed = time.Now()
	mustPush(t, e, items(q, "p", "two")...)
	p = wokenBy(t, second, "push", pushed)
	if p.err != nil || p.res == nil || !slices.Equal(txnIDs(p.res.Messages), []string{"two"}) {
		t.Fatalf("second parked pop: %+v %v", p.res, p.err)
	}
	if n := handOffs(e, before); n != 2 {
		t.Fatalf("hand-offs = %d, want 2", n)
	}
}

// Every other group parked on the queue is still woken and claims for itself,
// and a pop pinned to a partition is served only by writes to that partition.
func TestAPushHandOffLeavesOtherGroupsAndPinsAlone(t *testing.T) {
	e := newEngineWithoutRechecks(t)
	q := queueName(t)
	mustPush(t, e, append(items(q, "a", "seed-a"), items(q, "b", "seed-b")...)...) // a new partition voids the plans
	drainGroup(t, e, q, "one")
	drainGroup(t, e, q, "two")

	popOne := parkIdle(t, e, PopRequest{Queue: q, Group: "one", Partition: "a", Batch: 10, Wait: true, Timeout: 10 * time.Second, AutoAck: true})
	popTwo := parkIdle(t, e, PopRequest{Queue: q, Group: "two", Batch: 10, Wait: true, Timeout: 10 * time.Second, AutoAck: true})

	before := e.HotPathStats()
	pushed := time.Now()
	mustPush(t, e, items(q, "b", "to-b")...)
	p := wokenBy(t, popTwo, "push", pushed)
	if p.err != nil || p.res == nil || !slices.Equal(txnIDs(p.res.Messages), []string{"to-b"}) {
		t.Fatalf("group two: %+v %v", p.res, p.err)
	}
	if n := handOffs(e, before); n != 1 {
		t.Fatalf("hand-offs = %d, want 1 (group two; group one is pinned to a)", n)
	}
	stillParked(t, popOne, "the pop pinned to a, after a push to b,")

	popTwo = parkIdle(t, e, PopRequest{Queue: q, Group: "two", Batch: 10, Wait: true, Timeout: 10 * time.Second, AutoAck: true})
	before = e.HotPathStats()
	pushed = time.Now()
	mustPush(t, e, items(q, "a", "to-a")...)
	for name, done := range map[string]<-chan poppedAt{"group one": popOne, "group two": popTwo} {
		p := wokenBy(t, done, "push", pushed)
		if p.err != nil || p.res == nil || !slices.Equal(txnIDs(p.res.Messages), []string{"to-a"}) {
			t.Fatalf("%s: %+v %v", name, p.res, p.err)
		}
	}
	oneTrip, general := popPaths(e, before)
	if n := handOffs(e, before); n != 1 || oneTrip+general != 1 {
		t.Fatalf("one group must be handed the message and the other woken to claim it: hand-offs %d, claims %d", n, oneTrip+general)
	}
}

// One push wakes the parked pops of two groups at once: the push hands the
// message to one group and announces it to the other, which must claim it
// at once rather than at its next re-check.
func TestOnePushWakesTheParkedPopsOfTwoGroups(t *testing.T) {
	e := newEngineWithoutRechecks(t)
	q := queueName(t)
	mustPush(t, e, items(q, "p", "seed")...)
	drainGroup(t, e, q, "one")
	drainGroup(t, e, q, "two")

	popOne := parkIdle(t, e, PopRequest{Queue: q, Group: "one", Batch: 10, Wait: true, Timeout: 10 * time.Second, AutoAck: true})
	popTwo := parkIdle(t, e, PopRequest{Queue: q, Group: "two", Batch: 10, Wait: true, Timeout: 10 * time.Second, AutoAck: true})

	pushed := time.Now()
	mustPush(t, e, items(q, "p", "news")...)
	for name, done := range map[string]<-chan poppedAt{"group one": popOne, "group two": popTwo} {
		p := wokenBy(t, done, "push", pushed)
		if p.err != nil || p.res == nil || !slices.Equal(txnIDs(p.res.Messages), []string{"news"}) {
			t.Fatalf("%s: %+v %v", name, p.res, p.err)
		}
	}
}

// A transaction bundle that pushes to the next stage of a pipeline claims for
// that stage's parked pop in its own round trip, as a push does; both the
// one-trip bundle (a lease this broker granted, known partitions) and the
// general one (a key-value write rides along).
func TestATransactionBundleClaimsForAParkedPopOfWhatItPushes(t *testing.T) {
	e := newEngineWithoutRechecks(t)
	in, out := queueName(t)+"-in", queueName(t)+"-out"
	mustPush(t, e, items(in, "p", "a", "b")...)
	mustPush(t, e, items(out, "p", "seed")...)
	drainGroup(t, e, out, "next")

	for i, withKV := range []bool{false, true} {
		held := mustPop(t, e, PopRequest{Queue: in, Batch: 1})
		if len(held.Messages) != 1 {
			t.Fatalf("pop from the first stage: %+v", held.Messages)
		}
		done := parkIdle(t, e, PopRequest{Queue: out, Group: "next", Batch: 10, Wait: true, Timeout: 10 * time.Second, AutoAck: true})
		before := e.HotPathStats()
		req := TransactionRequest{Ops: []TxOp{
			ackOp(0, held.Messages[0], "", held.LeaseID),
			pushOp(1, out, "p", held.Messages[0].TransactionID+"-next", i),
		}}
		if withKV {
			req.KV = []KVOp{{Op: KVPut, Namespace: out, Key: "count", Value: raw(i), Forever: true}}
		}
		bundled := time.Now()
		if res := mustTransaction(t, e, req); !res.Success {
			t.Fatalf("bundle %d: %+v", i, res)
		}
		p := wokenBy(t, done, "bundle", bundled)
		if p.err != nil || p.res == nil || !slices.Equal(txnIDs(p.res.Messages), []string{held.Messages[0].TransactionID + "-next"}) {
			t.Fatalf("parked pop of the next stage after bundle %d: %+v %v", i, p.res, p.err)
		}
		oneTrip, general := popPaths(e, before)
		if n := handOffs(e, before); n != 1 || oneTrip+general != 0 {
			t.Fatalf("bundle %d (kv %v): hand-offs %d, claims of the pop's own %d; want 1 and 0", i, withKV, n, oneTrip+general)
		}
	}
}

// With the group's only partition leased to another consumer, the push's claim
// for the parked pop finds nothing; the pop goes back to waiting without a
// claim of its own (it would find the same) and keeps its turn, no other pop
// of the group is woken for it, and the ack that releases the lease wakes it.
func TestAHandOffThatFindsTheLaneLeasedSendsThePopBackToWaiting(t *testing.T) {
	e := newEngineWithoutRechecks(t)
	q := queueName(t)
	mustPush(t, e, items(q, "p", "seed")...)
	drainGroup(t, e, q, "workers")
	mustPush(t, e, items(q, "p", "held")...)
	held := mustPop(t, e, PopRequest{Queue: q, Group: "workers", Batch: 1, LeaseSeconds: 60})
	if len(held.Messages) != 1 {
		t.Fatalf("pop: %+v", held.Messages)
	}

	req := PopRequest{Queue: q, Group: "workers", Batch: 10, Wait: true, Timeout: 10 * time.Second, AutoAck: true}
	first, second := parkTwo(t, e, req)

	before := e.HotPathStats()
	mustPush(t, e, items(q, "p", "next")...)
	stillParked(t, first, "the pop the push claimed nothing for")
	stillParked(t, second, "the second parked pop")
	oneTrip, general := popPaths(e, before)
	if n := handOffs(e, before); n != 1 || oneTrip+general != 0 {
		t.Fatalf("hand-offs %d, claims of the pops' own %d; want 1 and 0", n, oneTrip+general)
	}

	releasedAt := time.Now()
	mustAck(t, e, AckItem{TransactionID: "held", PartitionID: held.PartitionID.String(), Group: "workers", LeaseID: held.LeaseID})
	select {
	case p := <-second:
		t.Fatalf("the second parked pop answered before the one the push claimed nothing for: %+v", p.res)
	case p := <-first:
		if p.err != nil || !slices.Equal(txnIDs(p.res.Messages), []string{"next"}) {
			t.Fatalf("first parked pop after the release: %+v %v", p.res, p.err)
		}
	case <-time.After(time.Until(releasedAt.Add(wakeBound))):
		t.Fatalf("no parked pop answered within %v of the release: it did not wake the one the push claimed nothing for", wakeBound)
	}
}

// An ack that ends a lease which took a full batch from one partition claims
// the next batch for a parked pop of the group in its own round trip: the pop
// gets it without a claim of its own. A lease that took everything there was
// hands nothing on: the parked pop stays parked and no claim runs.
func TestAnAckEndingAFullBatchClaimsTheNextForAParkedPop(t *testing.T) {
	e := newEngineWithoutRechecks(t)
	q := queueName(t)
	mustPush(t, e, items(q, "p", "a", "b", "c", "d", "e")...)
	held := mustPop(t, e, PopRequest{Queue: q, Group: "workers", Batch: 2, LeaseSeconds: 60, SubscriptionMode: "all"})
	if !slices.Equal(txnIDs(held.Messages), []string{"a", "b"}) {
		t.Fatalf("first pop: %v", txnIDs(held.Messages))
	}
	req := PopRequest{Queue: q, Group: "workers", Batch: 2, Wait: true, Timeout: 10 * time.Second, LeaseSeconds: 60}
	parked := parkIdle(t, e, req)

	before := e.HotPathStats()
	ackedAt := time.Now()
	r := mustAck(t, e, ack(held.Messages[0], "completed"), ack(held.Messages[1], "completed"))
	if !r[0].Success || !r[1].Success || !r[1].LeaseReleased {
		t.Fatalf("ack: %+v", r)
	}
	p := wokenBy(t, parked, "ack", ackedAt)
	if p.err != nil || p.res == nil || !slices.Equal(txnIDs(p.res.Messages), []string{"c", "d"}) || p.res.LeaseID == "" {
		t.Fatalf("parked pop: %+v %v", p.res, p.err)
	}
	if n := handOffs(e, before); n != 1 {
		t.Fatalf("hand-offs = %d, want 1", n)
	}
	if oneTrip, general := popPaths(e, before); oneTrip+general != 0 {
		t.Fatalf("the handed pop ran claims of its own: one-trip %d, general %d", oneTrip, general)
	}

	// "e" is the last message: a batch of 2 finds one, so its ack hands nothing on.
	mustAck(t, e, ack(p.res.Messages[0], "completed"), ack(p.res.Messages[1], "completed"))
	last := mustPop(t, e, PopRequest{Queue: q, Group: "workers", Batch: 2, LeaseSeconds: 60})
	if !slices.Equal(txnIDs(last.Messages), []string{"e"}) {
		t.Fatalf("last pop: %v", txnIDs(last.Messages))
	}
	parked = parkIdle(t, e, req)
	before = e.HotPathStats()
	mustAck(t, e, ack(last.Messages[0], "completed"))
	stillParked(t, parked, "a pop parked behind a lease that took all there was")
	if n := handOffs(e, before); n != 0 {
		t.Fatalf("hand-offs after acking a short batch = %d, want 0", n)
	}
}

// A hand-off claim that fails after the ack committed (here a stale plan: the
// queue's partition version moved under the cached one) leaves the ack
// standing and the pop to claim for itself, as a woken pop does.
func TestAnAckWhoseHandOffClaimFailsStillStandsAndThePopIsServed(t *testing.T) {
	e := newEngineWithoutRechecks(t)
	q := queueName(t)
	mustPush(t, e, items(q, "p", "a", "b", "c", "d")...)
	held := mustPop(t, e, PopRequest{Queue: q, Group: "workers", Batch: 2, LeaseSeconds: 60, SubscriptionMode: "all"})
	parked := parkIdle(t, e, PopRequest{Queue: q, Group: "workers", Batch: 2, Wait: true, Timeout: 10 * time.Second, LeaseSeconds: 60})
	if _, err := e.pool.Exec(context.Background(), `UPDATE lanes.queues SET partition_version = partition_version + 1 WHERE name = $1`, q); err != nil {
		t.Fatal(err)
	}

	before := e.HotPathStats()
	ackedAt := time.Now()
	r := mustAck(t, e, ack(held.Messages[0], "completed"), ack(held.Messages[1], "completed"))
	if !r[0].Success || !r[1].Success || !r[1].LeaseReleased {
		t.Fatalf("ack: %+v", r)
	}
	p := wokenBy(t, parked, "ack", ackedAt)
	if p.err != nil || p.res == nil || !slices.Equal(txnIDs(p.res.Messages), []string{"c", "d"}) {
		t.Fatalf("parked pop: %+v %v", p.res, p.err)
	}
	if n := handOffs(e, before); n != 0 {
		t.Fatalf("hand-offs = %d, want 0 (the claim failed)", n)
	}
	if oneTrip, general := popPaths(e, before); general == 0 {
		t.Fatalf("the pop did not claim for itself the general way (one-trip %d, general %d)", oneTrip, general)
	}
	// The ack stood: the group's cursor is past "b", so nothing before "c" comes back.
	if again := mustPop(t, e, PopRequest{Queue: q, Group: "workers", Batch: 10, LeaseSeconds: 60}); len(again.Messages) != 0 {
		t.Fatalf("after the ack and the handed batch: %v", txnIDs(again.Messages))
	}
}

// ackWithAPopParked pops "a" and "b" of the five messages q's partition "p"
// holds into a lease, parks a pop of the group (batch 2, lease parkedLease
// seconds), acks the lease and returns what the parked pop got, which must be
// "c" and "d", with the counters from before the ack.
func ackWithAPopParked(t *testing.T, e *Engine, q string, parkedLease int) (poppedAt, HotPathStats) {
	t.Helper()
	held := mustPop(t, e, PopRequest{Queue: q, Group: "workers", Batch: 2, LeaseSeconds: 60, SubscriptionMode: "all"})
	if !slices.Equal(txnIDs(held.Messages), []string{"a", "b"}) {
		t.Fatalf("first pop: %v", txnIDs(held.Messages))
	}
	parked := parkIdle(t, e, PopRequest{Queue: q, Group: "workers", Batch: 2, Wait: true, Timeout: 10 * time.Second, LeaseSeconds: parkedLease})
	before := e.HotPathStats()
	ackedAt := time.Now()
	mustAck(t, e, ack(held.Messages[0], "completed"), ack(held.Messages[1], "completed"))
	p := wokenBy(t, parked, "ack", ackedAt)
	if p.err != nil || p.res == nil || !slices.Equal(txnIDs(p.res.Messages), []string{"c", "d"}) || p.res.LeaseID == "" {
		t.Fatalf("parked pop: %+v %v", p.res, p.err)
	}
	return p, before
}

// continuedHandOffs counts the acks' hand-offs by continueLeaseSQL since before.
func continuedHandOffs(e *Engine, before HotPathStats) uint64 {
	return e.HotPathStats().HandOffsContinued - before.HandOffsContinued
}

// An ack that ends a full batch of the only partition of the group with work
// leases the next batch of that partition to a parked pop without the claim
// statement: the pop gets it in the ack's round trip under its own lease
// time, and its ack works as any other.
func TestAnAckEndingTheOnlyBusyPartitionsBatchContinuesItForAParkedPop(t *testing.T) {
	e := newEngineWithoutRechecks(t)
	q := queueName(t)
	mustPush(t, e, items(q, "p", "a", "b", "c", "d", "e")...)
	p, before := ackWithAPopParked(t, e, q, 30)
	if n := continuedHandOffs(e, before); n != 1 {
		t.Fatalf("continued hand-offs = %d, want 1", n)
	}
	if oneTrip, general := popPaths(e, before); oneTrip+general != 0 {
		t.Fatalf("the handed pop ran claims of its own: one-trip %d, general %d", oneTrip, general)
	}
	var committed, batchEnd int64
	var leaseLeft time.Duration
	if err := e.pool.QueryRow(context.Background(), `SELECT committed, batch_end, lease_expires_at - now()
		FROM lanes.consumers WHERE partition_id = $1 AND consumer_group = 'workers' AND lease_id = $2::uuid`,
		p.res.PartitionID, p.res.LeaseID).Scan(&committed, &batchEnd, &leaseLeft); err != nil {
		t.Fatalf("the handed lease's cursor: %v", err)
	}
	if committed != 1 || batchEnd != 3 || leaseLeft < 25*time.Second || leaseLeft > 30*time.Second {
		t.Fatalf("cursor committed %d, batch end %d, lease left %v; want 1, 3 and the pop's 30 s", committed, batchEnd, leaseLeft)
	}
	if r := mustAck(t, e, ack(p.res.Messages[0], "completed"), ack(p.res.Messages[1], "completed")); !r[1].Success || !r[1].LeaseReleased {
		t.Fatalf("ack of the handed batch: %+v", r)
	}
	if last := mustPop(t, e, PopRequest{Queue: q, Group: "workers", Batch: 10, LeaseSeconds: 60}); !slices.Equal(txnIDs(last.Messages), []string{"e"}) {
		t.Fatalf("after the handed batch: %v", txnIDs(last.Messages))
	}
}

// Only a lease whose claim saw no other partition of the group with work is
// continued: there the serving order had nothing to choose. The first pop
// here saw both partitions (its ack's hand-off runs the claim statement), the
// second only the one the first left.
func TestOnlyALeaseThatSawNoOtherBusyPartitionIsContinued(t *testing.T) {
	e := newEngineWithoutRechecks(t)
	q := queueName(t)
	mustPush(t, e, append(items(q, "p1", "a1", "b1", "c1", "d1"), items(q, "p2", "a2", "b2", "c2", "d2")...)...)
	pop := PopRequest{Queue: q, Group: "workers", Batch: 2, Partitions: 1, LeaseSeconds: 60, SubscriptionMode: "all"}
	first := mustPop(t, e, pop)
	second := mustPop(t, e, pop)
	if first.ReadyPartitions != 2 || second.ReadyPartitions != 1 || first.Partition == second.Partition {
		t.Fatalf("pops took %s (ready %d) and %s (ready %d)", first.Partition, first.ReadyPartitions, second.Partition, second.ReadyPartitions)
	}
	parked := pop
	parked.Wait, parked.Timeout = true, 10*time.Second
	for i, held := range []*PopResult{first, second} {
		waiting := parkIdle(t, e, parked)
		before := e.HotPathStats()
		ackedAt := time.Now()
		mustAck(t, e, ack(held.Messages[0], "completed"), ack(held.Messages[1], "completed"))
		p := wokenBy(t, waiting, "ack", ackedAt)
		if p.err != nil || p.res == nil || p.res.Partition != held.Partition || len(p.res.Messages) != 2 {
			t.Fatalf("pop parked behind lease %d: %+v %v, want the next two of %s", i, p.res, p.err, held.Partition)
		}
		wantContinued := uint64(i) // the second lease's claim saw only its partition
		if n, c := handOffs(e, before), continuedHandOffs(e, before); n != 1 || c != wantContinued {
			t.Fatalf("ack of lease %d: hand-offs %d (continued %d), want 1 (continued %d)", i, n, c, wantContinued)
		}
	}
}

// A queue whose claims judge more than the cursor and the log (here
// windowBuffer) is never continued: the continuation takes nothing and the
// pop claims for itself, under the queue's rules.
func TestAContinuationLeavesAWindowBufferedQueueToTheClaim(t *testing.T) {
	e := newEngineWithoutRechecks(t)
	q := queueName(t)
	if _, err := e.Configure(context.Background(), ConfigureRequest{Queue: q, Options: map[string]json.RawMessage{"windowBuffer": json.RawMessage("1")}}); err != nil {
		t.Fatal(err)
	}
	mustPush(t, e, items(q, "p", "a", "b", "c", "d", "e")...)
	time.Sleep(1100 * time.Millisecond) // past the window: claimable
	_, before := ackWithAPopParked(t, e, q, 60)
	if n, c := handOffs(e, before), continuedHandOffs(e, before); n != 0 || c != 0 {
		t.Fatalf("hand-offs = %d (continued %d), want none: the pop claims for itself", n, c)
	}
	if oneTrip, general := popPaths(e, before); oneTrip+general == 0 {
		t.Fatal("the pop did not claim for itself")
	}
}

// An ack whose deadline passes while the claim it runs for a parked pop is
// held in PostgreSQL still hands the pop that claim: cut short at its
// deadline, the ack's batch committed anyway (the claim had run past the
// cancel) and its lease held "c" and "d" for nobody until it expired.
func TestAnAckPastItsDeadlineStillHandsItsClaimToTheParkedPop(t *testing.T) {
	e := newEngineWithoutRechecks(t)
	q := queueName(t)
	mustPush(t, e, items(q, "p", "a", "b", "c", "d")...)
	held := mustPop(t, e, PopRequest{Queue: q, Group: "workers", Batch: 2, LeaseSeconds: 60, SubscriptionMode: "all"})
	parked := parkIdle(t, e, PopRequest{Queue: q, Group: "workers", Batch: 2, Wait: true, Timeout: 10 * time.Second, LeaseSeconds: 60})
	testdb.StallNextClaimPastCancel(t, func(ctx context.Context, sql string) error {
		_, err := e.pool.Exec(ctx, sql)
		return err
	}, "workers", 1500*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	before := e.HotPathStats()
	r, err := e.Ack(ctx, []AckItem{ack(held.Messages[0], "completed"), ack(held.Messages[1], "completed")})
	if err != nil || !r[0].Success || !r[1].Success {
		t.Errorf("ack past its deadline: %+v %v", r, err)
	}
	select {
	case p := <-parked:
		if p.err != nil || p.res == nil || !slices.Equal(txnIDs(p.res.Messages), []string{"c", "d"}) {
			t.Fatalf("parked pop: %+v %v", p.res, p.err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the parked pop got nothing: the claim the ack ran for it holds its messages for nobody")
	}
	if n := handOffs(e, before); n != 1 {
		t.Fatalf("hand-offs = %d, want 1", n)
	}
}

// A claim a push runs for a parked pop that fails after the push committed
// logs once a minute with the count, not one WARN line per write: while the
// database is down every write with a pop parked fails one. A trigger fails
// every lease the group's claims write, so each push's claim for the parked pop
// fails (and so does the pop's own claim after it).
func TestFailingHandOffClaimsLogOnceAMinute(t *testing.T) {
	var out testlog.Buffer
	e := newEngineWith(t, Config{Logger: slog.New(slog.NewTextHandler(&out, nil)), ParkedRecheckRate: rateWithoutRechecks}, nil)
	q := queueName(t)
	group := "fails-" + q
	// group is letters, digits and dashes (queueName): safe inside quotes.
	withRowTrigger(t, e, "BEFORE UPDATE ON lanes.consumers", `
			IF NEW.consumer_group = '`+group+`' AND NEW.lease_id IS NOT NULL THEN
				RAISE EXCEPTION 'leases of this group fail';
			END IF;`)
	mustPush(t, e, items(q, "p", "seed")...)
	drainGroup(t, e, q, group) // autoAck pops write no lease: they pass

	const writes = 4
	for i := range writes {
		parked := parkIdle(t, e, PopRequest{Queue: q, Group: group, Batch: 10, Wait: true, Timeout: 10 * time.Second, LeaseSeconds: 60})
		pushed := time.Now()
		mustPush(t, e, items(q, "p", fmt.Sprint("m", i))...)
		if p := wokenBy(t, parked, "push", pushed); p.err == nil {
			t.Fatalf("write %d: the parked pop's claims should fail: %+v", i, p.res)
		}
		drainGroup(t, e, q, group)
	}
	lines := strings.Count(out.String(), "claim for a parked pop after a write failed")
	if lines != 1 || !strings.Contains(out.String(), "failures=1") {
		t.Fatalf("want one WARN line for %d failed claims within the minute, got %d:\n%s", writes, lines, out.String())
	}
}

// A claim a push runs for a parked pop that takes a segment which does not
// decode gives it back in the push's round trip, as the pop's own claim does:
// no lease is left for nobody, and the pop answers the CorruptSegmentError. A
// trigger stores the pushed segment's frames truncated.
func TestAHandOffReadingACorruptSegmentGivesItsClaimBack(t *testing.T) {
	e := newEngineWithoutRechecks(t)
	q := queueName(t)
	ctx := context.Background()
	// Both partitions exist before the group's plan is cached: a push creating
	// one makes the plan stale, and the pop would claim for itself.
	mustPush(t, e, items(q, "bad", "seed")...)
	drainGroup(t, e, q, "workers")
	// q is letters, digits and dashes (queueName): safe inside quotes.
	withRowTrigger(t, e, "BEFORE INSERT ON lanes.segments", `
			IF EXISTS (SELECT 1 FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
					WHERE p.id = NEW.partition_id AND q.name = '`+q+`' AND p.name = 'bad') THEN
				NEW.frames := substring(NEW.frames FROM 1 FOR 20);
			END IF;`)
	parked := parkIdle(t, e, PopRequest{Queue: q, Group: "workers", Batch: 10, Wait: true, Timeout: 10 * time.Second, LeaseSeconds: 60})
	before := e.HotPathStats()
	pushed := time.Now()
	mustPush(t, e, items(q, "bad", "a", "b")...)
	p := wokenBy(t, parked, "push", pushed)
	var corrupt *CorruptSegmentError
	if !errors.As(p.err, &corrupt) || corrupt.Queue != q || corrupt.Partition != "bad" {
		t.Fatalf("parked pop: %+v %v", p.res, p.err)
	}
	// A pop that claimed for itself, with no hand-off, would leave no lease either.
	after := e.HotPathStats()
	if given := after.HandOffsGivenBack - before.HandOffsGivenBack; given != 1 {
		t.Fatalf("hand-off claims given back = %d, want 1 (the push claimed for the pop)", given)
	}
	if n := handOffs(e, before); n != 0 {
		t.Fatalf("hand-offs = %d, want 0 (the claim was given back)", n)
	}
	var leased int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM lanes.consumers c JOIN lanes.partitions p ON p.id = c.partition_id
		JOIN lanes.queues q ON q.id = p.queue_id
		WHERE q.name = $1 AND p.name = 'bad' AND (c.lease_id IS NOT NULL OR c.lease_expires_at IS NOT NULL)`, q).Scan(&leased); err != nil {
		t.Fatal(err)
	}
	if leased != 0 {
		t.Fatal("the corrupt partition is leased to nobody")
	}
}

// withRowTrigger installs, for the test's lifetime, a row trigger (event, e.g.
// "BEFORE INSERT ON lanes.segments") whose PL/pgSQL body runs before RETURN NEW:
// the way these tests make one write fail or store damaged frames.
func withRowTrigger(t *testing.T, e *Engine, event, body string) {
	t.Helper()
	ctx := context.Background()
	fn := fmt.Sprintf("test_row_trigger_%d", queueSeq.Add(1))
	table := event[strings.LastIndex(event, " ")+1:]
	if _, err := e.pool.Exec(ctx, `CREATE FUNCTION lanes.`+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN`+body+`
			RETURN NEW;
		END $$;
		CREATE TRIGGER `+fn+` `+event+` FOR EACH ROW EXECUTE FUNCTION lanes.`+fn+`()`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := e.pool.Exec(ctx, `DROP TRIGGER `+fn+` ON `+table+`; DROP FUNCTION lanes.`+fn+`()`); err != nil {
			t.Error(err)
		}
	})
}
