package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// preloadID is the transaction id of message n of partition p of a preload.
func preloadID(p, n int) string { return fmt.Sprintf("p%d-%d", p, n) }

// expectPreload records a preload's messages in t.
func expectPreload(t *tally, partitions, perPartition int) {
	for p := range partitions {
		for n := range perPartition {
			t.expect(preloadID(p, n))
		}
	}
}

// preload fills partitions × perPartition messages (transaction ids preloadID) with 8 pushers.
func (h *harness) preload(ctx context.Context, q string, partitions, perPartition int) error {
	const batch = 100
	perPartitionBatches := batchCount(perPartition, batch)
	var errs firstError
	parallelBatches(8, partitions*perPartitionBatches, &errs, func(_, b int) error {
		p := b / perPartitionBatches
		off, n := batchSpan(b%perPartitionBatches, batch, perPartition)
		items := make([]pushItem, n)
		for k := range items {
			items[k] = pushItem{Queue: q, Partition: fmt.Sprintf("p%d", p), TransactionID: preloadID(p, off+k), Payload: benchPayload{Seq: int64(off + k), Body: payloadBody}}
		}
		_, err := h.pushItems(ctx, items)
		return err
	})
	return errs.get()
}

// consumedBatch is one pop's delivery after its ack: Acked holds the messages
// whose ack took effect, Redelivered counts those whose ack did not because
// their lease had expired and the message went (or goes) to another consumer.
type consumedBatch struct {
	Acked       []popMessage
	Redelivered int
	PoppedAt    time.Time // the pop answered
	AckedAt     time.Time // the ack answered (committed)
}

// ackResult is the part of an ack answer the tally reads.
type ackResult struct {
	Success bool    `json:"success"`
	Noop    bool    `json:"noop"`
	Error   *string `json:"error"`
}

// errInvalidLease is the broker's rejection of an ack whose lease expired.
const errInvalidLease = "invalid or expired lease"

// sortAcks splits a popped batch by its ack results: an ack took effect when
// it succeeded and was not a noop; a noop (the cursor had passed it: another
// consumer acked it after the lease expired) or an expired-lease rejection is
// a redelivery, which at-least-once delivery allows; any other rejection is
// an error.
func sortAcks(ms []popMessage, res []ackResult) (acked []popMessage, redelivered int, err error) {
	if len(res) != len(ms) {
		return nil, 0, fmt.Errorf("ack answered %d results for %d messages", len(res), len(ms))
	}
	acked = make([]popMessage, 0, len(ms))
	for i, r := range res {
		switch {
		case r.Success && !r.Noop:
			acked = append(acked, ms[i])
		case r.Noop, r.Error != nil && *r.Error == errInvalidLease:
			redelivered++
		default:
			msg := "unknown"
			if r.Error != nil {
				msg = *r.Error
			}
			return nil, 0, fmt.Errorf("ack rejected: %s", msg)
		}
	}
	return acked, redelivered, nil
}

// consumeLoop pops batch-sized leases from q (group "" = queue mode) and acks
// each batch until stop says so; every acked batch goes to onBatch.
func (h *harness) consumeLoop(ctx context.Context, q, group string, batch int, stop func() bool, onBatch func(consumedBatch)) error {
	params := url.Values{"batch": {fmt.Sprint(batch)}, "wait": {"true"}, "timeout": {"200"}}
	if group != "" {
		params.Set("consumerGroup", group)
		params.Set("subscriptionMode", "all")
	}
	path := "/api/v1/pop/queue/" + url.PathEscape(q) + "?" + params.Encode()
	for !stop() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var pop popResponse
		status, err := h.do(ctx, http.MethodGet, path, nil, &pop)
		if err != nil {
			return err
		}
		popped := time.Now()
		if status == http.StatusNoContent || len(pop.Messages) == 0 {
			continue
		}
		acks := make([]ackItem, len(pop.Messages))
		for i, m := range pop.Messages {
			acks[i] = ackItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: pop.LeaseID, Status: "completed"}
		}
		body := map[string]any{"acknowledgments": acks}
		if group != "" {
			body["consumerGroup"] = group
		}
		var res []ackResult
		if _, err := h.do(ctx, http.MethodPost, "/api/v1/ack/batch", body, &res); err != nil {
			return err
		}
		b := consumedBatch{PoppedAt: popped, AckedAt: time.Now()}
		if b.Acked, b.Redelivered, err = sortAcks(pop.Messages, res); err != nil {
			return err
		}
		onBatch(b)
	}
	return nil
}

// drainDeadlineError is the error of a scenario whose consumers gave up
// before every message arrived: its rate would be measured on the timeout.
func drainDeadlineError(after time.Duration, arrived, expected int64) error {
	return fmt.Errorf("drain deadline (%s) expired with %d of %d messages done", after.Round(time.Second), arrived, expected)
}

// backlogQueue is the scenario's queue, preloaded with partitions × perPartition
// messages (preloadID) and checkpointed, and how many messages it holds.
func (h *harness) backlogQueue(ctx context.Context, name string, partitions, perPartition int) (q string, total int64, err error) {
	q = h.queue(name)
	if err := h.preload(ctx, q, partitions, perPartition); err != nil {
		return "", 0, err
	}
	h.settle(ctx)
	return q, int64(partitions * perPartition), nil
}

// consumeScenario preloads a backlog and drains it with consumers per group
// (queue mode when groups is 0), checking every message arrives once per group.
func (h *harness) consumeScenario(name string, groups, consumersPerGroup, partitions, perPartition int) (Result, error) {
	ctx := context.Background()
	q, total, err := h.backlogQueue(ctx, name, partitions, perPartition)
	if err != nil {
		return Result{}, err
	}
	names := []string{""}
	if groups > 0 {
		names = names[:0]
		for g := 0; g < groups; g++ {
			names = append(names, fmt.Sprintf("g%d", g))
		}
	}
	drainFor := 10*h.o.duration + time.Minute
	deadline := time.Now().Add(drainFor)
	var wg sync.WaitGroup
	var redelivered atomic.Int64
	var firstErr firstError
	tallies := make([]*tally, len(names))
	counts := make([]atomic.Int64, len(names))
	w := h.begin(h.lanesDB, name)
	start := time.Now()
	for gi, g := range names {
		tallies[gi] = newTally(int(total))
		expectPreload(tallies[gi], partitions, perPartition)
		for c := 0; c < consumersPerGroup; c++ {
			wg.Add(1)
			go func(gi int, g string) {
				defer wg.Done()
				stop := func() bool { return counts[gi].Load() >= total || time.Now().After(deadline) || firstErr.get() != nil }
				err := h.consumeLoop(ctx, q, g, 100, stop, func(b consumedBatch) {
					tallies[gi].add(transactionIDs(b.Acked)...)
					counts[gi].Add(int64(len(b.Acked)))
					redelivered.Add(int64(b.Redelivered))
				})
				if err != nil {
					firstErr.set(err)
				}
			}(gi, g)
		}
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	mode := "queue mode"
	if groups > 0 {
		mode = fmt.Sprintf("%d consumer groups (fan-out, subscriptionMode=all), %d consumers each", groups, consumersPerGroup)
	} else {
		mode += fmt.Sprintf(", %d consumers", consumersPerGroup)
	}
	r := Result{Scenario: name, System: "lanes", Available: true, Seconds: elapsed,
		Description: fmt.Sprintf("drain a %d-message backlog (%d partitions × %d), pop batch 100 + ack batch, %s; msg/s counts deliveries", total, partitions, perPartition, mode)}
	w.end(&r)
	var v verdict
	for gi := range names {
		r.Messages += counts[gi].Load()
		gv := tallies[gi].verdict()
		v.Lost, v.Unexpected, v.Duplicated = v.Lost+gv.Lost, v.Unexpected+gv.Unexpected, v.Duplicated+gv.Duplicated
	}
	r.setVerdict(v)
	r.Redelivered = redelivered.Load()
	if err := firstErr.get(); err != nil {
		return r, err
	}
	if want := total * int64(len(names)); r.Messages < want {
		return r, drainDeadlineError(drainFor, r.Messages, want)
	}
	r.MsgPerSec = float64(r.Messages) / elapsed
	return r, nil
}

// transactionIDs are the tally keys of ms: every scenario's ids are unique
// within its queue.
func transactionIDs(ms []popMessage) []string {
	keys := make([]string, len(ms))
	for i, m := range ms {
		keys[i] = m.TransactionID
	}
	return keys
}
