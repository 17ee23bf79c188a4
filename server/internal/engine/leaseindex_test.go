package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
)

func indexedMessages(partition uuid.UUID, from int64, txns ...string) []Message {
	out := make([]Message, len(txns))
	for i, txn := range txns {
		out[i] = Message{PartitionID: partition, TransactionID: txn, Offset: from + int64(i)}
	}
	return out
}

func TestLeaseIndexResolvesWhatTheLeaseDelivered(t *testing.T) {
	x := newLeaseIndex()
	p1, p2 := uuid.New(), uuid.New()
	x.remember("L", time.Minute, append(indexedMessages(p1, 10, "a", "b"), indexedMessages(p2, 0, "a")...), false, false)
	for _, tc := range []struct {
		partition uuid.UUID
		txn       string
		want      int64
		ok        bool
	}{{p1, "a", 10, true}, {p1, "b", 11, true}, {p2, "a", 0, true}, {p2, "b", 0, false}, {p1, "c", 0, false}} {
		got, ok := x.lookup("L", tc.partition, tc.txn)
		if ok != tc.ok || got != tc.want {
			t.Errorf("lookup(%s, %s) = %d, %v; want %d, %v", tc.partition, tc.txn, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := x.lookup("other", p1, "a"); ok {
		t.Error("another lease resolved through L's entries")
	}
	x.forget("L", p1)
	if _, ok := x.lookup("L", p1, "a"); ok {
		t.Error("released partition still resolves")
	}
	if _, ok := x.lookup("L", p2, "a"); !ok || x.size != 1 {
		t.Errorf("the lease's other partition went too (size %d)", x.size)
	}
	x.forget("L", p2)
	if len(x.byLease) != 0 || x.size != 0 {
		t.Errorf("fully released lease kept: %d leases, %d ids", len(x.byLease), x.size)
	}
}

// An ack ends a full backlog when it reaches the end of a lease that took a
// full batch from one partition: only then does it claim for a parked pop.
func TestLeaseIndexTellsWhenAnAckEndsAFullBatch(t *testing.T) {
	x := newLeaseIndex()
	p1, p2 := uuid.New(), uuid.New()
	x.remember("full", time.Minute, indexedMessages(p1, 10, "a", "b", "c"), true, false)
	x.remember("short", time.Minute, indexedMessages(p1, 20, "d"), false, false)
	x.remember("wide", time.Minute, append(indexedMessages(p1, 30, "e"), indexedMessages(p2, 0, "f")...), true, false)
	for _, tc := range []struct {
		lease     string
		partition uuid.UUID
		txns      []string
		want      bool
	}{
		{"full", p1, []string{"a", "b", "c"}, true},
		{"full", p1, []string{"c"}, true},       // the rest acked before
		{"full", p1, []string{"a", "b"}, false}, // "c" still leased
		{"short", p1, []string{"d"}, false},     // the pop took all there was
		{"wide", p1, []string{"e"}, false},      // one of several partitions
	} {
		r, ok := x.resolveAll(tc.lease, tc.partition, tc.txns)
		if !ok || r.endsFullBacklog != tc.want {
			t.Errorf("resolveAll(%s, %v) = %+v, %v; want endsFullBacklog %v", tc.lease, tc.txns, r, ok, tc.want)
		}
	}
}

func TestLeaseIndexSkipsShortHorizonsAndExpires(t *testing.T) {
	x := newLeaseIndex()
	p := uuid.New()
	x.remember("short", leaseIndexMargin, indexedMessages(p, 0, "a"), false, false)
	if _, ok := x.lookup("short", p, "a"); ok {
		t.Error("a horizon within the safety margin was indexed")
	}
	x.remember("L", time.Minute, indexedMessages(p, 0, "a"), false, false)
	x.byLease["L"].until = time.Now().Add(-time.Millisecond)
	if _, ok := x.lookup("L", p, "a"); ok {
		t.Error("expired entry answered")
	}
	if len(x.byLease) != 0 || x.size != 0 {
		t.Errorf("expired entry kept: %d leases, %d ids", len(x.byLease), x.size)
	}
}

func TestLeaseIndexStopsAtItsBound(t *testing.T) {
	x := newLeaseIndex()
	p := uuid.New()
	full := make([]string, leaseIndexMax)
	for i := range full {
		full[i] = fmt.Sprint(i)
	}
	x.remember("full", time.Minute, indexedMessages(p, 0, full...), false, false)
	x.remember("more", time.Minute, indexedMessages(p, 0, "x"), false, false)
	if _, ok := x.lookup("more", p, "x"); ok || x.size != leaseIndexMax {
		t.Fatalf("index grew past its bound: %d ids", x.size)
	}
	x.byLease["full"].until = time.Now().Add(-time.Millisecond)
	x.remember("after", time.Minute, indexedMessages(p, 0, "y"), false, false)
	if _, ok := x.lookup("after", p, "y"); !ok || x.size != 1 {
		t.Fatalf("expired entries were not swept to make room: %d ids", x.size)
	}
}

// The granting broker resolves a leased ack from memory; another broker (a
// second engine on the same database) resolves the same ack in lanes.txns.
// Emptying lanes.txns after the pop tells the two paths apart.
func TestLeasedAckResolvesOnTheGrantingBrokerWithoutTxnRows(t *testing.T) {
	granting, other := newEngine(t), newEngine(t)
	q := queueName(t)
	pushN(t, granting, q, "p", 4)
	b := mustPop(t, granting, PopRequest{Queue: q, Batch: 4})
	if _, err := granting.pool.Exec(context.Background(), `DELETE FROM lanes.txns WHERE partition_id = $1`, b.PartitionID); err != nil {
		t.Fatal(err)
	}
	viaOther := mustAck(t, other, ack(b.Messages[0], "completed"))
	if viaOther[0].Success || viaOther[0].Error != errUnresolvable {
		t.Fatalf("another broker has no index entry and must resolve in lanes.txns: %+v", viaOther[0])
	}
	res := mustAck(t, granting, ack(b.Messages[1], "completed"), ack(b.Messages[3], "completed"))
	for _, r := range res {
		if !r.Success {
			t.Fatalf("granting broker's ack: %+v", r)
		}
	}
	if !res[1].LeaseReleased {
		t.Fatalf("acking through the batch end releases the lease: %+v", res[1])
	}
	if n := granting.leases.size; n != 0 {
		t.Fatalf("released lease still indexed: %d ids", n)
	}
	if again := mustPop(t, granting, PopRequest{Queue: q, Batch: 4}); len(again.Messages) != 0 {
		t.Fatalf("acked through offset 3, yet %v redelivered", txnIDs(again.Messages))
	}
}

// With deduplication off a transaction id can reappear in the partition, so
// lanes.txns may move on from the delivered offset: such leases are not indexed.
func TestLeaseWithoutDeduplicationIsNotIndexed(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	if _, err := e.Configure(context.Background(), ConfigureRequest{Queue: q, Options: map[string]json.RawMessage{"dedupWindowSeconds": json.RawMessage("0")}}); err != nil {
		t.Fatal(err)
	}
	pushN(t, e, q, "p", 2)
	b := mustPop(t, e, PopRequest{Queue: q, Batch: 2})
	if _, ok := e.leases.lookup(b.LeaseID, b.PartitionID, "m0"); ok {
		t.Fatal("lease on a queue without deduplication was indexed")
	}
	if res := mustAck(t, e, ack(b.Messages[1], "completed")); !res[0].Success {
		t.Fatalf("ack through lanes.txns: %+v", res[0])
	}
}

type cursorState struct {
	committed, batchEnd, consumed int64
	leased                        bool
	retries                       int
}

func cursorOf(t *testing.T, e *Engine, partition uuid.UUID) cursorState {
	t.Helper()
	var c cursorState
	if err := e.pool.QueryRow(context.Background(), `SELECT committed, batch_end, total_consumed, lease_id IS NOT NULL, retry_count
		FROM lanes.consumers WHERE partition_id = $1 AND consumer_group = $2`, partition, QueueModeGroup).
		Scan(&c.committed, &c.batchEnd, &c.consumed, &c.leased, &c.retries); err != nil {
		t.Fatal(err)
	}
	return c
}

// The one-round-trip ack (granting broker, all completed) leaves the cursor
// and answers exactly as the general path does (another broker, which has no
// index entry): a partial ack keeps the lease, acking through the batch end
// releases it and resets the retry count.
func TestOneTripAckMatchesTheGeneralPath(t *testing.T) {
	granting, other := newEngine(t), newEngine(t)
	fast, general := queueName(t), queueName(t)
	pushN(t, granting, fast, "p", 10)
	pushN(t, granting, general, "p", 10)
	fb := mustPop(t, granting, PopRequest{Queue: fast, Batch: 10})
	gb := mustPop(t, granting, PopRequest{Queue: general, Batch: 10})
	granting.leases.forget(gb.LeaseID, gb.PartitionID) // the general path's lease is unknown to any index

	partial := func(b *PopResult) []AckItem {
		return []AckItem{ack(b.Messages[2], "completed"), ack(b.Messages[4], "completed")}
	}
	rf, rg := mustAck(t, granting, partial(fb)...), mustAck(t, other, partial(gb)...)
	if !reflect.DeepEqual(rf, rg) {
		t.Fatalf("partial ack answers differ:\n one trip %+v\n general  %+v", rf, rg)
	}
	if cf, cg := cursorOf(t, granting, fb.PartitionID), cursorOf(t, granting, gb.PartitionID); cf != cg || cf.committed != 4 || !cf.leased {
		t.Fatalf("after the partial ack: one trip %+v, general %+v", cf, cg)
	}
	for _, pid := range []uuid.UUID{fb.PartitionID, gb.PartitionID} {
		if _, err := granting.pool.Exec(context.Background(), `UPDATE lanes.consumers SET retry_count = 2 WHERE partition_id = $1`, pid); err != nil {
			t.Fatal(err)
		}
	}
	rest := func(b *PopResult) []AckItem {
		return []AckItem{ack(b.Messages[9], "completed"), ack(b.Messages[5], "completed")}
	}
	rf, rg = mustAck(t, granting, rest(fb)...), mustAck(t, other, rest(gb)...)
	if !reflect.DeepEqual(rf, rg) || !rf[0].LeaseReleased {
		t.Fatalf("final ack answers:\n one trip %+v\n general  %+v", rf, rg)
	}
	cf, cg := cursorOf(t, granting, fb.PartitionID), cursorOf(t, granting, gb.PartitionID)
	if cf != cg || cf != (cursorState{committed: 9, batchEnd: 9, consumed: 10}) {
		t.Fatalf("after the final ack: one trip %+v, general %+v", cf, cg)
	}
	if granting.leases.size != 0 {
		t.Fatalf("released lease still indexed: %d ids", granting.leases.size)
	}
	if g, o := granting.HotPathStats(), other.HotPathStats(); g.AcksOneTrip != 2 || g.AcksGeneral != 0 || o.AcksOneTrip != 0 || o.AcksGeneral != 2 {
		t.Fatalf("paths taken: granting %+v, other %+v", g, o)
	}
	// A repeat under the released lease: the one-trip guard refuses it and the
	// general path answers, as it does on the other broker: a noop, since the
	// cursor covers it (a retried ack request).
	af, ag := mustAck(t, granting, ack(fb.Messages[9], "completed")), mustAck(t, other, ack(gb.Messages[9], "completed"))
	if !reflect.DeepEqual(af, ag) || !af[0].Success || !af[0].Noop {
		t.Fatalf("repeated ack:\n granting %+v\n other    %+v", af, ag)
	}
}
