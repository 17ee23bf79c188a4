package lanes_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// Time spent on pops that fail counts as idle (docs/consuming.md §3): with no broker to answer,
// IdleTimeout ends the iterator and the consume loop quietly, with each failure reported, and
// the 1 s error backoff is cut at the idle deadline rather than slept out.
func TestITIdleTimeoutEndsWhilePopsFail(t *testing.T) {
	t.Parallel()
	const idle = 300 * time.Millisecond
	c, err := lanes.New(lanes.WithURL(closedPortURL(t)), lanes.WithRetryAttempts(0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })

	t.Run("iterator", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var reported atomic.Int64
		q := c.Queue("q").IdleTimeout(idle).OnError(func(error) { reported.Add(1) })
		started := time.Now()
		for m, err := range q.Messages(ctx) {
			t.Fatalf("yielded %v, %v", m, err)
		}
		elapsed := time.Since(started)
		require.NoError(t, ctx.Err(), "the iteration ended only with the test's context")
		require.GreaterOrEqual(t, elapsed, idle)
		require.Less(t, elapsed, idle+500*time.Millisecond)
		require.GreaterOrEqual(t, reported.Load(), int64(1))
	})

	t.Run("consume", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var reported atomic.Int64
		q := c.Queue("q").IdleTimeout(idle).OnError(func(error) { reported.Add(1) })
		started := time.Now()
		cons, err := q.Consume(ctx, func(context.Context, *lanes.Message) error { return nil })
		require.NoError(t, err)
		select {
		case <-cons.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("idle timeout did not stop the consumer")
		}
		require.NoError(t, cons.Err())
		require.Less(t, time.Since(started), idle+time.Second)
		require.GreaterOrEqual(t, reported.Load(), int64(1))
	})
}
