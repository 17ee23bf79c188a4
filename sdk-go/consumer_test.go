package lanes

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRenewEvery: the renewal interval is the one given, else a third of the builder's lease (at
// most 10 s), else 10 s, as in the TypeScript and Python SDKs.
func TestRenewEvery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		every time.Duration
		lease int
		want  time.Duration
	}{
		{every: 300 * time.Millisecond, lease: 1, want: 300 * time.Millisecond},
		{every: 0, lease: 0, want: 10 * time.Second},
		{every: 0, lease: 3, want: time.Second},
		{every: 0, lease: 1, want: time.Second / 3},
		{every: 0, lease: 300, want: 10 * time.Second},
	} {
		require.Equal(t, tc.want, renewEvery(tc.every, tc.lease), "every %v lease %d", tc.every, tc.lease)
	}
}
