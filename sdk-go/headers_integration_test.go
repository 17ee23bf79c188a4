package lanes_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// headerRecorder is a real HTTP server in front of the broker that keeps the headers each
// request arrived with, every line of every name (the test reads what went over the wire).
type headerRecorder struct {
	mu       sync.Mutex
	received []http.Header
}

func (h *headerRecorder) start(t *testing.T, broker string) string {
	t.Helper()
	target, err := url.Parse(broker)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.received = append(h.received, r.Header.Clone())
		h.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A header named in two letter cases, or also set by the SDK, goes out once, as TS and Python
// send it: the caller's value replaces the SDK's Accept, Content-Type and User-Agent, the last
// WithHeader of a name wins, and the bearer token and X-Retry-Count stay the SDK's. WithHeader
// added, so two calls sent two lines the broker might read either of.
func TestITAHeaderInTwoCasesOrAlsoSetByTheSDKGoesOutOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &headerRecorder{}
	c, err := lanes.New(lanes.WithURL(rec.start(t, testBrokerURL(t))), lanes.WithBearerToken("the-token"),
		lanes.WithHeader("Accept", "text/plain"),
		lanes.WithHeader("accept", "application/json"),
		lanes.WithHeader("CONTENT-TYPE", "application/json; charset=utf-8"),
		lanes.WithHeader("user-agent", "billing/2.1"),
		lanes.WithHeader("AUTHORIZATION", "Bearer the-callers"),
		lanes.WithHeader("x-retry-count", "9"),
		lanes.WithHeader("X-Team", "a"),
		lanes.WithHeader("x-team", "b"),
	)
	require.NoError(t, err)
	closeWhenDone(t, c)
	_, err = c.Queue(b.queue).Push(b.ctx, lanes.Data(1))
	require.NoError(t, err)
	_, err = c.Health(b.ctx)
	require.NoError(t, err)

	want := map[string][]string{
		"Accept":        {"application/json"},
		"Content-Type":  {"application/json; charset=utf-8"},
		"User-Agent":    {"billing/2.1"},
		"Authorization": {"Bearer the-token"},
		"X-Retry-Count": {"0"},
		"X-Team":        {"b"},
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.received, 2, "a push, then a GET")
	for i, h := range rec.received {
		got := map[string][]string{}
		for name := range want {
			got[name] = h.Values(name)
		}
		require.Equal(t, want, got, "request %d", i+1)
	}
}
