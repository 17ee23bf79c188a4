package lanes_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// answerDropper forwards every request to the broker; for the next `drops` requests it lets the
// broker commit and read the whole answer, then closes the client's connection without a byte:
// the answer is lost after the write landed.
type answerDropper struct {
	broker string
	mu     sync.Mutex
	drops  int
	seen   int
	// beforeDrop, when set, runs before a dropped answer's connection is closed: the test waits
	// there for the write's effect (a timer firing) to happen before the client retries.
	beforeDrop func()
}

func (p *answerDropper) dropNext(n int) { p.mu.Lock(); p.drops, p.seen = n, 0; p.mu.Unlock() }

func (p *answerDropper) attempts() int { p.mu.Lock(); defer p.mu.Unlock(); return p.seen }

func (p *answerDropper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.broker+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	answer, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	p.mu.Lock()
	p.seen++
	drop := p.drops > 0
	if drop {
		p.drops--
	}
	p.mu.Unlock()
	if drop {
		if p.beforeDrop != nil {
			p.beforeDrop()
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

// TestITLostAnswerOnWritesThatAreNotIdempotent: an incr, a putIfAbsent and a KV-only transaction
// whose answer is lost after the broker committed are not resent (the broker applied each once)
// and fail with ErrOutcomeUnknown; a plain put and a transaction with a push are resent safely.
func TestITLostAnswerOnWritesThatAreNotIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy := &answerDropper{broker: os.Getenv("LANES_TEST_URL")}
	srv := httptest.NewServer(proxy)
	defer srv.Close()
	c, err := lanes.New(lanes.WithURL(srv.URL), lanes.WithRetryDelay(1))
	require.NoError(t, err)
	direct := b.c.KV(b.queue)
	kv := c.KV(b.queue)
	value := func(key string) string {
		t.Helper()
		got, err := direct.Get(b.ctx, key)
		require.NoError(t, err)
		return string(got.Value)
	}

	proxy.dropNext(1)
	_, err = kv.Incr(b.ctx, "counter", 1, lanes.Forever, lanes.KVIncrOpts{})
	require.ErrorIs(t, err, lanes.ErrOutcomeUnknown)
	require.ErrorIs(t, err, lanes.ErrConnection)
	require.Equal(t, 1, proxy.attempts())
	require.Equal(t, "1", value("counter"))

	proxy.dropNext(1)
	_, err = kv.PutIfAbsent(b.ctx, "once", "first", lanes.Forever)
	require.ErrorIs(t, err, lanes.ErrOutcomeUnknown)
	require.Equal(t, `"first"`, value("once"))

	proxy.dropNext(1)
	_, err = c.Transaction().KV(lanes.KVIncr(b.queue, "tx-counter", 1, lanes.Forever, lanes.KVIncrOpts{})).Commit(b.ctx)
	require.ErrorIs(t, err, lanes.ErrOutcomeUnknown)
	require.Equal(t, "1", value("tx-counter"))

	// Idempotent: a plain put is resent and answers.
	proxy.dropNext(1)
	_, err = kv.Put(b.ctx, "plain", "v", lanes.Forever)
	require.NoError(t, err)
	require.Equal(t, 2, proxy.attempts())
	require.Equal(t, `"v"`, value("plain"))

	// A push's ids make the resend of a committed bundle roll back as duplicate.
	proxy.dropNext(1)
	_, err = c.Transaction().Queue(b.queue).Push(lanes.Data(1)).
		KV(lanes.KVIncr(b.queue, "bundle-counter", 1, lanes.Forever, lanes.KVIncrOpts{})).Commit(b.ctx)
	var txErr *lanes.TransactionError
	require.ErrorAs(t, err, &txErr)
	require.Equal(t, lanes.ReasonDuplicate, txErr.Reason)
	require.Equal(t, 2, txErr.Attempts)
	require.Equal(t, "1", value("bundle-counter"))
}

// TestITLostAnswerTimerScheduleFiresOnce: a timer schedule (direct, and as a transaction rider)
// whose answer is lost is resent with the transaction id minted when the op was built, so the
// fired pushes deduplicate and the queue gets one message per timer.
func TestITLostAnswerTimerScheduleFiresOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fired := func(key string) func() {
		return func() {
			require.Eventually(t, func() bool {
				got, err := b.c.Timers(b.queue).Get(b.ctx, key)
				return err == nil && !got.Found
			}, 20*time.Second, 50*time.Millisecond, "the %s timer fires", key)
		}
	}
	proxy := &answerDropper{broker: os.Getenv("LANES_TEST_URL")}
	srv := httptest.NewServer(proxy)
	defer srv.Close()
	c, err := lanes.New(lanes.WithURL(srv.URL), lanes.WithRetryDelay(1))
	require.NoError(t, err)

	// The answer is lost after the timer fired: the resend schedules it again.
	proxy.beforeDrop = fired("direct")
	proxy.dropNext(1)
	_, err = c.Timers(b.queue).Partition("direct").Schedule(b.ctx, "direct", 0, []byte(`{"n":1}`))
	require.NoError(t, err)
	require.Equal(t, 2, proxy.attempts())

	proxy.beforeDrop = fired("rider")
	proxy.dropNext(1)
	rider := lanes.TimerSchedule(b.queue, "rider", 0, []byte(`{"n":2}`))
	rider.Partition = ptrTo("rider")
	_, err = c.Transaction().Timer(rider).Commit(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 2, proxy.attempts())

	for _, partition := range []string{"direct", "rider"} {
		fired(partition)()
		msgs, err := b.c.Queue(b.queue).Partition(partition).Batch(10).Wait(false).Pop(b.ctx)
		require.NoError(t, err)
		require.Len(t, msgs, 1, "the %s timer fired once", partition)
	}
}
