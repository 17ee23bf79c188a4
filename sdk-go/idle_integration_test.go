package lanes_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
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

// popTimeouts are the long-poll timeouts (ms) of the pops recorded, in order.
func (p *popQueries) popTimeouts(t *testing.T) []int {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for _, raw := range p.queries {
		v, err := url.ParseQuery(raw)
		require.NoError(t, err)
		ms, err := strconv.Atoi(v.Get("timeout"))
		require.NoError(t, err)
		out = append(out, ms)
	}
	return out
}

// An idle timeout shorter than the long poll ends the iterator and the consume loop within a
// moment of its deadline (docs/consuming.md §3): each pop waits at most the idle time left,
// not its whole Timeout. Before, an empty queue's long poll of 5 s ran out first.
func TestITIdleTimeoutCutsTheLongPoll(t *testing.T) {
	t.Parallel()
	const idle = 300 * time.Millisecond
	const longPoll = 5 * time.Second
	const moment = 700 * time.Millisecond
	cases := []struct {
		name        string
		build       func(q lanes.QueueBuilder) lanes.QueueBuilder
		consumeOnly bool
	}{
		{"plain", func(q lanes.QueueBuilder) lanes.QueueBuilder { return q }, false},
		{"server auto-ack", func(q lanes.QueueBuilder) lanes.QueueBuilder { return q.ServerAutoAck(true) }, false},
		{"three workers", func(q lanes.QueueBuilder) lanes.QueueBuilder { return q.Concurrency(3) }, true},
	}
	for _, tc := range cases {
		t.Run("iterator "+tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.consumeOnly {
				t.Skip("the iterator has one worker")
			}
			b := setup(t)
			c, rec := recordingClient(t)
			q := tc.build(c.Queue(b.queue).Timeout(longPoll).IdleTimeout(idle))
			started := time.Now()
			for m, err := range q.Messages(b.ctx) {
				t.Fatalf("yielded %v, %v", m, err)
			}
			wantEndedAtIdleDeadline(t, started, rec, idle, moment)
		})
		t.Run("consume "+tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			c, rec := recordingClient(t)
			q := tc.build(c.Queue(b.queue).Timeout(longPoll).IdleTimeout(idle))
			started := time.Now()
			require.NoError(t, q.Run(b.ctx, func(context.Context, *lanes.Message) error { return nil }))
			wantEndedAtIdleDeadline(t, started, rec, idle, moment)
		})
	}
}

// Without an idle timeout the long poll is the builder's Timeout, as before.
func TestITNoIdleTimeoutKeepsTheLongPoll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &popQueries{}
	c, err := lanes.New(lanes.WithURL(testBrokerURL(t)), lanes.WithHTTPClient(&http.Client{Transport: rec}))
	require.NoError(t, err)
	closeWhenDone(t, c)
	q := c.Queue(b.queue).Timeout(400 * time.Millisecond)
	ctx, cancel := context.WithTimeout(b.ctx, time.Second)
	defer cancel()
	for m, err := range q.Messages(ctx) {
		t.Fatalf("yielded %v, %v", m, err)
	}
	timeouts := rec.popTimeouts(t)
	require.NotEmpty(t, timeouts)
	for _, ms := range timeouts {
		require.Equal(t, 400, ms)
	}
}

// recordingClient is a client whose requests rec records.
func recordingClient(t *testing.T) (*lanes.Client, *popQueries) {
	t.Helper()
	rec := &popQueries{}
	c, err := lanes.New(lanes.WithURL(testBrokerURL(t)), lanes.WithHTTPClient(&http.Client{Transport: rec}))
	require.NoError(t, err)
	closeWhenDone(t, c)
	return c, rec
}

// wantEndedAtIdleDeadline wants a loop or iterator started at started to
// have ended within a moment of its idle deadline, every pop's long poll cut
// to the idle time left and still waiting.
func wantEndedAtIdleDeadline(t *testing.T, started time.Time, rec *popQueries, idle, moment time.Duration) {
	t.Helper()
	elapsed := time.Since(started)
	require.GreaterOrEqual(t, elapsed, idle)
	require.Less(t, elapsed, idle+moment)
	for _, ms := range rec.popTimeouts(t) {
		require.LessOrEqual(t, ms, int(idle.Milliseconds()))
		require.Positive(t, ms, "a cut long poll still waits")
	}
}
