package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// wakeScenarios measure how fast a parked long-poll pop is woken: a consumer
// parks on an empty queue, one message is pushed, the pop's return is timed.
// Rounds alternate between the two kinds of pop, so both see the machine in
// the same phase: a leased pop, as the SDKs' consume loops pop (its claim
// commits without waiting for a WAL flush; the lease is acked after the
// round, untimed), and an autoAck pop, whose claim moves the cursor and so
// waits for a second durable commit after the push's.
func (h *harness) wakeScenarios() (leased, autoAck Result, err error) {
	ctx := context.Background()
	queues := map[bool]string{false: h.queue("wake"), true: h.queue("wake-autoack")}
	for _, q := range queues {
		if _, err := h.do(ctx, http.MethodGet, "/api/v1/pop/queue/"+q, nil, nil); err != nil {
			return leased, autoAck, err
		}
	}
	fromSend := map[bool]*recorder{false: {}, true: {}}
	fromAck := map[bool]*recorder{false: {}, true: {}}
	// About 40 ms a round, and this many of each kind: four windows' worth.
	// Over the 250 rounds of one window the p99 was the third-worst sample
	// and read 7.6 to 10.0 ms in back-to-back runs of the same broker.
	perKind := max(int(4*h.o.duration/(40*time.Millisecond)), 20)
	w := h.begin(h.lanesDB, "")
	for i := 0; i < 2*perKind; i++ {
		auto := i%2 == 1
		q := queues[auto]
		got := make(chan time.Time, 1)
		popped := make(chan popResponse, 1)
		errc := make(chan error, 1)
		go func() {
			var pop popResponse
			_, err := h.do(ctx, http.MethodGet, fmt.Sprintf("/api/v1/pop/queue/%s?wait=true&timeout=5000&autoAck=%t", q, auto), nil, &pop)
			if err == nil && len(pop.Messages) == 0 {
				err = errors.New("parked pop returned empty")
			}
			got <- time.Now()
			popped <- pop
			errc <- err
		}()
		time.Sleep(30 * time.Millisecond) // let the pop park
		t0 := time.Now()
		id := fmt.Sprintf("w%d", i)
		if _, err := h.pushItems(ctx, []pushItem{{Queue: q, Partition: "p", TransactionID: id, Payload: i}}); err != nil {
			return leased, autoAck, err
		}
		acked := time.Now()
		delivered, pop := <-got, <-popped
		if err := <-errc; err != nil {
			return leased, autoAck, err
		}
		if err := wokeWith(pop, id); err != nil {
			return leased, autoAck, err
		}
		fromSend[auto].add(delivered.Sub(t0))
		fromAck[auto].add(max(delivered.Sub(acked), 0))
		if !auto {
			// Untimed: the next leased round must find the partition free.
			m := pop.Messages[0]
			var res []struct {
				Success bool `json:"success"`
			}
			ack := map[string]any{"acknowledgments": []ackItem{{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: pop.LeaseID, Status: "completed"}}}
			if _, err := h.do(ctx, http.MethodPost, "/api/v1/ack/batch", ack, &res); err != nil {
				return leased, autoAck, err
			}
			if len(res) != 1 || !res[0].Success {
				return leased, autoAck, fmt.Errorf("ack of the leased wake-up pop rejected: %+v", res)
			}
		}
	}
	const timing = "latency = push sent → pop returned (includes the push's durable commit); alt = push answered → pop returned (0 when the pop returned first); rounds alternate with the other kind of pop, and the CPU, commit and claim figures are both kinds' together"
	leased = Result{Scenario: "wake", System: "lanes", Available: true, Messages: int64(perKind)}
	w.end(&leased) // one window for both kinds: its CPU, commit and claim figures are the pair's
	autoAck = leased
	leased.LatencyMs, leased.AltLatencyMs = fromSend[false].percentiles(), fromAck[false].percentiles()
	leased.Description = "one parked long-poll pop per round, leased as the SDKs' consume loops pop, acked after the round; " + timing
	autoAck.Scenario = "wake-autoack"
	autoAck.LatencyMs, autoAck.AltLatencyMs = fromSend[true].percentiles(), fromAck[true].percentiles()
	autoAck.Description = "one parked long-poll pop per round with autoAck=true (the claim commits durably before the pop answers); " + timing
	return leased, autoAck, nil
}

// wokeWith checks a woken pop delivered the message the round pushed and
// nothing else: an older message would time a wake-up that never happened.
func wokeWith(pop popResponse, id string) error {
	if len(pop.Messages) != 1 || pop.Messages[0].TransactionID != id {
		got := make([]string, len(pop.Messages))
		for i, m := range pop.Messages {
			got[i] = m.TransactionID
		}
		return fmt.Errorf("woken pop delivered %v, want the round's message %s", got, id)
	}
	return nil
}
