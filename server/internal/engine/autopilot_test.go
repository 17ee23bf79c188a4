package engine

import (
	"io"
	"log/slog"
	"testing"
	"time"
)

// Controller rules as pure logic: each step is one observed pop.

func TestLaneSnapsWidthToReadyPressure(t *testing.T) {
	l := &lane{width: 1}
	now := time.Unix(0, 0)
	if w := l.step(laneSample{ready: 12, delivered: 100, batch: 100}, now); w != 12 {
		t.Fatalf("first observation of 12 ready partitions: width %d", w)
	}
	// The hard ceiling holds however much is ready.
	l = &lane{width: 1}
	if w := l.step(laneSample{ready: 5000, delivered: 100, batch: 100}, now); w != autopilotMaxWidth {
		t.Fatalf("ceiling: width %d", w)
	}
}

func TestLaneDoublesOnAgeAndShrinksWhenIdle(t *testing.T) {
	now := time.Unix(0, 0)
	l := &lane{width: 4}
	l.step(laneSample{ready: 2, delivered: 100, batch: 100, wait: time.Second}, now)
	if l.width != 8 {
		t.Fatalf("old work should double the width: %d", l.width)
	}
	// Idle: nothing ready, nothing waited, batches mostly empty. One halving per dwell.
	l = &lane{width: 8, observed: true, lastChange: now}
	now = now.Add(autopilotDwell)
	for i := 0; i < 10; i++ {
		l.step(laneSample{ready: 0, delivered: 0, batch: 100}, now)
	}
	if l.width != 4 {
		t.Fatalf("shrink should wait for the dwell: %d after one dwell, want 4", l.width)
	}
	for i := 0; i < 10; i++ {
		now = now.Add(autopilotDwell)
		l.step(laneSample{ready: 0, delivered: 0, batch: 100}, now)
	}
	if l.width != 1 {
		t.Fatalf("idle lane should shrink to 1: %d", l.width)
	}
}

func TestLaneHoldsWhenBalanced(t *testing.T) {
	now := time.Unix(0, 0)
	l := &lane{width: 8}
	for i := 0; i < 50; i++ {
		now = now.Add(time.Second)
		// Full batches, 6 ready, young work: neither grow nor shrink.
		if w := l.step(laneSample{ready: 6, delivered: 100, batch: 100, wait: time.Millisecond}, now); w != 8 {
			t.Fatalf("step %d: width %d, want 8", i, w)
		}
	}
}

func TestLaneDwellAllowsOneChangePerWindowOrSixteenPops(t *testing.T) {
	now := time.Unix(0, 0)
	l := &lane{width: 1}
	l.step(laneSample{ready: 4, delivered: 1, batch: 100}, now) // first change: 4
	changes := 0
	last := l.width
	for i := 0; i < autopilotDwellPops-1; i++ {
		l.step(laneSample{ready: 40, delivered: 100, batch: 100}, now)
		if l.width != last {
			changes++
			last = l.width
		}
	}
	if changes != 0 {
		t.Fatalf("width changed %d times inside the dwell", changes)
	}
	l.step(laneSample{ready: 40, delivered: 100, batch: 100}, now) // the 16th pop may move it
	if l.width == 4 {
		t.Fatal("16 pops should end the dwell")
	}
}

func TestIdleLaneSplitsReadyAmongLivePops(t *testing.T) {
	now := time.Unix(0, 0)
	l := &lane{width: 64, ready: 30, observed: true, lastSeen: now, live: 2}
	if w := l.planWidth(now.Add(2 * time.Second)); w != 10 {
		t.Fatalf("idle lane with 30 ready and 3 pops: width %d, want 10", w)
	}
	if w := (&lane{}).planWidth(now); w != 1 {
		t.Fatalf("cold lane: width %d", w)
	}
}

func TestAutopilotPlanLeavesExplicitKnobs(t *testing.T) {
	a := newAutopilot(AutopilotOn, slog.New(slog.NewTextHandler(io.Discard, nil)))
	key := laneKey{scope: "q", group: "g"}
	a.lanes[key] = &lane{key: key, width: 20, ready: 20, observed: true, lastSeen: time.Now()}

	req := PopRequest{Queue: "q", Group: "g", Partitions: 3, Batch: 0, AutoBatch: true}
	a.plan(&req)
	if req.Partitions != 3 || req.Batch != autopilotBatch {
		t.Fatalf("explicit width: %+v", req)
	}
	req = PopRequest{Queue: "q", Group: "g", Partitions: 1, Batch: 7, AutoWidth: true}
	a.plan(&req)
	if req.Partitions != 20 || req.Batch != 7 {
		t.Fatalf("explicit batch: %+v", req)
	}
	req = PopRequest{Queue: "q", Group: "g", Partitions: 5, Batch: 9}
	if l := a.plan(&req); l != nil || req.Partitions != 5 || req.Batch != 9 {
		t.Fatalf("not engaged: %+v", req)
	}
	off := newAutopilot(AutopilotOff, slog.Default())
	req = PopRequest{Queue: "q", Group: "g", Partitions: 1, AutoBatch: true, AutoWidth: true}
	if l := off.plan(&req); l != nil || req.Partitions != 1 || req.Batch != autopilotLegacyBatch {
		t.Fatalf("off: %+v", req)
	}
}

func TestWaitAdviceGrowsWithEmptyPops(t *testing.T) {
	l := &lane{width: 1}
	now := time.Unix(0, 0)
	l.step(laneSample{delivered: 3, batch: 100}, now)
	if d := l.waitAdvice(); d != 0 {
		t.Fatalf("after a full pop: %v", d)
	}
	var last time.Duration
	for i := 0; i < 10; i++ {
		l.step(laneSample{batch: 100}, now)
		d := l.waitAdvice()
		if d < last || d > autopilotEmptyWaitMax || d == 0 {
			t.Fatalf("empty pop %d: advice %v after %v", i, d, last)
		}
		last = d
	}
	if last != autopilotEmptyWaitMax {
		t.Fatalf("advice should reach the max: %v", last)
	}
}
