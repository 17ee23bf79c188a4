package lanes

import (
	"context"
	"testing"
)

// closeWhenDone closes c when the test ends, without waiting for a flush (its broker may be a
// fake that refuses everything), so its buffer flushers and idle connections end with the test.
func closeWhenDone(t *testing.T, c *Client) {
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = c.Close(ctx)
	})
}
