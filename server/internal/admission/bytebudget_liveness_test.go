package admission

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Review of the body budget: bodies whose senders keep sending always
// finish, however they interleave. Senders of three clients take room in
// steps for bodies with and without a known length (one without is counted as
// large as the cap, and may end before it), each read whole, held a moment,
// then given back. A lost wake-up would leave a body waiting out the ten
// second wait, and two bodies waiting on each other would be refused: either
// fails the test, as would room left held or counted as being read.
func TestByteBudgetBodiesOfActiveSendersAlwaysFinish(t *testing.T) {
	const limit, share, maxBody, senders, bodiesEach = 1000, 600, 500, 24, 300
	b := NewByteBudget(limit, 10*time.Second).LimitPerClient(share)
	clients := []string{"a", "b", "c"}
	var refused, served atomic.Int64
	var wg sync.WaitGroup
	for i := range senders {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for range bodiesEach {
				length := 1 + rng.Int64N(maxBody)
				size := length
				if rng.IntN(3) == 0 {
					size = maxBody // no declared length: counted as the cap
				}
				room := b.Body(clients[i%len(clients)], size)
				for room.Held() < length {
					step := min(1+rng.Int64N(100), size-room.Held())
					if err := room.Grow(context.Background(), step); err != nil {
						refused.Add(1)
						break
					}
				}
				if room.Held() >= length {
					room.Received()
					served.Add(1)
				}
				if rng.IntN(4) == 0 {
					time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
				}
				room.Release()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("senders still waiting after a minute: %+v, %d served", b.Stats(), served.Load())
	}
	if refused.Load() != 0 {
		t.Fatalf("%d bodies of active senders refused (%d served): a body waited out the wait", refused.Load(), served.Load())
	}
	if s := b.Stats(); s.Held != 0 || s.Waiting != 0 || b.reading != 0 || len(b.clients) != 0 {
		t.Fatalf("after every release: %+v, %d bytes being read, %d clients", s, b.reading, len(b.clients))
	}
}
