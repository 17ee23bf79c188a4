package main

import (
	"context"
	"fmt"
	"hash/maphash"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// preload fills partitions × perPartition messages (transaction ids "p<i>-<n>") with 8 pushers.
func (h *harness) preload(ctx context.Context, q string, partitions, perPartition int) error {
	const batch = 100
	perPartitionBatches := batchCount(perPartition, batch)
	var errs firstError
	parallelBatches(8, partitions*perPartitionBatches, &errs, func(_, b int) error {
		p := b / perPartitionBatches
		off, n := batchSpan(b%perPartitionBatches, batch, perPartition)
		items := make([]pushItem, n)
		for k := range items {
			items[k] = pushItem{Queue: q, Partition: fmt.Sprintf("p%d", p), TransactionID: fmt.Sprintf("p%d-%d", p, off+k), Payload: benchPayload{Seq: int64(off + k), Body: payloadBody}}
		}
		_, err := h.pushItems(ctx, items)
		return err
	})
	return errs.get()
}

// tally counts deliveries per key to find the lost and the duplicated. It
// keeps a 128-bit hash of each key, not the key: a map without pointers is not
// walked by the garbage collector, and a quarter million string keys made
// marking and map inserts a quarter of the harness's CPU in consume-queue,
// CPU the broker and PostgreSQL share on this machine. Two of a million
// distinct keys share a hash with probability about 10⁻²⁷.
type tally struct {
	mu    sync.Mutex
	seeds [2]maphash.Seed
	seen  map[[2]uint64]uint32
}

func newTally(n int) *tally {
	return &tally{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, seen: make(map[[2]uint64]uint32, n)}
}

func (t *tally) add(keys ...string) {
	t.mu.Lock()
	for _, k := range keys {
		t.seen[[2]uint64{maphash.String(t.seeds[0], k), maphash.String(t.seeds[1], k)}]++
	}
	t.mu.Unlock()
}

// verdict compares the deliveries with the expected number of distinct keys.
func (t *tally) verdict(expected int64) (lost, dup int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range t.seen {
		if n > 1 {
			dup += int64(n - 1)
		}
	}
	return expected - int64(len(t.seen)), dup
}

// consumeLoop pops batch-sized leases from q (group "" = queue mode) and acks
// each batch until stop says so; every delivered message goes to onMsg.
func (h *harness) consumeLoop(ctx context.Context, q, group string, batch int, stop func() bool, onMsgs func([]popMessage)) error {
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
		var res []struct {
			Success bool    `json:"success"`
			Error   *string `json:"error"`
		}
		if _, err := h.do(ctx, http.MethodPost, "/api/v1/ack/batch", body, &res); err != nil {
			return err
		}
		for _, r := range res {
			if !r.Success {
				msg := "unknown"
				if r.Error != nil {
					msg = *r.Error
				}
				return fmt.Errorf("ack rejected: %s", msg)
			}
		}
		onMsgs(pop.Messages)
	}
	return nil
}

// consumeScenario preloads a backlog and drains it with consumers per group
// (queue mode when groups is 0), checking every message arrives once per group.
func (h *harness) consumeScenario(name string, groups, consumersPerGroup, partitions, perPartition int) (Result, error) {
	q := h.queue(name)
	ctx := context.Background()
	if err := h.preload(ctx, q, partitions, perPartition); err != nil {
		return Result{}, err
	}
	h.settle(ctx)
	total := int64(partitions * perPartition)
	names := []string{""}
	if groups > 0 {
		names = names[:0]
		for g := 0; g < groups; g++ {
			names = append(names, fmt.Sprintf("g%d", g))
		}
	}
	deadline := time.Now().Add(10*h.o.duration + time.Minute)
	var wg sync.WaitGroup
	var firstErr firstError
	tallies := make([]*tally, len(names))
	counts := make([]atomic.Int64, len(names))
	w := h.begin(h.lanesDB, name)
	start := time.Now()
	for gi, g := range names {
		tallies[gi] = newTally(int(total))
		for c := 0; c < consumersPerGroup; c++ {
			wg.Add(1)
			go func(gi int, g string) {
				defer wg.Done()
				stop := func() bool { return counts[gi].Load() >= total || time.Now().After(deadline) || firstErr.get() != nil }
				err := h.consumeLoop(ctx, q, g, 100, stop, func(ms []popMessage) {
					keys := make([]string, len(ms))
					for i, m := range ms {
						keys[i] = m.PartitionID + "/" + m.TransactionID
					}
					tallies[gi].add(keys...)
					counts[gi].Add(int64(len(ms)))
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
	for gi := range names {
		r.Messages += counts[gi].Load()
		l, d := tallies[gi].verdict(total)
		r.Lost += l
		r.Duplicated += d
	}
	r.MsgPerSec = float64(r.Messages) / elapsed
	if err := firstErr.get(); err != nil {
		return r, err
	}
	return r, nil
}
