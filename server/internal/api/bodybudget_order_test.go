package api

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/admission"
)

// bodyOrderBroker is a broker whose body budget is two bodies of the 1 MiB
// cap, with no client share, and two stalled bodies being read: one holds
// 1 MiB, the other 256 KiB. A body of the cap then waits for room, while a
// small one fits beside them.
type bodyOrderBroker struct {
	*resilientBroker
	budget          *admission.ByteBudget
	stalledPart     net.Conn // the stalled body holding 256 KiB
	stalledNearFull net.Conn // the one holding 1 MiB
}

const bodyOrderMaxBody = 1 << 20

func newBodyOrderBroker(t *testing.T, maxWait time.Duration) bodyOrderBroker {
	t.Helper()
	budget := admission.NewByteBudget(2*bodyOrderMaxBody, maxWait)
	b := newBrokerWith(t, testDSN, Options{MaxBodyBytes: bodyOrderMaxBody, BodyBudget: budget, BodyReadTimeout: time.Minute}, "")
	full := pushOfSize("q", bodyOrderMaxBody)
	nearFull := stallBodyAfter(t, b.URL, "/api/v1/push", full, bodyOrderMaxBody-1000)
	waitForHeld(t, budget, bodyOrderMaxBody)
	part := stallBodyAfter(t, b.URL, "/api/v1/push", full, 10)
	waitForHeld(t, budget, bodyOrderMaxBody+bodyReserveStep)
	return bodyOrderBroker{resilientBroker: b, budget: budget, stalledPart: part, stalledNearFull: nearFull}
}

// pushInBackground posts body in the background and sends its status (0 if it failed).
func pushInBackground(brokerURL, body string) <-chan int {
	answer := make(chan int, 1)
	go func() {
		resp, _, err := postPush(brokerURL, body, false)
		if err != nil {
			answer <- 0
			return
		}
		answer <- resp.StatusCode
	}()
	return answer
}

// waitForWaiting waits until want bodies wait for room, failing early if
// answered has an answer first.
func waitForWaiting(t *testing.T, budget *admission.ByteBudget, want int64, answered <-chan int, what string) {
	t.Helper()
	waitFor(t, 3*time.Second, what, func() bool { return budget.Stats().Waiting == want || len(answered) > 0 })
	if len(answered) > 0 {
		t.Fatalf("%s: answered %d first", what, <-answered)
	}
}

// Review of the body budget: waiting bodies were woken all at once and the
// first to find room took it, so under a steady stream of small pushes a
// large one could wait out its two seconds and be refused although it came
// first. A body that starts while others wait now waits behind them; a small
// body still does not wait behind large bodies being read, only behind
// earlier waiters.
func TestABodyWaitingForRoomIsNotPassedByLaterBodies(t *testing.T) {
	b := newBodyOrderBroker(t, 10*time.Second)
	q := uniqueQueue(t)
	if status := <-pushInBackground(b.URL, pushOfSize(q, 1000)); status != http.StatusCreated {
		t.Fatalf("small push beside two stalled bodies, nobody waiting: %d; want 201", status)
	}

	large := pushOfSize(q, bodyOrderMaxBody)
	largeConn := stallBodyAfter(t, b.URL, "/api/v1/push", large, 10)
	waitForWaiting(t, b.budget, 1, nil, "the large body to wait for room")
	small := pushInBackground(b.URL, pushOfSize(q, 1000))
	waitForWaiting(t, b.budget, 2, small, "a small push that came after the waiting large one to wait behind it")

	// The 256 KiB stalled body ends: the large one fits, then the small one beside it.
	_ = b.stalledPart.Close()
	if _, err := io.WriteString(largeConn, large[10:]); err != nil {
		t.Fatal(err)
	}
	if resp := readAnswer(t, largeConn); resp.StatusCode != http.StatusCreated {
		t.Fatalf("the large push that waited first: %d; want 201", resp.StatusCode)
	}
	if status := <-small; status != http.StatusCreated {
		t.Fatalf("the small push behind it: %d; want 201", status)
	}
	_ = b.stalledNearFull.Close()
	wantBudgetGivenBack(t, b.resilientBroker, b.budget, "after the waiting bodies were served in order")
	if s := b.budget.Stats(); s.Rejected != 0 {
		t.Fatalf("%d bodies refused for want of room", s.Rejected)
	}
}

// Review of the body budget: a body waiting for room whose client hung up
// went on waiting until its wait ran out (net/http notices a hang-up only
// once the body is read), and now it would also hold up the bodies behind
// it. The hang-up now ends its wait at once (within hangUpPoll), and the
// next body gets the room.
func TestABodyWaitingForRoomStopsWhenItsClientHangsUp(t *testing.T) {
	b := newBodyOrderBroker(t, 10*time.Second)
	q := uniqueQueue(t)
	leaving := stallBodyAfter(t, b.URL, "/api/v1/push", pushOfSize(q, bodyOrderMaxBody), 10)
	waitForWaiting(t, b.budget, 1, nil, "the large body to wait for room")
	small := pushInBackground(b.URL, pushOfSize(q, 1000))
	waitForWaiting(t, b.budget, 2, small, "a small push to wait behind the large one")

	_ = leaving.Close()
	start := time.Now()
	select {
	case status := <-small:
		if status != http.StatusCreated {
			t.Fatalf("the small push behind a waiting body whose client hung up: %d; want 201", status)
		}
	case <-time.After(time.Second):
		t.Fatalf("the small push still waits a second after the client of the body ahead of it hung up: %+v", b.budget.Stats())
	}
	t.Logf("the body behind a waiting one was let in %s after the latter's client hung up", time.Since(start).Round(time.Millisecond))
	waitFor(t, time.Second, "the body whose client hung up to stop waiting", func() bool { return b.budget.Stats().Waiting == 0 })

	_ = b.stalledPart.Close()
	_ = b.stalledNearFull.Close()
	wantBudgetGivenBack(t, b.resilientBroker, b.budget, "after a waiting body's client hung up")
	if s := b.budget.Stats(); s.Rejected != 0 {
		t.Fatalf("%d bodies refused for want of room", s.Rejected)
	}
}
