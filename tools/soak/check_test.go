package main

import (
	"testing"
	"time"
)

// The verdict flags each way a run breaks the promise, and passes a run whose only blemishes are
// the redeliveries at-least-once allows.
func TestCheckFlagsLossPhantomAndOrderButNotExplainedDuplicates(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	newRun := func() (*ledger, []*consumeLoop, *injector) {
		led := newLedger()
		for seq, status := range []string{"queued", "buffered", "duplicate", ""} {
			r := &pushRecord{Key: "q/p/" + string(rune('1'+seq)), Queue: "q", Partition: "p", Seq: seq + 1}
			led.sent(r)
			if status != "" {
				led.acked(r, status, false)
			}
		}
		loops := []*consumeLoop{{id: 0, warns: &warnLog{counts: map[string]int{}}}}
		inj := &injector{busy: map[string]bool{}, events: []faultEvent{{Kind: faultPGCrash, Start: at(250), End: at(260)}}}
		return led, loops, inj
	}
	deliverAll := func(led *ledger, group string, keys ...string) {
		for i, k := range keys {
			led.delivered(delivery{Key: k, Queue: "q", Group: group, Partition: "p", At: at(100 * (i + 1))})
		}
	}
	clean := func(led *ledger, except string, keys ...string) {
		for _, g := range soakGroups {
			if g.label != except {
				deliverAll(led, g.label, keys...)
			}
		}
	}

	t.Run("a clean run with a redelivery across a crash passes", func(t *testing.T) {
		led, loops, inj := newRun()
		clean(led, "", "q/p/1", "q/p/2", "q/p/2", "q/p/3")
		if !led.caughtUp() {
			t.Fatal("every group handled every acknowledged message, yet not caught up")
		}
		rep := check(led, loops, inj)
		if !rep.ok() {
			t.Fatalf("verdict %q", rep.verdict())
		}
		if g := rep.Groups["queue-mode"]; g.Duplicates != 1 || g.DuplicatesBy[dupAfterFault] != 1 {
			t.Fatalf("duplicates %d by %v", g.Duplicates, g.DuplicatesBy)
		}
		if rep.Unacknowledged != 1 {
			t.Fatalf("unacknowledged %d", rep.Unacknowledged)
		}
	})
	t.Run("an acknowledged message one group never handled is lost", func(t *testing.T) {
		led, loops, inj := newRun()
		clean(led, "group-each", "q/p/1", "q/p/2", "q/p/3")
		deliverAll(led, "group-each", "q/p/1", "q/p/3")
		if led.caughtUp() {
			t.Fatal("caught up with a message one group never handled")
		}
		if rep := check(led, loops, inj); len(rep.Groups["group-each"].Lost) != 1 || rep.ok() {
			t.Fatalf("lost %v, verdict %q", rep.Groups["group-each"].Lost, rep.verdict())
		}
	})
	t.Run("a later message handled first is out of order", func(t *testing.T) {
		led, loops, inj := newRun()
		clean(led, "group-batch", "q/p/1", "q/p/2", "q/p/3")
		deliverAll(led, "group-batch", "q/p/1", "q/p/3", "q/p/2")
		if rep := check(led, loops, inj); len(rep.Groups["group-batch"].OutOfOrder) != 1 || rep.ok() {
			t.Fatalf("out of order %v, verdict %q", rep.Groups["group-batch"].OutOfOrder, rep.verdict())
		}
	})
	t.Run("a message never pushed is a phantom", func(t *testing.T) {
		led, loops, inj := newRun()
		clean(led, "", "q/p/1", "q/p/2", "q/p/3", "q/p/9")
		if rep := check(led, loops, inj); len(rep.Groups["queue-mode"].Phantom) != 1 || rep.ok() {
			t.Fatalf("phantom %v, verdict %q", rep.Groups["queue-mode"].Phantom, rep.verdict())
		}
	})
	t.Run("a redelivery nothing explains is counted, not a failure", func(t *testing.T) {
		led, loops, inj := newRun()
		inj.events = nil
		clean(led, "", "q/p/1", "q/p/1", "q/p/2", "q/p/3")
		rep := check(led, loops, inj)
		if g := rep.Groups["queue-mode"]; len(g.Unexplained) != 1 || !rep.ok() {
			t.Fatalf("unexplained %v, verdict %q", g.Unexplained, rep.verdict())
		}
	})
}
