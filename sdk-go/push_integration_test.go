package lanes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// A []byte payload has one shape whatever its bytes (encoding/json's base64), so every one
// comes back through Decode as the same bytes; json.RawMessage is the way to send raw JSON.
func TestITPushBytesRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	blobs := [][]byte{[]byte("42"), []byte("true"), []byte(`"hi"`), {0xff, 0x00, 0x10}, []byte("hello")}
	items := make([]lanes.Item, 0, len(blobs)+1)
	for _, blob := range blobs {
		items = append(items, lanes.Data(blob))
	}
	items = append(items, lanes.Data(json.RawMessage(`{"orderId":42}`)))
	_, err := b.c.Queue(b.queue).Push(b.ctx, items...)
	require.NoError(t, err)

	msgs, err := b.c.Queue(b.queue).Autopilot(false).Batch(10).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, msgs, len(items))
	for i, blob := range blobs {
		var back []byte
		require.NoError(t, msgs[i].Decode(&back), "item %d stored as %s", i, msgs[i].Data)
		require.Equal(t, blob, back)
	}
	require.JSONEq(t, `{"orderId":42}`, string(msgs[len(blobs)].Data))
}

// An item that cannot be encoded fails the call with *InvalidItemError naming it, and nothing
// of the call is stored or buffered.
func TestITPushRejectsUnencodableItem(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Strings that are not UTF-8 too: encoding/json would send U+FFFD in their place.
	for _, bad := range []any{json.RawMessage("{not json"), make(chan int), "a\xffb", map[string]any{"k": []string{"\xfe"}},
		json.RawMessage("\"\xff\"")} {
		_, err := b.c.Queue(b.queue).Push(b.ctx, lanes.Data(1), lanes.Data(bad))
		var ie *lanes.InvalidItemError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, 1, ie.Index)
		if raw, ok := bad.(json.RawMessage); ok && string(raw) == "{not json" {
			require.EqualError(t, err, "lanes: push item #1 cannot be encoded: json.RawMessage is not valid JSON")
		}

		buf := b.c.Queue(b.queue).Buffer(lanes.BufferOptions{FlushInterval: time.Hour})
		require.ErrorAs(t, buf.Push(b.ctx, lanes.Data(1), lanes.Data(bad)), &ie)
		require.Zero(t, buf.Len())
	}
	require.NoError(t, b.c.Close(b.ctx))
	msgs, err := b.c.Queue(b.queue).Batch(10).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Empty(t, msgs)
}

// One item the broker refuses (a NUL in its transaction id makes the whole request a 400) costs
// only that item: the buffer splits the batch, stores the other nine and hands the refused one
// to OnError.
func TestITBufferDropsOnlyTheRefusedItem(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	var dropped []lanes.Item
	buf := b.c.Queue(b.queue).Buffer(lanes.BufferOptions{MessageCount: 10, FlushInterval: time.Hour,
		OnError: func(err error) {
			var de *lanes.DroppedError
			if errors.As(err, &de) {
				mu.Lock()
				dropped = append(dropped, de.Items...)
				mu.Unlock()
			}
		}})
	for i := range 10 {
		tid := fmt.Sprintf("ok-%d", i)
		if i == 5 {
			tid = "bad\x00id"
		}
		require.NoError(t, buf.Push(b.ctx, lanes.Item{Data: i, TransactionID: tid}))
	}
	require.NoError(t, buf.Flush(b.ctx))

	msgs, err := b.c.Queue(b.queue).Autopilot(false).Batch(20).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, msgs, 9)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, dropped, 1)
	require.Equal(t, "bad\x00id", dropped[0].TransactionID)
	require.JSONEq(t, "5", string(dropped[0].Data.(json.RawMessage)))
}

// BufferStats counts the client's buffers, the items waiting in them and the batches they sent,
// as TS's bufferStats() and Python's buffer_stats() do.
func TestITBufferStats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.Equal(t, lanes.BufferStats{}, b.c.BufferStats())
	opts := lanes.BufferOptions{FlushInterval: time.Hour}
	require.NoError(t, b.c.Queue(b.queue).Partition("a").Buffer(opts).Push(b.ctx, lanes.Data(1), lanes.Data(2), lanes.Data(3)))
	require.NoError(t, b.c.Queue(b.queue).Partition("b").Buffer(opts).Push(b.ctx, lanes.Data(4), lanes.Data(5)))
	require.Equal(t, lanes.BufferStats{ActiveBuffers: 2, TotalBufferedMessages: 5}, b.c.BufferStats())
	_ = b.c.Queue(b.queue).Partition("a").Buffer(lanes.BufferOptions{MessageCount: 7})
	require.Equal(t, lanes.BufferStats{ActiveBuffers: 2, TotalBufferedMessages: 5}, b.c.BufferStats(),
		"a buffer is shared per (queue, partition) inside one client")

	require.NoError(t, b.c.FlushAll(b.ctx))
	require.Equal(t, lanes.BufferStats{ActiveBuffers: 2, FlushesPerformed: 2}, b.c.BufferStats())
	stored := 0
	for range 2 { // a pop claims one partition
		msgs, err := b.c.Queue(b.queue).Autopilot(false).Batch(10).Wait(false).Pop(b.ctx)
		require.NoError(t, err)
		stored += len(msgs)
	}
	require.Equal(t, 5, stored)
}

// After Close a client starts no buffered work: new and existing buffers refuse pushes with
// ErrClientClosed; direct pushes still work.
func TestITClosedClientRefusesBufferPushes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	buf := b.c.Queue(b.queue).Buffer(lanes.BufferOptions{FlushInterval: time.Hour})
	require.NoError(t, buf.Push(b.ctx, lanes.Data(1)))
	require.NoError(t, b.c.Close(b.ctx))

	require.ErrorIs(t, buf.Push(b.ctx, lanes.Data(2)), lanes.ErrClientClosed)
	other := b.c.Queue(b.queue).Partition("later").Buffer(lanes.BufferOptions{})
	require.ErrorIs(t, other.Push(b.ctx, lanes.Data(3)), lanes.ErrClientClosed)
	require.NoError(t, b.c.FlushAll(b.ctx))
	require.NoError(t, b.c.Close(b.ctx), "idempotent")

	_, err := b.c.Queue(b.queue).Push(b.ctx, lanes.Data(4))
	require.NoError(t, err)
	msgs, err := b.c.Queue(b.queue).Autopilot(false).Batch(10).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	require.JSONEq(t, "1", string(msgs[0].Data))
	require.JSONEq(t, "4", string(msgs[1].Data))
}

// The buffer's name check is the broker's rule: every name a buffer refuses, the broker refuses
// with 400 on a direct push, and the longest name the broker stores, a buffer sends.
func TestITBufferNameRuleMatchesTheBroker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	refused := []struct{ queue, partition string }{
		{" ", ""}, {".", ""}, {"..", ""}, {"a\x00b", ""}, {strings.Repeat("q", 513), ""},
		{b.queue, ".."}, {b.queue, strings.Repeat("p", 513)},
	}
	for _, tc := range refused {
		qb := b.c.Queue(tc.queue)
		if tc.partition != "" {
			qb = qb.Partition(tc.partition)
		}
		_, err := qb.Push(b.ctx, lanes.Data(1))
		var ae *lanes.APIError
		require.ErrorAs(t, err, &ae, "%q/%q", tc.queue, tc.partition)
		require.Equal(t, 400, ae.Status)
		var ne *lanes.InvalidNameError
		require.ErrorAs(t, qb.Buffer(lanes.BufferOptions{}).Push(b.ctx, lanes.Data(1)), &ne)
	}
	longest := b.queue + strings.Repeat("q", 512-len(b.queue))
	buf := b.c.Queue(longest).Partition(strings.Repeat("p", 512)).Buffer(lanes.BufferOptions{FlushInterval: time.Hour})
	require.NoError(t, buf.Push(b.ctx, lanes.Data(1)))
	require.NoError(t, buf.Flush(b.ctx))
	msgs, err := b.c.Queue(longest).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
}

// heldPush scripts the test broker to store the first push of c's run and hold its answer for
// hold: the window where a send is in flight and its items are stored but not yet known sent.
func heldPush(t *testing.T, hold time.Duration) *lanes.Client {
	t.Helper()
	return scriptFaults(t, fmt.Sprintf(`[{"method":"POST","path":"/api/v1/push","responses":[{"pass":true,"holdAnswerMs":%d}]}]`,
		hold.Milliseconds()))
}

// waitStored waits until n messages of queue are stored (the held push reached the broker).
func waitStored(t *testing.T, b bundle, queue string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		l, err := b.c.Admin().ListMessages(b.ctx, lanes.MessageQuery{Queue: queue, Limit: 100})
		return err == nil && len(l.Messages) >= n
	}, 5*time.Second, 20*time.Millisecond)
}

// requireStoredOnce pops queue whole and checks it holds each transaction id once.
func requireStoredOnce(t *testing.T, b bundle, queue string, ids []string) {
	t.Helper()
	msgs, err := b.c.Queue(queue).Autopilot(false).Batch(100).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	got := make([]string, len(msgs))
	for i, m := range msgs {
		got[i] = m.TransactionID
	}
	require.ElementsMatch(t, ids, got, "every item stored once")
}

// bufferItems are n items with fixed transaction ids, so a resend deduplicates.
func bufferItems(prefix string, n int) ([]lanes.Item, []string) {
	items := make([]lanes.Item, n)
	ids := make([]string, n)
	for i := range items {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		items[i] = lanes.Item{Data: i, TransactionID: ids[i]}
	}
	return items, ids
}

// A Flush whose ctx ends while the background flusher waits for a held answer returns then,
// with *UnsentError counting the items not known sent, and cuts nothing: the held send's items
// arrive, and a later Flush sends the rest, each item once.
func TestITFlushEndsWithItsCtxWhileTheFlusherSends(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := heldPush(t, 3*time.Second)
	buf := c.Queue(b.queue).Buffer(lanes.BufferOptions{MessageCount: 5, FlushInterval: time.Hour})
	items, ids := bufferItems("held", 8)
	require.NoError(t, buf.Push(b.ctx, items[:5]...)) // a full batch: the flusher sends it
	waitStored(t, b, b.queue, 5)
	require.NoError(t, buf.Push(b.ctx, items[5:]...))

	ctx, cancel := context.WithTimeout(b.ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := buf.Flush(ctx)
	took := time.Since(start)
	t.Logf("returned after %v", took)
	require.Less(t, took, 700*time.Millisecond, "Flush is bounded by its ctx")
	var ue *lanes.UnsentError
	require.ErrorAs(t, err, &ue)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, 8, ue.Unsent, "the held batch is not known sent yet")

	require.NoError(t, buf.Flush(b.ctx))
	require.Zero(t, buf.Len())
	requireStoredOnce(t, b, b.queue, ids)
}

// FlushAll is bounded the same way.
func TestITFlushAllEndsWithItsCtxWhileAFlusherSends(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := heldPush(t, 3*time.Second)
	buf := c.Queue(b.queue).Buffer(lanes.BufferOptions{MessageCount: 5, FlushInterval: time.Hour})
	items, ids := bufferItems("held-all", 5)
	require.NoError(t, buf.Push(b.ctx, items...))
	waitStored(t, b, b.queue, 5)

	ctx, cancel := context.WithTimeout(b.ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.FlushAll(ctx)
	took := time.Since(start)
	t.Logf("returned after %v", took)
	require.Less(t, took, 700*time.Millisecond, "FlushAll is bounded by its ctx")
	var ue *lanes.UnsentError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, 5, ue.Unsent)

	require.NoError(t, c.Close(b.ctx))
	requireStoredOnce(t, b, b.queue, ids)
}

// A Close whose ctx ends while another caller's Flush waits for a held answer returns then and
// leaves that caller's send alone (its ctx owns it): the Flush still ends well, and a second
// Close has nothing left to send; every item is stored once.
func TestITCloseEndsWithItsCtxWhileAFlushSends(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := heldPush(t, 2*time.Second)
	buf := c.Queue(b.queue).Buffer(lanes.BufferOptions{MessageCount: 100, FlushInterval: time.Hour})
	items, ids := bufferItems("held-close", 4)
	require.NoError(t, buf.Push(b.ctx, items...))
	flushed := make(chan error, 1)
	go func() { flushed <- buf.Flush(b.ctx) }()
	waitStored(t, b, b.queue, 4)

	ctx, cancel := context.WithTimeout(b.ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Close(ctx)
	took := time.Since(start)
	t.Logf("returned after %v", took)
	require.Less(t, took, 700*time.Millisecond, "Close is bounded by its ctx")
	var ue *lanes.UnsentError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, 4, ue.Unsent)

	require.NoError(t, <-flushed, "the Flush that owned the send was not cut")
	require.NoError(t, c.Close(b.ctx))
	requireStoredOnce(t, b, b.queue, ids)
}
