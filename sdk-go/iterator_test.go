package lanes

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const popTwoPartitions = `{"messages":[` +
	`{"id":"1","transactionId":"a0","partitionId":"A","leaseId":"L","consumerGroup":"g","data":1},` +
	`{"id":"2","transactionId":"a1","partitionId":"A","leaseId":"L","consumerGroup":"g","data":2},` +
	`{"id":"3","transactionId":"b0","partitionId":"B","leaseId":"L","consumerGroup":"g","data":3},` +
	`{"id":"4","transactionId":"b1","partitionId":"B","leaseId":"L","consumerGroup":"g","data":4}],` +
	`"leaseId":"L","consumerGroup":"g"}`

type ackWireItem struct {
	TransactionID string `json:"transactionId"`
	Status        string `json:"status"`
}

// iterFake answers pops with popTwoPartitions once, then 204, acks with success, and returns
// the ack items sent, one slice per ack call.
func iterFake(t *testing.T, opts ...Option) (*Client, *fakeBroker, func() [][]ackWireItem) {
	t.Helper()
	var pops atomic.Int64
	fb := &fakeBroker{}
	fb.handler = func(n int, w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/ack/batch":
			fb.mu.Lock()
			var body struct {
				Acks []ackWireItem `json:"acknowledgments"`
			}
			_ = json.Unmarshal([]byte(fb.bodies[len(fb.bodies)-1]), &body)
			fb.mu.Unlock()
			writeJSON(w, 200, "["+strings.TrimSuffix(strings.Repeat(`{"success":true},`, len(body.Acks)), ",")+"]")
		case "/api/v1/ack":
			writeJSON(w, 200, `{"success":true}`)
		default:
			if pops.Add(1) == 1 {
				writeJSON(w, 200, popTwoPartitions)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		}
	}
	srv := httptest.NewServer(fb)
	t.Cleanup(srv.Close)
	c, err := New(append([]Option{WithURL(srv.URL)}, opts...)...)
	require.NoError(t, err)
	closeWhenDone(t, c)
	acks := func() [][]ackWireItem {
		fb.mu.Lock()
		defer fb.mu.Unlock()
		var out [][]ackWireItem
		for i, r := range fb.reqs {
			switch r.URL.Path {
			case "/api/v1/ack/batch":
				var body struct {
					Acks []ackWireItem `json:"acknowledgments"`
				}
				require.NoError(t, json.Unmarshal([]byte(fb.bodies[i]), &body), fb.bodies[i])
				out = append(out, body.Acks)
			case "/api/v1/ack":
				var one ackWireItem
				require.NoError(t, json.Unmarshal([]byte(fb.bodies[i]), &one), fb.bodies[i])
				out = append(out, []ackWireItem{one})
			}
		}
		return out
	}
	return c, fb, acks
}

func TestMessagesBreakReleases(t *testing.T) {
	t.Parallel()
	c, _, acks := iterFake(t)
	var seen []string
	for m, err := range c.Queue("q").Wait(false).Messages(context.Background()) {
		require.NoError(t, err)
		seen = append(seen, m.TransactionID)
		if m.TransactionID == "a1" {
			break // a0 handled; a1 in hand; B untouched
		}
	}
	require.Equal(t, []string{"a0", "a1"}, seen)
	require.Equal(t, [][]ackWireItem{{{"a0", "completed"}, {"a1", "retry"}, {"b0", "retry"}}}, acks())
}

func TestMessagesLimit(t *testing.T) {
	t.Parallel()
	c, _, acks := iterFake(t)
	n := 0
	for _, err := range c.Queue("q").Wait(false).Limit(3).Messages(context.Background()) {
		require.NoError(t, err)
		n++
	}
	require.Equal(t, 3, n)
	// a0, a1, b0 handled; the limit leaves b1 unhandled
	// a1 commits a0 too (docs/sdk-design.md §4, "Loop acks")
	require.Equal(t, [][]ackWireItem{{{"a1", "completed"}, {"b0", "completed"}, {"b1", "retry"}}}, acks())
}

// With AutoAck(false) leaving releases nothing: a retry of a1 would release a0, which the
// caller still holds, too.
func TestMessagesAutoAckOffLeavingReleasesNothing(t *testing.T) {
	t.Parallel()
	c, _, acks := iterFake(t)
	for m, err := range c.Queue("q").Wait(false).AutoAck(false).Messages(context.Background()) {
		require.NoError(t, err)
		if m.TransactionID == "a0" {
			break
		}
	}
	require.Empty(t, acks())
}

func TestMessagesPanicReleases(t *testing.T) {
	t.Parallel()
	c, _, acks := iterFake(t)
	require.Panics(t, func() {
		for _, err := range c.Queue("q").Wait(false).Messages(context.Background()) {
			require.NoError(t, err)
			panic("boom")
		}
	})
	require.Equal(t, [][]ackWireItem{{{"a0", "retry"}, {"b0", "retry"}}}, acks())
}

func TestMessagesCancelEndsQuietly(t *testing.T) {
	t.Parallel()
	c, _, acks := iterFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	for _, err := range c.Queue("q").Wait(false).Messages(ctx) {
		require.NoError(t, err)
		n++
		cancel()
	}
	require.Equal(t, 1, n)
	require.Equal(t, [][]ackWireItem{{{"a0", "completed"}, {"a1", "retry"}, {"b0", "retry"}}}, acks())
}

func TestMessagesTerminalErrorYielded(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			writeJSON(w, 503, `{"error":"x","code":"unavailable"}`)
			return
		}
		writeJSON(w, 403, `{"error":"no","code":"forbidden"}`)
	}, WithRetryAttempts(0))
	var reported, yielded []error
	for m, err := range c.Queue("q").Wait(false).OnError(func(err error) { reported = append(reported, err) }).Messages(context.Background()) {
		require.Nil(t, m)
		yielded = append(yielded, err)
	}
	require.Len(t, reported, 1) // the 503, waited out
	require.Len(t, yielded, 1)
	require.ErrorIs(t, yielded[0], ErrForbidden)
	require.Equal(t, 2, fb.count())
}

func TestMessagesAcksBeforeNextPopAndIdle(t *testing.T) {
	t.Parallel()
	c, fb, acks := iterFake(t)
	n := 0
	// The idle time counts from the last message and is checked before each pop: long enough
	// that the pop after the ack is sent on a loaded machine (1 ms was not, in CI).
	for _, err := range c.Queue("q").Wait(false).IdleTimeout(250 * time.Millisecond).Messages(context.Background()) {
		require.NoError(t, err)
		n++
	}
	require.Equal(t, 4, n)
	require.Equal(t, [][]ackWireItem{{{"a1", "completed"}, {"b1", "completed"}}}, acks())
	fb.mu.Lock()
	defer fb.mu.Unlock()
	var paths []string
	for _, r := range fb.reqs {
		paths = append(paths, r.URL.Path)
	}
	// The acks go out before the next pop; how many empty pops fit in the idle
	// timeout depends on the scheduler, so only their kind is checked.
	require.GreaterOrEqual(t, len(paths), 3)
	require.Equal(t, []string{"/api/v1/pop/queue/q", "/api/v1/ack/batch"}, paths[:2])
	for _, p := range paths[2:] {
		require.Equal(t, "/api/v1/pop/queue/q", p)
	}
}
