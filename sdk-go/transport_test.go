package lanes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRetryRealWait runs the policy without the sleep hook: retryablehttp's own timer waits the
// hint decideRetry chose.
func TestRetryRealWait(t *testing.T) {
	t.Parallel()
	fb := &fakeBroker{handler: func(n int, w http.ResponseWriter, r *http.Request) {
		if n <= 2 {
			w.Header().Set("retry-after-ms", "40")
			writeJSON(w, 429, `{"error":"busy","code":"rate_limited"}`)
			return
		}
		writeJSON(w, 201, pushOK)
	}}
	srv := httptest.NewServer(fb)
	defer srv.Close()
	c, err := New(WithURL(srv.URL))
	require.NoError(t, err)
	start := time.Now()
	_, err = c.Queue("q").Push(context.Background(), Data(1))
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), 80*time.Millisecond)
	require.Equal(t, 3, fb.count())
	require.Equal(t, "2", fb.reqs[2].Header.Get("X-Retry-Count"))
	require.Equal(t, fb.bodies[0], fb.bodies[2])
}

// TestRetryWaitCanceled: a cancellation during the wait ends the call at once with the cause.
func TestRetryWaitCanceled(t *testing.T) {
	t.Parallel()
	fb := &fakeBroker{handler: func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		writeJSON(w, 429, `{"error":"busy","code":"rate_limited"}`)
	}}
	srv := httptest.NewServer(fb)
	defer srv.Close()
	c, err := New(WithURL(srv.URL))
	require.NoError(t, err)
	cause := errors.New("shutting down")
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(100*time.Millisecond, func() { cancel(cause) })
	start := time.Now()
	_, err = c.Queue("q").Wait(true).Pop(ctx)
	require.ErrorIs(t, err, cause)
	require.Less(t, time.Since(start), 5*time.Second)
	require.Equal(t, 1, fb.count())
}

// TestFailoverHeadersAndBody: the retry on the second broker carries the same body and
// X-Retry-Count 1; a 5xx on the second broker fails back to the first.
func TestFailoverHeadersAndBody(t *testing.T) {
	t.Parallel()
	a := &fakeBroker{handler: func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			writeJSON(w, 503, `{"error":"x","code":"unavailable"}`)
			return
		}
		writeJSON(w, 201, pushOK)
	}}
	b := &fakeBroker{handler: func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 502, `{"error":"x","code":"bad_gateway"}`)
	}}
	sa, sb := httptest.NewServer(a), httptest.NewServer(b)
	defer sa.Close()
	defer sb.Close()
	sr := &sleepRec{}
	c, err := New(WithURL(sa.URL, sb.URL), WithBearerToken("tok"), WithHeader("X-App", "t"),
		withClock(time.Now, func() float64 { return 0 }, sr.sleep))
	require.NoError(t, err)
	_, err = c.Queue("q").Partition("p").Push(context.Background(), Item{Data: 1, TransactionID: "tx"})
	require.NoError(t, err)
	require.Equal(t, 2, a.count())
	require.Equal(t, 1, b.count())
	require.Equal(t, "1", b.reqs[0].Header.Get("X-Retry-Count"))
	require.Equal(t, "2", a.reqs[1].Header.Get("X-Retry-Count"))
	require.Equal(t, a.bodies[0], b.bodies[0])
	require.Equal(t, a.bodies[0], a.bodies[1])
	require.Equal(t, a.reqs[0].URL.Path, b.reqs[0].URL.Path)
	for _, r := range []*http.Request{a.reqs[0], b.reqs[0], a.reqs[1]} {
		require.Equal(t, "Bearer tok", r.Header.Get("Authorization"))
		require.Equal(t, "t", r.Header.Get("X-App"))
	}
	// B untried → no wait; back to A (tried in this call) → computed backoff n=1
	require.Equal(t, []time.Duration{0, time.Second}, sr.all())
}

// TestPerAttemptTimeout: an attempt that outlives WithTimeout is a network failure and retried.
func TestPerAttemptTimeout(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		writeJSON(w, 201, pushOK)
	}, WithTimeout(100*time.Millisecond))
	_, err := c.Queue("q").Push(context.Background(), Data(1))
	require.NoError(t, err)
	require.Equal(t, 2, fb.count())
}

type recHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r)
	h.mu.Unlock()
	return nil
}
func (h *recHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recHandler) WithGroup(string) slog.Handler      { return h }

// TestRetryLogging: retry decisions at debug with their reason; retryablehttp's own messages
// (including its "request failed" at error level) are routed to debug too.
func TestRetryLogging(t *testing.T) {
	t.Parallel()
	h := &recHandler{}
	dead := httptest.NewServer(http.NotFoundHandler())
	u := dead.URL
	dead.Close()
	c, err := New(WithURL(u), WithRetryAttempts(1), WithLogger(slog.New(h)),
		withClock(time.Now, func() float64 { return 0 }, (&sleepRec{}).sleep))
	require.NoError(t, err)
	_, err = c.Queue("q").Push(context.Background(), Data(1))
	require.ErrorIs(t, err, ErrConnection)
	h.mu.Lock()
	defer h.mu.Unlock()
	var buf bytes.Buffer
	sawRetry := false
	for _, r := range h.recs {
		require.Equal(t, slog.LevelDebug, r.Level, r.Message)
		buf.WriteString(r.Message + "\n")
		if r.Message == "lanes: retrying" {
			sawRetry = true
		}
	}
	require.True(t, sawRetry, buf.String())
}

// TestBodyStallRetried: an answer whose body stalls past the per-attempt timeout fails that
// attempt like a lost answer, so the push is resent with the same ids.
func TestBodyStallRetried(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `[{"index":0,`)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		writeJSON(w, 201, pushOK)
	}, WithTimeout(200*time.Millisecond))
	res, err := c.Queue("q").Push(context.Background(), Item{Data: 1, TransactionID: "tx"})
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, 2, fb.count())
	require.Equal(t, fb.bodies[0], fb.bodies[1])
}

// TestNotIdempotentWriteNotRetried: a KV incr answered 503 (or cut off after it was sent) is not
// resent; the error says the outcome is unknown and still unwraps to what happened.
func TestNotIdempotentWriteNotRetried(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 503, `{"error":"x","code":"unavailable"}`)
	})
	_, err := c.KV("ns").Incr(context.Background(), "k", 1, Forever, KVIncrOpts{})
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	var apiErr *APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, 503, apiErr.Status)
	require.Equal(t, "unavailable", apiErr.Code)
	require.Equal(t, 1, fb.count())

	// A plain put is idempotent: retried as before.
	_, err = c.KV("ns").Put(context.Background(), "k", 1, Forever)
	require.NotErrorIs(t, err, ErrOutcomeUnknown)
	require.Equal(t, 4, fb.count())

	// A 429 proves nothing was applied: an incr is retried in place.
	c2, fb2, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			writeJSON(w, 429, `{"error":"busy","code":"rate_limited"}`)
			return
		}
		writeJSON(w, 200, `{"results":[{"index":0,"op":"incr","applied":true,"value":1,"version":1}]}`)
	})
	res, err := c2.KV("ns").Incr(context.Background(), "k", 1, Forever, KVIncrOpts{})
	require.NoError(t, err)
	require.True(t, *res.Applied)
	require.Equal(t, 2, fb2.count())
}

// TestNotIdempotentWriteRetriedAfterRefusedDial: a connection that could not be made proves the
// request never left, so even an incr fails over to the next broker.
func TestNotIdempotentWriteRetriedAfterRefusedDial(t *testing.T) {
	t.Parallel()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	fb := &fakeBroker{handler: func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `{"results":[{"index":0,"op":"incr","applied":true,"value":1,"version":1}]}`)
	}}
	live := httptest.NewServer(fb)
	defer live.Close()
	c, err := New(WithURL(deadURL, live.URL), withClock(time.Now, func() float64 { return 0 }, (&sleepRec{}).sleep))
	require.NoError(t, err)
	res, err := c.KV("ns").Incr(context.Background(), "k", 1, Forever, KVIncrOpts{})
	require.NoError(t, err)
	require.True(t, *res.Applied)
	require.Equal(t, 1, fb.count())
}

// idleCloser is a transport that records CloseIdleConnections.
type idleCloser struct {
	http.RoundTripper
	closed atomic.Int64
}

func (i *idleCloser) CloseIdleConnections() { i.closed.Add(1) }

// Client.Close closes the idle keep-alive connections of its transport (whose goroutines would
// otherwise linger).
func TestCloseClosesIdleConnections(t *testing.T) {
	t.Parallel()
	via := &idleCloser{RoundTripper: http.DefaultTransport}
	c, err := New(WithURL("http://127.0.0.1:1"), WithHTTPClient(&http.Client{Transport: via}))
	require.NoError(t, err)
	require.NoError(t, c.Close(context.Background()))
	require.EqualValues(t, 1, via.closed.Load())
}

// TestPushSendsItsBodyWithoutCopies: a push builds its request body once and the transport sends
// those bytes on every attempt, so pushing a big payload allocates about its size, not a
// multiple of it. Not parallel: it reads the process's allocation counter.
func TestPushSendsItsBodyWithoutCopies(t *testing.T) {
	var received atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body) // a recording broker would allocate the body itself
		received.Add(n)
		writeJSON(w, 201, pushOK)
	}))
	t.Cleanup(srv.Close)
	c, err := New(WithURL(srv.URL))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = c.Queue("q").Push(ctx, Data(1)) // connection and first-call setup outside the count
	require.NoError(t, err)
	const size = 8 << 20
	payload := json.RawMessage(`"` + strings.Repeat("x", size-2) + `"`)

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = c.Queue("q").Push(ctx, Data(payload))
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	require.Greater(t, received.Load(), int64(size))
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(size*3/2))
}

// TestBearerTokenFuncAskedBeforeEveryAttempt: a retry carries the token the func returns then,
// and a func that fails before a retry ends the call with its error.
func TestBearerTokenFuncAskedBeforeEveryAttempt(t *testing.T) {
	t.Parallel()
	var asked atomic.Int32
	errGone := errors.New("token source gone")
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 503, `{"error":"x","code":"unavailable"}`)
	}, WithRetryAttempts(3), WithBearerTokenFunc(func(context.Context) (string, error) {
		if n := asked.Add(1); n <= 2 {
			return fmt.Sprintf("tok-%d", n), nil
		}
		return "", errGone
	}))
	_, err := c.Queue("q").Push(context.Background(), Data(1))
	require.ErrorIs(t, err, errGone)
	require.NotErrorIs(t, err, ErrConnection, "the token func's failure is no network failure")
	require.Equal(t, 2, fb.count())
	require.Equal(t, "Bearer tok-1", fb.reqs[0].Header.Get("Authorization"))
	require.Equal(t, "Bearer tok-2", fb.reqs[1].Header.Get("Authorization"))
}

// A token func that fails before the first attempt fails the call with its own error, unsent, as
// TS and Python do: not a *ConnectionError, which would say the broker could not be reached.
func TestBearerTokenFuncFailingFirstFailsTheCallUnsent(t *testing.T) {
	t.Parallel()
	errGone := errors.New("token source gone")
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `{"status":"healthy"}`)
	}, WithBearerTokenFunc(func(context.Context) (string, error) { return "", errGone }))
	_, err := c.Health(context.Background())
	require.ErrorIs(t, err, errGone)
	require.NotErrorIs(t, err, ErrConnection)
	var ce *ConnectionError
	require.False(t, errors.As(err, &ce))
	require.Equal(t, 0, fb.count())
}
