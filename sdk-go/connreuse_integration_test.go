package lanes_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// countingForwarder passes TCP connections to target and counts them.
func countingForwarder(t *testing.T, target string) (addr string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted = &atomic.Int64{}
	var open sync.WaitGroup
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			open.Add(2)
			pipe := func(to, from net.Conn) {
				defer open.Done()
				_, _ = io.Copy(to, from)
				_ = to.Close()
				_ = from.Close()
			}
			go pipe(server, client)
			go pipe(client, server)
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); open.Wait() })
	return ln.Addr().String(), accepted
}

// Consume loops keep their connections to the broker: 8 consumers popping
// batches of 10 and acking them open about a connection for each one's pops
// and one for its acks, not one per call that found the pool's 2 idle places
// per host (net/http's default) taken, as the pop connections all went idle
// while their consumers acked, and the ack connections while they popped.
func TestITConsumeLoopsReuseTheirConnections(t *testing.T) {
	t.Parallel()
	broker, err := url.Parse(testBrokerURL(t))
	require.NoError(t, err)
	addr, accepted := countingForwarder(t, broker.Host)
	c, err := lanes.New(lanes.WithURL("http://" + addr))
	require.NoError(t, err)
	closeWhenDone(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	queue := fmt.Sprintf("sdkgo-conn-reuse-%d", time.Now().UnixNano())
	const consumers, partitions, perPartition = 8, 8, 200
	for p := range partitions {
		items := make([]lanes.Item, perPartition)
		for i := range items {
			items[i] = lanes.Data(i)
		}
		_, err := c.Queue(queue).Partition(fmt.Sprint("p", p)).Push(ctx, items...)
		require.NoError(t, err)
	}
	before := accepted.Load()
	var handled atomic.Int64
	done := make(chan struct{})
	running := make([]*lanes.Consumer, consumers)
	for i := range running {
		running[i], err = c.Queue(queue).Batch(10).Partitions(1).Consume(ctx, func(context.Context, *lanes.Message) error {
			if handled.Add(1) == partitions*perPartition {
				close(done)
			}
			return nil
		})
		require.NoError(t, err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("handled %d of %d messages", handled.Load(), partitions*perPartition)
	}
	// About one for each consumer's pops and one for its acks, plus the dials net/http
	// races against a connection about to go idle (14–15 here; 60 and more with 2 idle
	// places per host).
	opened := accepted.Load() - before
	t.Logf("%d consumers handling %d messages in batches of 10 opened %d connections", consumers, partitions*perPartition, opened)
	require.LessOrEqual(t, opened, int64(2*consumers+4),
		"%d consumers handling %d messages in batches of 10 opened %d connections", consumers, partitions*perPartition, opened)
	for _, consumer := range running {
		require.NoError(t, consumer.Stop(ctx))
	}
}
