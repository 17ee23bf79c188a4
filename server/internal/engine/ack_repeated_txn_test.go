package engine

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// ackBrokers runs an ack test on the broker that granted the lease (which
// resolves from its lease index) and on another broker on the same database
// (which resolves in lanes.txns and the span's segments).
func ackBrokers(t *testing.T, run func(t *testing.T, granting, acking *Engine)) {
	t.Run("granting broker", func(t *testing.T) {
		e := newEngine(t)
		run(t, e, e)
	})
	t.Run("another broker", func(t *testing.T) {
		run(t, newEngine(t), newEngine(t))
	})
}

func configureDedupWindow(t *testing.T, e *Engine, q string, seconds int) {
	t.Helper()
	if _, err := e.Configure(context.Background(), ConfigureRequest{Queue: q,
		Options: map[string]json.RawMessage{"dedupWindowSeconds": raw(seconds)}}); err != nil {
		t.Fatal(err)
	}
}

// groupCursor is the committed offset and lease state of (partition of b, group).
func groupCursor(t *testing.T, e *Engine, b *PopResult, group string) (committed int64, leased bool) {
	t.Helper()
	if err := e.pool.QueryRow(context.Background(), `SELECT committed, lease_id IS NOT NULL FROM lanes.consumers
		WHERE partition_id = $1 AND consumer_group = $2`, b.PartitionID, group).Scan(&committed, &leased); err != nil {
		t.Fatal(err)
	}
	return committed, leased
}

// pushTwiceAcrossTheWindow pushes id evt-1 ("first"), waits out the queue's
// one-second dedup window and pushes evt-1 again ("second"): lanes.txns then
// points at the second copy.
func pushTwiceAcrossTheWindow(t *testing.T, e *Engine, q string) {
	t.Helper()
	configureDedupWindow(t, e, q, 1)
	mustPush(t, e, PushItem{Queue: q, Partition: "p", TransactionID: "evt-1", Payload: raw("first")})
	time.Sleep(1300 * time.Millisecond)
	if res := mustPush(t, e, PushItem{Queue: q, Partition: "p", TransactionID: "evt-1", Payload: raw("second")}); res[0].Status != PushQueued {
		t.Fatalf("the re-sent id after the window was not stored: %+v", res[0])
	}
}

// A leased ack of an id re-sent after the dedup window names the copy the
// lease delivered, not the newest: completing it moves on to the second copy,
// failing it charges the budget (so the poison eventually dead-letters)
// instead of answering unresolvable forever.
func TestLeasedAckOfAnIDResentAfterTheWindowResolvesTheDeliveredCopy(t *testing.T) {
	for _, status := range []string{"completed", "failed"} {
		t.Run(status, func(t *testing.T) {
			ackBrokers(t, func(t *testing.T, granting, acking *Engine) {
				q := queueName(t)
				pushTwiceAcrossTheWindow(t, granting, q)
				pop := PopRequest{Queue: q, Group: "g", SubscriptionMode: "all", Batch: 1}
				b := mustPop(t, granting, pop)
				if len(b.Messages) != 1 || string(b.Messages[0].Data) != `"first"` {
					t.Fatalf("first pop: %+v", b.Messages)
				}
				res := mustAck(t, acking, ack(b.Messages[0], status))
				if !res[0].Success || !res[0].LeaseReleased {
					t.Fatalf("%s ack of the delivered copy: %+v", status, res[0])
				}
				next := mustPop(t, granting, pop)
				want := map[string]string{"completed": `"second"`, "failed": `"first"`}[status]
				if len(next.Messages) != 1 || string(next.Messages[0].Data) != want {
					t.Fatalf("after the %s ack the next pop delivers %+v, want %s", status, next.Messages, want)
				}
				if status == "failed" {
					var retries int
					if err := granting.pool.QueryRow(context.Background(), `SELECT retry_count FROM lanes.consumers
						WHERE partition_id = $1 AND consumer_group = 'g'`, b.PartitionID).Scan(&retries); err != nil {
						t.Fatal(err)
					}
					if retries != 1 {
						t.Fatalf("the failed ack charged %d retries, want 1", retries)
					}
				}
			})
		})
	}
}

// pushRepeated pushes x, y, x to a queue with deduplication off and pops the
// three under one lease.
func pushRepeated(t *testing.T, e *Engine) *PopResult {
	t.Helper()
	q := queueName(t)
	configureDedupWindow(t, e, q, 0)
	mustPush(t, e, items(q, "p", "x", "y", "x")...)
	b := mustPop(t, e, PopRequest{Queue: q, Batch: 3})
	if got := txnIDs(b.Messages); !reflect.DeepEqual(got, []string{"x", "y", "x"}) {
		t.Fatalf("pop: %v", got)
	}
	return b
}

// With deduplication off, a leased ack of x means the first x the lease
// delivered: it commits offset 0 only, so y is not skipped. The next ack of x
// then means the second one.
func TestLeasedAckOfARepeatedIDCommitsTheFirstUnackedCopy(t *testing.T) {
	ackBrokers(t, func(t *testing.T, granting, acking *Engine) {
		b := pushRepeated(t, granting)
		res := mustAck(t, acking, ack(b.Messages[0], "completed"))
		if !res[0].Success || res[0].LeaseReleased {
			t.Fatalf("ack of the first x: %+v", res[0])
		}
		if committed, leased := groupCursor(t, granting, b, QueueModeGroup); committed != 0 || !leased {
			t.Fatalf("after acking the first x the cursor is at %d (leased %v), want 0 and leased", committed, leased)
		}
		if res = mustAck(t, acking, ack(b.Messages[1], "completed")); !res[0].Success || res[0].LeaseReleased {
			t.Fatalf("ack of y: %+v", res[0])
		}
		if res = mustAck(t, acking, ack(b.Messages[2], "completed")); !res[0].Success || !res[0].LeaseReleased {
			t.Fatalf("ack of the second x: %+v", res[0])
		}
		if committed, leased := groupCursor(t, granting, b, QueueModeGroup); committed != 2 || leased {
			t.Fatalf("after acking all three the cursor is at %d (leased %v), want 2 and released", committed, leased)
		}
	})
}

// One call acking every message of [x, y, x] resolves its k-th mention of x to
// the k-th copy, so it commits through the third message.
func TestAckOfEveryCopyInOneCallCommitsThroughTheLast(t *testing.T) {
	ackBrokers(t, func(t *testing.T, granting, acking *Engine) {
		b := pushRepeated(t, granting)
		res := mustAck(t, acking, ack(b.Messages[0], "completed"), ack(b.Messages[1], "completed"), ack(b.Messages[2], "completed"))
		for _, r := range res {
			if !r.Success || !r.LeaseReleased {
				t.Fatalf("ack of all three: %+v", res)
			}
		}
		if committed, leased := groupCursor(t, granting, b, QueueModeGroup); committed != 2 || leased {
			t.Fatalf("the cursor is at %d (leased %v), want 2 and released", committed, leased)
		}
		if again := mustPop(t, granting, PopRequest{Queue: b.Messages[0].Queue, Batch: 3}); len(again.Messages) != 0 {
			t.Fatalf("redelivered after acking all: %v", txnIDs(again.Messages))
		}
	})
}

// A lease-less ack of x while the cursor has a leased span resolves within it
// too: the first x, not the newest.
func TestLeaselessAckOfARepeatedIDResolvesWithinTheSpan(t *testing.T) {
	ackBrokers(t, func(t *testing.T, granting, acking *Engine) {
		b := pushRepeated(t, granting)
		first := ack(b.Messages[0], "completed")
		first.LeaseID = ""
		if res := mustAck(t, acking, first); !res[0].Success {
			t.Fatalf("lease-less ack of x: %+v", res[0])
		}
		if committed, _ := groupCursor(t, granting, b, QueueModeGroup); committed != 0 {
			t.Fatalf("the lease-less ack of x moved the cursor to %d, want 0 (the first x)", committed)
		}
	})
}

// A bundle's acks of [x, y, x] resolve the same way as a plain ack's.
func TestBundleAckOfEveryCopyCommitsThroughTheLast(t *testing.T) {
	ackBrokers(t, func(t *testing.T, granting, acking *Engine) {
		b := pushRepeated(t, granting)
		out := queueName(t) + "-out"
		res := mustTransaction(t, acking, TransactionRequest{Ops: []TxOp{
			pushOp(0, out, "p", "out-1", 1),
			ackOp(1, b.Messages[0], "", b.LeaseID), ackOp(2, b.Messages[1], "", b.LeaseID),
		}})
		if !res.Success {
			t.Fatalf("bundle acking x and y: %+v", res)
		}
		if committed, _ := groupCursor(t, granting, b, QueueModeGroup); committed != 1 {
			t.Fatalf("after the bundle acked x and y the cursor is at %d, want 1", committed)
		}
		res = mustTransaction(t, acking, TransactionRequest{Ops: []TxOp{ackOp(0, b.Messages[2], "", b.LeaseID)}})
		if !res.Success || !res.Results[0].Ack.LeaseReleased {
			t.Fatalf("bundle acking the second x: %+v %+v", res, res.Results)
		}
		if committed, leased := groupCursor(t, granting, b, QueueModeGroup); committed != 2 || leased {
			t.Fatalf("the cursor is at %d (leased %v), want 2 and released", committed, leased)
		}
	})
}
