package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

func configureMinPopWait(t *testing.T, e *Engine, q string, ms int) {
	t.Helper()
	if _, err := e.Configure(context.Background(), ConfigureRequest{Queue: q, Options: map[string]json.RawMessage{
		"minPopWaitTime": json.RawMessage(fmt.Sprint(ms))}}); err != nil {
		t.Fatal(err)
	}
}

// minPopWaitTime: a waiting pop that finds an under-full batch holds it for
// up to that long, and answers early when pushes fill the batch.
func TestMinPopWaitTimeHoldsAnUnderFullBatch(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	configureMinPopWait(t, e, q, 800)
	pushN(t, e, q, "p", 3)

	start := time.Now()
	held := mustPop(t, e, PopRequest{Queue: q, Batch: 10, Wait: true, Timeout: 5 * time.Second})
	if took := time.Since(start); took < 750*time.Millisecond || took > 2*time.Second {
		t.Fatalf("an under-full batch answered after %v, want the 800 ms hold", took)
	}
	if len(held.Messages) != 3 {
		t.Fatalf("held pop got %d messages, want 3", len(held.Messages))
	}
	mustAck(t, e, ack(held.Messages[2], "completed"))

	// Pushes during the hold join the batch, and a full batch answers at once.
	mustPush(t, e, items(q, "p", "a0", "a1", "a2", "a3")...)
	start = time.Now()
	done := popInBackground(e, PopRequest{Queue: q, Batch: 10, Wait: true, Timeout: 5 * time.Second})
	time.Sleep(200 * time.Millisecond)
	mustPush(t, e, items(q, "p", "b0", "b1", "b2", "b3", "b4", "b5")...)
	p := <-done
	if p.err != nil {
		t.Fatal(p.err)
	}
	if len(p.res.Messages) != 10 {
		t.Fatalf("the filled batch has %d messages, want 10: %v", len(p.res.Messages), txnIDs(p.res.Messages))
	}
	if took := p.at.Sub(start); took > 600*time.Millisecond {
		t.Fatalf("a batch filled during the hold answered after %v, want soon after the push at 200 ms", took)
	}
}

// The hold never applies where the reference does not hold: a pop that does
// not wait, a batch of one, a pop of one named partition; and it is cut short
// by the pop's own timeout.
func TestMinPopWaitTimeAppliesOnlyToWaitingBatchPopsOfAQueue(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	configureMinPopWait(t, e, q, 3000)
	for _, tc := range []struct {
		name    string
		req     PopRequest
		within  time.Duration
		atLeast time.Duration
	}{
		{"no wait", PopRequest{Queue: q, Batch: 10}, time.Second, 0},
		{"batch of one", PopRequest{Queue: q, Batch: 1, Wait: true, Timeout: 10 * time.Second}, time.Second, 0},
		{"named partition", PopRequest{Queue: q, Partition: "p", Batch: 10, Wait: true, Timeout: 10 * time.Second}, time.Second, 0},
		{"timeout shorter than the hold", PopRequest{Queue: q, Batch: 10, Wait: true, Timeout: 400 * time.Millisecond}, 1500 * time.Millisecond, 350 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mustPush(t, e, items(q, "p", tc.name)...)
			start := time.Now()
			res := mustPop(t, e, tc.req)
			took := time.Since(start)
			if len(res.Messages) != 1 || res.Messages[0].TransactionID != tc.name {
				t.Fatalf("got %v, want [%s]", txnIDs(res.Messages), tc.name)
			}
			if took > tc.within || took < tc.atLeast {
				t.Fatalf("answered after %v, want between %v and %v", took, tc.atLeast, tc.within)
			}
			mustAck(t, e, ack(res.Messages[0], "completed"))
		})
	}
}

// An empty queue parks the pop as usual; the hold starts when the first
// message comes, and pushes to other partitions fill the same batch.
func TestMinPopWaitTimeStartsWhenTheFirstMessageComes(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	configureMinPopWait(t, e, q, 600)
	mustPush(t, e, items(q, "p", "seed")...)
	seed := mustPop(t, e, PopRequest{Queue: q, Batch: 10})
	mustAck(t, e, ack(seed.Messages[0], "completed"))

	done := popInBackground(e, PopRequest{Queue: q, Batch: 3, Wait: true, Timeout: 10 * time.Second})
	time.Sleep(300 * time.Millisecond)
	first := time.Now()
	mustPush(t, e, items(q, "p", "x0")...)
	time.Sleep(150 * time.Millisecond)
	mustPush(t, e, items(q, "other", "x1")...)
	p := <-done
	if p.err != nil {
		t.Fatal(p.err)
	}
	if got := p.at.Sub(first); got < 550*time.Millisecond || got > 1500*time.Millisecond {
		t.Fatalf("answered %v after the first message, want the 600 ms hold from it", got)
	}
	if len(p.res.Messages) != 2 {
		t.Fatalf("got %v, want both messages pushed during the hold", txnIDs(p.res.Messages))
	}
}

// A configure through another broker reaches this one's holds within
// popHoldsMaxAge, and setting the option back to 0 ends holding.
func TestMinPopWaitTimeFollowsConfigureOnAnotherBroker(t *testing.T) {
	e := newEngine(t)
	other := newEngine(t)
	q := queueName(t)
	configureMinPopWait(t, e, q, 0)
	mustPush(t, e, items(q, "p", "m0")...)
	if res := mustPop(t, e, PopRequest{Queue: q, Batch: 10, Wait: true, Timeout: 5 * time.Second}); len(res.Messages) != 1 {
		t.Fatalf("got %d", len(res.Messages))
	} else {
		mustAck(t, e, ack(res.Messages[0], "completed"))
	}
	configureMinPopWait(t, other, q, 700)
	time.Sleep(popHoldsMaxAge + 100*time.Millisecond)
	mustPush(t, e, items(q, "p", "m1")...)
	start := time.Now()
	res := mustPop(t, e, PopRequest{Queue: q, Batch: 10, Wait: true, Timeout: 5 * time.Second})
	if took := time.Since(start); took < 650*time.Millisecond || len(res.Messages) != 1 {
		t.Fatalf("after a configure through another broker: %d messages after %v, want 1 after the 700 ms hold", len(res.Messages), took)
	}
}

// TestUnreadablePopHoldsLogOneWarning: while the database is unreachable
// every waiting batch pop of a queue tries to read the queues'
// minPopWaitTime; the first failure logs a WARN, the rest within the minute
// add no line.
func TestUnreadablePopHoldsLogOneWarning(t *testing.T) {
	e, out := newUnreachableEngine(t)
	for range 4 {
		if hold := e.popHoldFor(context.Background(), &PopRequest{Queue: "holds-unreadable", Batch: 10, Wait: true}); hold != 0 {
			t.Fatalf("hold %v read from an unreachable database", hold)
		}
	}
	if n := strings.Count(out.String(), `level=WARN msg="reading the queues' minPopWaitTime`); n != 1 {
		t.Fatalf("want one WARN line for 4 failing reads, got %d:\n%s", n, out.String())
	}
}
