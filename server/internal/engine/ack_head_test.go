package engine

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
)

// configureRetryLimit sets a queue's retry budget.
func configureRetryLimit(t *testing.T, e *Engine, q, limit string) {
	t.Helper()
	if _, err := e.Configure(context.Background(), ConfigureRequest{Queue: q, Options: map[string]json.RawMessage{
		"retryLimit": json.RawMessage(limit)}}); err != nil {
		t.Fatal(err)
	}
}

// popExpect pops up to n messages of the queue-mode group and checks their ids.
func popExpect(t *testing.T, e *Engine, q string, n int, want ...string) *PopResult {
	t.Helper()
	b := mustPop(t, e, PopRequest{Queue: q, Batch: n})
	if got := txnIDs(b.Messages); !reflect.DeepEqual(got, want) {
		t.Fatalf("pop delivered %v, want %v", got, want)
	}
	return b
}

// ackInBundle acks items in one transaction bundle and returns its ack results.
func ackInBundle(t *testing.T, e *Engine, acks ...AckItem) []AckResult {
	t.Helper()
	ops := make([]TxOp, len(acks))
	for i := range acks {
		ops[i] = TxOp{Index: i, Ack: &acks[i]}
	}
	res, err := e.Transaction(context.Background(), TransactionRequest{Ops: ops})
	if err != nil || !res.Success {
		t.Fatalf("bundle: %+v, %v", res, err)
	}
	out := make([]AckResult, len(res.Results))
	for i, r := range res.Results {
		out[i] = *r.Ack
	}
	return out
}

// The retry budget belongs to the head message: once the cursor moves past a
// message that spent the whole budget, the next one starts with a full one,
// whether the move and the next failure come in one call or two, and through
// the one-trip ack or a transaction bundle.
func TestRetryBudgetStartsOverForTheNextMessage(t *testing.T) {
	for _, tc := range []struct {
		name              string
		completeAThenFail func(t *testing.T, e *Engine, a, b Message)
	}{
		{"separate calls", func(t *testing.T, e *Engine, a, b Message) {
			mustAck(t, e, ack(a, "completed")) // the lease stays: c is still leased
			if r := mustAck(t, e, ack(b, "failed")); !r[0].Success || r[0].DLQ {
				t.Fatalf("first failure of b: %+v", r[0])
			}
		}},
		{"one call", func(t *testing.T, e *Engine, a, b Message) {
			if r := mustAck(t, e, ack(a, "completed"), ack(b, "failed")); !r[1].Success || r[1].DLQ {
				t.Fatalf("first failure of b: %+v", r[1])
			}
		}},
		{"one bundle", func(t *testing.T, e *Engine, a, b Message) {
			ackInBundle(t, e, ack(a, "completed"), ack(b, "failed"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t)
			q := queueName(t)
			configureRetryLimit(t, e, q, "2")
			pushN(t, e, q, "p", 3)
			for range 2 { // m0 spends the whole budget and is still redelivered
				batch := popExpect(t, e, q, 3, "m0", "m1", "m2")
				mustAck(t, e, ack(batch.Messages[0], "failed"))
			}
			batch := popExpect(t, e, q, 3, "m0", "m1", "m2")
			tc.completeAThenFail(t, e, batch.Messages[0], batch.Messages[1])
			if n := dlqRows(t, e, batch.PartitionID); n != 0 {
				t.Fatalf("m1's first failure dead-lettered it with m0's spent budget (%d dead letters)", n)
			}
			// m1 has a budget of its own: one more failure redelivers, the next files it.
			b := popExpect(t, e, q, 2, "m1", "m2")
			if r := mustAck(t, e, ack(b.Messages[0], "failed")); r[0].DLQ {
				t.Fatalf("second failure of m1: %+v", r[0])
			}
			b = popExpect(t, e, q, 2, "m1", "m2")
			if r := mustAck(t, e, ack(b.Messages[0], "failed")); !r[0].DLQ {
				t.Fatalf("third failure of m1 should dead-letter it: %+v", r[0])
			}
			var retries int
			if err := e.pool.QueryRow(context.Background(), `SELECT retry_count FROM lanes.dlq
				WHERE partition_id = $1 AND transaction_id = 'm1'`, b.PartitionID).Scan(&retries); err != nil {
				t.Fatal(err)
			}
			if retries != 2 {
				t.Fatalf("m1 dead-lettered after %d retries, want 2", retries)
			}
			popExpect(t, e, q, 2, "m2")
		})
	}
}

// A dlq ack of a message the earlier messages of its lease do not lead up to
// files nothing and skips nothing: the lease goes, the cursor stays below the
// first unacknowledged message and the batch redelivers from it. Once the
// poison is the head, a dlq ack files it and the cursor moves past it.
func TestDeadLetteringWaitsForTheHead(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	pushN(t, e, q, "p", 5)
	b := popExpect(t, e, q, 4, "m0", "m1", "m2", "m3")
	r := mustAck(t, e, ack(b.Messages[2], "dlq"))
	want := AckResult{Index: 0, TransactionID: "m2", Success: true, LeaseReleased: true, Error: errDeadLetterNotHead}
	if r[0] != want {
		t.Fatalf("dlq of m2 below unacknowledged m0, m1:\n got %+v\nwant %+v", r[0], want)
	}
	if n := dlqRows(t, e, b.PartitionID); n != 0 {
		t.Fatalf("m2 filed before m0 and m1 were acknowledged: %d dead letters", n)
	}
	b = popExpect(t, e, q, 4, "m0", "m1", "m2", "m3")

	// m1 completed leaves m0 completed silently, but the cursor stops there:
	// m2 is the head after the clamp, so it is filed and the cursor passes it.
	r = mustAck(t, e, ack(b.Messages[1], "completed"), ack(b.Messages[2], "dlq"))
	if !r[1].Success || !r[1].DLQ || r[1].Error != "" {
		t.Fatalf("dlq of m2 at the head: %+v", r[1])
	}
	if n := dlqRows(t, e, b.PartitionID); n != 1 {
		t.Fatalf("%d dead letters, want m2 alone", n)
	}
	popExpect(t, e, q, 4, "m3", "m4")
}

// A failed ack with the budget spent is a dead-lettering too: at a message
// below unacknowledged ones it files (or drops) nothing and the batch
// redelivers; at the head it files.
func TestSpentBudgetWaitsForTheHead(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	configureRetryLimit(t, e, q, "0")
	pushN(t, e, q, "p", 4)
	b := popExpect(t, e, q, 3, "m0", "m1", "m2")
	r := mustAck(t, e, ack(b.Messages[0], "completed"), ack(b.Messages[2], "failed"))
	if !r[1].Success || r[1].DLQ || r[1].Dropped || !r[1].LeaseReleased || r[1].Error != errDeadLetterNotHead {
		t.Fatalf("spent failure of m2 below unacknowledged m1: %+v", r[1])
	}
	if n := dlqRows(t, e, b.PartitionID); n != 0 {
		t.Fatalf("m2 filed before m1 was acknowledged: %d dead letters", n)
	}
	b = popExpect(t, e, q, 3, "m1", "m2", "m3")
	if r := mustAck(t, e, ack(b.Messages[0], "failed")); !r[0].DLQ {
		t.Fatalf("spent failure of the head m1: %+v", r[0])
	}
	popExpect(t, e, q, 3, "m2", "m3")
}

// A transaction bundle's acks follow the same rule as a plain ack's.
func TestBundleDeadLetteringWaitsForTheHead(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	pushN(t, e, q, "p", 3)
	b := popExpect(t, e, q, 3, "m0", "m1", "m2")
	res := ackInBundle(t, e, ack(b.Messages[1], "dlq"))
	if !res[0].Success || res[0].DLQ {
		t.Fatalf("bundle dlq of m1 below unacknowledged m0: %+v", res[0])
	}
	if n := dlqRows(t, e, b.PartitionID); n != 0 {
		t.Fatalf("m1 filed before m0 was acknowledged: %d dead letters", n)
	}
	popExpect(t, e, q, 3, "m0", "m1", "m2")
}
