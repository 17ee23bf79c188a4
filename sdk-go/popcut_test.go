package lanes

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// A soft stop half-closes only a connection that carries one call at a time: TCP and TLS
// HTTP/1.1. An HTTP/2 connection (TLS with ALPN h2, or plain TCP from a transport that may speak
// unencrypted HTTP/2) carries other calls too, which a half-close would end: its pop is canceled
// instead.
func TestHalfClosableOnlyForHTTP1Connections(t *testing.T) {
	ts := httptest.NewUnstartedServer(http.NotFoundHandler())
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	for _, tc := range []struct {
		proto    string
		closable bool
	}{{"h2", false}, {"http/1.1", true}} {
		cfg := ts.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		cfg.NextProtos = []string{tc.proto}
		conn, err := tls.Dial("tcp", ts.Listener.Addr().String(), cfg)
		require.NoError(t, err)
		require.Equal(t, tc.proto == "h2", conn.ConnectionState().NegotiatedProtocol == "h2")
		require.Equal(t, tc.closable, halfClosable(conn, false) != nil, tc.proto)
		_ = conn.Close()
	}

	tcp, err := net.Dial("tcp", ts.Listener.Addr().String())
	require.NoError(t, err)
	require.NotNil(t, halfClosable(tcp, true))
	require.Nil(t, halfClosable(tcp, false), "plain TCP from a transport that may speak HTTP/2")
	_ = tcp.Close()
	pipe, other := net.Pipe()
	require.Nil(t, halfClosable(pipe, true), "a connection that cannot be half-closed")
	_, _ = pipe.Close(), other.Close()

	h2c := &http.Transport{Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	require.False(t, plainHTTP1Only(h2c))
	require.True(t, plainHTTP1Only(&http.Transport{}))
	require.True(t, plainHTTP1Only(http.DefaultTransport.(*http.Transport).Clone()))
	require.False(t, plainHTTP1Only(wrapped{h2c}), "a wrapper may speak anything")
}

type wrapped struct{ http.RoundTripper }
