package main

import (
	"fmt"
	"slices"
	"strings"
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
		rep := check(led, loops, inj, true, nil)
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
		if rep := check(led, loops, inj, false, nil); len(rep.Groups["group-each"].Lost) != 1 || rep.ok() {
			t.Fatalf("lost %v, verdict %q", rep.Groups["group-each"].Lost, rep.verdict())
		}
	})
	t.Run("a later message handled first is out of order", func(t *testing.T) {
		led, loops, inj := newRun()
		clean(led, "group-batch", "q/p/1", "q/p/2", "q/p/3")
		deliverAll(led, "group-batch", "q/p/1", "q/p/3", "q/p/2")
		if rep := check(led, loops, inj, true, nil); len(rep.Groups["group-batch"].OutOfOrder) != 1 || rep.ok() {
			t.Fatalf("out of order %v, verdict %q", rep.Groups["group-batch"].OutOfOrder, rep.verdict())
		}
	})
	t.Run("a message never pushed is a phantom", func(t *testing.T) {
		led, loops, inj := newRun()
		clean(led, "", "q/p/1", "q/p/2", "q/p/3", "q/p/9")
		if rep := check(led, loops, inj, true, nil); len(rep.Groups["queue-mode"].Phantom) != 1 || rep.ok() {
			t.Fatalf("phantom %v, verdict %q", rep.Groups["queue-mode"].Phantom, rep.verdict())
		}
	})
	t.Run("a redelivery nothing explains is counted, not a failure", func(t *testing.T) {
		led, loops, inj := newRun()
		inj.events = nil
		clean(led, "", "q/p/1", "q/p/1", "q/p/2", "q/p/3")
		rep := check(led, loops, inj, true, nil)
		if g := rep.Groups["queue-mode"]; len(g.Unexplained) != 1 || !rep.ok() {
			t.Fatalf("unexplained %v, verdict %q", g.Unexplained, rep.verdict())
		}
	})
}

// An acknowledged message a group never handled is lost when a later one of its partition reached
// that group, or when it is in the partition's tail and the run drained or the broker does not
// hold the tail; only a tail the broker still holds after a run that did not drain is a backlog.
func TestCheckTellsAnUndrainedTailFromALoss(t *testing.T) {
	t0 := time.Now()
	// Partition q/p gets seqs 1-4 and q/other seqs 1-2, all acknowledged; every group but
	// group-each handles all of them, group-each only the seqs of q/p given.
	newRun := func(eachHandles ...int) (*ledger, []*consumeLoop, *injector) {
		led := newLedger()
		var all []*pushRecord
		for _, part := range []string{"p", "other"} {
			for seq := 1; seq <= map[string]int{"p": 4, "other": 2}[part]; seq++ {
				r := &pushRecord{Key: fmt.Sprintf("q/%s/%d", part, seq), Queue: "q", Partition: part, Seq: seq}
				led.sent(r)
				led.acked(r, "queued", false)
				all = append(all, r)
			}
		}
		handle := func(group string, r *pushRecord) {
			led.delivered(delivery{Key: r.Key, Queue: "q", Group: group, Partition: r.Partition, At: t0.Add(time.Duration(len(led.deliveries)) * time.Millisecond)})
		}
		for _, g := range soakGroups {
			for _, r := range all {
				if g.label != "group-each" || r.Partition == "other" || slices.Contains(eachHandles, r.Seq) {
					handle(g.label, r)
				}
			}
		}
		return led, []*consumeLoop{{id: 0, warns: &warnLog{counts: map[string]int{}}}}, &injector{busy: map[string]bool{}}
	}
	heldByEach := func(pending int) backlog { return backlog{"group-each": {"q/p": pending}} }

	for _, tc := range []struct {
		name       string
		handled    []int
		drained    bool
		held       backlog
		lost       int
		notDrained int
		verdictHas []string
	}{
		{name: "a tail the broker holds after a run that did not drain is not drained",
			handled: []int{1, 2}, held: heldByEach(2), notDrained: 2,
			verdictHas: []string{"group-each did not reach 2 acknowledged messages in 1 partition,", "not lost", "did not drain within -drain 5s", "longer -drain"}},
		{name: "a tail the broker holds more than is not drained (unacknowledged pushes count too)",
			handled: []int{1, 2}, held: heldByEach(7), notDrained: 2},
		{name: "a tail the broker holds nothing of is lost",
			handled: []int{1, 2}, held: heldByEach(0), lost: 2, verdictHas: []string{"group-each lost 2 acknowledged messages"}},
		{name: "a tail longer than the broker holds is lost",
			handled: []int{1, 2}, held: heldByEach(1), lost: 2},
		{name: "a tail after a run that drained is lost",
			handled: []int{1, 2}, drained: true, held: heldByEach(2), lost: 2},
		{name: "a hole is lost even when the broker holds a backlog",
			handled: []int{1, 3}, held: heldByEach(5), lost: 1, notDrained: 1,
			verdictHas: []string{"group-each lost 1 acknowledged messages", "did not reach 1 acknowledged messages"}},
		{name: "a run that did not drain fails with nothing missing",
			handled: []int{1, 2, 3, 4}, held: heldByEach(1), verdictHas: []string{"did not drain within -drain 5s", "longer -drain"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			led, loops, inj := newRun(tc.handled...)
			rep := check(led, loops, inj, tc.drained, tc.held)
			rep.DrainLimit = "5s"
			g := rep.Groups["group-each"]
			if len(g.Lost) != tc.lost || g.NotDrained != tc.notDrained {
				t.Fatalf("lost %v, not drained %d; want %d lost, %d not drained", g.Lost, g.NotDrained, tc.lost, tc.notDrained)
			}
			for _, other := range []string{"queue-mode", "group-batch"} {
				if o := rep.Groups[other]; len(o.Lost) != 0 || o.NotDrained != 0 {
					t.Fatalf("%s: lost %v, not drained %d", other, o.Lost, o.NotDrained)
				}
			}
			if tc.drained && tc.lost == 0 && !rep.ok() || !tc.drained && rep.ok() {
				t.Fatalf("drained %v, lost %d, verdict %q", tc.drained, tc.lost, rep.verdict())
			}
			for _, want := range tc.verdictHas {
				if !strings.Contains(rep.verdict(), want) {
					t.Errorf("verdict %q lacks %q", rep.verdict(), want)
				}
			}
		})
	}
}
