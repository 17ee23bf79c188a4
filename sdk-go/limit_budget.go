package lanes

import (
	"context"
	"sync"
)

// limitBudget shares Limit among the workers of a consumer under server auto-ack, where a pop
// commits its messages: each pop reserves its batch out of what is left before it is sent, so
// workers popping at once never take more than Limit between them (as the TypeScript and
// Python SDKs do).
type limitBudget struct {
	mu      sync.Mutex
	left    int64         // Limit minus the messages popped and the batches of pops in flight
	popping int           // pops in flight holding a reservation
	settled chan struct{} // closed (and replaced) when a pop settles: room may have come back
}

func newLimitBudget(limit int64) *limitBudget {
	return &limitBudget{left: limit, settled: make(chan struct{})}
}

// reserve takes up to want of what is left for one pop, waiting while all of it is reserved by
// pops in flight (one may come back short). It returns 0 when ctx ends or the budget is spent.
// settle must be called once with how many messages the pop brought.
func (b *limitBudget) reserve(ctx context.Context, want int) (batch int, settle func(got int)) {
	for {
		b.mu.Lock()
		if b.left > 0 {
			k := min(int64(want), b.left)
			b.left -= k
			b.popping++
			b.mu.Unlock()
			return int(k), func(got int) { b.settle(k - int64(got)) }
		}
		if b.popping == 0 {
			b.mu.Unlock()
			return 0, nil
		}
		wake := b.settled
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return 0, nil
		}
	}
}

func (b *limitBudget) settle(unused int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.left += unused
	b.popping--
	close(b.settled)
	b.settled = make(chan struct{})
}

// spent reports that all of Limit was popped and no pop in flight can give any of it back.
func (b *limitBudget) spent() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.left <= 0 && b.popping == 0
}
