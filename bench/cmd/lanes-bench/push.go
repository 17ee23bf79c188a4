package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// pushScenario runs producers concurrent producers, each pushing batch-sized
// requests to its own partition for the scenario's duration (closed loop).
func (h *harness) pushScenario(name string, producers, batch int) (Result, error) {
	q := h.queue(name)
	ctx := context.Background()
	// create the queue and partitions outside the window
	for p := 0; p < producers; p++ {
		if _, err := h.pushItems(ctx, []pushItem{{Queue: q, Partition: fmt.Sprintf("p%d", p), TransactionID: pushWarmID(p), Payload: benchPayload{Body: payloadBody}}}); err != nil {
			return Result{}, err
		}
	}
	runCtx, cancel := context.WithTimeout(ctx, h.o.duration)
	defer cancel()
	var sent atomic.Int64
	requestsAccepted := make([]atomic.Int64, producers) // producer p's requests 0..n-1 were all queued
	var firstErr firstError
	lat := &recorder{}
	var wg sync.WaitGroup
	w := h.begin(h.lanesDB, name)
	start := time.Now()
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			items := make([]pushItem, batch)
			for seq := 0; runCtx.Err() == nil; seq++ {
				for i := range items {
					items[i] = pushItem{Queue: q, Partition: fmt.Sprintf("p%d", p), TransactionID: pushID(p, seq, i),
						Payload: benchPayload{Seq: int64(seq*batch + i), Body: payloadBody}}
				}
				t0 := time.Now()
				n, err := h.pushItems(ctx, items)
				sent.Add(int64(n))
				if err != nil {
					firstErr.set(err)
					return
				}
				lat.add(time.Since(t0))
				requestsAccepted[p].Add(1)
			}
		}(p)
	}
	wg.Wait()
	r := Result{Scenario: name, System: "lanes", Available: true, Messages: sent.Load(), Seconds: time.Since(start).Seconds(),
		Description: fmt.Sprintf("%d producers × batch %d, one partition each, closed loop; latency = push request round trip", producers, batch)}
	w.end(&r)
	if err := firstErr.get(); err != nil {
		return r, err
	}
	r.MsgPerSec = float64(r.Messages) / r.Seconds
	r.LatencyMs = lat.percentiles()
	t := newTally(int(r.Messages) + producers)
	for p := range producers {
		t.expect(pushWarmID(p))
		for seq := range int(requestsAccepted[p].Load()) {
			for i := range batch {
				t.expect(pushID(p, seq, i))
			}
		}
	}
	storedTwice, err := h.tallyStored(ctx, q, t)
	if err != nil {
		return r, err
	}
	v := t.verdict()
	v.Duplicated += storedTwice
	r.setVerdict(v)
	return r, nil
}

// pushWarmID and pushID are the transaction ids of a push scenario: the
// message that creates producer p's partition, and item i of its seq-th push.
func pushWarmID(p int) string     { return fmt.Sprintf("warm-%d", p) }
func pushID(p, seq, i int) string { return fmt.Sprintf("%d-%d-%d", p, seq, i) }
