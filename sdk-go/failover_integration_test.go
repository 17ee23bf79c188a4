package lanes_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// attemptHosts records the host of every attempt the client makes, then sends it on for real.
type attemptHosts struct {
	mu    sync.Mutex
	hosts []string
}

func (a *attemptHosts) RoundTrip(r *http.Request) (*http.Response, error) {
	a.mu.Lock()
	a.hosts = append(a.hosts, r.URL.Host)
	a.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

// take returns the hosts recorded since the last take.
func (a *attemptHosts) take() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.hosts
	a.hosts = nil
	return out
}

// closedPortURL is a URL on a local port nobody listens on: connecting to it is refused.
func closedPortURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "http://" + addr
}

// A broker URL whose connection is refused is skipped for WithHealthRetryAfter, then tried again
// (docs/retries.md §4); without the option it stays skipped for the default 5 s.
func TestITHealthRetryAfterSkipsAFailingURL(t *testing.T) {
	t.Parallel()
	live := testBrokerURL(t)
	liveHost := hostOf(live)
	for _, tc := range []struct {
		name    string
		opts    []lanes.Option
		retried bool // after 400 ms, the failing URL is asked again
	}{
		{"configured 200ms", []lanes.Option{lanes.WithHealthRetryAfter(200 * time.Millisecond)}, true},
		{"default 5s", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			dead := closedPortURL(t)
			deadHost := hostOf(dead)
			rec := &attemptHosts{}
			opts := append([]lanes.Option{lanes.WithURL(dead, live), lanes.WithHTTPClient(&http.Client{Transport: rec})}, tc.opts...)
			c, err := lanes.New(opts...)
			require.NoError(t, err)
			closeWhenDone(t, c)

			_, err = c.Health(ctx)
			require.NoError(t, err)
			require.Equal(t, []string{deadHost, liveHost}, rec.take(), "the first call fails over")
			_, err = c.Health(ctx)
			require.NoError(t, err)
			require.Equal(t, []string{liveHost}, rec.take(), "the failing URL is skipped")

			time.Sleep(400 * time.Millisecond)
			_, err = c.Health(ctx)
			require.NoError(t, err)
			if tc.retried {
				require.Equal(t, []string{deadHost, liveHost}, rec.take(), "asked again once the time passed")
			} else {
				require.Equal(t, []string{liveHost}, rec.take(), "still skipped inside the default 5 s")
			}
		})
	}
}

func TestHealthRetryAfterNegativeIsRefused(t *testing.T) {
	t.Parallel()
	_, err := lanes.New(lanes.WithURL("http://127.0.0.1:1"), lanes.WithHealthRetryAfter(-time.Second))
	require.ErrorContains(t, err, "WithHealthRetryAfter must not be negative")
}

// sameBrokerOtherHost is the test broker's URL with 127.0.0.1 and localhost swapped: a second
// URL the client tells apart, on the same real broker.
func sameBrokerOtherHost(t *testing.T, base string) string {
	t.Helper()
	if strings.Contains(base, "127.0.0.1") {
		return strings.Replace(base, "127.0.0.1", "localhost", 1)
	}
	require.Contains(t, base, "localhost")
	return strings.Replace(base, "localhost", "127.0.0.1", 1)
}

// What marks a URL as failing, as in the TS and Python SDKs: a 408 or a 5xx, retried or not
// (an answer `x-should-retry: false` forbids the retry, not the skip); any other 4xx does not.
// twoHostClient is a client of the test broker under two host names, the first one's GET /health
// answered as healthResponse (a fault script of its own run), recording each attempt's host.
func twoHostClient(t *testing.T, healthResponse string, opts ...lanes.Option) (c *lanes.Client, first, second string, rec *attemptHosts) {
	t.Helper()
	first = testBrokerURL(t)
	second = sameBrokerOtherHost(t, first)
	rec = &attemptHosts{}
	opts = append([]lanes.Option{lanes.WithURL(second), lanes.WithHTTPClient(&http.Client{Transport: rec})}, opts...)
	return scriptFaults(t, `[{"method":"GET","path":"/health","responses":[`+healthResponse+`]}]`, opts...), first, second, rec
}

// requireNextHealthGoesTo checks the next call, a healthy one, went to the second URL when the
// first is skipped, else to the first.
func requireNextHealthGoesTo(ctx context.Context, t *testing.T, c *lanes.Client, rec *attemptHosts, first, second string, skipped bool) {
	t.Helper()
	_, err := c.Health(ctx)
	require.NoError(t, err)
	want := hostOf(first)
	if skipped {
		want = hostOf(second)
	}
	require.Equal(t, []string{want}, rec.take())
}

func TestITWhichAnswersSkipAURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fault   string
		skipped bool
	}{
		{"408", `{"status":408}`, true},
		{"503 x-should-retry false", `{"status":503,"headers":{"x-should-retry":"false"}}`, true},
		{"409", `{"status":409}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, first, second, rec := twoHostClient(t, tc.fault)

			_, err := c.Health(ctx)
			require.Error(t, err, "the scripted answer, not retried")
			require.Equal(t, []string{hostOf(first)}, rec.take())
			requireNextHealthGoesTo(ctx, t, c, rec, first, second, tc.skipped)
		})
	}
}

func hostOf(u string) string { return strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://") }

// A success that was already in flight when the URL failed (here a long-poll pop parked on an
// empty queue) does not end the skip early: the URL stays skipped for WithHealthRetryAfter, as
// in the TS and Python SDKs.
func TestITSkipOutlastsASuccessInFlight(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, first, second, rec := twoHostClient(t, `{"status":503}`)
	queue := fmt.Sprintf("sdkgo-skip-outlasts-%d", time.Now().UnixNano())

	popped := make(chan error, 1)
	go func() {
		_, err := c.Queue(queue).Wait(true).Timeout(time.Second).Pop(ctx)
		popped <- err
	}()
	time.Sleep(300 * time.Millisecond) // the pop is parked on the first URL
	_, err := c.Health(ctx)
	require.Error(t, err, "the scripted 503, not retried")
	require.NoError(t, <-popped)
	require.Equal(t, []string{hostOf(first), hostOf(first)}, rec.take())

	requireNextHealthGoesTo(ctx, t, c, rec, first, second, true) // the first URL is still skipped
}

// An attempt cut by the caller's context deadline says nothing about the broker: the URL is not
// marked. One cut by the per-attempt WithTimeout is the broker being slow: the URL is skipped.
// As in the TS and Python SDKs.
func TestITAttemptCutShort(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		deadline bool
		opts     []lanes.Option
		skipped  bool
	}{
		{"by the caller's deadline marks nothing", true, nil, false},
		{"by the per-attempt timeout marks the URL", false, []lanes.Option{lanes.WithTimeout(200 * time.Millisecond)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, first, second, rec := twoHostClient(t, `{"status":200,"delayMs":2000,"body":{"status":"healthy"}}`, tc.opts...)

			slowCtx := ctx
			if tc.deadline {
				var cancelSlow context.CancelFunc
				slowCtx, cancelSlow = context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancelSlow()
			}
			_, err := c.Health(slowCtx)
			require.Error(t, err, "the attempt is cut at 200 ms")
			require.Equal(t, []string{hostOf(first)}, rec.take())
			requireNextHealthGoesTo(ctx, t, c, rec, first, second, tc.skipped)
		})
	}
}
