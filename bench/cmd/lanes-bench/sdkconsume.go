package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// sdkConsumeScenario drains the backlog consume-queue drains (the same
// partitions, messages and 8 consumers in queue mode, batch 100) through the
// Go SDK's consume loop with a handler that only records each message: what
// an application consuming with the SDK gets. Unlike the harness's own loop,
// the SDK acks each partition of a pop with its last completed message (an ack
// is an offset commit) and renews leases while handlers run. msg/s counts
// handled messages; the window ends once every consumer stopped and sent its
// last ack.
func (h *harness) sdkConsumeScenario(name string, consumers, partitions, perPartition int) (Result, error) {
	ctx := context.Background()
	q, total, err := h.backlogQueue(ctx, name, partitions, perPartition)
	if err != nil {
		return Result{}, err
	}
	seen := newTally(int(total))
	expectPreload(seen, partitions, perPartition)
	// The SDK logs a warning per failed call; an error fails the scenario instead.
	client, err := lanes.New(lanes.WithURL(h.brokerURL), lanes.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = client.Close(ctx) }()

	drainFor := 10*h.o.duration + time.Minute
	var handled atomic.Int64
	var errs firstError
	allHandled := make(chan struct{})
	var once sync.Once
	handler := func(_ context.Context, m *lanes.Message) error {
		seen.add(m.TransactionID)
		if handled.Add(1) >= total {
			once.Do(func() { close(allHandled) })
		}
		return nil
	}
	w := h.begin(h.lanesDB, name)
	start := time.Now()
	running := make([]*lanes.Consumer, 0, consumers)
	for range consumers {
		c, err := client.Queue(q).Batch(100).Partitions(1).OnError(func(err error) { errs.set(err) }).Consume(ctx, handler)
		if err != nil {
			return Result{}, err
		}
		running = append(running, c)
	}
	select {
	case <-allHandled:
	case <-time.After(drainFor):
	}
	for _, c := range running {
		if err := c.Stop(ctx); err != nil {
			errs.set(err)
		}
	}
	elapsed := time.Since(start).Seconds()
	r := Result{Scenario: name, System: "lanes", Available: true, Seconds: elapsed,
		Description: fmt.Sprintf("drain a %d-message backlog (%d partitions × %d) through the Go SDK's consume loop: %d consumers in queue mode, "+
			"batch 100, a handler that only records the message; the SDK acks each partition of a pop with its last message; msg/s counts handled messages", total, partitions, perPartition, consumers)}
	w.end(&r)
	r.Messages = handled.Load()
	r.setVerdict(seen.verdict())
	if err := errs.get(); err != nil {
		return r, err
	}
	if r.Messages < total {
		return r, drainDeadlineError(drainFor, r.Messages, total)
	}
	r.MsgPerSec = float64(r.Messages) / elapsed
	return r, nil
}
