package lanes_test

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// unansweredListener is a listening socket whose backlog is full, so a new connect to it waits
// without an answer, as to a host that drops packets. It returns the URL.
func unansweredListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	raw, err := ln.(*net.TCPListener).SyscallConn()
	require.NoError(t, err)
	require.NoError(t, raw.Control(func(fd uintptr) { require.NoError(t, syscall.Listen(int(fd), 0)) }))
	addr := ln.Addr().String()
	// Fill the backlog (Linux keeps backlog+1 connections waiting for accept).
	for i := 0; i < 4; i++ {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			t.Cleanup(func() { _ = c.Close() })
		}
	}
	c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
	if err == nil {
		_ = c.Close()
		t.Skip("this system answers a connect to a full backlog; no unanswered connect to test with")
	}
	return "http://" + addr
}

// A per-attempt timeout that ends while connecting proves the request never left, as a refused
// connect does (docs/retries.md §5): a KV incr, which is not idempotent, goes on to the next
// broker URL and lands once, instead of ending in OutcomeUnknownError.
func TestConnectTimeoutRetriesAWriteThatIsNotIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, err := lanes.New(lanes.WithURL(unansweredListener(t), testBrokerURL(t)), lanes.WithTimeout(500*time.Millisecond))
	require.NoError(t, err)
	closeWhenDone(t, c)
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	started := time.Now()
	res, err := c.KV(b.queue).Incr(ctx, "hits", 1, lanes.Forever, lanes.KVIncrOpts{})
	require.NoError(t, err)
	require.True(t, res.Applied != nil && *res.Applied)
	require.Less(t, time.Since(started), 2*time.Second)
	got, err := b.c.KV(b.queue).Get(ctx, "hits")
	require.NoError(t, err)
	require.JSONEq(t, "1", string(got.Value))
}
