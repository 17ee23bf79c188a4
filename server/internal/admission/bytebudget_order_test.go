package admission

import (
	"context"
	"errors"
	"testing"
	"time"
)

// growInBackground has room grow by n and sends Grow's answer.
func growInBackground(ctx context.Context, room *BodyRoom, n int64) <-chan error {
	answer := make(chan error, 1)
	go func() { answer <- room.Grow(ctx, n) }()
	return answer
}

// waitForWaiters waits until want bodies wait for room in b.
func waitForWaiters(t *testing.T, b *ByteBudget, want int64) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for b.Stats().Waiting != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d bodies waiting for room; want %d", b.Stats().Waiting, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func wantGranted(t *testing.T, what string, answer <-chan error) {
	t.Helper()
	select {
	case err := <-answer:
		if err != nil {
			t.Fatalf("%s: %v; want room", what, err)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("%s still waits", what)
	}
}

func wantWaiting(t *testing.T, what string, answer <-chan error) {
	t.Helper()
	if len(answer) > 0 {
		t.Fatalf("%s: %v before its turn; want it waiting", what, <-answer)
	}
}

func wantAllGivenBack(t *testing.T, b *ByteBudget) {
	t.Helper()
	if s := b.Stats(); s.Held != 0 || s.Waiting != 0 || b.reading != 0 || len(b.clients) != 0 || len(b.queue) != 0 {
		t.Fatalf("after every release: %+v, %d bytes being read, %d clients, %d queued", s, b.reading, len(b.clients), len(b.queue))
	}
}

// A body that starts while an earlier one waits for room in the budget waits
// behind it, even if it would fit now; a body already being read takes its
// next bytes past both.
func TestByteBudgetServesWaitingBodiesInArrivalOrder(t *testing.T) {
	b := NewByteBudget(1000, 10*time.Second)
	reading := b.Body("a", 600)
	if err := reading.Grow(t.Context(), 450); err != nil {
		t.Fatal(err)
	}
	large := b.Body("b", 600) // 450 being read + 600 > 1000
	largeAnswer := growInBackground(t.Context(), &large, 100)
	waitForWaiters(t, b, 1)
	small := b.Body("c", 100)
	smallAnswer := growInBackground(t.Context(), &small, 100)
	waitForWaiters(t, b, 2)
	wantWaiting(t, "a small body after a waiting large one", smallAnswer)

	if err := reading.Grow(t.Context(), 150); err != nil {
		t.Fatalf("a body being read, with two waiting: %v; want its next bytes at once", err)
	}
	wantWaiting(t, "the large body", largeAnswer)
	reading.Received()
	wantGranted(t, "the large body once the body being read is read", largeAnswer)
	wantGranted(t, "the small body behind it", smallAnswer)
	for _, room := range []*BodyRoom{&reading, &large, &small} {
		room.Release()
	}
	wantAllGivenBack(t, b)
}

// A body its own client's share keeps waiting holds up the later bodies of
// that client, not those of other clients.
func TestByteBudgetWaiterKeptByItsClientHoldsUpOnlyThatClient(t *testing.T) {
	b := NewByteBudget(1000, 10*time.Second).LimitPerClient(500)
	stalled := b.Body("a", 400)
	if err := stalled.Grow(t.Context(), 200); err != nil {
		t.Fatal(err)
	}
	second := b.Body("a", 400) // a's 200 being read + 400 > 500
	secondAnswer := growInBackground(t.Context(), &second, 100)
	waitForWaiters(t, b, 1)

	other := b.Body("b", 400)
	if err := other.Grow(t.Context(), 100); err != nil {
		t.Fatalf("another client's body behind a waiter its own client keeps: %v; want room at once", err)
	}
	third := b.Body("a", 50)
	thirdAnswer := growInBackground(t.Context(), &third, 50)
	waitForWaiters(t, b, 2)
	wantWaiting(t, "a later small body of the same client", thirdAnswer)

	stalled.Release()
	wantGranted(t, "the client's waiting body once its stalled one ends", secondAnswer)
	wantGranted(t, "the client's later body", thirdAnswer)
	for _, room := range []*BodyRoom{&second, &other, &third} {
		room.Release()
	}
	wantAllGivenBack(t, b)
}

// A waiting body whose request ends stops waiting, gives back the room it
// holds at once and no longer holds up the bodies behind it.
func TestByteBudgetWaiterWhoseRequestEndsGivesItsRoomBackAtOnce(t *testing.T) {
	b := NewByteBudget(1000, 10*time.Second)
	read := b.Body("a", 700)
	if err := read.Grow(t.Context(), 700); err != nil {
		t.Fatal(err)
	}
	read.Received() // held 700, none of it being read
	midBody := b.Body("b", 400)
	if err := midBody.Grow(t.Context(), 100); err != nil {
		t.Fatal(err)
	}
	midCtx, midHangUp := context.WithCancel(t.Context())
	midAnswer := growInBackground(midCtx, &midBody, 300) // 800 held + 300 > 1000
	waitForWaiters(t, b, 1)
	starting := b.Body("c", 100)
	startingCtx, startingHangUp := context.WithCancel(t.Context())
	startingAnswer := growInBackground(startingCtx, &starting, 100) // 800 held + 100 fits, but behind the waiter
	waitForWaiters(t, b, 2)
	small := b.Body("d", 50)
	smallAnswer := growInBackground(t.Context(), &small, 50)
	waitForWaiters(t, b, 3)

	midHangUp()
	if err := <-midAnswer; !errors.Is(err, context.Canceled) {
		t.Fatalf("a body waiting mid-way whose request ended: %v; want context.Canceled", err)
	}
	if midBody.Held() != 0 {
		t.Fatalf("the body whose request ended holds %d; want its room given back", midBody.Held())
	}
	wantGranted(t, "the starting body behind it", startingAnswer)
	startingHangUp()
	wantGranted(t, "the small body behind them", smallAnswer)
	if s := b.Stats(); s.Held != 700+100+50 {
		t.Fatalf("held %d; want 850 (the read body and the two let in)", s.Held)
	}
	for _, room := range []*BodyRoom{&read, &midBody, &starting, &small} {
		room.Release()
	}
	wantAllGivenBack(t, b)
}

// A waiting body refused when its wait runs out no longer holds up the
// bodies behind it.
func TestByteBudgetWaiterRefusedAfterItsWaitLetsTheNextIn(t *testing.T) {
	const maxWait = 500 * time.Millisecond
	b := NewByteBudget(1000, maxWait)
	reading := b.Body("a", 600)
	if err := reading.Grow(t.Context(), 500); err != nil {
		t.Fatal(err)
	}
	large := b.Body("b", 600) // 500 being read + 600 > 1000, until reading ends
	largeAnswer := growInBackground(t.Context(), &large, 100)
	waitForWaiters(t, b, 1)
	time.Sleep(maxWait / 2) // the small body's wait ends well after the large one's
	small := b.Body("c", 100)
	smallAnswer := growInBackground(t.Context(), &small, 100)
	waitForWaiters(t, b, 2)

	if _, refused := IsRejected(<-largeAnswer); !refused {
		t.Fatal("the large body that could not fit: want it refused after its wait")
	}
	wantGranted(t, "the small body behind it", smallAnswer)
	if s := b.Stats(); s.Rejected != 1 {
		t.Fatalf("%d refused; want 1", s.Rejected)
	}
	for _, room := range []*BodyRoom{&reading, &large, &small} {
		room.Release()
	}
	wantAllGivenBack(t, b)
}

// A body that finds room with nobody waiting takes it without allocating:
// the budget is on every request's path.
func TestByteBudgetUncontendedGrowDoesNotAllocate(t *testing.T) {
	b := NewByteBudget(1000, time.Second).LimitPerClient(500)
	ctx := t.Context()
	allocs := testing.AllocsPerRun(1000, func() {
		room := b.Body("a", 300)
		if err := room.Grow(ctx, 100); err != nil {
			t.Fatal(err)
		}
		if err := room.Grow(ctx, 200); err != nil {
			t.Fatal(err)
		}
		room.Received()
		room.Release()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations a body with room free; want none", allocs)
	}
	wantAllGivenBack(t, b)
}

func BenchmarkByteBudgetUncontendedBody(b *testing.B) {
	budget := NewByteBudget(1<<30, time.Second).LimitPerClient(1 << 28)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			room := budget.Body("a", 1000)
			if err := room.Grow(ctx, 1000); err != nil {
				b.Fatal(err)
			}
			room.Received()
			room.Release()
		}
	})
}
