package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// partitionScenario measures sustained throughput on a queue of n partitions
// of which 1% (at least one) are busy. The idle ones each hold one
// already-consumed message, as partitions that were active once do; the bulk
// setup is then vacuumed, as autovacuum would have done while they were
// created on a running system. During the window 8 producers push batch 100
// round-robin over the busy partitions while 8 queue-mode consumers pop batch
// 100 + ack; msg/s counts acked messages. Producers hold back while the
// backlog (pushed, not yet acked) exceeds two batches per busy partition (at
// least 20,000 messages), so the figure is what the broker sustains end to end
// rather than how fast a backlog grows: unbounded producers took CPU from the
// consumers of a 2-core machine and measured a backlog nobody drains. The
// window starts after a warm-up of half its length.
// After the window the producers stop and the rest is drained to check that
// nothing was lost or delivered twice.
func (h *harness) partitionScenario(n int) (Result, error) {
	q := h.queue(fmt.Sprintf("parts%d", n))
	ctx := context.Background()
	busy := max(1, n/100)
	setupStart := time.Now()
	if err := h.createIdlePartitions(ctx, q, n); err != nil {
		return Result{}, fmt.Errorf("creating %d partitions: %w", n, err)
	}
	h.maintain(ctx, "VACUUM (ANALYZE)")
	setup := time.Since(setupStart)
	h.settle(ctx)

	const producers, consumers, batch = 8, 8, 100
	maxBacklog := int64(max(20000, busy*2*batch))
	seen := newTally(1 << 16)
	var pushed, received, redelivered atomic.Int64
	batchesAccepted := make([]atomic.Int64, producers) // producer p's batches 0..n-1 were all queued
	var inWindow atomic.Int64
	var firstErr firstError
	producing := atomic.Bool{}
	producing.Store(true)
	pushersDone := atomic.Bool{} // set once no push is in flight any more
	windowOpen := atomic.Bool{}  // opens after the warm-up
	drainDeadline := atomic.Int64{}
	drainDeadline.Store(time.Now().Add(time.Hour).UnixNano())
	var pwg, cwg sync.WaitGroup
	for p := 0; p < producers; p++ {
		pwg.Add(1)
		go func(p int) {
			defer pwg.Done()
			items := make([]pushItem, batch)
			for k := 0; producing.Load() && firstErr.get() == nil; k++ {
				for pushed.Load()-received.Load() > maxBacklog && producing.Load() && firstErr.get() == nil {
					time.Sleep(time.Millisecond)
				}
				part := (p + k*producers) % busy
				for i := range items {
					items[i] = pushItem{Queue: q, Partition: fmt.Sprintf("p%d", part), TransactionID: partsID(p, k, i), Payload: benchPayload{Seq: int64(k), Body: payloadBody}}
				}
				c, err := h.pushItems(ctx, items)
				pushed.Add(int64(c))
				if err != nil {
					firstErr.set(err)
					return
				}
				batchesAccepted[p].Add(1)
			}
		}(p)
	}
	for c := 0; c < consumers; c++ {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			stop := func() bool {
				return firstErr.get() != nil || (pushersDone.Load() && received.Load() >= pushed.Load()) || time.Now().UnixNano() > drainDeadline.Load()
			}
			err := h.consumeLoop(ctx, q, "", batch, stop, func(b consumedBatch) {
				seen.add(transactionIDs(b.Acked)...)
				received.Add(int64(len(b.Acked)))
				redelivered.Add(int64(b.Redelivered))
				if windowOpen.Load() {
					inWindow.Add(int64(len(b.Acked)))
				}
			})
			if err != nil {
				firstErr.set(err)
			}
		}()
	}
	// Warm-up, not counted: the first seconds after a bulk setup measure how the
	// database settles after it (see docs/benchmarks.md), not the steady state.
	time.Sleep(h.o.duration / 2)
	w := h.begin(h.lanesDB, fmt.Sprintf("parts%d", n))
	start := time.Now()
	pushedBefore := pushed.Load()
	windowOpen.Store(true)
	time.Sleep(h.o.duration)
	windowOpen.Store(false)
	secs := time.Since(start).Seconds()
	pushedInWindow := pushed.Load() - pushedBefore
	r := Result{Scenario: fmt.Sprintf("parts-%d", n), System: "lanes", Available: true, Partitions: n, Seconds: secs,
		Messages: inWindow.Load(), MsgPerSec: float64(inWindow.Load()) / secs, PushedPerSec: float64(pushedInWindow) / secs,
		Description: fmt.Sprintf("%d partitions, %d busy (8 producers push batch 100 round-robin over them, holding back above a %d-message backlog; 8 consumers pop batch 100 + ack); msg/s = acked per second after a warm-up of half the window; setup of the idle partitions (vacuum included) took %.1f s", n, busy, maxBacklog, setup.Seconds())}
	w.end(&r)
	r.Seconds = secs
	producing.Store(false)
	pwg.Wait()
	pushersDone.Store(true)
	const drainFor = 60 * time.Second
	drainDeadline.Store(time.Now().Add(drainFor).UnixNano())
	cwg.Wait()
	for p := range producers {
		for k := range int(batchesAccepted[p].Load()) {
			for i := range batch {
				seen.expect(partsID(p, k, i))
			}
		}
	}
	r.setVerdict(seen.verdict())
	r.Redelivered = redelivered.Load()
	if err := firstErr.get(); err != nil {
		return r, err
	}
	if received.Load() < pushed.Load() {
		return r, drainDeadlineError(drainFor, received.Load(), pushed.Load())
	}
	return r, nil
}

// partsID is the transaction id of item i of producer p's k-th push.
func partsID(p, k, i int) string { return fmt.Sprintf("b%d-%d-%d", p, k, i) }

// createIdlePartitions gives queue q partitions p0..p(n-1), each with one
// message that is then consumed, so they exist, hold a log and have a cursor.
func (h *harness) createIdlePartitions(ctx context.Context, q string, n int) error {
	const perRequest = 1000
	var errs firstError
	parallelBatches(4, batchCount(n, perRequest), &errs, func(_, b int) error {
		base, k := batchSpan(b, perRequest, n)
		items := make([]pushItem, k)
		for j := range items {
			items[j] = pushItem{Queue: q, Partition: fmt.Sprintf("p%d", base+j), TransactionID: "idle", Payload: benchPayload{Seq: -1}}
		}
		_, err := h.pushItems(ctx, items)
		return err
	})
	if err := errs.get(); err != nil {
		return err
	}
	// consume them all (autoAck, no width cap)
	drained := 0
	deadline := time.Now().Add(10 * time.Minute)
	for drained < n && time.Now().Before(deadline) {
		var pop popResponse
		status, err := h.do(ctx, http.MethodGet, "/api/v1/pop/queue/"+q+"?batch=10000&partitions=0&autoAck=true", nil, &pop)
		if err != nil {
			return err
		}
		if status == http.StatusNoContent {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		drained += len(pop.Messages)
	}
	if drained < n {
		return fmt.Errorf("drained %d of %d setup messages", drained, n)
	}
	// One more pop, which finds nothing, as a live consumer's next poll would:
	// the last draining claim still saw work, so the group's claim floor stayed
	// below every setup write, and the window's first claims would walk all n
	// partitions (1.4 s each at 100,000) before one of them moved it.
	var pop popResponse
	if _, err := h.do(ctx, http.MethodGet, "/api/v1/pop/queue/"+q+"?batch=1&autoAck=true", nil, &pop); err != nil {
		return err
	}
	if len(pop.Messages) != 0 {
		return fmt.Errorf("setup queue still held %d messages after the drain", len(pop.Messages))
	}
	return nil
}
