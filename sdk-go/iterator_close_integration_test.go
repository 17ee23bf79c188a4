package lanes_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// The client's Close and an iterator holding messages it has not handed over yet (the same
// cases run in sdk-python, test_close_ends_iterators.py, and sdk-js, iterator-close.test.ts).
// Close ends no iteration and closes no connection in use (docs/consuming.md §5), so what the
// iterator holds stays its caller's until the range ends, and the range's release goes out after
// Close too: a fresh client gets those messages at once, not after their 60 s lease.

// freeAtOnce is what a fresh client's pop gets at once (no wait), acked so nothing stays leased.
func freeAtOnce(t *testing.T, b bundle) []string {
	t.Helper()
	c, err := lanes.New(lanes.WithURL(testBrokerURL(t)))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close(b.ctx)) }()
	got, err := c.Queue(b.queue).Batch(10).Autopilot(false).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	ids := make([]string, len(got))
	for i, m := range got {
		ids[i] = m.TransactionID
	}
	if len(got) > 0 {
		_, err = c.Ack(b.ctx, got, lanes.AckCompleted)
		require.NoError(t, err)
	}
	return ids
}

// iterateTwoThen pushes five messages to one partition, ranges over them with batch 5 and calls
// atSecond in the loop body of the second; the range goes on while atSecond returns true.
func iterateTwoThen(t *testing.T, b bundle, ctx context.Context, atSecond func() bool) []string {
	t.Helper()
	pushN(t, b, "p", 5, "m")
	var handed []string
	for m, err := range b.c.Queue(b.queue).Batch(5).LeaseSeconds(60).Autopilot(false).Messages(ctx) {
		require.NoError(t, err)
		handed = append(handed, m.TransactionID)
		if len(handed) == 2 && !atSecond() {
			break
		}
		if len(handed) == 3 {
			break
		}
	}
	return handed
}

func TestITCloseWithAnIteratorHoldingMessages(t *testing.T) {
	t.Parallel()
	t.Run("stopped, then the client closes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithCancel(b.ctx)
		defer cancel()
		handed := iterateTwoThen(t, b, ctx, func() bool {
			cancel()
			require.NoError(t, b.c.Close(b.ctx))
			return true // the range ends on the canceled ctx, after Close
		})
		require.Equal(t, []string{"m-p-0", "m-p-1"}, handed)
		// Both were handled (the body returned), so acked completed; the three not handed over
		// are released as the range ends.
		require.Equal(t, []string{"m-p-2", "m-p-3", "m-p-4"}, freeAtOnce(t, b))
	})
	t.Run("the client closes, then the range goes on and is left", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		held := []string{"unchecked"}
		handed := iterateTwoThen(t, b, b.ctx, func() bool {
			require.NoError(t, b.c.Close(b.ctx))
			held = freeAtOnce(t, b) // the iteration goes on: its messages are still its caller's
			return true
		})
		require.Empty(t, held)
		require.Equal(t, []string{"m-p-0", "m-p-1", "m-p-2"}, handed, "the range stopped at Close")
		require.Equal(t, []string{"m-p-2", "m-p-3", "m-p-4"}, freeAtOnce(t, b))
	})
}
