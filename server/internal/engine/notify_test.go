package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// listenerPID waits for e's notification listener to be on LISTEN from a
// backend other than previous, and returns that backend's pid.
func listenerPID(t *testing.T, e *Engine, previous int32) int32 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var pid int32
		err := e.pool.QueryRow(context.Background(), `SELECT coalesce(max(pid), 0) FROM pg_stat_activity
			WHERE datname = current_database() AND query = 'LISTEN `+notifyChannel+`' AND pid <> $1`, previous).Scan(&pid)
		if err != nil {
			t.Fatal(err)
		}
		if pid != 0 {
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no listener other than backend %d", previous)
	return 0
}

// Each reconnect of the listener that gets back on LISTEN starts its backoff
// over: the fifth lost connection in a row is back within about the first
// delay, not after 1.6 s of doubling.
func TestListenerBackoffStartsOverAfterAReconnect(t *testing.T) {
	e := newEngine(t)
	pid := listenerPID(t, e, 0)
	for i := 0; i < 5; i++ {
		lost := time.Now()
		if _, err := e.pool.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid); err != nil {
			t.Fatal(err)
		}
		pid = listenerPID(t, e, pid)
		if back := time.Since(lost); back > listenReconnectFirst+400*time.Millisecond {
			t.Fatalf("reconnect %d took %v", i+1, back)
		}
	}
}

// TestFailingNotificationsLogOneWarning: when pg_notify keeps failing (the
// database's notification queue full, or the database gone) every push
// commit's flush fails; the first logs a WARN, the rest within the minute
// add no line.
func TestFailingNotificationsLogOneWarning(t *testing.T) {
	e, out := newUnreachableEngine(t)
	for i := range 4 {
		// Queued without a kick and flushed here, so each flush has ended
		// before the count below.
		e.notifier.mu.Lock()
		e.notifier.pending[fmt.Sprint("notify-failing-", i)] = true
		e.notifier.mu.Unlock()
		e.notifier.flush()
	}
	if n := strings.Count(out.String(), `level=WARN msg="notify other brokers failed`); n != 1 {
		t.Fatalf("want one WARN line for 4 failing flushes, got %d:\n%s", n, out.String())
	}
}

// A queue name may hold a line break, and a notification lists one name a
// line: another broker's push to such a queue still wakes a pop parked on it
// at once, not at its next re-check.
func TestLongPollWakesAcrossBrokersOnAQueueNamedWithALineBreak(t *testing.T) {
	const wakeBound = 400 * time.Millisecond // a wake takes milliseconds; a re-check would take 700
	a, b := newEngine(t), newEngine(t)
	q := queueName(t) + "\nsecond line"
	mustPop(t, a, PopRequest{Queue: q}) // creates the queue
	waitListening(t, a)
	done := make(chan *PopResult, 1)
	go func() {
		r, _ := a.Pop(context.Background(), PopRequest{Queue: q, Wait: true, Timeout: 5 * time.Second})
		done <- r
	}()
	// Parked for 1 s, the pop re-checks at
	// 0.9 s and next at 1.7 s, so only a wake delivers within wakeBound.
	time.Sleep(time.Second)
	pushed := time.Now()
	mustPush(t, b, items(q, "p", "wake")...)
	r := <-done
	if r == nil || len(r.Messages) != 1 {
		t.Fatalf("parked pop returned %v", r)
	}
	if latency := time.Since(pushed); latency > wakeBound {
		t.Fatalf("the pop parked on one broker was delivered %v after the push through another: a re-check, not a wake", latency)
	}
}

// waitListening waits until e's notification listener is on LISTEN: a push
// through another broker before then wakes nobody here, and a test timing a
// wake would time a re-check instead.
func waitListening(t *testing.T, e *Engine) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !e.listening.Load(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the notification listener did not attach within 10 s")
		}
	}
}
