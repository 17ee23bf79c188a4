package lanes_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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

// slowAnswerProxy is a TCP proxy to the broker that passes each answer's bytes on `delay` after
// the broker wrote them, so an answer the broker sent can still be on its way when the client
// acts, and passes a client's half-close on to the broker at once.
type slowAnswerProxy struct {
	ln  net.Listener
	tls bool // clients speak TLS to the proxy, which speaks plain HTTP to the broker
	// deaf, when set, does not pass a client's half-close on: the broker never hears of it.
	deaf   atomic.Bool
	broker string
	delay  time.Duration
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startSlowAnswerProxy(t *testing.T, delay time.Duration, tlsConfig *tls.Config) *slowAnswerProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	p := &slowAnswerProxy{ln: ln, tls: tlsConfig != nil, broker: hostPort(testBrokerURL(t)), delay: delay}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *slowAnswerProxy) url() string {
	if p.tls {
		return "https://" + p.ln.Addr().String()
	}
	return "http://" + p.ln.Addr().String()
}

type closeWriter interface{ CloseWrite() error }

// testTLS is a server config with httptest's certificate (for 127.0.0.1) and a client trusting
// it, which speaks HTTP/1.1: no ALPN is offered.
func testTLS(t *testing.T) (*tls.Config, *http.Client) {
	t.Helper()
	ts := httptest.NewUnstartedServer(http.NotFoundHandler())
	ts.StartTLS()
	defer ts.Close()
	roots := ts.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	server := &tls.Config{Certificates: ts.TLS.Certificates, MinVersion: tls.VersionTLS12}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	t.Cleanup(client.CloseIdleConnections)
	return server, client
}

func (p *slowAnswerProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *slowAnswerProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		broker, err := net.Dial("tcp", p.broker)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, broker)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { // requests, and the client's half-close, at once
			defer p.wg.Done()
			_, _ = io.Copy(broker, client)
			if !p.deaf.Load() {
				_ = broker.(closeWriter).CloseWrite()
			}
		}()
		go p.answers(broker, client)
	}
}

type chunk struct {
	at   time.Time
	data []byte // nil: the broker closed its side
}

func (p *slowAnswerProxy) answers(broker, client net.Conn) {
	defer p.wg.Done()
	chunks := make(chan chunk, 1024)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for c := range chunks {
			time.Sleep(time.Until(c.at))
			if c.data == nil {
				_ = client.(closeWriter).CloseWrite()
				return
			}
			if _, err := client.Write(c.data); err != nil {
				return
			}
		}
	}()
	defer close(chunks)
	buf := make([]byte, 64<<10)
	for {
		n, err := broker.Read(buf)
		if n > 0 {
			chunks <- chunk{at: time.Now().Add(p.delay), data: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			chunks <- chunk{at: time.Now().Add(p.delay)}
			return
		}
	}
}

func hostPort(url string) string {
	for _, prefix := range []string{"http://", "https://"} {
		if len(url) > len(prefix) && url[:len(prefix)] == prefix {
			return url[len(prefix):]
		}
	}
	return url
}

// A consumer soft-stopped while its long poll's answer is on its way (the broker wrote it, the
// proxy holds it 600 ms) gives the message back: a fresh pop gets it at once. Before, the stop
// canceled the pop, the answer was lost with its connection, and the message stayed leased for
// the whole 60 s lease. The same over TLS (HTTP/1.1) on a caller's WithHTTPClient.
func TestITSoftStopReleasesAnAnswerTheBrokerAlreadyWrote(t *testing.T) {
	t.Parallel()
	t.Run("tcp", func(t *testing.T) {
		t.Parallel()
		proxy := startSlowAnswerProxy(t, 600*time.Millisecond, nil)
		softStopWithAnAnswerOnItsWay(t, proxy.url())
	})
	t.Run("tls on a caller's http client", func(t *testing.T) {
		t.Parallel()
		server, client := testTLS(t)
		proxy := startSlowAnswerProxy(t, 600*time.Millisecond, server)
		softStopWithAnAnswerOnItsWay(t, proxy.url(), lanes.WithHTTPClient(client))
	})
}

func softStopWithAnAnswerOnItsWay(t *testing.T, url string, opts ...lanes.Option) {
	b := setup(t)
	c, err := lanes.New(append([]lanes.Option{lanes.WithURL(url)}, opts...)...)
	require.NoError(t, err)
	closeWhenDone(t, c)
	var mu sync.Mutex
	var handled []string
	cons, err := c.Queue(b.queue).LeaseSeconds(60).Timeout(20*time.Second).Autopilot(false).
		Consume(b.ctx, func(_ context.Context, m *lanes.Message) error {
			mu.Lock()
			handled = append(handled, m.TransactionID)
			mu.Unlock()
			return nil
		})
	require.NoError(t, err)
	time.Sleep(time.Second) // the long poll is parked on the broker
	pushN(t, b, "a", 1, "late")
	time.Sleep(200 * time.Millisecond) // the broker wrote the answer; the proxy holds it
	stopped := time.Now()
	require.NoError(t, cons.Stop(b.ctx))
	require.Less(t, time.Since(stopped), 2*time.Second, "the stop waits for the answer on its way, not the long poll")
	mu.Lock()
	require.Empty(t, handled, "a stopped consumer hands nothing over")
	mu.Unlock()

	requireReleasedAtOnce(t, b)
}

// requireReleasedAtOnce fails unless a fresh pop gets the one message at once: the stopped
// consumer released what its cut pop was answered instead of holding it for the lease.
func requireReleasedAtOnce(t *testing.T, b bundle) {
	t.Helper()
	start := time.Now()
	got, err := b.c.Queue(b.queue).Autopilot(false).Timeout(5 * time.Second).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, got, 1, "held by the stopped consumer's pop until its lease expires")
	require.Less(t, time.Since(start), 2*time.Second)
	_, err = b.c.Ack(b.ctx, got, lanes.AckCompleted)
	require.NoError(t, err)
}

// A soft stop whose half-close the broker never hears of (a proxy in between ignores it) cancels
// the pop 2 s later, as a stop did before: it does not wait for the long poll (20 s) to end.
func TestITSoftStopCancelsAHalfClosedPopThatGetsNoAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy := startSlowAnswerProxy(t, 0, nil)
	proxy.deaf.Store(true)
	c, err := lanes.New(lanes.WithURL(proxy.url()))
	require.NoError(t, err)
	closeWhenDone(t, c)
	cons, err := c.Queue(b.queue).LeaseSeconds(60).Timeout(20*time.Second).
		Consume(b.ctx, func(context.Context, *lanes.Message) error { return nil })
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond) // the long poll is parked on the broker
	stopped := time.Now()
	require.NoError(t, cons.Stop(b.ctx))
	took := time.Since(stopped)
	require.GreaterOrEqual(t, took, 1900*time.Millisecond, "the half-closed pop was canceled before its 2 s grace")
	require.Less(t, took, 4*time.Second, "the stop waited for the long poll")
}

// A soft stop of a consumer whose long polls are parked ends them at once, through the
// half-close (the broker answers 499 and claims nothing), and the client's next call goes on: a
// half-closed connection is not reused.
func TestITSoftStopOfParkedPopsEndsAtOnceAndLeavesTheClientUsable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy := startSlowAnswerProxy(t, 0, nil)
	c, err := lanes.New(lanes.WithURL(proxy.url()), lanes.WithRetryAttempts(0))
	require.NoError(t, err)
	closeWhenDone(t, c)
	other := bundle{c: c, queue: b.queue + "-other", ctx: b.ctx}
	for i := range 5 {
		cons, err := c.Queue(b.queue).Concurrency(3).LeaseSeconds(60).Timeout(20*time.Second).
			Consume(b.ctx, func(context.Context, *lanes.Message) error {
				return errors.New("nothing was pushed to this queue")
			})
		require.NoError(t, err)
		time.Sleep(300 * time.Millisecond) // the pops are parked on the broker
		stopped := time.Now()
		require.NoError(t, cons.Stop(b.ctx))
		require.Less(t, time.Since(stopped), time.Second)
		require.NoError(t, cons.Err())
		pushN(t, other, "a", 1, fmt.Sprintf("after-stop-%d", i))
	}
	got, err := b.c.Queue(other.queue).Batch(10).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, got, 5)
}

// Consumers started and soft-stopped over and over while messages flow, on the client that also
// pushes them: a stop half-closes pops that are parked, answering or just answered, and no push
// on the same client ever meets a half-closed connection (each push is made once, no retries).
// Every message is handled or released: none is left leased.
func TestITSoftStopsWhileMessagesFlowLeaveTheClientsConnectionsSound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, err := lanes.New(lanes.WithURL(testBrokerURL(t)), lanes.WithRetryAttempts(0))
	require.NoError(t, err)
	closeWhenDone(t, c)
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	var pushed, handled sync.Map
	pushErr := make(chan error, 1)
	var pushers sync.WaitGroup
	pushers.Add(1)
	go func() {
		defer pushers.Done()
		for i := 0; ctx.Err() == nil; i++ {
			id := fmt.Sprintf("flow-%d", i)
			if _, err := c.Queue(b.queue).Partition(fmt.Sprint(i%4)).Push(ctx, lanes.Item{Data: i, TransactionID: id}); err != nil {
				if ctx.Err() == nil {
					pushErr <- err
				}
				return
			}
			pushed.Store(id, true)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	for range 20 {
		cons, err := c.Queue(b.queue).Concurrency(3).LeaseSeconds(60).Timeout(5*time.Second).
			Consume(b.ctx, func(_ context.Context, m *lanes.Message) error {
				handled.Store(m.TransactionID, true)
				return nil
			})
		require.NoError(t, err)
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, cons.Stop(b.ctx))
		require.NoError(t, cons.Err())
	}
	cancel()
	pushers.Wait()
	select {
	case err := <-pushErr:
		t.Fatalf("a push on the client of the stopped consumers failed: %v", err)
	default:
	}
	// What no consumer handled was released: a last consumer gets all of it at once.
	var final sync.Map
	rest, err := b.c.Queue(b.queue).Batch(100).Wait(false).IdleTimeout(time.Second).
		Consume(b.ctx, func(_ context.Context, m *lanes.Message) error {
			final.Store(m.TransactionID, true)
			return nil
		})
	require.NoError(t, err)
	<-rest.Done()
	var leased []string
	pushed.Range(func(id, _ any) bool {
		_, wasHandled := handled.Load(id)
		_, isFinal := final.Load(id)
		if !wasHandled && !isFinal {
			leased = append(leased, id.(string))
		}
		return true
	})
	require.Empty(t, leased, "messages left leased by a stopped consumer")
}

// loggingTransport stands for a caller's wrapper of its transport (tracing, logging, metrics):
// the SDK cannot see what the wrapped transport speaks.
type loggingTransport struct{ base http.RoundTripper }

func (l loggingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return l.base.RoundTrip(r)
}

// A caller's wrapped transport speaking HTTP/2 over plain TCP (h2c, to a front that speaks it)
// carries the consumer's pop and the caller's own calls on one connection. A soft stop
// half-closed it as an HTTP/1.1 one (only an *http.Transport set to unencrypted HTTP/2 was told
// apart): the front saw the end of the connection and closed it, and the caller's own long poll
// on it failed with an unexpected EOF. The pop is canceled instead: the other call goes on.
func TestITSoftStopLeavesTheOtherCallsOfAWrappedH2CConnectionAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target, err := url.Parse(testBrokerURL(t))
	require.NoError(t, err)
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	front := &http.Server{Handler: httputil.NewSingleHostReverseProxy(target), Protocols: &h2c}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = front.Serve(ln) }()
	t.Cleanup(func() { _ = front.Close() })
	base := &http.Transport{Protocols: &h2c}
	t.Cleanup(base.CloseIdleConnections)
	c, err := lanes.New(lanes.WithURL("http://"+ln.Addr().String()), lanes.WithRetryAttempts(0),
		lanes.WithHTTPClient(&http.Client{Transport: loggingTransport{base}}))
	require.NoError(t, err)
	closeWhenDone(t, c)
	own := make(chan error, 1)
	go func() {
		_, err := c.Queue(b.queue + "-own").Wait(true).Timeout(3 * time.Second).Pop(b.ctx)
		own <- err
	}()
	cons, err := c.Queue(b.queue).Timeout(20*time.Second).
		Consume(b.ctx, func(context.Context, *lanes.Message) error { return nil })
	require.NoError(t, err)
	time.Sleep(500 * time.Millisecond) // both long polls are parked on the broker
	stopped := time.Now()
	require.NoError(t, cons.Stop(b.ctx))
	require.Less(t, time.Since(stopped), time.Second)
	require.NoError(t, <-own, "the caller's own long poll on the same connection")
}
