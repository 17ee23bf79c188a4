package lanes

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRenewEvery: the renewal interval is the one given, else a third of the builder's lease (at
// most 10 s), else unknown (0), as in the TypeScript and Python SDKs.
func TestRenewEvery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		every time.Duration
		lease int
		want  time.Duration
	}{
		{every: 300 * time.Millisecond, lease: 1, want: 300 * time.Millisecond},
		{every: 0, lease: 0, want: 0},
		{every: 0, lease: 3, want: time.Second},
		{every: 0, lease: 1, want: time.Second / 3},
		{every: 0, lease: 300, want: 10 * time.Second},
	} {
		require.Equal(t, tc.want, renewEvery(tc.every, tc.lease), "every %v lease %d", tc.every, tc.lease)
	}
}

// An unknown lease is renewed at a third of what the first renewal's answer shows.
func TestRenewEveryForExpiry(t *testing.T) {
	t.Parallel()
	popped := time.Now()
	at := func(d time.Duration) *time.Time { e := popped.Add(d); return &e }
	require.Equal(t, time.Second, renewEveryForExpiry(popped, at(3*time.Second)))
	require.Equal(t, 10*time.Second, renewEveryForExpiry(popped, at(300*time.Second)))
	require.Equal(t, 500*time.Millisecond, renewEveryForExpiry(popped, at(time.Second)))
	require.Equal(t, 10*time.Second, renewEveryForExpiry(popped, nil))
	require.Equal(t, 2, renewSeconds(time.Second))
	require.Equal(t, 1, renewSeconds(300*time.Millisecond))
}
