package lanes_test

import (
	"context"
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

func hostOf(u string) string { return strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://") }
