package lanes

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A failed buffer flush is dropped only on 400, 403 and 413 (docs/sdk-design.md §2), as in the
// TypeScript and Python buffers; every other status keeps the batch and sends it again.
func TestBufferDropsOnlyOn400403413(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		drop   bool
	}{
		{400, true}, {403, true}, {413, true},
		{401, false}, {404, false}, {409, false}, {422, false}, {501, false},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			t.Parallel()
			c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if n == 1 {
					writeJSON(w, tc.status, `{"error":"no","code":"scripted"}`)
					return
				}
				writeJSON(w, 201, pushOK)
			}, WithRetryAttempts(0))
			var mu sync.Mutex
			var reported []error
			// FlushInterval keeps the background flush out of the way: only Flush sends.
			buf := c.Queue("q").Buffer(BufferOptions{FlushInterval: time.Hour, RetryDelay: time.Millisecond,
				OnError: func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }})
			require.NoError(t, buf.Push(context.Background(), Item{Data: 1, TransactionID: "tx-1"}))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, buf.Flush(ctx))
			require.Zero(t, buf.Len())

			mu.Lock()
			defer mu.Unlock()
			require.Len(t, reported, 1)
			var ae *APIError
			require.True(t, errors.As(reported[0], &ae))
			require.Equal(t, tc.status, ae.Status)
			if tc.drop {
				require.Equal(t, 1, fb.count(), "dropped: sent once")
				return
			}
			require.Equal(t, 2, fb.count(), "kept: sent again")
			fb.mu.Lock()
			defer fb.mu.Unlock()
			require.Equal(t, fb.bodies[0], fb.bodies[1], "the retry resends the same items (same transaction ids)")
		})
	}
}

// readBody is the request body as text.
func readBody(r *http.Request) string {
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

// answerPush answers a push like the broker: one queued result per item of the body.
func answerPush(w http.ResponseWriter, body string) {
	var req struct {
		Items []pushItemWire `json:"items"`
	}
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		writeJSON(w, 400, `{"error":"bad json","code":"bad_request"}`)
		return
	}
	out := make([]PushResult, len(req.Items))
	for i, it := range req.Items {
		out[i] = PushResult{Index: i, MessageID: "m-" + it.TransactionID, TransactionID: it.TransactionID, Queue: it.Queue, Status: StatusQueued}
	}
	b, _ := json.Marshal(out)
	writeJSON(w, 201, string(b))
}

// A batch over the broker's body limit (413) is halved until it fits: only an item too big
// on its own is dropped, handed to OnError with its transaction id.
func TestBufferSplitsOn413(t *testing.T) {
	t.Parallel()
	const limit = 3000
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		body := readBody(r)
		if len(body) > limit {
			writeJSON(w, 413, `{"error":"body too large","code":"payload_too_large"}`)
			return
		}
		answerPush(w, body)
	}, WithRetryAttempts(0))
	var mu sync.Mutex
	var dropped []Item
	buf := c.Queue("q").Buffer(BufferOptions{MessageCount: 10, FlushInterval: time.Hour,
		OnError: func(err error) {
			var de *DroppedError
			require.ErrorAs(t, err, &de)
			require.ErrorIs(t, err, ErrPayloadTooLarge)
			mu.Lock()
			dropped = append(dropped, de.Items...)
			mu.Unlock()
		}})
	for i := range 10 {
		data := strings.Repeat("x", 500)
		if i == 7 {
			data = strings.Repeat("y", 2*limit)
		}
		require.NoError(t, buf.Push(context.Background(), Item{Data: data, TransactionID: "tx-" + strconv.Itoa(i)}))
	}
	require.NoError(t, buf.Flush(context.Background()))
	require.Zero(t, buf.Len())

	stored := map[string]bool{}
	fb.mu.Lock()
	for _, body := range fb.bodies {
		if len(body) <= limit {
			var req struct{ Items []pushItemWire }
			require.NoError(t, json.Unmarshal([]byte(body), &req))
			for _, it := range req.Items {
				stored[it.TransactionID] = true
			}
		}
	}
	fb.mu.Unlock()
	require.Len(t, stored, 9)
	require.False(t, stored["tx-7"])
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, dropped, 1)
	require.Equal(t, "tx-7", dropped[0].TransactionID)
}

// A 403 is about the credential, not the items: the batch is dropped whole, without splitting.
func TestBufferDoesNotSplitOn403(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 403, `{"error":"no","code":"forbidden"}`)
	}, WithRetryAttempts(0))
	var got *DroppedError
	buf := c.Queue("q").Buffer(BufferOptions{FlushInterval: time.Hour, OnError: func(err error) { require.ErrorAs(t, err, &got) }})
	require.NoError(t, buf.Push(context.Background(), Data(1), Data(2), Data(3)))
	require.NoError(t, buf.Flush(context.Background()))
	require.Equal(t, 1, fb.count())
	require.Len(t, got.Items, 3)
}

// A dropped item is never silent: without WithLogger it is logged to slog.Default.
func TestBufferDropIsLoggedByDefault(t *testing.T) { //nolint:paralleltest // swaps slog.Default
	rec := &recHandler{}
	prev := slog.Default()
	slog.SetDefault(slog.New(rec))
	t.Cleanup(func() { slog.SetDefault(prev) })
	c, _, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 400, `{"error":"no","code":"bad_request"}`)
	}, WithRetryAttempts(0))
	buf := c.Queue("q").Buffer(BufferOptions{FlushInterval: time.Hour})
	require.NoError(t, buf.Push(context.Background(), Item{Data: 1, TransactionID: "tx-lost"}))
	require.NoError(t, buf.Flush(context.Background()))

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.recs, 1)
	require.Equal(t, slog.LevelError, rec.recs[0].Level)
	require.Contains(t, rec.recs[0].Message, "dropped")
}

// FlushAll and Close flush every buffer at once: a buffer the broker keeps refusing does not
// use up the deadline of a healthy one, and the error names how many items are left.
func TestCloseFlushesEveryBufferAndCountsTheUnsent(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		body := readBody(r)
		if strings.Contains(body, `"queue":"stuck"`) {
			writeJSON(w, 503, `{"error":"down","code":"unavailable"}`)
			return
		}
		answerPush(w, body)
	}, WithRetryAttempts(0))
	stuck := c.Queue("stuck").Buffer(BufferOptions{FlushInterval: time.Hour, RetryDelay: 10 * time.Millisecond})
	healthy := c.Queue("healthy").Buffer(BufferOptions{FlushInterval: time.Hour})
	require.NoError(t, stuck.Push(context.Background(), Data(1), Data(2)))
	require.NoError(t, healthy.Push(context.Background(), Data(1), Data(2), Data(3)))

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := c.Close(ctx)
	var ue *UnsentError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, 2, ue.Unsent)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Zero(t, healthy.Len())
	require.Equal(t, 2, stuck.Len(), "kept: another Close may still send them")
	require.Positive(t, fb.count())
	require.ErrorIs(t, stuck.ctx.Err(), context.Canceled, "the background flusher ended")
}

// A push waiting for room in a full buffer is woken by Close and told the client is closed.
func TestCloseWakesAPushWaitingForRoom(t *testing.T) {
	t.Parallel()
	c, _, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 503, `{"error":"down","code":"unavailable"}`)
	}, WithRetryAttempts(0))
	buf := c.Queue("q").Buffer(BufferOptions{MessageCount: 1, MaxSize: 1, FlushInterval: time.Hour, RetryDelay: time.Hour})
	require.NoError(t, buf.Push(context.Background(), Data(1)))
	waiting := make(chan error, 1)
	go func() { waiting <- buf.Push(context.Background(), Data(2)) }()
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.Error(t, c.Close(ctx))
	select {
	case err := <-waiting:
		require.ErrorIs(t, err, ErrClientClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting push was not woken by Close")
	}
}

// A buffer for a name the broker refuses answers Push with *InvalidNameError and sends nothing:
// it never fills with items that could only be dropped.
func TestBufferRefusesNamesTheBrokerRefuses(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		answerPush(w, readBody(r))
	}, WithRetryAttempts(0))
	for _, tc := range []struct{ queue, partition, field string }{
		{"", "", "queue"}, {"  ", "", "queue"}, {".", "", "queue"}, {"..", "", "queue"},
		{"a\x00b", "", "queue"}, {strings.Repeat("q", 513), "", "queue"},
		{"q", "..", "partition"}, {"q", strings.Repeat("p", 513), "partition"}, {"q", " \t", "partition"},
	} {
		qb := c.Queue(tc.queue)
		if tc.partition != "" {
			qb = qb.Partition(tc.partition)
		}
		buf := qb.Buffer(BufferOptions{FlushInterval: time.Hour})
		var ne *InvalidNameError
		require.ErrorAs(t, buf.Push(context.Background(), Data(1)), &ne, "%q/%q", tc.queue, tc.partition)
		require.Equal(t, tc.field, ne.Field)
		require.Zero(t, buf.Len())
	}
	ok := c.Queue(strings.Repeat("q", 512)).Partition("p").Buffer(BufferOptions{FlushInterval: time.Hour})
	require.NoError(t, ok.Push(context.Background(), Data(1)))
	require.NoError(t, ok.Flush(context.Background()))
	require.Equal(t, 1, fb.count(), "only the valid buffer sent")
}

// Items a flush drops reach OnError as one *DroppedError and one log line, however many
// halvings found them.
func TestBufferReportsTheDropsOfAFlushOnce(t *testing.T) { //nolint:paralleltest // swaps slog.Default
	rec := &recHandler{}
	prev := slog.Default()
	slog.SetDefault(slog.New(rec))
	t.Cleanup(func() { slog.SetDefault(prev) })
	c, _, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 400, `{"error":"no","code":"validation_failed"}`)
	}, WithRetryAttempts(0))
	var reported []error
	// FlushInterval and the default MessageCount keep the background flush out of the way.
	buf := c.Queue("q").Buffer(BufferOptions{FlushInterval: time.Hour,
		OnError: func(err error) { reported = append(reported, err) }})
	for i := range 8 {
		require.NoError(t, buf.Push(context.Background(), Item{Data: i, TransactionID: "tx-" + strconv.Itoa(i)}))
	}
	require.NoError(t, buf.Flush(context.Background()))

	require.Len(t, reported, 1)
	var de *DroppedError
	require.ErrorAs(t, reported[0], &de)
	require.Len(t, de.Items, 8)
	require.Equal(t, "tx-0", de.Items[0].TransactionID)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.recs, 1)
}

// A push is all or nothing: one that cannot get room for all its items before ctx ends queues
// none of them, so pushing the same items again stores each once; a call larger than MaxSize
// waits for an empty buffer and then goes in whole.
func TestBufferPushIsAllOrNothing(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	down := true
	var stored []string
	c, _, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		body := readBody(r)
		mu.Lock()
		defer mu.Unlock()
		if down {
			writeJSON(w, 503, `{"error":"down","code":"unavailable"}`)
			return
		}
		var req struct {
			Items []pushItemWire `json:"items"`
		}
		_ = json.Unmarshal([]byte(body), &req) // answerPush refuses a body that does not parse
		for _, it := range req.Items {
			stored = append(stored, string(it.Payload))
		}
		answerPush(w, body)
	}, WithRetryAttempts(0))
	buf := c.Queue("q").Buffer(BufferOptions{MessageCount: 100, MaxSize: 4, FlushInterval: time.Hour,
		RetryDelay: 10 * time.Millisecond, OnError: func(error) {}})
	require.NoError(t, buf.Push(context.Background(), Data(1), Data(2), Data(3)))

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, buf.Push(ctx, Data(4), Data(5)), context.DeadlineExceeded)
	require.Equal(t, 3, buf.Len(), "nothing of the timed-out call was queued")

	mu.Lock()
	down = false
	mu.Unlock()
	require.NoError(t, buf.Push(context.Background(), Data(4), Data(5)))
	// Larger than MaxSize: queued whole once the buffer is empty.
	require.NoError(t, buf.Push(context.Background(), Data(6), Data(7), Data(8), Data(9), Data(10)))
	flushCtx, cancelFlush := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelFlush()
	require.NoError(t, buf.Flush(flushCtx))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10"}, stored)
}
