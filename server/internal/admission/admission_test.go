package admission

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestClassAdmitsUpToBudgetQueuesThenRejects(t *testing.T) {
	c := NewClass("push", Limits{InFlight: 2, Waiting: 1, MaxWait: 200 * time.Millisecond})
	ctx := context.Background()
	r1, err1 := c.Acquire(ctx)
	r2, err2 := c.Acquire(ctx)
	if err1 != nil || err2 != nil {
		t.Fatalf("budget of 2 refused: %v %v", err1, err2)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var queuedErr error
	go func() {
		defer wg.Done()
		rel, err := c.Acquire(ctx) // queues: the line holds one
		queuedErr = err
		if rel != nil {
			rel()
		}
	}()
	deadline := time.Now().Add(time.Second)
	for c.Stats().Waiting != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	_, err := c.Acquire(ctx) // the line is full: rejected at once
	rej, ok := IsRejected(err)
	if !ok || rej.Reason != ReasonOverloaded || rej.RetryAfter < time.Second {
		t.Fatalf("want overloaded rejection, got %v", err)
	}
	r1()
	r1() // a second release is harmless
	wg.Wait()
	if queuedErr != nil {
		t.Fatalf("queued request should get the released slot: %v", queuedErr)
	}
	r2()
	s := c.Stats()
	if s.InFlight != 0 || s.Waiting != 0 || s.Rejected != 1 || s.Admitted != 3 {
		t.Fatalf("stats %+v", s)
	}
}

func TestClassRejectsAfterMaxWait(t *testing.T) {
	c := NewClass("ack", Limits{InFlight: 1, Waiting: 5, MaxWait: 50 * time.Millisecond})
	rel, _ := c.Acquire(context.Background())
	defer rel()
	start := time.Now()
	_, err := c.Acquire(context.Background())
	if _, ok := IsRejected(err); !ok {
		t.Fatalf("want rejection, got %v", err)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond || waited > time.Second {
		t.Fatalf("waited %v", waited)
	}
}

func TestClientLimiterRefillsAtRate(t *testing.T) {
	l := NewClientLimiter(10, 2)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	for i := range 2 {
		if err := l.Allow("a"); err != nil {
			t.Fatalf("burst of 2 refused at %d: %v", i, err)
		}
	}
	err := l.Allow("a")
	rej, ok := IsRejected(err)
	if !ok || rej.Reason != ReasonRateLimited || rej.RetryAfter != 100*time.Millisecond {
		t.Fatalf("want rate_limited after 100ms, got %v %+v", err, rej)
	}
	if l.Allow("b") != nil {
		t.Fatal("another client has its own bucket")
	}
	now = now.Add(100 * time.Millisecond)
	if l.Allow("a") != nil {
		t.Fatal("one token refilled after 100ms")
	}
	if RetryAfterSeconds(100*time.Millisecond) != 1 || RetryAfterSeconds(1500*time.Millisecond) != 2 {
		t.Fatal("Retry-After rounds up to whole seconds, at least 1")
	}
}

// Buckets were kept for every client seen until the next minute's sweep:
// half a million addresses grew the heap by 64 MB. Their count is now
// capped, and a client at its limit keeps its empty bucket while passing
// clients come and go.
func TestClientLimiterKeepsABoundedNumberOfBuckets(t *testing.T) {
	l := NewClientLimiter(1, 10)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	for range 10 {
		if err := l.Allow("busy"); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 100_000 {
		if err := l.Allow(fmt.Sprint("passing-", i)); err != nil {
			t.Fatalf("a new client was refused: %v", err)
		}
		if i%10_000 == 0 {
			if _, limited := IsRejected(l.Allow("busy")); !limited {
				t.Fatalf("the busy client got a fresh bucket after %d passing clients", i)
			}
		}
	}
	if n := len(l.buckets); n > 1<<16 {
		t.Fatalf("%d buckets kept after 100001 clients within a second; want at most %d", n, 1<<16)
	}
}

// A client gone quiet for longer than its bucket takes to refill is
// forgotten at the next sweep (a minute apart): the map holds the clients
// seen recently, not every client seen since boot.
func TestClientLimiterForgetsIdleClients(t *testing.T) {
	l := NewClientLimiter(5, 5)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	for i := range 1000 {
		if err := l.Allow(fmt.Sprint("client-", i)); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(30 * time.Second)
	if err := l.Allow("recent"); err != nil {
		t.Fatal(err)
	}
	if n := len(l.buckets); n != 1001 {
		t.Fatalf("%d buckets before the next sweep; want 1001", n)
	}
	now = now.Add(31 * time.Second)
	if err := l.Allow("new"); err != nil {
		t.Fatal(err)
	}
	if n := len(l.buckets); n != 1 {
		t.Fatalf("%d buckets after the sweep; want only the client that just came", n)
	}
}

// A parked pop's re-check never queues and never counts as rejected, and a
// request waiting in line gets a freed slot before a re-check can take it.
func TestTryAcquireNeverQueuesAndYieldsToTheLine(t *testing.T) {
	c := NewClass("pop", Limits{InFlight: 1, Waiting: 1, MaxWait: 2 * time.Second})
	held, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.TryAcquire(); ok {
		t.Fatal("TryAcquire took a slot that is held")
	}
	if st := c.Stats(); st.Waiting != 0 || st.Rejected != 0 {
		t.Fatalf("a missed TryAcquire queued or counted as rejected: %+v", st)
	}
	queued := make(chan func(), 1)
	go func() {
		rel, err := c.Acquire(context.Background())
		if err != nil {
			t.Error(err)
		}
		queued <- rel
	}()
	for deadline := time.Now().Add(time.Second); c.Stats().Waiting != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second Acquire never queued")
		}
	}
	held()
	if _, ok := c.TryAcquire(); ok {
		t.Fatal("TryAcquire took the freed slot from the request waiting in line")
	}
	rel := <-queued
	rel()
	again, ok := c.TryAcquire()
	if !ok {
		t.Fatal("TryAcquire refused a free slot")
	}
	again()
	if st := c.Stats(); st.Rejected != 0 {
		t.Fatalf("rejections: %+v", st)
	}
}

// takeWhole has client take room for a whole body of n bytes at once.
func takeWhole(ctx context.Context, b *ByteBudget, client string, n int64) (*BodyRoom, error) {
	room := b.Body(client, n)
	return &room, room.Grow(ctx, n)
}

func TestByteBudgetWakesAWaiterWhenRoomIsGivenBack(t *testing.T) {
	b := NewByteBudget(100, time.Second)
	ctx := context.Background()
	a, err := takeWhole(ctx, b, "a", 80)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { _, err := takeWhole(ctx, b, "b", 50); got <- err }()
	for b.Stats().Waiting != 1 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	a.Release()
	if err := <-got; err != nil || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("waiter after the release: %v after %s; want room at once", err, time.Since(start))
	}
	if s := b.Stats(); s.Held != 50 || s.Waiting != 0 || s.Rejected != 0 {
		t.Fatalf("stats %+v", s)
	}
	short := NewByteBudget(100, 50*time.Millisecond)
	_, _ = takeWhole(ctx, short, "a", 100)
	_, err = takeWhole(ctx, short, "b", 1)
	if rej, ok := IsRejected(err); !ok || rej.Class != BodyClass || rej.Reason != ReasonOverloaded || rej.RetryAfter < time.Second {
		t.Fatalf("no room within the wait: %v; want an overloaded body rejection", err)
	}
}

// One client holding its share waits, then is refused, while another client
// still finds room in the same budget; giving the share back lets it in again.
func TestByteBudgetCapsOneClientsShare(t *testing.T) {
	const maxWait = 50 * time.Millisecond
	b := NewByteBudget(100, maxWait).LimitPerClient(40)
	ctx := context.Background()
	slow, err := takeWhole(ctx, b, "slow", 30)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = takeWhole(ctx, b, "slow", 20)
	if rej, ok := IsRejected(err); !ok || rej.Reason != ReasonOverloaded || time.Since(start) < maxWait {
		t.Fatalf("past its share: %v after %s; want an overloaded rejection after waiting %s", err, time.Since(start), maxWait)
	}
	other, err := takeWhole(ctx, b, "other", 40)
	if err != nil {
		t.Fatalf("another client with the slow one at its share: %v", err)
	}
	if _, err := takeWhole(ctx, b, "slow", 41); err == nil {
		t.Fatal("a reservation larger than the share was granted")
	}
	slow.Release()
	again, err := takeWhole(ctx, b, "slow", 40)
	if err != nil {
		t.Fatalf("after giving its bytes back: %v", err)
	}
	again.Release()
	other.Release()
	if s := b.Stats(); s.Held != 0 || len(b.clients) != 0 || b.reading != 0 {
		t.Fatalf("after every release: %+v, %d clients still tracked, %d bytes still being read", s, len(b.clients), b.reading)
	}
}

// A body takes a step only while its rest fits beside the bodies being read,
// in the budget and in its client's share: the third body of 60 bytes is
// refused its first 30, which would fit, since the two bodies let in before
// it could then no longer both finish. A body read whole stops counting, and
// its room, once given back, lets the third in.
func TestByteBudgetLetsABodyGrowOnlyWhileItsRestFits(t *testing.T) {
	const maxWait = 50 * time.Millisecond
	for name, c := range map[string]struct {
		budget  *ByteBudget
		clients [3]string
	}{
		"in the budget":         {NewByteBudget(100, maxWait), [3]string{"a", "b", "c"}},
		"in the client's share": {NewByteBudget(1000, maxWait).LimitPerClient(100), [3]string{"a", "a", "a"}},
	} {
		ctx := context.Background()
		b := c.budget
		first, second, third := b.Body(c.clients[0], 60), b.Body(c.clients[1], 60), b.Body(c.clients[2], 60)
		for _, room := range []*BodyRoom{&first, &second} {
			if err := room.Grow(ctx, 30); err != nil {
				t.Fatalf("%s: first step of a body: %v", name, err)
			}
		}
		if err := third.Grow(ctx, 30); err == nil || third.Held() != 0 {
			t.Fatalf("%s: a third body's first step beside two half-read ones: %v, holding %d; want refused, holding nothing", name, err, third.Held())
		}
		if err := first.Grow(ctx, 30); err != nil {
			t.Fatalf("%s: the rest of the first body: %v", name, err)
		}
		first.Received()
		got := make(chan error, 1)
		go func() { got <- third.Grow(ctx, 30) }()
		for b.Stats().Waiting != 1 {
			time.Sleep(time.Millisecond)
		}
		first.Release()
		if err := <-got; err != nil {
			t.Fatalf("%s: the third body once the first gave its room back: %v", name, err)
		}
		second.Release()
		third.Release()
		if s := b.Stats(); s.Held != 0 || s.Rejected != 1 || len(b.clients) != 0 || b.reading != 0 {
			t.Fatalf("%s: after every release: %+v, %d clients, %d bytes being read", name, s, len(b.clients), b.reading)
		}
	}
}
