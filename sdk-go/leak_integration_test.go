package lanes_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// These tests end a consumer (or iterator, or buffer) in each way it can end, then Close the
// client, and require that no goroutine the test started is left: no worker, lease renewal,
// idle watch, escalation timer, flusher or keep-alive connection. They do not call t.Parallel,
// so they run before the parallel tests resume and see only their own goroutines.

// noLeakAfter checks, when the test ends, that every goroutine it started has ended once the
// client is closed.
func noLeakAfter(t *testing.T, b bundle) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, b.c.Close(ctx))
		goleak.VerifyNone(t, ignore)
	})
}

func TestITNoGoroutineLeftAfterSoftStopWithAPopParked(t *testing.T) {
	b := setup(t)
	noLeakAfter(t, b)
	cons, err := b.c.Queue(b.queue).Timeout(10*time.Second).Consume(b.ctx, func(context.Context, *lanes.Message) error { return nil })
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond) // the pop is parked on the broker
	require.NoError(t, cons.Stop(b.ctx))
}

func TestITNoGoroutineLeftAfterHardStopOfARenewedHandler(t *testing.T) {
	b := setup(t)
	noLeakAfter(t, b)
	pushN(t, b, "a", 3, "hard")
	started := make(chan struct{})
	cons, err := b.c.Queue(b.queue).Concurrency(2).RenewLease(true, 50*time.Millisecond).SoftStopTimeout(time.Minute).
		Consume(b.ctx, func(ctx context.Context, _ *lanes.Message) error {
			select {
			case started <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return ctx.Err()
		})
	require.NoError(t, err)
	<-started
	time.Sleep(150 * time.Millisecond) // a renewal or two
	require.NoError(t, cons.StopAndCancel(b.ctx))
}

func TestITNoGoroutineLeftAfterContextCancel(t *testing.T) {
	b := setup(t)
	noLeakAfter(t, b)
	ctx, cancel := context.WithCancel(b.ctx)
	cons, err := b.c.Queue(b.queue).Timeout(10*time.Second).IdleTimeout(time.Hour).
		Consume(ctx, func(context.Context, *lanes.Message) error { return nil })
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond)
	cancel()
	<-cons.Done()
	require.ErrorIs(t, cons.Err(), context.Canceled)
}

func TestITNoGoroutineLeftAfterATerminalError(t *testing.T) {
	b := setup(t)
	noLeakAfter(t, b)
	cons, err := b.c.Queue(b.queue).Batch(1_000_000).Consume(b.ctx, func(context.Context, *lanes.Message) error { return nil })
	require.NoError(t, err)
	<-cons.Done()
	var ae *lanes.APIError
	require.True(t, errors.As(cons.Err(), &ae), "got %v", cons.Err())
}

func TestITNoGoroutineLeftAfterLimitAndIdleTimeout(t *testing.T) {
	b := setup(t)
	noLeakAfter(t, b)
	pushN(t, b, "a", 5, "limit")
	cons, err := b.c.Queue(b.queue).Limit(3).Concurrency(3).Consume(b.ctx, func(context.Context, *lanes.Message) error { return nil })
	require.NoError(t, err)
	<-cons.Done()
	require.NoError(t, cons.Err())
	idle, err := b.c.Queue(b.queue).Timeout(100*time.Millisecond).IdleTimeout(300*time.Millisecond).
		ConsumeBatch(b.ctx, func(context.Context, []*lanes.Message) error { return nil })
	require.NoError(t, err)
	<-idle.Done()
	require.NoError(t, idle.Err())
}

func TestITNoGoroutineLeftAfterLeavingTheIterator(t *testing.T) {
	b := setup(t)
	noLeakAfter(t, b)
	pushN(t, b, "a", 4, "iter")
	for m, err := range b.c.Queue(b.queue).Batch(4).RenewLease(true, 50*time.Millisecond).Messages(b.ctx) {
		require.NoError(t, err)
		require.NotNil(t, m)
		time.Sleep(120 * time.Millisecond)
		break
	}
	for _, err := range b.c.Queue(b.queue).Timeout(100 * time.Millisecond).IdleTimeout(300 * time.Millisecond).Messages(b.ctx) {
		require.NoError(t, err)
	}
}

func TestITNoGoroutineLeftAfterClosingABufferedClient(t *testing.T) {
	b := setup(t)
	noLeakAfter(t, b)
	buf := b.c.Queue(b.queue).Partition("p").Buffer(lanes.BufferOptions{FlushInterval: time.Hour})
	require.NoError(t, buf.Push(b.ctx, lanes.Data(1), lanes.Data(2)))
}

// TestNoGoroutineLeftAfterACloseThatGaveUp: Close on a broker that accepts connections and never
// answers gives up at its ctx, and cuts the flush it had in flight instead of leaving it running.
func TestNoGoroutineLeftAfterACloseThatGaveUp(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	stalled, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var accepted []net.Conn
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			conn, err := stalled.Accept()
			if err != nil {
				return
			}
			accepted = append(accepted, conn)
		}
	}()
	c, err := lanes.New(lanes.WithURL("http://" + stalled.Addr().String()))
	require.NoError(t, err)
	buf := c.Queue("stalled").Buffer(lanes.BufferOptions{FlushInterval: 10 * time.Millisecond})
	require.NoError(t, buf.Push(context.Background(), lanes.Data(1)))
	time.Sleep(100 * time.Millisecond) // the flush is in flight
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var unsent *lanes.UnsentError
	require.ErrorAs(t, c.Close(ctx), &unsent)
	require.Equal(t, 1, unsent.Unsent)
	require.NoError(t, stalled.Close())
	<-acceptDone
	for _, conn := range accepted {
		require.NoError(t, conn.Close())
	}
	goleak.VerifyNone(t, ignore)
}
