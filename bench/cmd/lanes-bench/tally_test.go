package main

import (
	"fmt"
	"sync"
	"testing"
)

// The verdict compares keys, not counts: a key accepted and never arrived is
// lost, a key arrived and never accepted is unexpected, and every arrival of
// a key beyond its first is duplicated, so none of them can hide another.
func TestTallyVerdictComparesAcceptedAndArrivedKeys(t *testing.T) {
	for _, c := range []struct {
		name     string
		expected []string
		arrived  []string
		want     verdict
	}{
		{"exact arrivals: nothing", []string{"a", "b", "c"}, []string{"a", "b", "c"}, verdict{}},
		{"a missing arrival is lost", []string{"a", "b", "c", "d"}, []string{"a", "b", "c"}, verdict{Lost: 1}},
		{"every repeat beyond the first is duplicated", []string{"a", "b"}, []string{"a", "a", "a", "b", "b"}, verdict{Duplicated: 3}},
		// as many arrivals as accepted keys, one key twice: the duplicate must not hide the loss
		{"lost and duplicated together", []string{"a", "b", "c"}, []string{"a", "a", "b"}, verdict{Lost: 1, Duplicated: 1}},
		// as many distinct arrivals as accepted keys: the stranger must not hide the loss
		{"lost and never pushed together", []string{"a", "b"}, []string{"a", "x"}, verdict{Lost: 1, Unexpected: 1}},
		{"nothing arrived loses everything", []string{"a", "b", "c", "d", "e"}, nil, verdict{Lost: 5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tl := newTally(len(c.expected))
			tl.expect(c.expected...)
			tl.add(c.arrived...)
			if got := tl.verdict(); got != c.want {
				t.Fatalf("verdict = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestTallyIsSafeForConcurrentConsumers(t *testing.T) {
	// consumers of a scenario add from many goroutines at once (run with -race to see a data race)
	tl := newTally(800)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				tl.expect(fmt.Sprintf("%d/%d", g, i))
				tl.add(fmt.Sprintf("%d/%d", g, i))
			}
		}()
	}
	wg.Wait()
	if v := tl.verdict(); v != (verdict{}) {
		t.Fatalf("verdict = %+v, want nothing lost", v)
	}
}

func TestSetVerdictMarksTheLossChecked(t *testing.T) {
	var r Result
	r.setVerdict(verdict{Lost: 2, Unexpected: 1, Duplicated: 3})
	if !r.LossChecked || r.Lost != 2 || r.Unexpected != 1 || r.Duplicated != 3 {
		t.Fatalf("result after setVerdict: %+v", r)
	}
}
