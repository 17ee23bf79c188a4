package lanes_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// errorLog collects what a consumer or iterator reports to OnError.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) { l.mu.Lock(); l.errs = append(l.errs, err); l.mu.Unlock() }

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// The iterator renews the lease of the message in hand by default, as the consume loop does: a
// loop body slower than the 1 s lease keeps its message (a second consumer gets nothing), acks
// it, and no renewal runs after the ack. RenewLease(false, 0) turns the renewal off.
func TestITMessagesRenewLeaseByDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.c.Queue(b.queue).Wait(false).LeaseSeconds(1).Limit(1)
	slowBody := func(q lanes.QueueBuilder) (stolen int, errs []error) {
		var log errorLog
		for _, err := range q.OnError(log.add).Messages(b.ctx) {
			require.NoError(t, err)
			time.Sleep(1500 * time.Millisecond)
			other, err := b.c.Queue(b.queue).Wait(false).Pop(b.ctx)
			require.NoError(t, err)
			stolen = len(other)
			time.Sleep(time.Second)
		}
		time.Sleep(1500 * time.Millisecond) // a renewal still running after the ack would fail here
		return stolen, log.all()
	}

	pushN(t, b, "a", 1, "renewed")
	stolen, errs := slowBody(q)
	require.Zero(t, stolen, "a second consumer got the message in hand")
	require.Empty(t, errs)
	left, err := b.c.Queue(b.queue).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Empty(t, left, "acked under the renewed lease")

	pushN(t, b, "b", 1, "off")
	stolen, _ = slowBody(q.RenewLease(false, 0))
	require.Equal(t, 1, stolen, "without renewal the 1 s lease expires under the loop body")
}

// Under server auto-ack a pop asks for no more than what is left of Limit, so messages beyond
// it stay queued instead of being committed and lost.
func TestITServerAutoAckPopCappedAtLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 5, "cap")
	q := b.c.Queue(b.queue).Wait(false).Batch(10).ServerAutoAck(true).Limit(2)

	var handled []*lanes.Message
	var mu sync.Mutex
	require.NoError(t, q.Run(b.ctx, func(ctx context.Context, m *lanes.Message) error {
		mu.Lock()
		handled = append(handled, m)
		mu.Unlock()
		return nil
	}))
	require.Len(t, handled, 2)

	n := 0
	for _, err := range q.Limit(1).IdleTimeout(2 * time.Second).Messages(b.ctx) {
		require.NoError(t, err)
		n++
	}
	require.Equal(t, 1, n)

	left, err := b.c.Queue(b.queue).Wait(false).Batch(10).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, left, 2, "the messages beyond the Limits are still queued")
}

// Under server auto-ack a soft stop still hands every popped message to the handler (they are
// committed; nothing can release them), while a hard stop reports how many it dropped.
func TestITServerAutoAckStops(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, hard bool) (handled int, errs []error) {
		b := setup(t)
		pushN(t, b, "a", 5, "stop")
		var log errorLog
		first := make(chan struct{})
		var mu sync.Mutex
		cons, err := b.c.Queue(b.queue).Wait(false).Batch(5).ServerAutoAck(true).OnError(log.add).
			Consume(b.ctx, func(ctx context.Context, m *lanes.Message) error {
				mu.Lock()
				handled++
				if handled == 1 {
					close(first)
				}
				mu.Unlock()
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(100 * time.Millisecond):
					return nil
				}
			})
		require.NoError(t, err)
		<-first
		if hard {
			require.NoError(t, cons.StopAndCancel(b.ctx))
		} else {
			require.NoError(t, cons.Stop(b.ctx))
		}
		require.NoError(t, cons.Err())
		mu.Lock()
		defer mu.Unlock()
		return handled, log.all()
	}
	t.Run("soft", func(t *testing.T) {
		t.Parallel()
		handled, errs := run(t, false)
		require.Equal(t, 5, handled, "every committed message is handed over")
		require.Empty(t, errs)
	})
	t.Run("hard", func(t *testing.T) {
		t.Parallel()
		handled, errs := run(t, true)
		require.Equal(t, 1, handled)
		require.Len(t, errs, 1)
		var drop *lanes.AutoAckDroppedError
		require.ErrorAs(t, errs[0], &drop)
		require.Equal(t, 4, drop.Count)
	})
}

// An iterator left early under server auto-ack reports the popped messages it never handed over.
func TestITServerAutoAckIteratorLeftEarlyReportsDropped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 5, "left")
	var log errorLog
	for _, err := range b.c.Queue(b.queue).Wait(false).Batch(5).ServerAutoAck(true).OnError(log.add).Messages(b.ctx) {
		require.NoError(t, err)
		break
	}
	errs := log.all()
	require.Len(t, errs, 1)
	var drop *lanes.AutoAckDroppedError
	require.True(t, errors.As(errs[0], &drop), "%v", errs[0])
	require.Equal(t, 4, drop.Count)
}
