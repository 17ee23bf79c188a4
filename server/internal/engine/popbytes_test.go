package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// popBytesBudget is the byte budget of these tests' engines: two 40 KiB
// messages stay under it, the third reaches it.
const popBytesBudget = 100 << 10

// bigItems are n messages of about 40 KiB each on partition p of q, each in a
// segment of its own (a segment closes past segmentMaxBytes).
func bigItems(q, p, prefix string, n int) []PushItem {
	out := make([]PushItem, n)
	for i := range out {
		id := fmt.Sprintf("%s%d", prefix, i)
		out[i] = PushItem{Queue: q, Partition: p, TransactionID: id, Payload: raw(strings.Repeat("x", 40<<10))}
	}
	return out
}

func newBudgetEngine(t *testing.T) *Engine {
	return newEngineWith(t, Config{PopMaxBytes: popBytesBudget}, nil)
}

// A pop of large messages stops once what it took reaches the byte budget,
// and its lease covers only what it delivered: acking that ends the lease,
// and the next pop takes the rest at once.
func TestPopStopsAtTheByteBudgetAndLeasesOnlyWhatItDelivered(t *testing.T) {
	for _, pinned := range []bool{false, true} {
		t.Run(fmt.Sprintf("pinned=%v", pinned), func(t *testing.T) {
			e := newBudgetEngine(t)
			q := queueName(t)
			mustPush(t, e, bigItems(q, "p", "m", 10)...)
			req := PopRequest{Queue: q, Batch: 200, LeaseSeconds: 300}
			if pinned {
				req.Partition = "p"
			}
			first := mustPop(t, e, req)
			if got := txnIDs(first.Messages); strings.Join(got, ",") != "m0,m1,m2" {
				t.Fatalf("first pop delivered %v, want m0..m2 (the budget reached on the third)", got)
			}
			var batchEnd int64
			if err := e.pool.QueryRow(t.Context(), `SELECT batch_end FROM lanes.consumers WHERE lease_id = $1::uuid`,
				first.LeaseID).Scan(&batchEnd); err != nil || batchEnd != first.Messages[2].Offset {
				t.Fatalf("the lease ends at %d (%v), want the last delivered offset %d", batchEnd, err, first.Messages[2].Offset)
			}
			r := mustAck(t, e, ack(first.Messages[0], "completed"), ack(first.Messages[1], "completed"), ack(first.Messages[2], "completed"))
			if !r[2].Success || !r[2].LeaseReleased {
				t.Fatalf("acking what was delivered did not end the lease: %+v", r)
			}
			second := mustPop(t, e, req)
			if got := txnIDs(second.Messages); strings.Join(got, ",") != "m3,m4,m5" {
				t.Fatalf("second pop delivered %v, want m3..m5 at once", got)
			}
		})
	}
}

// An autoAck pop moves the cursor only through what it delivered: pops one
// after another deliver every message once, in order.
func TestAutoAckPopsUnderTheByteBudgetDeliverEverythingOnce(t *testing.T) {
	e := newBudgetEngine(t)
	q := queueName(t)
	mustPush(t, e, bigItems(q, "p", "m", 10)...)
	var got []string
	for pops := 0; pops < 10; pops++ {
		b := mustPop(t, e, PopRequest{Queue: q, Batch: 200, AutoAck: true})
		if len(b.Messages) == 0 {
			break
		}
		if len(b.Messages) > 3 {
			t.Fatalf("an autoAck pop delivered %d messages past the budget", len(b.Messages))
		}
		got = append(got, txnIDs(b.Messages)...)
	}
	if want := "m0,m1,m2,m3,m4,m5,m6,m7,m8,m9"; strings.Join(got, ",") != want {
		t.Fatalf("delivered %v, want %s once each", got, want)
	}
}

// A wide pop's partitions share one byte budget; the partitions it left are
// the next pop's at once, and every message goes out once.
func TestWidePopSharesTheByteBudget(t *testing.T) {
	e := newBudgetEngine(t)
	q := queueName(t)
	for p := 0; p < 4; p++ {
		mustPush(t, e, bigItems(q, fmt.Sprintf("p%d", p), fmt.Sprintf("p%d-", p), 2)...)
	}
	req := PopRequest{Queue: q, Batch: 200, Partitions: 4, LeaseSeconds: 300}
	first := mustPop(t, e, req)
	second := mustPop(t, e, req) // another consumer, while the first holds its lease
	seen := map[string]int{}
	for _, b := range []*PopResult{first, second} {
		if len(b.Messages) != 3 {
			t.Fatalf("wide pops delivered %v then %v, want 3 each (the budget shared by the partitions)",
				txnIDs(first.Messages), txnIDs(second.Messages))
		}
		for _, m := range b.Messages {
			seen[m.TransactionID]++
			mustAck(t, e, ack(m, "completed"))
		}
	}
	for pops := 0; pops < 8; pops++ {
		b := mustPop(t, e, req)
		if len(b.Messages) == 0 {
			break
		}
		for _, m := range b.Messages {
			seen[m.TransactionID]++
			mustAck(t, e, ack(m, "completed"))
		}
	}
	if len(seen) != 8 {
		t.Fatalf("delivered %d of 8 messages: %v", len(seen), seen)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("%s delivered %d times", id, n)
		}
	}
}

// A message larger than the whole budget still goes out, alone.
func TestAMessageAboveTheByteBudgetIsDeliveredAlone(t *testing.T) {
	e := newBudgetEngine(t)
	q := queueName(t)
	huge := PushItem{Queue: q, Partition: "p", TransactionID: "huge", Payload: raw(strings.Repeat("x", 150<<10))}
	mustPush(t, e, append([]PushItem{huge}, items(q, "p", "a", "b")...)...)
	first := mustPop(t, e, PopRequest{Queue: q, Batch: 200})
	if got := txnIDs(first.Messages); strings.Join(got, ",") != "huge" {
		t.Fatalf("first pop delivered %v, want the huge message alone", got)
	}
	mustAck(t, e, ack(first.Messages[0], "completed"))
	if got := txnIDs(mustPop(t, e, PopRequest{Queue: q, Batch: 200}).Messages); strings.Join(got, ",") != "a,b" {
		t.Fatalf("second pop delivered %v, want a,b", got)
	}
}

// An ack that ends a lease hands the partition's next batch to a parked pop
// in its own round trip (continueLeaseSQL); that batch keeps the budget too.
func TestAckHandOffKeepsTheByteBudget(t *testing.T) {
	e := newBudgetEngine(t)
	q := queueName(t)
	mustPush(t, e, bigItems(q, "p", "m", 10)...)
	held := mustPop(t, e, PopRequest{Queue: q, Batch: 2, LeaseSeconds: 300})
	if len(held.Messages) != 2 {
		t.Fatalf("held pop: %v", txnIDs(held.Messages))
	}
	before := e.HotPathStats().HandOffsContinued
	done := parkPastBackoff(t, e, PopRequest{Queue: q, Batch: 200, Wait: true, Timeout: 10 * time.Second, LeaseSeconds: 300})
	mustAck(t, e, ack(held.Messages[0], "completed"), ack(held.Messages[1], "completed"))
	p := <-done
	if p.err != nil || strings.Join(txnIDs(p.res.Messages), ",") != "m2,m3,m4" {
		t.Fatalf("parked pop: %v %v, want m2..m4", txnIDs(p.res.Messages), p.err)
	}
	if n := e.HotPathStats().HandOffsContinued - before; n != 1 {
		t.Fatalf("continued hand-offs = %d, want 1 (continueLeaseSQL)", n)
	}
	mustAck(t, e, ack(p.res.Messages[0], "completed"), ack(p.res.Messages[1], "completed"), ack(p.res.Messages[2], "completed"))
	if got := txnIDs(mustPop(t, e, PopRequest{Queue: q, Batch: 200, LeaseSeconds: 300}).Messages); strings.Join(got, ",") != "m5,m6,m7" {
		t.Fatalf("next pop delivered %v, want m5..m7", got)
	}
}
