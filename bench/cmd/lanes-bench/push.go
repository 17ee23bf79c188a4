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
		if _, err := h.pushItems(ctx, []pushItem{{Queue: q, Partition: fmt.Sprintf("p%d", p), TransactionID: fmt.Sprintf("warm-%d", p), Payload: benchPayload{Body: payloadBody}}}); err != nil {
			return Result{}, err
		}
	}
	runCtx, cancel := context.WithTimeout(ctx, h.o.duration)
	defer cancel()
	var sent atomic.Int64
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
					items[i] = pushItem{Queue: q, Partition: fmt.Sprintf("p%d", p), TransactionID: fmt.Sprintf("%d-%d-%d", p, seq, i),
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
	stored, err := h.storedMessages(ctx, q)
	if err != nil {
		return r, err
	}
	stored -= int64(producers) // the warm-up messages
	if stored < r.Messages {
		r.Lost = r.Messages - stored
	} else {
		r.Duplicated = stored - r.Messages
	}
	return r, nil
}
