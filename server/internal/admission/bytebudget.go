package admission

import (
	"context"
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
// maxWait for room to be given back, then is rejected.
type ByteBudget struct {
	limit    int64
	maxWait  time.Duration
	held     atomic.Int64 // written under mu; Stats reads it without
	waiting  atomic.Int64
	rejected atomic.Int64

	mu sync.Mutex
	// reading is the part of held taken by bodies not yet read whole.
	reading int64
	// freed is closed, and replaced, when room is given back while
	// someone waits: every waiter then tries again.
	freed chan struct{}

	clientShare int64                 // the most one client may hold; 0 is no cap
	clients     map[string]clientRoom // only clients holding bytes now
}

// clientRoom is what one client holds, and how much of it is of bodies still
// being read.
type clientRoom struct{ held, reading int64 }

// NewByteBudget builds a budget of limit bytes; a non-positive maxWait waits one second.
func NewByteBudget(limit int64, maxWait time.Duration) *ByteBudget {
	if maxWait <= 0 {
		maxWait = time.Second
	}
	return &ByteBudget{limit: limit, maxWait: maxWait, freed: make(chan struct{})}
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
// refused.
func (r *BodyRoom) Grow(ctx context.Context, n int64) error {
	b := r.budget
	if r.size > b.limit || b.clientShare > 0 && r.size > b.clientShare {
		return b.reject()
	}
	if ok, _ := b.tryGrow(r, n); ok {
		return nil
	}
	b.waiting.Add(1)
	defer b.waiting.Add(-1)
	timer := time.NewTimer(b.maxWait)
	defer timer.Stop()
	for {
		ok, freed := b.tryGrow(r, n)
		if ok {
			return nil
		}
		select {
		case <-freed:
		case <-timer.C:
			return b.reject()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// tryGrow takes n bytes for r if they fit now; if not, it returns the channel
// closed when room is next given back (read under the same lock as the try,
// so no wake-up is lost).
func (b *ByteBudget) tryGrow(r *BodyRoom, n int64) (bool, chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	othersReading := b.reading - r.held
	if b.held.Load()+n > b.limit || othersReading+r.size > b.limit {
		return false, b.freed
	}
	if b.clientShare > 0 {
		c := b.clients[r.client]
		if c.held+n > b.clientShare || c.reading-r.held+r.size > b.clientShare {
			return false, b.freed
		}
		b.clients[r.client] = clientRoom{held: c.held + n, reading: c.reading + n}
	}
	b.held.Add(n)
	b.reading += n
	r.held += n
	return true, nil
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
// of bodies being read, and wakes the waiters.
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
	if b.waiting.Load() > 0 {
		close(b.freed)
		b.freed = make(chan struct{})
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
