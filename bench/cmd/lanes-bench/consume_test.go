package main

import (
	"fmt"
	"sync"
	"testing"
)

// The verdict counts each expected key never delivered as lost and every
// delivery of a key beyond its first as duplicated.
func TestTallyVerdictCountsLostAndDuplicatedDeliveries(t *testing.T) {
	for _, c := range []struct {
		name      string
		expected  int
		adds      [][]string
		lost, dup int64
	}{
		{"exact deliveries: neither", 3, [][]string{{"a", "b"}, {"c"}}, 0, 0},
		{"a missing delivery is lost", 4, [][]string{{"a", "b", "c"}}, 1, 0},
		// two extra deliveries of a, one of b
		{"every repeat beyond the first is duplicated", 2, [][]string{{"a", "a", "a"}, {"b"}, {"b"}}, 0, 3},
		// 3 deliveries of 3 expected keys, one key twice: a duplicate must not hide a loss
		{"lost and duplicated together", 3, [][]string{{"a", "a", "b"}}, 1, 1},
		{"nothing delivered loses everything", 5, nil, 5, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			tl := newTally(len(c.adds))
			for _, keys := range c.adds {
				tl.add(keys...)
			}
			if lost, dup := tl.verdict(int64(c.expected)); lost != c.lost || dup != c.dup {
				t.Fatalf("verdict = lost %d dup %d, want %d %d", lost, dup, c.lost, c.dup)
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
				tl.add(fmt.Sprintf("%d/%d", g, i))
			}
		}()
	}
	wg.Wait()
	if lost, dup := tl.verdict(800); lost != 0 || dup != 0 {
		t.Fatalf("verdict = lost %d dup %d, want 0 0", lost, dup)
	}
}
