package lanes_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// alpnFront is a TLS front to the broker that offers h2 and http/1.1 (ALPN), as an https
// broker's front does: it serves an h2 connection with a reverse proxy, and passes an HTTP/1.1
// one on byte for byte, its half-close included; both reach the broker through a proxy that
// holds each answer 600 ms.
type alpnFront struct {
	ln          net.Listener
	h2, http1   atomic.Int32 // connections by the protocol they negotiated
	h2Conns     chan net.Conn
	h2Server    *http.Server
	slow        *slowAnswerProxy
	serverTLS   *tls.Config
	clientRoots *x509.CertPool
}

func startALPNFront(t *testing.T) *alpnFront {
	t.Helper()
	ts := httptest.NewUnstartedServer(http.NotFoundHandler())
	ts.StartTLS()
	roots := ts.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	certs := ts.TLS.Certificates
	ts.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &alpnFront{ln: ln, h2Conns: make(chan net.Conn), slow: startSlowAnswerProxy(t, 600*time.Millisecond, nil),
		serverTLS:   &tls.Config{Certificates: certs, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12},
		clientRoots: roots}
	target, err := url.Parse(f.slow.url())
	require.NoError(t, err)
	f.h2Server = &http.Server{Handler: httputil.NewSingleHostReverseProxy(target), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		_ = f.h2Server.Serve(chanListener{conns: f.h2Conns, closed: make(chan struct{}), once: new(sync.Once), addr: ln.Addr()})
	}()
	go f.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		_ = f.h2Server.Close()
	})
	return f
}

func (f *alpnFront) url() string { return "https://" + f.ln.Addr().String() }

func (f *alpnFront) accept() {
	for {
		raw, err := f.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			conn := tls.Server(raw, f.serverTLS)
			if err := conn.Handshake(); err != nil {
				_ = raw.Close()
				return
			}
			if conn.ConnectionState().NegotiatedProtocol == "h2" {
				f.h2.Add(1)
				select {
				case f.h2Conns <- conn:
				case <-time.After(5 * time.Second):
					_ = conn.Close()
				}
				return
			}
			f.http1.Add(1)
			up, err := net.Dial("tcp", hostPort(f.slow.url()))
			if err != nil {
				_ = conn.Close()
				return
			}
			go func() {
				_, _ = io.Copy(up, conn)
				_ = up.(closeWriter).CloseWrite()
			}()
			_, _ = io.Copy(conn, up)
			_ = conn.CloseWrite()
		}()
	}
}

// chanListener hands the http.Server the connections that negotiated h2.
type chanListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   *sync.Once
	addr   net.Addr
}

func (l chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l chanListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l chanListener) Addr() net.Addr { return l.addr }

// On an https broker whose front offers h2, the client the SDK built speaks HTTP/2 but for the
// pops of its consume loops and iterators, which go over HTTP/1.1 so that a stop can half-close
// them: an answer the broker already wrote is released, not lost. Over h2 the cut canceled the
// pop, and that answer's message stayed leased for the whole lease.
func TestITLoopPopsOfAnHTTPSClientGoOverHTTP1AndAreCutByHalfClose(t *testing.T) {
	t.Parallel()
	front := startALPNFront(t)
	for _, stop := range []string{"Stop", "StopAndCancel"} {
		t.Run(stop, func(t *testing.T) {
			var c *lanes.Client
			stopWithAnAnswerOnItsWayOn(t, func() *lanes.Client {
				var err error
				c, err = lanes.New(lanes.WithURL(front.url()))
				require.NoError(t, err)
				lanes.TrustRootsForTest(c, front.clientRoots)
				closeWhenDone(t, c)
				return c
			}, func(b bundle, c *lanes.Client, handled func(*lanes.Message)) func() {
				cons, err := c.Queue(b.queue).LeaseSeconds(60).Timeout(20*time.Second).Autopilot(false).
					Consume(b.ctx, func(_ context.Context, m *lanes.Message) error {
						handled(m)
						return nil
					})
				require.NoError(t, err)
				return func() {
					if stop == "Stop" {
						require.NoError(t, cons.Stop(b.ctx))
					} else {
						require.NoError(t, cons.StopAndCancel(b.ctx))
					}
				}
			})
			h2Before := front.h2.Load()
			_, err := c.Health(context.Background())
			require.NoError(t, err)
			require.Positive(t, front.h2.Load(), "the client's other calls speak HTTP/2")
			require.LessOrEqual(t, front.h2.Load(), h2Before+1)
		})
	}
	require.Positive(t, front.http1.Load(), "the loop's pops speak HTTP/1.1")
}
