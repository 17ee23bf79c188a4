package lanes_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// TestMain fails the run if a goroutine is left once every test has ended: a consume loop,
// lease renewal or buffer flusher still running after its consumer stopped or its client closed.
// Keep-alive connections are the transport's, not the SDK's (a test's own WithHTTPClient
// transport keeps them); Client.Close ending those of the SDK's transport is checked by the
// TestITNoGoroutineLeft tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// closeWhenDone closes c when the test ends, without waiting for a flush, so its buffer
// flushers and idle connections end with the test.
func closeWhenDone(t *testing.T, c *lanes.Client) {
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = c.Close(ctx)
	})
}
