package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

func mustTimers(t testing.TB, e *Engine, ops ...TimerOp) []TimerResult {
	t.Helper()
	res, err := e.ScheduleTimers(context.Background(), ops)
	if err != nil {
		t.Fatalf("timers: %v", err)
	}
	return res
}

func TestTimerScheduleRescheduleCancelAndRead(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	res := mustTimers(t, e,
		TimerOp{Op: TimerSchedule, Queue: q, TimerKey: "remind/1", Delay: time.Hour, Payload: raw(map[string]int{"n": 1}), TransactionID: "t1"},
		TimerOp{Op: TimerReschedule, Queue: q, TimerKey: "remind/1", Delay: 2 * time.Hour, Payload: raw(2)},
		TimerOp{Op: TimerSchedule, Queue: q, TimerKey: "remind/2", Delay: time.Hour},
		TimerOp{Op: TimerCancel, Queue: q, TimerKey: "nothing"},
	)
	if res[0].Status != TimerScheduled || res[1].Status != TimerRescheduled || !res[1].OK || res[1].TransactionID == "t1" ||
		res[2].Status != TimerScheduled || res[3].OK || res[3].Status != TimerAbsent {
		t.Fatalf("statuses: %+v", res)
	}
	tm, err := e.GetTimer(context.Background(), q, "remind/1")
	if err != nil || tm == nil || string(tm.Payload) != "2" || tm.MessageID != res[1].MessageID || !tm.DeliverAt.Equal(*res[1].DeliverAt) {
		t.Fatalf("get: %+v %v", tm, err)
	}
	list, truncated, err := e.ListTimers(context.Background(), q, "remind/", "", 1)
	if err != nil || len(list) != 1 || !truncated || list[0].TimerKey != "remind/1" {
		t.Fatalf("list: %+v %v %v", list, truncated, err)
	}
	if n, err := e.CountTimers(context.Background(), q, ""); err != nil || n != 2 {
		t.Fatalf("count: %d %v", n, err)
	}
	if r, err := e.CancelTimer(context.Background(), q, "remind/2", "not-its-txn"); err != nil || r.Status != TimerAbsent {
		t.Fatalf("cancel with another txn: %+v %v", r, err)
	}
	if r, err := e.CancelTimer(context.Background(), q, "remind/2", ""); err != nil || r.Status != TimerCancelled || !r.OK {
		t.Fatalf("cancel: %+v %v", r, err)
	}
	if tm, err := e.GetTimer(context.Background(), q, "remind/2"); err != nil || tm != nil {
		t.Fatalf("canceled timer still there: %+v %v", tm, err)
	}
}

// A timer is due at its deliverAt, not before: firing passes run from its
// schedule on, each bracketed by the database's clock read before and after
// it; none that ended before deliverAt fires it, the first that started after
// it does. Judged by the clock the firing reads, not by sleeps, so a machine
// that stalls the test between a sleep and a pass cannot make it fail.
func TestATimerFiresNoEarlierThanItsDeliverAt(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	dbNow := func() time.Time {
		t.Helper()
		var now time.Time
		if err := e.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now
	}
	// A stall longer than the delay leaves no pass wholly before deliverAt,
	// which would check nothing: the timer is scheduled again then.
	for attempt := 1; ; attempt++ {
		q := queueName(t)
		res := mustTimers(t, e, TimerOp{Op: TimerSchedule, Queue: q, TimerKey: "soon", Delay: 1500 * time.Millisecond})
		deliverAt := *res[0].DeliverAt
		passesBefore := 0 // passes that ended before deliverAt
		for {
			started := dbNow()
			if _, err := e.FireDueTimers(ctx); err != nil {
				t.Fatal(err)
			}
			ended := dbNow()
			tm, err := e.GetTimer(ctx, q, "soon")
			if err != nil {
				t.Fatal(err)
			}
			fired := tm == nil
			switch {
			case fired && ended.Before(deliverAt):
				t.Fatalf("a pass that ended %v before the timer's deliverAt fired it", deliverAt.Sub(ended))
			case !fired && !started.Before(deliverAt):
				t.Fatalf("a pass that started %v after the timer's deliverAt left it scheduled", started.Sub(deliverAt))
			case !fired && ended.Before(deliverAt):
				passesBefore++
			}
			if fired {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if passesBefore == 0 {
			if attempt == 5 {
				t.Fatal("no firing pass ran wholly before the timer's deliverAt in 5 attempts")
			}
			continue
		}
		if got := mustPop(t, e, PopRequest{Queue: q, Batch: 10}); len(got.Messages) != 1 {
			t.Fatalf("the fired timer delivered %d messages, want 1", len(got.Messages))
		}
		t.Logf("%d passes before deliverAt left the timer scheduled (attempt %d)", passesBefore, attempt)
		return
	}
}

func TestTimerHorizonAndBadInput(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	cases := map[string]struct {
		op   TimerOp
		code string
	}{
		"beyond horizon": {TimerOp{Op: TimerSchedule, Queue: q, TimerKey: "k", Delay: TimerHorizon + time.Second}, CodeTimerHorizonExceeded},
		"no key":         {TimerOp{Op: TimerSchedule, Queue: q}, CodeTimersBadRequest},
		"bad op":         {TimerOp{Op: "fire", Queue: q, TimerKey: "k"}, CodeTimersBadRequest},
		"not JSON":       {TimerOp{Op: TimerSchedule, Queue: q, TimerKey: "k", Payload: []byte("{oops")}, CodeTimersBadRequest},
	}
	for name, c := range cases {
		_, err := e.ScheduleTimers(context.Background(), []TimerOp{{Op: TimerSchedule, Queue: q, TimerKey: "valid"}, c.op})
		var coded *CodedInputError
		if !errors.As(err, &coded) || coded.Code != c.code {
			t.Fatalf("%s: %v, want %s", name, err, c.code)
		}
	}
	if n, _ := e.CountTimers(context.Background(), q, ""); n != 0 {
		t.Fatal("a rejected call scheduled its valid op")
	}
	res := mustTransaction(t, e, TransactionRequest{Ops: []TxOp{pushOp(0, q, "", "", 1)},
		Timers: []TimerOp{{Op: TimerSchedule, Queue: q, TimerKey: "far", Delay: TimerHorizon + time.Hour}}})
	if res.Success || res.Reason != TxReasonTimerHorizon || messagesIn(t, e, q) != 0 {
		t.Fatalf("bundle beyond the horizon: %+v", res)
	}
}

// TestTimersFireOnceWithTwoBrokers runs the firing loop on two engines and
// checks every timer is delivered exactly once, with its promised message id,
// and that a parked pop wakes for it.
func TestTimersFireOnceWithTwoBrokers(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	q := queueName(t)
	const n = 60
	var ops []TimerOp
	for i := 0; i < n; i++ {
		ops = append(ops, TimerOp{Op: TimerSchedule, Queue: q, Partition: fmt.Sprintf("p%d", i%3), TimerKey: fmt.Sprintf("k%03d", i),
			Delay: 300 * time.Millisecond, Payload: raw(i), TransactionID: fmt.Sprintf("timer-%d", i)})
	}
	scheduled := mustTimers(t, a, ops...)
	promised := map[string]string{}
	for _, r := range scheduled {
		promised[r.TransactionID] = r.MessageID.String()
	}
	a.StartTimers(50 * time.Millisecond)
	b.StartTimers(50 * time.Millisecond)
	start := time.Now()
	parked := mustPop(t, b, PopRequest{Queue: q, Group: "g", SubscriptionMode: "all", Batch: n, Wait: true, Timeout: 5 * time.Second})
	if len(parked.Messages) == 0 || time.Since(start) > 2*time.Second {
		t.Fatalf("a parked pop must wake when a timer fires: %d messages after %v", len(parked.Messages), time.Since(start))
	}
	deadline := time.Now().Add(5 * time.Second)
	for messagesIn(t, a, q) < n && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // room for a double fire to show up
	if got := messagesIn(t, a, q); got != n {
		t.Fatalf("stored %d messages for %d timers", got, n)
	}
	if left, _ := a.CountTimers(context.Background(), q, ""); left != 0 {
		t.Fatalf("%d timers left after firing", left)
	}
	seen := map[string]bool{}
	var acks []AckItem
	for _, m := range parked.Messages {
		seen[m.TransactionID] = true
		if promised[m.TransactionID] != m.ID.String() {
			t.Fatalf("message %s has id %s, the timer promised %s", m.TransactionID, m.ID, promised[m.TransactionID])
		}
		acks = append(acks, AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID.String(), Status: "completed", Group: "g", LeaseID: parked.LeaseID})
	}
	// The parked pop may have woken at the first of several firing commits (each
	// broker fires what it locks); timers fired after its claim wait behind its
	// lease until it is acked.
	for _, r := range mustAck(t, b, acks...) {
		if !r.Success {
			t.Fatalf("acking the parked pop: %+v", r)
		}
	}
	for len(seen) < n {
		pop := mustPop(t, a, PopRequest{Queue: q, Group: "g", Batch: n, AutoAck: true})
		if len(pop.Messages) == 0 {
			break
		}
		for _, m := range pop.Messages {
			if seen[m.TransactionID] {
				t.Fatalf("timer %s delivered twice", m.TransactionID)
			}
			seen[m.TransactionID] = true
		}
	}
	if len(seen) != n {
		t.Fatalf("delivered %d distinct timers, want %d", len(seen), n)
	}
}

func TestTimerRidesABundleAndRollsBackWithIt(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	mustPush(t, e, items(q, "", "exists")...)
	res := mustTransaction(t, e, TransactionRequest{Ops: []TxOp{pushOp(0, q, "", "exists", 1)},
		Timers: []TimerOp{{Op: TimerSchedule, Queue: q, TimerKey: "rolled-back", Delay: time.Hour}}})
	if res.Success || res.Reason != TxReasonDuplicate {
		t.Fatalf("%+v", res)
	}
	if tm, _ := e.GetTimer(context.Background(), q, "rolled-back"); tm != nil {
		t.Fatal("a timer of a rolled-back bundle was stored")
	}
	res = mustTransaction(t, e, TransactionRequest{Timers: []TimerOp{{Op: TimerSchedule, Queue: q, TimerKey: "kept", Delay: 0}}})
	if !res.Success || len(res.Timers) != 1 || res.Timers[0].Status != TimerScheduled {
		t.Fatalf("%+v", res)
	}
	if n, err := e.FireDueTimers(context.Background()); err != nil || n < 1 {
		t.Fatalf("fire: %d %v", n, err)
	}
	if messagesIn(t, e, q) != 2 {
		t.Fatalf("the fired timer's message: %d stored", messagesIn(t, e, q))
	}
}

// A timer firing is a push the broker makes: under push maintenance due timers
// wait, and fire once it ends. A bundle carrying pushes is refused then (it
// cannot go to the spool whole); one without pushes commits.
func TestPushMaintenanceHoldsTimersAndBundlesWithPushes(t *testing.T) {
	e := newEngine(t)
	var paused atomic.Bool
	e.PausePushesWhen(paused.Load)
	q := queueName(t)
	mustPush(t, e, items(q, "", "input")...)
	mustTimers(t, e, TimerOp{Op: TimerSchedule, Queue: q, TimerKey: "due", Delay: 0})
	input := mustPop(t, e, PopRequest{Queue: q, Batch: 1, LeaseSeconds: 60}).Messages[0]
	paused.Store(true)

	if n, err := e.FireDueTimers(context.Background()); err != nil || n != 0 {
		t.Fatalf("fired %d timers (err %v) under push maintenance", n, err)
	}
	if tm, err := e.GetTimer(context.Background(), q, "due"); err != nil || tm == nil {
		t.Fatalf("the due timer must wait for the end of maintenance: %v %v", tm, err)
	}
	withPush := TransactionRequest{Ops: []TxOp{pushOp(0, q, "", "output", 1), ackOp(1, input, "", input.LeaseID)}}
	if res, err := e.Transaction(context.Background(), withPush); !errors.Is(err, ErrPushesPaused) {
		t.Fatalf("a bundle with pushes under push maintenance: %+v %v, want ErrPushesPaused", res, err)
	}
	if n := messagesIn(t, e, q); n != 1 {
		t.Fatalf("%d messages stored, want only the input", n)
	}
	ackOnly := mustTransaction(t, e, TransactionRequest{Ops: []TxOp{ackOp(0, input, "", input.LeaseID)}})
	if !ackOnly.Success {
		t.Fatalf("a bundle without pushes must commit under push maintenance: %+v", ackOnly)
	}

	paused.Store(false)
	if n, err := e.FireDueTimers(context.Background()); err != nil || n < 1 {
		t.Fatalf("fire after maintenance: %d %v", n, err)
	}
	if n := messagesIn(t, e, q); n != 2 {
		t.Fatalf("the timer's message once maintenance ended: %d stored, want 2", n)
	}
}
