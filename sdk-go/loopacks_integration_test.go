package lanes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// wireAck is one acknowledgement item as the SDK sent it.
type wireAck struct {
	TransactionID string `json:"transactionId"`
	Status        string `json:"status"`
}

// ackRecorder records the items of every ack call a client sends through it.
type ackRecorder struct {
	mu    sync.Mutex
	calls [][]wireAck
}

func (a *ackRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/api/v1/ack") && r.Body != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var items []wireAck
		if r.URL.Path == "/api/v1/ack" {
			var one wireAck
			err = json.Unmarshal(body, &one)
			items = []wireAck{one}
		} else {
			var batch struct {
				Acknowledgments []wireAck `json:"acknowledgments"`
			}
			err = json.Unmarshal(body, &batch)
			items = batch.Acknowledgments
		}
		if err != nil {
			return nil, err
		}
		a.mu.Lock()
		a.calls = append(a.calls, items)
		a.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (a *ackRecorder) all() [][]wireAck {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([][]wireAck(nil), a.calls...)
}

// ackRecordingClient is a client whose ack calls rec records.
func ackRecordingClient(t *testing.T, rec *ackRecorder) *lanes.Client {
	t.Helper()
	c, err := lanes.New(lanes.WithURL(testBrokerURL(t)), lanes.WithHTTPClient(&http.Client{Transport: rec}))
	require.NoError(t, err)
	closeWhenDone(t, c)
	return c
}

func txnIDs(prefix, partition string, from, to int) []string {
	var ids []string
	for i := from; i <= to; i++ {
		ids = append(ids, fmt.Sprintf("%s-%s-%d", prefix, partition, i))
	}
	return ids
}

// An ack is an offset commit, so the consume loop acks a pop whose messages all completed with
// one item per partition, the last message: every message is handled once and none redelivers.
func TestITLoopAcksACompletedPartitionWithItsLastMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &ackRecorder{}
	c := ackRecordingClient(t, rec)
	pushN(t, b, "a", 10, "all")

	var handled []string
	require.NoError(t, c.Queue(b.queue).Wait(false).Batch(10).Limit(10).Run(b.ctx, func(_ context.Context, m *lanes.Message) error {
		handled = append(handled, m.TransactionID)
		return nil
	}))
	require.Equal(t, txnIDs("all", "a", 0, 9), handled)
	require.Equal(t, [][]wireAck{{{TransactionID: "all-a-9", Status: "completed"}}}, rec.all())
	requireAllCommitted(t, b)
}

// A failure in the middle of a partition sends the completed messages before it as the last of
// them plus the failure itself; the cursor stops below the failure, which redelivers first.
func TestITLoopAcksAFailureWithTheCompletedMessagesBeforeIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &ackRecorder{}
	c := ackRecordingClient(t, rec)
	pushN(t, b, "a", 6, "mid")

	var handled []string
	failed := false
	require.NoError(t, c.Queue(b.queue).Wait(false).Batch(10).Limit(7).OnError(func(error) {}).
		Run(b.ctx, func(_ context.Context, m *lanes.Message) error {
			handled = append(handled, m.TransactionID)
			if m.TransactionID == "mid-a-2" && !failed {
				failed = true
				return errors.New("boom")
			}
			return nil
		}))
	require.Equal(t, append(txnIDs("mid", "a", 0, 2), txnIDs("mid", "a", 2, 5)...), handled)
	require.Equal(t, [][]wireAck{
		{{TransactionID: "mid-a-1", Status: "completed"}, {TransactionID: "mid-a-2", Status: "failed"}},
		{{TransactionID: "mid-a-5", Status: "completed"}},
	}, rec.all())
	requireAllCommitted(t, b)
}

// The iterator acks what the loop body handled the same way: one item per partition.
func TestITIteratorAcksACompletedPartitionWithItsLastMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &ackRecorder{}
	c := ackRecordingClient(t, rec)
	pushN(t, b, "a", 4, "it")
	pushN(t, b, "b", 3, "it")

	n := 0
	for _, err := range c.Queue(b.queue).Wait(false).Batch(10).Partitions(2).Limit(7).Messages(b.ctx) {
		require.NoError(t, err)
		n++
	}
	require.Equal(t, 7, n)
	calls := rec.all()
	require.Len(t, calls, 1)
	require.ElementsMatch(t, []wireAck{{TransactionID: "it-a-3", Status: "completed"}, {TransactionID: "it-b-2", Status: "completed"}}, calls[0])
	requireAllCommitted(t, b)
}

// Client.Ack still sends every message it is given: only the loops' own acks are collapsed.
func TestITManualAckSendsEveryMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &ackRecorder{}
	c := ackRecordingClient(t, rec)
	pushN(t, b, "a", 3, "man")
	ms, err := c.Queue(b.queue).Wait(false).Batch(10).Pop(b.ctx)
	require.NoError(t, err)
	_, err = c.Ack(b.ctx, ms, lanes.AckCompleted)
	require.NoError(t, err)
	require.Len(t, rec.all(), 1)
	require.Len(t, rec.all()[0], 3)
}

// With deduplication off a pop can hold one transaction id twice; the broker resolves the k-th
// mention of an id to its k-th copy, so the loop sends such a partition's acks whole, and the
// cursor passes both copies.
func TestITLoopAcksARepeatedTransactionIDWhole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &ackRecorder{}
	c := ackRecordingClient(t, rec)
	off := 0
	_, err := b.c.Queue(b.queue).Configure(b.ctx, lanes.QueueOptions{DedupWindowSeconds: &off})
	require.NoError(t, err)
	for _, id := range []string{"x", "y", "x"} {
		_, err := b.c.Queue(b.queue).Partition("a").Push(b.ctx, lanes.Item{Data: id, TransactionID: id})
		require.NoError(t, err)
	}
	n := 0
	require.NoError(t, c.Queue(b.queue).Wait(false).Batch(10).Limit(3).Run(b.ctx, func(context.Context, *lanes.Message) error {
		n++
		return nil
	}))
	require.Equal(t, 3, n)
	requireAllCommitted(t, b)
	require.Equal(t, [][]wireAck{{{"x", "completed"}, {"y", "completed"}, {"x", "completed"}}}, rec.all())
}

// requireAllCommitted checks that the queue-mode cursor of every partition is at its last
// message: nothing is left pending, leased or not.
func requireAllCommitted(t *testing.T, b bundle) {
	t.Helper()
	d, err := b.c.Queue(b.queue).Depth(b.ctx)
	require.NoError(t, err)
	require.Zero(t, d.Pending, "messages the cursor has not passed")
}
