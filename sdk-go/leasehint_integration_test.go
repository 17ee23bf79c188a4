package lanes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
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

// aheadRenewals answers every applied lease renewal with a newExpiresAt an hour ahead, as a
// broker whose database clock runs an hour ahead of the client's would; the renewal itself
// reaches the broker unchanged.
type aheadRenewals struct{}

func (aheadRenewals) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || !strings.HasSuffix(req.URL.Path, "/extend") || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	var answer map[string]any
	err = json.NewDecoder(resp.Body).Decode(&answer)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if answer["newExpiresAt"] != nil {
		ahead := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
		answer["newExpiresAt"], answer["expiresAt"], answer["lease_expires_at"] = ahead, ahead, ahead
	}
	raw, err := json.Marshal(answer)
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	resp.ContentLength = int64(len(raw))
	resp.Header.Set("Content-Length", strconv.Itoa(len(raw)))
	return resp, nil
}

// A renewal's answer names the new expiry on the database's clock; the consume loop counts a
// renewed lease from when it sent the renewal instead, so a database clock an hour ahead does
// not make it resend a failed ack past the lease. The queue's lease is 3 s, renewed every second
// for 2 s; the handler holds its message 2.5 s and the acks fail (503): the loop gives up after
// one attempt (the next, 1 s later, would come within 1 s of the renewed lease's end, about
// 4 s) and the message redelivers. Before, it took the answer's hour and resent at 3.5 s,
// 5.5 s, 9.5 s, ..., past the lease.
func TestITConsumeCountsARenewedLeaseFromWhenTheRenewalWasSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.c.Admin().ConfigureQueue(b.ctx, b.queue, lanes.QueueOptions{LeaseTime: ptrTo(3)}, lanes.ConfigureReplace)
	require.NoError(t, err)
	c := scriptFaults(t, `[{"method":"POST","path":"/api/v1/ack*","responses":[{"status":503,"times":20}]}]`,
		lanes.WithHTTPClient(&http.Client{Transport: aheadRenewals{}}))
	pushN(t, b, "p", 1, "ahead")
	failed := &failedAcks{}
	handled := make(chan struct{}, 4)
	cons, err := c.Queue(b.queue).Batch(1).Limit(1).OnError(failed.add).
		Consume(b.ctx, func(context.Context, *lanes.Message) error {
			time.Sleep(2500 * time.Millisecond)
			handled <- struct{}{}
			return nil
		})
	require.NoError(t, err)
	defer func() { _ = cons.StopAndCancel(context.Background()) }()
	<-handled
	select {
	case <-cons.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("the loop still resends the ack 5 s after the handler, past the 3 s lease renewed for 2 s; failed acks: %v", failed.statuses())
	}
	require.Equal(t, []int{503}, failed.statuses())
	again, err := b.c.Queue(b.queue).Batch(10).Wait(true).Timeout(6 * time.Second).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, again, 1, "the pop redelivers after its lease")
}
