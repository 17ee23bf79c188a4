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
		if ok != tc.ok || (ok && !reflect.DeepEqual(got, []int64{tc.want})) {
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
// second engine on the same database) resolves the same ack in lanes.txns
// and, where txns lacks the id, in the leased span's segments. Emptying
// lanes.txns after the pop tells the paths apart.
func TestLeasedAckResolvesOnTheGrantingBrokerWithoutTxnRows(t *testing.T) {
	granting, other := newEngine(t), newEngine(t)
	q := queueName(t)
	pushN(t, granting, q, "p", 4)
	b := mustPop(t, granting, PopRequest{Queue: q, Batch: 4})
	if _, err := granting.pool.Exec(context.Background(), `DELETE FROM lanes.txns WHERE partition_id = $1`, b.PartitionID); err != nil {
		t.Fatal(err)
	}
	unknown := ack(b.Messages[0], "completed")
	unknown.TransactionID = "never-pushed"
	viaOther := mustAck(t, other, ack(b.Messages[0], "completed"), unknown)
	if !viaOther[0].Success || viaOther[0].LeaseReleased {
		t.Fatalf("another broker has no index entry and must find the id in the leased span: %+v", viaOther[0])
	}
	if viaOther[1].Success || viaOther[1].Error != errUnresolvable {
		t.Fatalf("an id neither in lanes.txns nor in the span: %+v", viaOther[1])
	}
	if g := granting.HotPathStats(); g.AcksOneTrip != 0 {
		t.Fatalf("granting broker stats before its ack: %+v", g)
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
	if g := granting.HotPathStats(); g.AcksOneTrip != 1 || g.AcksGeneral != 0 {
		t.Fatalf("the granting broker's ack did not resolve from its index in one trip: %+v", g)
	}
	if again := mustPop(t, granting, PopRequest{Queue: q, Batch: 4}); len(again.Messages) != 0 {
		t.Fatalf("acked through offset 3, yet %v redelivered", txnIDs(again.Messages))
	}
}

// A lease that delivered an id more than once indexes every copy, lowest
// first, and an ack's k-th mention of the id resolves to the k-th copy (a
// mention past the last names the last again).
func TestLeaseIndexResolvesTheKthMentionToTheKthCopy(t *testing.T) {
	x := newLeaseIndex()
	p := uuid.New()
	x.remember("L", time.Minute, indexedMessages(p, 10, "x", "y", "x"), false, false)
	if got, _ := x.lookup("L", p, "x"); !reflect.DeepEqual(got, []int64{10, 12}) {
		t.Fatalf("copies of x: %v", got)
	}
	for _, tc := range []struct {
		txns   []string
		lo, hi int64
	}{
		{[]string{"x"}, 10, 10},
		{[]string{"y"}, 11, 11},
		{[]string{"y", "x"}, 10, 11},
		{[]string{"x", "y", "x"}, 10, 12},
		{[]string{"x", "x", "x"}, 10, 12},
	} {
		if r, ok := x.resolveAll("L", p, tc.txns); !ok || r.lo != tc.lo || r.hi != tc.hi {
			t.Errorf("resolveAll(%v) = [%d, %d] (%v), want [%d, %d]", tc.txns, r.lo, r.hi, ok, tc.lo, tc.hi)
		}
	}
	if x.size != 3 {
		t.Fatalf("size %d, want 3 offsets", x.size)
	}
	x.forget("L", p)
	if x.size != 0 || len(x.byLease) != 0 {
		t.Fatalf("forget left %d offsets", x.size)
	}
}

// With deduplication off an id can repeat in a partition; the lease is still
// indexed, with what it delivered, so its acks resolve in memory.
func TestLeaseWithoutDeduplicationIsIndexed(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	if _, err := e.Configure(context.Background(), ConfigureRequest{Queue: q, Options: map[string]json.RawMessage{"dedupWindowSeconds": json.RawMessage("0")}}); err != nil {
		t.Fatal(err)
	}
	pushN(t, e, q, "p", 2)
	b := mustPop(t, e, PopRequest{Queue: q, Batch: 2})
	if offs, ok := e.leases.lookup(b.LeaseID, b.PartitionID, "m0"); !ok || !reflect.DeepEqual(offs, []int64{0}) {
		t.Fatalf("lease on a queue without deduplication: indexed %v, %v", offs, ok)
	}
	before := e.HotPathStats()
	if res := mustAck(t, e, ack(b.Messages[1], "completed")); !res[0].Success || !res[0].LeaseReleased {
		t.Fatalf("ack from the index: %+v", res[0])
	}
	if after := e.HotPathStats(); after.AcksOneTrip != before.AcksOneTrip+1 {
		t.Fatalf("the indexed ack did not run in one trip: %+v", after)
	}
}
