package lanes_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// TestNewRefusesBrokerURLsThatAreNotHTTP: the README promises that New refuses a URL without
// http:// or https://, as the TypeScript client does, rather than a client whose every call fails.
func TestNewRefusesBrokerURLsThatAreNotHTTP(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"broker:6632", "localhost:6632", "127.0.0.1:6632", "//broker:6632", "ftp://broker:6632", "ws://broker:6632", "http://"} {
		c, err := lanes.New(lanes.WithURL(u))
		require.ErrorContains(t, err, "bad broker URL", "%q", u)
		require.Nil(t, c, "%q", u)
	}
	for _, u := range []string{"http://broker:6632", "https://broker", "HTTP://broker:6632/"} {
		c, err := lanes.New(lanes.WithURL(u))
		require.NoError(t, err, "%q", u)
		require.NoError(t, c.Close(t.Context()))
	}
}
