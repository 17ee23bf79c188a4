package engine

import (
	"context"
	"testing"
	"time"
)

func woken(wts ...*waiter) []bool {
	out := make([]bool, len(wts))
	for i, wt := range wts {
		select {
		case <-wt.ch:
			out[i] = true
		default:
		}
	}
	return out
}

func TestWaitersWakeOnePerTouchedPartitionPerGroup(t *testing.T) {
	w := newWaiters()
	a1 := w.register("q", "A", "")
	a2 := w.register("q", "A", "")
	a3 := w.register("q", "A", "")
	b1 := w.register("q", "B", "")
	pinned := w.register("q", "A", "p9")
	other := w.register("other", "A", "")
	discovery := w.register("", "A", "")

	w.wake("q", []string{"p1", "p2"})
	got := woken(a1, a2, a3, b1, pinned, other, discovery)
	want := []bool{true, true, false, true, false, false, true}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("after a push to p1,p2: woken = %v, want %v (a1 a2 a3 b1 pinned other discovery)", got, want)
		}
	}
	if n := w.count(); n != 3 {
		t.Fatalf("parked after wake = %d, want 3 (a3, pinned, other)", n)
	}

	w.wake("q", []string{"p9"})
	if got := woken(a3, pinned); !got[0] || !got[1] {
		t.Fatalf("a push to p9 must wake the pinned pop and one unpinned pop of A: %v", got)
	}

	w.wake("other", nil)
	if !woken(other)[0] {
		t.Fatal("a wake with unknown partitions must wake every waiter of the queue")
	}
	if n := w.count(); n != 0 {
		t.Fatalf("parked = %d, want 0", n)
	}
}

func TestWaitersWakeGroupPassesTheWakeOn(t *testing.T) {
	w := newWaiters()
	a1 := w.register("q", "A", "")
	b1 := w.register("q", "B", "")
	a2 := w.register("q", "A", "")
	a3 := w.register("q", "A", "")
	w.wakeGroup("q", "A", 2)
	got := woken(a1, b1, a2, a3)
	if !got[0] || got[1] || !got[2] || got[3] {
		t.Fatalf("wakeGroup(A, 2) woke %v, want the two oldest waiters of A only", got)
	}
	w.unregister(a1) // unregistering a woken waiter is a no-op
	w.unregister(a3)
	if n := w.count(); n != 1 {
		t.Fatalf("parked = %d, want 1 (b1)", n)
	}
	w.wakeAll()
	if !woken(b1)[0] || w.count() != 0 {
		t.Fatal("wakeAll must wake and forget everyone")
	}
}

func TestAPopHandsOnOnlyWhatItLeftBehind(t *testing.T) {
	for _, c := range []struct {
		claimed, ready, others, want int
	}{
		{claimed: 1, ready: 3, want: 2},            // took one of three: two peers may take the rest
		{claimed: 2, ready: 2, want: 0},            // took all it saw
		{claimed: 0, ready: 3, want: 0},            // took nothing: the rest was locked by pops in flight
		{claimed: 1, ready: 3, others: 1, want: 1}, // another claim running takes one of the two
		{claimed: 1, ready: 2, others: 3, want: 0}, // more claims running than partitions left
	} {
		r := &PopResult{PartitionsClaimed: c.claimed, ReadyPartitions: c.ready}
		if got := r.leftBehind(c.others); got != c.want {
			t.Errorf("claimed %d of %d ready, %d other claims running: hands on %d, want %d", c.claimed, c.ready, c.others, got, c.want)
		}
	}
	if (*PopResult)(nil).leftBehind(0) != 0 {
		t.Error("a failed pop hands on nothing")
	}
}

func TestWaitersCountTheClaimsOfAGroupRunning(t *testing.T) {
	w := newWaiters()
	w.claimStarted("q", "A")
	w.claimStarted("q", "A")
	w.claimStarted("q", "B")
	if n := w.claimEnded("q", "A"); n != 1 {
		t.Fatalf("first of two claims of A ended: %d others running, want 1", n)
	}
	if n := w.claimEnded("q", "A"); n != 0 {
		t.Fatalf("last claim of A ended: %d others running, want 0", n)
	}
	if n := w.claimEnded("q", "B"); n != 0 || len(w.claiming) != 0 {
		t.Fatalf("claims of B: %d others, %d groups left counted", n, len(w.claiming))
	}
}

func TestWaitersQueueANewPopBehindParkedPeersOfItsGroup(t *testing.T) {
	w := newWaiters()
	if w.registerBehindPeers("q", "A", "") != nil {
		t.Fatal("with nobody parked a pop must claim first, not park")
	}
	a1 := w.register("q", "A", "")
	pinned := w.register("q", "B", "p1")
	if w.registerBehindPeers("q", "B", "") != nil || w.registerBehindPeers("q", "C", "") != nil ||
		w.registerBehindPeers("other", "A", "") != nil || w.registerBehindPeers("", "A", "") != nil {
		t.Fatal("only parked pops of the same queue, group and pin are peers")
	}
	a2 := w.registerBehindPeers("q", "A", "")
	if a2 == nil {
		t.Fatal("a pop of a group with a parked pop must park behind it")
	}
	if w.registerBehindPeers("q", "B", "p1") == nil {
		t.Fatal("a pinned pop parks behind parked pops pinned to the same partition")
	}

	w.wake("q", []string{"p2"})
	if got := woken(a1, a2); !got[0] || got[1] {
		t.Fatalf("a push to one partition must wake the oldest pop of A, the one that parked first: %v", got)
	}
	a3 := w.registerBehindPeers("q", "A", "")
	if a3 == nil {
		t.Fatal("a2 is still parked: the next pop of A parks behind it")
	}
	w.unregister(a2)
	w.unregister(a3)
	if w.registerBehindPeers("q", "A", "") != nil {
		t.Fatal("once the group's pops left, a new pop claims first")
	}
	w.wakeAll()
	if !woken(pinned)[0] || w.registerBehindPeers("q", "B", "p1") != nil {
		t.Fatal("after wakeAll nobody is parked")
	}
}

func TestWaitersHandOnlyIdlePopsToAPush(t *testing.T) {
	w := newWaiters()
	claiming := w.register("q", "A", "") // registered before its own check, still claiming
	pinned := w.register("q", "A", "p9")
	noPlan := w.register("q", "B", "")
	gone := w.register("q", "A", "") // its caller left; it has not seen that yet
	idle := w.register("q", "A", "")
	left, leave := context.WithCancel(context.Background())
	leave()
	w.waitIdle(left, gone, &PopRequest{Queue: "q", Group: "A", Batch: 7})
	for _, wt := range []*waiter{pinned, noPlan, idle} {
		w.waitIdle(context.Background(), wt, &PopRequest{Queue: "q", Group: wt.group, Batch: 7})
	}
	planned := func(group string) bool { return group == "A" }

	got, req := w.takeForHandOff("q", []string{"p1"}, planned)
	if got != idle || req.Batch != 7 {
		t.Fatalf("took %+v (request %+v), want the idle unpinned pop of the planned group", got, req)
	}
	if again, _ := w.takeForHandOff("q", []string{"p1"}, planned); again != nil {
		t.Fatalf("a push to p1 must find no other pop to hand to, got %+v", again)
	}
	if got, _ := w.takeForHandOff("q", []string{"p9"}, planned); got != pinned {
		t.Fatalf("a push to p9 must hand to the pop pinned to it, got %+v", got)
	}

	// A pop that stops waiting while a push claims for it gets that claim.
	leaving := make(chan *PopResult, 1)
	go func() { leaving <- w.leaveHandedOff(idle) }()
	select {
	case r := <-leaving:
		t.Fatalf("leaving returned %+v before the claim ended", r)
	case <-time.After(50 * time.Millisecond):
	}
	handOffDone(idle, &PopResult{Messages: []Message{{TransactionID: "m"}}})
	if r := <-leaving; r == nil || len(r.Messages) != 1 {
		t.Fatalf("leaving pop got %+v, want the handed batch", r)
	}
	if r := w.leaveHandedOff(claiming); r != nil {
		t.Fatalf("a pop nobody claimed for got %+v on leaving", r)
	}
	if n := w.count(); n != 2 {
		t.Fatalf("parked = %d, want 2 (the pop without a plan, the one whose caller left)", n)
	}

	// A pop the push claimed nothing for parks again at the head of the line.
	again := w.registerFirst("q", "A", "")
	w.wakeGroup("q", "A", 1)
	if got := woken(again, gone); !got[0] || got[1] {
		t.Fatalf("woken = %v: the pop parked again first must get the next wake of its group", got)
	}
}

func TestWaitersWakeServedWakesTheHandedGroupOnlyForWhatItsClaimLeft(t *testing.T) {
	w := newWaiters()
	a1 := w.register("q", "A", "")
	a2 := w.register("q", "A", "")
	b1 := w.register("q", "B", "")
	w.wakeServed("q", []string{"p1", "p2"}, "A", 1)
	if got := woken(a1, a2, b1); !got[0] || got[1] || !got[2] {
		t.Fatalf("woken = %v, want [true false true]: A's claim left one of two partitions", got)
	}
	a3 := w.register("q", "A", "")
	w.wakeServed("q", []string{"p1"}, "A", 0)
	if got := woken(a2, a3); got[0] || got[1] {
		t.Fatalf("woken = %v: A's claim left nothing, so no pop of A is woken", got)
	}
}
