package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// txnScenario measures the pipeline handoff: pop one message from stage A and,
// in one POST /api/v1/transaction, ack it and push its successor to stage B.
func (h *harness) txnScenario() (Result, error) {
	ctx := context.Background()
	qa, qb := h.queue("txn-a"), h.queue("txn-b")
	const partitions, workers = 8, 16
	per := h.o.txnBacklog / partitions
	if err := h.preload(ctx, qa, partitions, per); err != nil {
		return Result{}, err
	}
	h.settle(ctx)
	total := int64(partitions * per)
	var done atomic.Int64
	var firstErr firstError
	handedOff := newTally(int(total)) // stage A's messages, each to be handed off once
	stageB := newTally(int(total))    // the handoffs committed, to find in stage B's log
	lat := &recorder{}
	var wg sync.WaitGroup
	deadline := time.Now().Add(h.o.duration)
	w := h.begin(h.lanesDB, "txn")
	start := time.Now()
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done.Load() < total && time.Now().Before(deadline) && firstErr.get() == nil {
				var pop popResponse
				status, err := h.do(ctx, http.MethodGet, "/api/v1/pop/queue/"+qa+"?batch=1&wait=true&timeout=200", nil, &pop)
				if err != nil {
					firstErr.set(err)
					return
				}
				if status == http.StatusNoContent || len(pop.Messages) == 0 {
					continue
				}
				m := pop.Messages[0]
				t0 := time.Now()
				var res struct {
					Success bool   `json:"success"`
					Reason  string `json:"reason"`
					Error   string `json:"error"`
				}
				body := map[string]any{
					"operations": []map[string]any{
						{"type": "ack", "transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": pop.LeaseID, "status": "completed"},
						{"type": "push", "items": []map[string]any{{"queue": qb, "partition": m.Partition, "transactionId": successorID(m), "payload": m.Data}}},
					},
					"requiredLeases": []string{pop.LeaseID},
				}
				if _, err := h.do(ctx, http.MethodPost, "/api/v1/transaction", body, &res); err != nil {
					firstErr.set(err)
					return
				}
				if !res.Success {
					firstErr.set(fmt.Errorf("transaction rolled back: %s %s", res.Reason, res.Error))
					return
				}
				lat.add(time.Since(t0))
				handedOff.add(m.TransactionID)
				stageB.expect(successorID(m))
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	r := Result{Scenario: "txn", System: "lanes", Available: true, Messages: done.Load(), Seconds: time.Since(start).Seconds(),
		Description: fmt.Sprintf("pipeline handoff for the window, %d workers: pop 1 from stage A (%d-message backlog), then one transaction acks it and pushes its successor to the same-named partition of stage B; lost = committed handoffs missing from stage B; latency = transaction round trip", workers, total)}
	w.end(&r)
	if err := firstErr.get(); err != nil {
		return r, err
	}
	r.TxPerSec = float64(r.Messages) / r.Seconds
	r.MsgPerSec = r.TxPerSec
	r.LatencyMs = lat.percentiles()
	// Every committed handoff must have put exactly one message into stage B,
	// and no message of stage A may have been handed off twice (the window
	// ends before stage A is drained, so its unhanded rest is not lost).
	storedTwice, err := h.tallyStored(ctx, qb, stageB)
	if err != nil {
		return r, err
	}
	v := stageB.verdict()
	v.Duplicated += storedTwice + handedOff.verdict().Duplicated
	r.setVerdict(v)
	return r, nil
}

// successorID is the stage-B transaction id of stage-A message m.
func successorID(m popMessage) string { return m.PartitionID + "/" + m.TransactionID }
