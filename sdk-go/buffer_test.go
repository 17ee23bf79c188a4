package lanes

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A failed buffer flush is dropped only on 400, 403 and 413 (docs/sdk-design.md §2), as in the
// TypeScript and Python buffers; every other status keeps the batch and sends it again.
func TestBufferDropsOnlyOn400403413(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		drop   bool
	}{
		{400, true}, {403, true}, {413, true},
		{401, false}, {404, false}, {409, false}, {422, false}, {501, false},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			t.Parallel()
			c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if n == 1 {
					writeJSON(w, tc.status, `{"error":"no","code":"scripted"}`)
					return
				}
				writeJSON(w, 201, pushOK)
			}, WithRetryAttempts(0))
			var mu sync.Mutex
			var reported []error
			// FlushInterval keeps the background flush out of the way: only Flush sends.
			buf := c.Queue("q").Buffer(BufferOptions{FlushInterval: time.Hour, RetryDelay: time.Millisecond,
				OnError: func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }})
			require.NoError(t, buf.Push(context.Background(), Item{Data: 1, TransactionID: "tx-1"}))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, buf.Flush(ctx))
			require.Zero(t, buf.Len())

			mu.Lock()
			defer mu.Unlock()
			require.Len(t, reported, 1)
			var ae *APIError
			require.True(t, errors.As(reported[0], &ae))
			require.Equal(t, tc.status, ae.Status)
			if tc.drop {
				require.Equal(t, 1, fb.count(), "dropped: sent once")
				return
			}
			require.Equal(t, 2, fb.count(), "kept: sent again")
			fb.mu.Lock()
			defer fb.mu.Unlock()
			require.Equal(t, fb.bodies[0], fb.bodies[1], "the retry resends the same items (same transaction ids)")
		})
	}
}
