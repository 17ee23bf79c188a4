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

// failedAcks records the errors OnError receives.
type failedAcks struct {
	mu   sync.Mutex
	errs []error
}

func (f *failedAcks) add(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, err)
}

func (f *failedAcks) statuses() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for _, err := range f.errs {
		var ae *lanes.APIError
		if errors.As(err, &ae) {
			out = append(out, ae.Status)
		} else {
			out = append(out, 0)
		}
	}
	return out
}

// iterateAll ranges over q.Messages until it ends on its own (Limit), returning how many
// messages it handed over and how long the range took.
func iterateAll(t *testing.T, ctx context.Context, q lanes.QueueBuilder) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	handled := 0
	for m, err := range q.Messages(ctx) {
		require.NoError(t, err)
		require.NotNil(t, m)
		handled++
	}
	return handled, time.Since(start)
}

// The iterator resends a pop's acks that fail as a broker restart does (503, no retries left)
// after the loop's error backoff (1 s, 2 s) while the lease lasts, as the consume loop does
// (docs/consuming.md §4): the third call lands and nothing redelivers once the lease has
// expired. Before, it sent them once and all three messages came back after the lease.
func TestITMessagesResendAFailedAckUntilItLands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := scriptFaults(t, `[{"method":"POST","path":"/api/v1/ack*","responses":[{"status":503,"times":2},{"pass":true}]}]`)
	pushN(t, b, "p", 3, "resend")
	failed := &failedAcks{}
	q := c.Queue(b.queue).LeaseSeconds(6).Batch(10).Limit(3).OnError(failed.add)
	handled, took := iterateAll(t, b.ctx, q)
	require.Equal(t, 3, handled)
	again, err := b.c.Queue(b.queue).Batch(10).Wait(true).Timeout(8 * time.Second).Pop(b.ctx)
	require.NoError(t, err)
	require.Empty(t, again, "redelivered: the failed ack was not resent until it landed")
	require.Equal(t, []int{503, 503}, failed.statuses(), "each failed call reported")
	require.GreaterOrEqual(t, took, 3*time.Second, "resent after 1 s, then after 2 s")
}

// The resending ends when the next attempt would come within 1 s of the lease's expiry (3 s:
// attempts at 0 s and 1 s, the next would be at 3 s); the pop then redelivers after its lease.
func TestITMessagesStopResendingAnAckBeforeTheLeaseEnds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := scriptFaults(t, `[{"method":"POST","path":"/api/v1/ack*","responses":[{"status":503,"times":10}]}]`)
	pushN(t, b, "p", 3, "lease")
	failed := &failedAcks{}
	q := c.Queue(b.queue).LeaseSeconds(3).Batch(10).Limit(3).OnError(failed.add)
	handled, took := iterateAll(t, b.ctx, q)
	require.Equal(t, 3, handled)
	require.Equal(t, []int{503, 503}, failed.statuses())
	require.Less(t, took, 2500*time.Millisecond, "no attempt past the lease")
	again, err := b.c.Queue(b.queue).Batch(10).Wait(true).Timeout(6 * time.Second).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, again, 3, "the pop redelivers after its lease")
}

// Canceling the range's context ends the resending at once, as a hard stop ends the consume
// loop's: the caller asked the iteration to end now.
func TestITMessagesCancelAbandonsTheResendingOfAnAck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := scriptFaults(t, `[{"method":"POST","path":"/api/v1/ack*","responses":[{"status":503,"times":10}]}]`)
	pushN(t, b, "p", 2, "cancel")
	failed := &failedAcks{}
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	q := c.Queue(b.queue).LeaseSeconds(30).Batch(10).Limit(2).OnError(func(err error) {
		failed.add(err)
		time.AfterFunc(200*time.Millisecond, cancel)
	})
	handled, took := iterateAll(t, ctx, q)
	require.Equal(t, 2, handled)
	require.Equal(t, []int{503}, failed.statuses())
	require.Less(t, took, 800*time.Millisecond, "the cancel ended the 1 s wait for the resend")
}

// A 429 on the ack is waited out by its hint (300 ms) and left out of the backoff's count: two
// 429s, then a 503 waits 1 s (not the 4 s it would after two counted failures), then the ack
// lands and nothing redelivers once the 4 s lease has expired.
func TestITMessagesWaitOutA429OnAnAckByItsHint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := scriptFaults(t, `[{"method":"POST","path":"/api/v1/ack*","responses":[`+
		`{"status":429,"headers":{"retry-after-ms":"300"},"times":2},{"status":503},{"pass":true}]}]`)
	pushN(t, b, "p", 3, "hint")
	failed := &failedAcks{}
	q := c.Queue(b.queue).LeaseSeconds(4).Batch(10).Limit(3).OnError(failed.add)
	handled, took := iterateAll(t, b.ctx, q)
	require.Equal(t, 3, handled)
	require.Equal(t, []int{429, 429, 503}, failed.statuses())
	require.GreaterOrEqual(t, took, 1500*time.Millisecond, "300 ms, 300 ms, then 1 s")
	require.Less(t, took, 3*time.Second, "a 429 counted in the backoff")
	again, err := b.c.Queue(b.queue).Batch(10).Wait(true).Timeout(5 * time.Second).Pop(b.ctx)
	require.NoError(t, err)
	require.Empty(t, again, "redelivered: the failed ack was not resent until it landed")
}

// Leaving the iterator (break, or the end of the range at Limit) resends a failed ack only
// within 5 s of leaving, not for the rest of a 30 s lease: attempts at 0 s, 1 s and 3 s, and
// the next (7 s) is not made; the messages redeliver after their lease. Before, the leave waited
// 15 s (attempts at 0, 1, 3, 7 and 15 s).
func TestITMessagesLeavingBoundsTheResendingOfAnAck(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"break", "limit"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			c := scriptFaults(t, `[{"method":"POST","path":"/api/v1/ack*","responses":[{"status":503,"times":20}]}]`)
			pushN(t, b, "p", 3, how)
			failed := &failedAcks{}
			q := c.Queue(b.queue).LeaseSeconds(30).Batch(10).OnError(failed.add)
			if how == "limit" {
				q = q.Limit(3)
			}
			start := time.Now()
			for m, err := range q.Messages(b.ctx) {
				require.NoError(t, err)
				require.NotNil(t, m)
				if how == "break" {
					break
				}
			}
			took := time.Since(start)
			require.Equal(t, []int{503, 503, 503}, failed.statuses(), "attempts at 0 s, 1 s and 3 s")
			require.Less(t, took, 5*time.Second, "resent past the leave's 5 s")
		})
	}
}
