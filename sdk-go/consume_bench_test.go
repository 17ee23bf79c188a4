package lanes_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// BenchmarkITConsumeLoop drains b.N messages, pushed beforehand over 8 partitions, through a
// consume loop (pop 100, 4 workers, a handler that does nothing) against the broker at
// LANES_TEST_URL: what the loop's own pops and acks cost. It reports msgs/s and the ack calls
// the loop made. Run it with a fixed count, e.g. -bench ConsumeLoop -benchtime 20000x.
func BenchmarkITConsumeLoop(b *testing.B) {
	url := os.Getenv("LANES_TEST_URL")
	if url == "" {
		b.Skip("LANES_TEST_URL is not set")
	}
	const partitions = 8
	var ackCalls atomic.Int64
	c, err := lanes.New(lanes.WithURL(url), lanes.WithHTTPClient(countingClient("/api/v1/ack", &ackCalls)))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	ctx := context.Background()
	queue := fmt.Sprintf("sdkgo-bench-consume-%d", time.Now().UnixNano())
	items := make([]lanes.Item, 0, 1000)
	for i := 0; i < b.N; i += len(items) {
		items = items[:0]
		for j := i; j < min(i+1000, b.N); j++ {
			items = append(items, lanes.Data(j))
		}
		if _, err := c.Queue(queue).Partition(fmt.Sprintf("p%d", i/1000%partitions)).Push(ctx, items...); err != nil {
			b.Fatal(err)
		}
	}
	ackCalls.Store(0)
	var handled atomic.Int64
	q := c.Queue(queue).Batch(100).Partitions(1).Concurrency(4).Wait(false).Limit(b.N)
	b.ResetTimer()
	start := time.Now()
	err = q.Run(ctx, func(context.Context, *lanes.Message) error { handled.Add(1); return nil })
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if got := handled.Load(); got != int64(b.N) {
		b.Fatalf("handled %d of %d", got, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(ackCalls.Load()), "ack-calls")
}

// countingClient is an HTTP client that counts the requests whose path starts with prefix.
func countingClient(prefix string, n *atomic.Int64) *http.Client {
	return &http.Client{Transport: pathCounter{prefix: prefix, n: n}}
}

type pathCounter struct {
	prefix string
	n      *atomic.Int64
}

func (p pathCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasPrefix(r.URL.Path, p.prefix) {
		p.n.Add(1)
	}
	return http.DefaultTransport.RoundTrip(r)
}
