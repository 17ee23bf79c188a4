package lanes_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// A handler that fails only for want of a broker (its own call got no answer, or 502, 503, 504,
// or a 429 the retries gave up on) has its message released with `retry`, which spends no retry:
// with retryLimit 0 the message is handled again, not dead-lettered. A 500 (which a message can
// cause) is nacked `failed` as before and reaches the DLQ through its budget.
func TestITHandlerFailingForWantOfABrokerSpendsNoRetry(t *testing.T) {
	t.Parallel()
	down, err := lanes.New(lanes.WithURL(closedPortURL(t)), lanes.WithRetryAttempts(0))
	require.NoError(t, err)
	closeWhenDone(t, down)
	for _, tc := range []struct {
		name        string
		handlerErr  func(ctx context.Context) error
		redelivered bool
	}{
		{"connection refused", func(ctx context.Context) error {
			_, err := down.Queue("orders-out").Push(ctx, lanes.Item{Data: map[string]any{"n": 1}})
			require.ErrorIs(t, err, lanes.ErrConnection)
			return fmt.Errorf("commit order: %w", err)
		}, true},
		{"503", func(context.Context) error {
			return &lanes.APIError{Status: 503, Code: "database_unavailable", Message: "database unavailable"}
		}, true},
		{"502", func(context.Context) error { return &lanes.APIError{Status: 502, Message: "Bad Gateway"} }, true},
		{"504", func(context.Context) error { return &lanes.APIError{Status: 504, Message: "Gateway Timeout"} }, true},
		{"429", func(context.Context) error {
			return &lanes.APIError{Status: 429, Code: "rate_limited", Message: "slow down", RetryAfter: 300 * time.Millisecond}
		}, true},
		{"500", func(context.Context) error {
			return &lanes.APIError{Status: 500, Code: "internal", Message: "internal error"}
		}, false},
		{"400", func(context.Context) error {
			return &lanes.APIError{Status: 400, Code: "bad_request", Message: "bad"}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			_, err := b.c.Queue(b.queue).Configure(b.ctx, lanes.QueueOptions{RetryLimit: ptrTo(0)})
			require.NoError(t, err)
			pushN(t, b, "a", 1, "outage")
			var calls int
			cons, err := b.c.Queue(b.queue).Wait(false).IdleTimeout(2500*time.Millisecond).
				Consume(b.ctx, func(ctx context.Context, m *lanes.Message) error {
					calls++
					if calls == 1 {
						return tc.handlerErr(ctx)
					}
					return nil
				})
			require.NoError(t, err)
			<-cons.Done()
			require.NoError(t, cons.Err())
			list, err := b.c.Admin().ListDLQ(b.ctx, lanes.DLQQuery{Queue: b.queue})
			require.NoError(t, err)
			if tc.redelivered {
				require.Equal(t, 2, calls, "released with retry: handled again")
				require.Empty(t, list.Messages, "not dead-lettered")
				return
			}
			require.Equal(t, 1, calls, "nacked failed with retryLimit 0: not handled again")
			require.Len(t, list.Messages, 1, "dead-lettered through its budget")
		})
	}
}

// A batch handler failing for want of a broker releases its slice with `retry` too.
func TestITBatchHandlerFailingForWantOfABrokerSpendsNoRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.c.Queue(b.queue).Configure(b.ctx, lanes.QueueOptions{RetryLimit: ptrTo(0)})
	require.NoError(t, err)
	pushN(t, b, "a", 2, "outage-batch")
	var calls, handled int
	cons, err := b.c.Queue(b.queue).Wait(false).Batch(10).IdleTimeout(2500*time.Millisecond).
		ConsumeBatch(b.ctx, func(ctx context.Context, ms []*lanes.Message) error {
			calls++
			if calls == 1 {
				return &lanes.APIError{Status: 503, Code: "database_unavailable", Message: "database unavailable"}
			}
			handled += len(ms)
			return nil
		})
	require.NoError(t, err)
	<-cons.Done()
	require.NoError(t, cons.Err())
	require.Equal(t, 2, handled, "the slice was handed over again")
	list, err := b.c.Admin().ListDLQ(b.ctx, lanes.DLQQuery{Queue: b.queue})
	require.NoError(t, err)
	require.Empty(t, list.Messages)
}

// A handler that keeps failing for want of a broker does not spin: after each such pop the worker
// waits the backoff of a failed pop (1 s, 2 s, 4 s, … up to 30 s) before popping again, and a
// stop cuts that wait short.
func TestITHandlerFailingForWantOfABrokerIsPaced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	down, err := lanes.New(lanes.WithURL(closedPortURL(t)), lanes.WithRetryAttempts(0))
	require.NoError(t, err)
	closeWhenDone(t, down)
	pushN(t, b, "a", 1, "paced")
	var calls atomic.Int32
	cons, err := b.c.Queue(b.queue).Wait(true).Timeout(time.Second).
		Consume(b.ctx, func(ctx context.Context, m *lanes.Message) error {
			calls.Add(1)
			_, err := down.Queue("orders-out").Push(ctx, lanes.Item{Data: 1})
			return err
		})
	require.NoError(t, err)
	time.Sleep(2500 * time.Millisecond)
	// handled at 0 s, again after 1 s, next after 2 s more (3 s): two calls, not hundreds
	require.Equal(t, int32(2), calls.Load())
	started := time.Now()
	require.NoError(t, cons.Stop(b.ctx))
	require.Less(t, time.Since(started), 500*time.Millisecond, "a stop cuts the wait short")
	list, err := b.c.Admin().ListDLQ(b.ctx, lanes.DLQQuery{Queue: b.queue})
	require.NoError(t, err)
	require.Empty(t, list.Messages)
}

// A handler that fails with a 429 carrying a Retry-After hint is not handed its message again
// before the hint has passed (here 2.5 s), as a pop's 429 is waited out: the loop's own backoff
// alone (1 s) would send the handler straight back to a broker that asked for 2.5 s.
func TestITHandlerFailingWithA429WaitsOutItsHint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	limited := scriptFaults(t, `[{"method":"POST","path":"/api/v1/push","responses":[`+
		`{"status":429,"headers":{"Retry-After":"2.5"}}]}]`)
	pushN(t, b, "a", 1, "hinted")
	var calls []time.Time
	cons, err := b.c.Queue(b.queue).Wait(true).Timeout(time.Second).Limit(2).
		Consume(b.ctx, func(ctx context.Context, m *lanes.Message) error {
			calls = append(calls, time.Now())
			_, err := limited.Queue(b.queue+"-out").Push(ctx, lanes.Item{Data: 1})
			return err
		})
	require.NoError(t, err)
	select {
	case <-cons.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the message was not handed over again")
	}
	require.NoError(t, cons.Err())
	require.Len(t, calls, 2)
	gap := calls[1].Sub(calls[0])
	require.GreaterOrEqual(t, gap, 2500*time.Millisecond, "the 429's hint was not waited out")
	require.Less(t, gap, 4*time.Second)
	list, err := b.c.Admin().ListDLQ(b.ctx, lanes.DLQQuery{Queue: b.queue})
	require.NoError(t, err)
	require.Empty(t, list.Messages)
}
