package lanes_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// A pop's answer names its lease; the SDK's PopResult carries it.
func TestITPopResultNamesTheQueuesLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.c.Admin().ConfigureQueue(b.ctx, b.queue, lanes.QueueOptions{LeaseTime: ptrTo(120)}, lanes.ConfigureReplace)
	require.NoError(t, err)
	pushN(t, b, "p", 1, "hint")
	res, err := b.c.Queue(b.queue).Wait(false).PopResult(b.ctx)
	require.NoError(t, err)
	require.Len(t, res.Messages, 1)
	require.Equal(t, 120, res.LeaseSeconds)
	require.NotNil(t, res.LeaseExpiresAt)
	require.WithinDuration(t, time.Now().Add(120*time.Second), *res.LeaseExpiresAt, 10*time.Second)
}

// Without LeaseSeconds the iterator counts with the lease the pop's answer names, the queue's
// 3 s leaseTime: the resending ends when the next attempt would come within 1 s of its expiry
// (attempts at 0 s and 1 s, the next would be at 3 s). Before, it assumed 60 s and resent past
// the lease (a third attempt at 3 s, cut only by the 5 s bound on leaving).
func TestITMessagesStopResendingAnAckBeforeTheQueuesLeaseEnds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.c.Admin().ConfigureQueue(b.ctx, b.queue, lanes.QueueOptions{LeaseTime: ptrTo(3)}, lanes.ConfigureReplace)
	require.NoError(t, err)
	c := scriptFaults(t, `[{"method":"POST","path":"/api/v1/ack*","responses":[{"status":503,"times":10}]}]`)
	pushN(t, b, "p", 3, "lease")
	failed := &failedAcks{}
	q := c.Queue(b.queue).Batch(10).Limit(3).OnError(failed.add)
	handled, took := iterateAll(t, b.ctx, q)
	require.Equal(t, 3, handled)
	require.Equal(t, []int{503, 503}, failed.statuses())
	require.Less(t, took, 2500*time.Millisecond, "no attempt past the lease")
	again, err := b.c.Queue(b.queue).Batch(10).Wait(true).Timeout(6 * time.Second).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, again, 3, "the pop redelivers after its lease")
}

// A consume loop without LeaseSeconds or renewal, on a queue whose lease is 120 s, waits out an
// ack's 429 hint of 62 s and resends it, since the lease still holds: the ack lands and the
// message is completed. Before, it assumed a 60 s lease, gave the ack up at once, and the
// message redelivered after 120 s (a duplicate for the handler).
func TestITConsumeResendsAnAckForAsLongAsTheQueuesLongLeaseHolds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, err := b.c.Admin().ConfigureQueue(ctx, b.queue, lanes.QueueOptions{LeaseTime: ptrTo(120)}, lanes.ConfigureReplace)
	require.NoError(t, err)
	c := scriptFaults(t, `[{"method":"POST","path":"/api/v1/ack*","responses":[`+
		`{"status":429,"headers":{"retry-after-ms":"62000"}},{"pass":true}]}]`)
	pushN(t, b, "p", 1, "long")
	failed := &failedAcks{}
	handled := make(chan *lanes.Message, 4)
	cons, err := c.Queue(b.queue).Batch(1).RenewLease(false, 0).OnError(failed.add).
		Consume(ctx, func(_ context.Context, m *lanes.Message) error {
			handled <- m
			return nil
		})
	require.NoError(t, err)
	defer func() { _ = cons.StopAndCancel(context.Background()) }()
	m := <-handled
	require.Eventually(t, func() bool {
		d, err := b.c.Admin().GetMessage(ctx, m.PartitionID, m.TransactionID)
		return err == nil && d.Status == "completed"
	}, 75*time.Second, 500*time.Millisecond, "the ack was not resent after its 62 s hint: the loop assumed a 60 s lease")
	require.Equal(t, []int{429}, failed.statuses())
	require.Len(t, handled, 0, "handled twice")
}
