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
// one slow sender cannot take the room of every other. A request that finds
// no room waits up to maxWait for bodies in flight to finish, then is
// rejected. Without a per-client share, taking and giving back room is one
// atomic operation each; only a request that has to wait takes a lock.
type ByteBudget struct {
	limit    int64
	maxWait  time.Duration
	held     atomic.Int64
	waiting  atomic.Int64
	rejected atomic.Int64

	mu sync.Mutex
	// freed is closed, and replaced, when bytes are given back while
	// someone waits: every waiter then tries again.
	freed chan struct{}

	clientShare int64 // the most one client may hold; 0 is no cap
	clientsMu   sync.Mutex
	clientHeld  map[string]int64 // only clients holding bytes now
}

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
	b.clientHeld = map[string]int64{}
	return b
}

// Reserve takes n bytes for client, waiting up to maxWait for room. Each
// successful Reserve must be matched by a Release of the same client and n.
func (b *ByteBudget) Reserve(ctx context.Context, client string, n int64) error {
	if b.tryReserve(client, n) {
		return nil
	}
	if n > b.limit || b.clientShare > 0 && n > b.clientShare {
		return b.reject()
	}
	b.waiting.Add(1)
	defer b.waiting.Add(-1)
	timer := time.NewTimer(b.maxWait)
	defer timer.Stop()
	for {
		// Read the channel before trying: a Release after a failed try
		// closes this channel or one read later, so no wake-up is lost.
		b.mu.Lock()
		freed := b.freed
		b.mu.Unlock()
		if b.tryReserve(client, n) {
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

// tryReserve takes n bytes for client if they fit both the client's share
// and the budget now.
func (b *ByteBudget) tryReserve(client string, n int64) bool {
	if b.clientShare <= 0 {
		return b.tryReserveShared(n)
	}
	b.clientsMu.Lock()
	defer b.clientsMu.Unlock()
	if b.clientHeld[client]+n > b.clientShare || !b.tryReserveShared(n) {
		return false
	}
	b.clientHeld[client] += n
	return true
}

// tryReserveShared takes n bytes of the budget if they fit now.
// Compare-and-swap rather than add-then-undo, so held never passes the limit
// even for a moment.
func (b *ByteBudget) tryReserveShared(n int64) bool {
	for {
		held := b.held.Load()
		if held+n > b.limit {
			return false
		}
		if b.held.CompareAndSwap(held, held+n) {
			return true
		}
	}
}

// Release gives back n bytes client took by Reserve.
func (b *ByteBudget) Release(client string, n int64) {
	if b.clientShare > 0 {
		b.clientsMu.Lock()
		if left := b.clientHeld[client] - n; left > 0 {
			b.clientHeld[client] = left
		} else {
			delete(b.clientHeld, client)
		}
		b.clientsMu.Unlock()
	}
	b.held.Add(-n)
	if b.waiting.Load() > 0 {
		b.mu.Lock()
		close(b.freed)
		b.freed = make(chan struct{})
		b.mu.Unlock()
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
