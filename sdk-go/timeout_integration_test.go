package lanes_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// deadlineRecorder notes the deadline of each attempt's context, as net/http would cut at it.
type deadlineRecorder struct {
	mu        sync.Mutex
	deadlines []time.Duration // 0: none
}

func (d *deadlineRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var left time.Duration
	if dl, ok := req.Context().Deadline(); ok {
		left = time.Until(dl)
	}
	d.mu.Lock()
	d.deadlines = append(d.deadlines, left)
	d.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func (d *deadlineRecorder) take() []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.deadlines
	d.deadlines = nil
	return out
}

// A per-attempt timeout of 0 sets none (docs/retries.md §1): an attempt carries no deadline of
// the SDK's, only the caller's; the default bounds it at 30 s.
func TestITTimeoutZeroSetsNoPerAttemptTimeout(t *testing.T) {
	t.Parallel()
	queue := fmt.Sprintf("sdkgo-timeout0-%d", time.Now().UnixNano())
	push := func(ctx context.Context, opts ...lanes.Option) []time.Duration {
		rec := &deadlineRecorder{}
		c, err := lanes.New(append([]lanes.Option{lanes.WithURL(testBrokerURL(t)), lanes.WithHTTPClient(&http.Client{Transport: rec})}, opts...)...)
		require.NoError(t, err)
		closeWhenDone(t, c)
		_, err = c.Queue(queue).Push(ctx, lanes.Data(1))
		require.NoError(t, err)
		return rec.take()
	}

	got := push(context.Background())
	require.Len(t, got, 1)
	require.InDelta(t, 30*time.Second, got[0], float64(5*time.Second), "the default")

	require.Equal(t, []time.Duration{0}, push(context.Background(), lanes.WithTimeout(0)))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got = push(ctx, lanes.WithTimeout(0))
	require.Len(t, got, 1)
	require.InDelta(t, time.Minute, got[0], float64(5*time.Second), "the caller's deadline alone")
}

func TestTimeoutNegativeIsRefused(t *testing.T) {
	t.Parallel()
	_, err := lanes.New(lanes.WithURL("http://127.0.0.1:1"), lanes.WithTimeout(-time.Second))
	require.ErrorContains(t, err, "WithTimeout must not be negative")
}
