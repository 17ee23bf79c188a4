package main

import (
	"sync"
	"sync/atomic"
)

// parallelBatches runs batches 0..count-1 over workers goroutines, handing them out in order,
// and returns once every worker has stopped. A worker stops at its own first error, and no
// batch is handed out once errs holds one: errs may be shared with the scenario's other
// goroutines (its consumers), so a failing consumer stops the producers too.
func parallelBatches(workers, count int, errs *firstError, run func(worker, batch int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for errs.get() == nil {
				b := int(next.Add(1) - 1)
				if b >= count {
					return
				}
				if err := run(w, b); err != nil {
					errs.set(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// batchSpan is where batch i of size items starts in a run of n items, and how many it holds.
func batchSpan(i, size, n int) (start, count int) {
	start = i * size
	return start, min(size, n-start)
}

// batchCount is how many batches of size items n items make.
func batchCount(n, size int) int { return (n + size - 1) / size }

// firstError keeps the first error any goroutine of a scenario reports.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (f *firstError) set(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}
