package main

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestParallelBatchesRunsEveryBatchOnceOverTheWorkers(t *testing.T) {
	const workers, count = 4, 103
	var mu sync.Mutex
	runs := map[int]int{}
	var errs firstError
	parallelBatches(workers, count, &errs, func(w, b int) error {
		if w < 0 || w >= workers {
			t.Errorf("worker %d outside 0..%d", w, workers-1)
		}
		mu.Lock()
		runs[b]++
		mu.Unlock()
		return nil
	})
	if errs.get() != nil {
		t.Fatal(errs.get())
	}
	for b := 0; b < count; b++ {
		if runs[b] != 1 {
			t.Fatalf("batch %d ran %d times, want once", b, runs[b])
		}
	}
	if len(runs) != count {
		t.Fatalf("%d batches ran, want %d", len(runs), count)
	}
}

func TestParallelBatchesStopsHandingOutBatchesAtTheFirstError(t *testing.T) {
	const workers, count, failing = 4, 1000, 5
	boom := errors.New("boom")
	var ran atomic.Int64
	var errs firstError
	parallelBatches(workers, count, &errs, func(_, b int) error {
		ran.Add(1)
		time.Sleep(time.Millisecond)
		if b == failing {
			return boom
		}
		return nil
	})
	if !errors.Is(errs.get(), boom) {
		t.Fatalf("errs = %v, want the failing batch's error", errs.get())
	}
	// batches up to the failing one, plus at most one more per other worker already claimed
	// before it failed and one claimed while it was being recorded
	if n := ran.Load(); n > failing+1+2*(workers-1) {
		t.Fatalf("%d batches ran after batch %d failed", n, failing)
	}
}

func TestParallelBatchesRunsNothingOnceAnotherGoroutineFailed(t *testing.T) {
	var errs firstError
	errs.set(errors.New("a consumer failed"))
	parallelBatches(4, 10, &errs, func(_, _ int) error {
		t.Error("a batch ran after the scenario had already failed")
		return nil
	})
}

func TestBatchSpanShortensTheLastBatch(t *testing.T) {
	if n := batchCount(250, 100); n != 3 {
		t.Fatalf("batchCount(250, 100) = %d, want 3", n)
	}
	if start, count := batchSpan(2, 100, 250); start != 200 || count != 50 {
		t.Fatalf("batchSpan(2, 100, 250) = %d, %d, want 200, 50", start, count)
	}
}

func TestFirstErrorKeepsTheFirstError(t *testing.T) {
	var f firstError
	if f.get() != nil {
		t.Fatal("a fresh firstError holds an error")
	}
	first := errors.New("first")
	f.set(first)
	f.set(errors.New("second"))
	if !errors.Is(f.get(), first) {
		t.Fatalf("get = %v, want the first error", f.get())
	}
}
