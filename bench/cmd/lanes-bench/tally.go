package main

import (
	"hash/maphash"
	"sync"
)

// tally compares the messages a scenario had accepted (expect) with those that
// arrived (add: a delivery whose ack took effect, or a row the log holds), by
// key, so a loss and a duplicate cannot cancel out. It keeps a 128-bit hash of
// each key, not the key: a map without pointers is not walked by the garbage
// collector, and a quarter million string keys made marking and map inserts a
// quarter of the harness's CPU in consume-queue, CPU the broker and PostgreSQL
// share on this machine. Two of a million distinct keys share a hash with
// probability about 10⁻²⁷.
type tally struct {
	mu       sync.Mutex
	seeds    [2]maphash.Seed
	expected map[[2]uint64]struct{}
	seen     map[[2]uint64]uint32
}

// verdict is what a tally found.
type verdict struct {
	Lost       int64 // accepted, never arrived
	Unexpected int64 // arrived, never accepted
	Duplicated int64 // arrivals of a key beyond its first
}

func newTally(n int) *tally {
	return &tally{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		expected: make(map[[2]uint64]struct{}, n), seen: make(map[[2]uint64]uint32, n)}
}

func (t *tally) hash(k string) [2]uint64 {
	return [2]uint64{maphash.String(t.seeds[0], k), maphash.String(t.seeds[1], k)}
}

// expect records keys the broker accepted.
func (t *tally) expect(keys ...string) {
	t.mu.Lock()
	for _, k := range keys {
		t.expected[t.hash(k)] = struct{}{}
	}
	t.mu.Unlock()
}

// add records keys that arrived.
func (t *tally) add(keys ...string) {
	t.mu.Lock()
	for _, k := range keys {
		t.seen[t.hash(k)]++
	}
	t.mu.Unlock()
}

func (t *tally) verdict() verdict {
	t.mu.Lock()
	defer t.mu.Unlock()
	var v verdict
	for k, n := range t.seen {
		if _, ok := t.expected[k]; !ok {
			v.Unexpected++
		}
		v.Duplicated += int64(n - 1)
	}
	for k := range t.expected {
		if _, ok := t.seen[k]; !ok {
			v.Lost++
		}
	}
	return v
}

// setVerdict records v in r and marks r's loss as checked.
func (r *Result) setVerdict(v verdict) {
	r.LossChecked = true
	r.Lost, r.Unexpected, r.Duplicated = v.Lost, v.Unexpected, v.Duplicated
}
