package admission

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// BodyClass is the RejectedError class of a request turned away because the
// request bodies already held fill the byte budget.
const BodyClass = "body"

// ByteBudget bounds the bytes of request bodies the broker holds at once,
// from the moment a body starts to arrive until its request ends, and
// optionally the bytes any one client holds of it (LimitPerClient), so that
// one slow sender cannot take the room of every other. A body takes its room
// in steps as it arrives (BodyRoom.Grow); one that finds no room waits up to
// maxWait for room to be given back, then is rejected. Waiting bodies are
// served in arrival order (see grantWaiters).
type ByteBudget struct {
	limit    int64
	maxWait  time.Duration
	held     atomic.Int64 // written under mu; Stats reads it without
	waiting  atomic.Int64 // len(queue), for Stats
	rejected atomic.Int64

	mu sync.Mutex
	// reading is the part of held taken by bodies not yet read whole.
	reading int64
	// queue is the bodies waiting for room, in arrival order.
	queue []*bodyWaiter

	clientShare int64                 // the most one client may hold; 0 is no cap
	clients     map[string]clientRoom // only clients holding bytes now
}

// clientRoom is what one client holds, and how much of it is of bodies still
// being read.
type clientRoom struct{ held, reading int64 }

// bodyWaiter is a body waiting for n more bytes; granted (under mu) once it
// has them, and then ready is closed. It holds a copy of the body's room, so
// that a BodyRoom that never waits stays off the heap; the body adds n to its
// own once granted.
type bodyWaiter struct {
	body    BodyRoom
	n       int64
	granted bool
	ready   chan struct{}
}

// NewByteBudget builds a budget of limit bytes; a non-positive maxWait waits one second.
func NewByteBudget(limit int64, maxWait time.Duration) *ByteBudget {
	if maxWait <= 0 {
		maxWait = time.Second
	}
	return &ByteBudget{limit: limit, maxWait: maxWait}
}

// LimitPerClient caps the bytes one client key may hold at share (a positive
// share; at least the largest body, or that body could never be received).
func (b *ByteBudget) LimitPerClient(share int64) *ByteBudget {
	b.clientShare = share
	b.clients = map[string]clientRoom{}
	return b
}

// BodyRoom is the room one request body holds in a ByteBudget, from its first
// byte until its request ends. Its methods are not safe for concurrent use.
type BodyRoom struct {
	budget *ByteBudget
	client string
	size   int64 // the most the body may take: its declared length, else the size cap
	held   int64
	read   bool // read whole: its room no longer counts as a body being read
}

// Body starts the room of a body of at most size bytes sent by client.
func (b *ByteBudget) Body(client string, size int64) BodyRoom {
	return BodyRoom{budget: b, client: client, size: size}
}

// Held is the room the body holds now.
func (r *BodyRoom) Held() int64 { return r.held }

// Grow takes n more bytes for the body (its held room plus n at most its
// size), waiting up to maxWait for room. It takes them only while the rest of
// the body, n included, fits beside the room of the other bodies being read,
// in the budget and in the client's share. The body let in last can then
// always be read to its end, waiting at most for requests already read to
// give their room back: taking room only as bytes arrived let every body of
// a burst hold a part of itself and wait for the others' room until all were
// refused. A body that starts while others wait takes its place behind them
// (grantWaiters). If ctx ends first, the body gives back all its room at once.
func (r *BodyRoom) Grow(ctx context.Context, n int64) error {
	if r.TryGrow(n) {
		return nil
	}
	b := r.budget
	if r.size > b.limit || b.clientShare > 0 && r.size > b.clientShare {
		return b.reject()
	}
	b.mu.Lock()
	w := &bodyWaiter{body: *r, n: n, ready: make(chan struct{})}
	b.queue = append(b.queue, w)
	b.grantWaiters()
	granted := w.granted // the bodies ahead, if any, were all kept by their own clients
	b.mu.Unlock()
	if granted {
		r.held += n
		return nil
	}
	timer := time.NewTimer(b.maxWait)
	defer timer.Stop()
	timedOut := false
	select {
	case <-w.ready:
		r.held += n
		return nil
	case <-timer.C:
		timedOut = true
	case <-ctx.Done():
	}
	b.mu.Lock()
	if w.granted { // room came as the wait ended: keep it, the caller releases it
		b.mu.Unlock()
		r.held += n
		return nil
	}
	b.queue = slices.DeleteFunc(b.queue, func(o *bodyWaiter) bool { return o == w })
	b.grantWaiters() // it may have kept the bodies behind it waiting
	b.mu.Unlock()
	if timedOut {
		return b.reject()
	}
	r.Release()
	return ctx.Err()
}

// TryGrow is Grow without the wait: it takes n more bytes for the body if
// they fit now and no earlier body waits for them, and reports whether it did.
func (r *BodyRoom) TryGrow(n int64) bool {
	b := r.budget
	if r.size > b.limit || b.clientShare > 0 && r.size > b.clientShare {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// A body that holds room already goes on past the waiters: they wait
	// for the bodies being read to end.
	if r.held == 0 && len(b.queue) > 0 {
		return false
	}
	c, fit := b.fit(r, n)
	if fit != fits {
		return false
	}
	b.take(r, n, c)
	return true
}

// roomFit is whether a body's next bytes fit, or what keeps them out.
type roomFit int

const (
	fits roomFit = iota
	budgetFull
	clientFull
)

// fit tells whether n more bytes for r fit now (under mu), with r's client's
// room. The client's share is checked first: a body its own client keeps
// waiting does not hold up other clients' bodies.
func (b *ByteBudget) fit(r *BodyRoom, n int64) (clientRoom, roomFit) {
	var c clientRoom
	if b.clientShare > 0 {
		c = b.clients[r.client]
		if c.held+n > b.clientShare || c.reading-r.held+r.size > b.clientShare {
			return c, clientFull
		}
	}
	if b.held.Load()+n > b.limit || b.reading-r.held+r.size > b.limit {
		return c, budgetFull
	}
	return c, fits
}

// take gives r n more bytes (under mu); c is r's client's room before.
func (b *ByteBudget) take(r *BodyRoom, n int64, c clientRoom) {
	if b.clientShare > 0 {
		b.clients[r.client] = clientRoom{held: c.held + n, reading: c.reading + n}
	}
	b.held.Add(n)
	b.reading += n
	r.held += n
}

// grantWaiters gives room to the waiting bodies it now fits (under mu), in
// arrival order: a body that holds no room yet is not let in while an earlier
// waiter is kept out by the budget, nor while an earlier waiter of its client
// is kept out by the client's share, so a stream of small bodies cannot
// starve a large one. A body already being read takes its next bytes
// whenever they fit, ahead of the others: the waiters wait for those bodies
// to end, and holding them back would leave both waiting.
func (b *ByteBudget) grantWaiters() {
	budgetKept := false
	var clientsKept map[string]bool // made only when a client keeps a body out
	waiting := b.queue[:0]
	for _, w := range b.queue {
		starting := w.body.held == 0
		if starting && (budgetKept || clientsKept[w.body.client]) {
			waiting = append(waiting, w)
			continue
		}
		c, fit := b.fit(&w.body, w.n)
		switch fit {
		case fits:
			b.take(&w.body, w.n, c)
			w.granted = true
			close(w.ready)
			continue
		case budgetFull:
			budgetKept = true
		case clientFull:
			if clientsKept == nil {
				clientsKept = map[string]bool{}
			}
			clientsKept[w.body.client] = true
		}
		waiting = append(waiting, w)
	}
	clear(b.queue[len(waiting):])
	b.queue = waiting
	b.waiting.Store(int64(len(waiting)))
}

// Received marks the body read whole: its room stays held until Release, but
// no longer keeps other bodies from starting (it needs no more).
func (r *BodyRoom) Received() {
	if r.read {
		return
	}
	r.read = true
	r.budget.giveBack(r.client, 0, r.held)
}

// Release gives back all the room the body holds.
func (r *BodyRoom) Release() {
	reading := r.held
	if r.read {
		reading = 0
	}
	r.budget.giveBack(r.client, r.held, reading)
	r.held, r.read = 0, true
}

// giveBack takes held bytes off client's room, reading of them off the room
// of bodies being read, and lets in the waiters that now fit.
func (b *ByteBudget) giveBack(client string, held, reading int64) {
	if held == 0 && reading == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.clientShare > 0 {
		c := b.clients[client]
		if c.held -= held; c.held > 0 {
			c.reading -= reading
			b.clients[client] = c
		} else {
			delete(b.clients, client)
		}
	}
	b.held.Add(-held)
	b.reading -= reading
	if len(b.queue) > 0 {
		b.grantWaiters()
	}
}

func (b *ByteBudget) reject() error {
	b.rejected.Add(1)
	return &RejectedError{Class: BodyClass, Reason: ReasonOverloaded, RetryAfter: max(b.maxWait, time.Second)}
}

// ByteStats is a snapshot of the budget for metrics.
type ByteStats struct {
	Budget   int64 `json:"budget"`
	Held     int64 `json:"held"`
	Waiting  int64 `json:"waiting"`
	Rejected int64 `json:"rejected"`
}

// Stats reports the budget's current use.
func (b *ByteBudget) Stats() ByteStats {
	return ByteStats{Budget: b.limit, Held: b.held.Load(), Waiting: b.waiting.Load(), Rejected: b.rejected.Load()}
}
