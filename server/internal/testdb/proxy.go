package testdb

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections to a PostgreSQL server, so a test can make
// chosen connections silently dead while new ones still get through: what a
// database host that loses power, or a network partition, does to a client's
// open connections, and a failover behind the same address to its new ones.
// pg_terminate_backend is no such test: it closes the connection, which the
// client notices at once.
type Proxy struct {
	listener net.Listener
	target   string
	mu       sync.Mutex
	conns    []*proxiedConn
	// slow holds back the server's bytes on connections whose client sent a
	// key, by its value (Slow).
	slow map[string]time.Duration
}

type proxiedConn struct {
	client, server net.Conn
	// sent is the start of what the client sent (enough for its first queries).
	sent []byte
	dead bool
}

// sentMax bounds what a proxied connection remembers of the client's bytes.
const sentMax = 64 << 10

// NewProxy listens on a free local port and forwards to target (host:port);
// everything closes when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{listener: ln, target: target}
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.listener.Addr().String() }

// Sent counts the connections whose client sent text (a query, say).
func (p *Proxy) Sent(text string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.conns {
		if bytes.Contains(c.sent, []byte(text)) {
			n++
		}
	}
	return n
}

// Kill makes the open connections whose client sent text silently dead, and
// says how many: nothing more passes either way, and neither end is closed,
// not even when the other end closes. Connections opened later pass.
func (p *Proxy) Kill(text string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.conns {
		if !c.dead && bytes.Contains(c.sent, []byte(text)) {
			c.dead = true
			n++
		}
	}
	return n
}

// Slow holds back each of the server's answers by delay on the connections
// whose client sent text, open now or later: what a database too busy to
// answer at once looks like to them. A zero delay ends it.
func (p *Proxy) Slow(text string, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.slow == nil {
		p.slow = map[string]time.Duration{}
	}
	p.slow[text] = delay
}

// serverDelay is how long c's server bytes are held back; p.mu held.
func (p *Proxy) serverDelay(c *proxiedConn) time.Duration {
	var delay time.Duration
	for text, d := range p.slow {
		if bytes.Contains(c.sent, []byte(text)) {
			delay = max(delay, d)
		}
	}
	return delay
}

func (p *Proxy) accept() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		server, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		c := &proxiedConn{client: client, server: server}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		go p.forward(c, client, server, true)
		go p.forward(c, server, client, false)
	}
}

// forward copies from to to until from fails; then it closes both ends, unless
// the connection is dead (the test's end closes those).
func (p *Proxy) forward(c *proxiedConn, from, to net.Conn, fromClient bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		p.mu.Lock()
		dead := c.dead
		if !dead && fromClient && len(c.sent) < sentMax {
			c.sent = append(c.sent, buf[:min(n, sentMax-len(c.sent))]...)
		}
		var delay time.Duration
		if !fromClient {
			delay = p.serverDelay(c)
		}
		p.mu.Unlock()
		if n > 0 && delay > 0 {
			time.Sleep(delay)
		}
		if n > 0 && !dead {
			if _, werr := to.Write(buf[:n]); werr != nil && err == nil {
				err = werr
			}
		}
		if err != nil {
			p.mu.Lock()
			dead = c.dead
			p.mu.Unlock()
			if !dead {
				_ = from.Close()
				_ = to.Close()
			}
			return
		}
	}
}

// Close stops the proxy and closes both ends of every connection, dead ones
// included; a test may call it before its clients close (pgxpool gives a
// connection to a silent server 15 s to close).
func (p *Proxy) Close() {
	_ = p.listener.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.client.Close()
		_ = c.server.Close()
	}
}
