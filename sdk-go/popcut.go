package lanes

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"time"
)

// popCut ends a consume loop's pop at a soft stop without losing an answer the broker already
// wrote (docs/consuming.md §5). Canceling the pop closes its connection: the broker gives back a
// claim whose client left before the answer was written, but an answer written just before the
// cut is lost with the connection, and its messages stay leased until the lease expires. A
// half-close (CloseWrite) tells the broker the client left as well (it answers 499 at once and
// claims nothing), while an answer it already wrote still arrives whole, for the loop to release
// with `retry`.
//
// The cut follows the pop's current attempt: the transport attaches the attempt's connection
// when it has it and detaches it at the answer's first byte, before net/http may put it back in
// its pool (an answer on its way needs no cut). Without a connection that can be half-closed
// (none yet, between attempts, HTTP/2, a transport that reports none) the cut cancels the pop,
// as a stop did before.
type popCut struct {
	ctx    context.Context // the pop's; carries the cut to the transport
	cancel context.CancelFunc

	mu        sync.Mutex
	fired     bool
	conn      closeWriter // the attempt's connection, until its answer's first byte
	answering bool        // the attempt's answer has begun: the cut leaves it alone
	grace     *time.Timer
}

// popCutGrace bounds the wait for the answer to a half-closed pop: a broker that answers
// nothing within it (hung, or a proxy that ignores the half-close) has the pop canceled.
const popCutGrace = 2 * time.Second

type closeWriter interface{ CloseWrite() error }

type popCutKey struct{}

// newPopCut returns a cut whose ctx, derived from parent, is the one to pop on.
func newPopCut(parent context.Context) *popCut {
	cut := &popCut{}
	ctx, cancel := context.WithCancel(parent)
	cut.ctx, cut.cancel = context.WithValue(ctx, popCutKey{}, cut), cancel
	return cut
}

func popCutOf(ctx context.Context) *popCut {
	cut, _ := ctx.Value(popCutKey{}).(*popCut)
	return cut
}

// attach records the connection an attempt got (httptrace GotConn), nil when it cannot be
// half-closed (halfClosable). After the cut fired, the attempt is one net/http makes on a new
// connection for a request it could not write on the half-closed one: it is canceled before it
// is sent.
func (p *popCut) attach(conn closeWriter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fired {
		p.cancel()
		return
	}
	p.conn, p.answering = conn, false
}

// answerBegun detaches the attempt's connection (httptrace GotFirstResponseByte).
func (p *popCut) answerBegun() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conn, p.answering = nil, true
}

// attemptEnded forgets the attempt once its answer was read or it failed.
func (p *popCut) attemptEnded() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conn, p.answering = nil, false
}

// hasFired reports whether the cut fired: the pop makes no further attempt.
func (p *popCut) hasFired() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fired
}

// fire cuts the pop: half-closes the attempt's connection, leaves an answer under way alone,
// and otherwise cancels.
func (p *popCut) fire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fired {
		return
	}
	p.fired = true
	switch {
	case p.answering:
	case p.conn != nil && p.conn.CloseWrite() == nil:
		p.grace = time.AfterFunc(popCutGrace, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if !p.answering {
				p.cancel()
			}
		})
	default:
		p.cancel()
	}
}

// done ends the cut once the pop returned.
func (p *popCut) done() {
	p.mu.Lock()
	if p.grace != nil {
		p.grace.Stop()
	}
	p.mu.Unlock()
	p.cancel()
}

// halfClosable is conn when it carries one HTTP/1.1 exchange at a time and can be half-closed;
// nil for an HTTP/2 connection, whose other streams a half-close would end too. Over TLS, ALPN
// tells; a plain TCP connection is HTTP/1.1 only when its transport speaks nothing else
// (plainHTTP1).
func halfClosable(conn net.Conn, plainHTTP1 bool) closeWriter {
	switch c := conn.(type) {
	case *net.TCPConn:
		if !plainHTTP1 {
			return nil
		}
		return c
	case *tls.Conn:
		if c.ConnectionState().NegotiatedProtocol == "h2" {
			return nil
		}
		return c
	}
	return nil
}
