package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// recorder keeps every latency sample (runs are short enough to keep them all,
// so percentiles are exact rather than bucketed).
type recorder struct {
	mu sync.Mutex
	d  []time.Duration
}

func (r *recorder) add(d time.Duration) {
	r.mu.Lock()
	r.d = append(r.d, d)
	r.mu.Unlock()
}

// percentiles answers p50, p99, p999 and max in milliseconds (nearest rank).
func (r *recorder) percentiles() map[string]float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.d) == 0 {
		return nil
	}
	sort.Slice(r.d, func(i, j int) bool { return r.d[i] < r.d[j] })
	at := func(p float64) float64 {
		// the smallest sample with at least p of them at or below it; the
		// epsilon keeps 0.99 × 1000 from rounding up a rank
		i := int(math.Ceil(p*float64(len(r.d))-1e-9)) - 1
		i = max(0, min(i, len(r.d)-1))
		return float64(r.d[i].Microseconds()) / 1000
	}
	return map[string]float64{"p50": at(0.50), "p99": at(0.99), "p999": at(0.999), "max": at(1)}
}

// parkedPolls keeps n long polls, spread over groups consumer groups (1:
// queue mode), parked on an idle queue until the returned stop is called (it
// waits for them to end and closes the client's idle connections): the
// load of many idle consumers, whose re-checks compete with the work
// measured beside them. A pop that returns, at its timeout or with an
// error, polls again at once. The load generator's client cannot cut a
// request short, so stop waits out the polls in flight (10 s at most).
func (h *harness) parkedPolls(n, groups int) (stop func(), err error) {
	ctx, cancel := context.WithCancel(context.Background())
	q := h.queue("parked")
	if _, err := h.do(ctx, "GET", "/api/v1/pop/queue/"+q, nil, nil); err != nil { // creates the queue
		cancel()
		return nil, err
	}
	var wg sync.WaitGroup
	for i := range n {
		path := "/api/v1/pop/queue/" + q + "?wait=true&timeout=10000"
		if groups > 1 {
			path += fmt.Sprintf("&consumerGroup=g%d&subscriptionMode=all", i%groups)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := h.do(ctx, "GET", path, nil, nil); err != nil && ctx.Err() == nil {
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	// Let them park and pass their first re-checks before the window opens.
	time.Sleep(2 * time.Second)
	return func() {
		cancel()
		wg.Wait()
		// Their connections would otherwise stay open, idle, for the
		// client's idle timeout (a minute): a thousand connections, each a
		// goroutine and buffers on the broker, beside the scenarios after.
		h.http.CloseIdleConnections()
	}, nil
}

// latencyScenario offers rate msg/s open loop (each message is sent at its
// scheduled instant whatever happened to the previous ones, one push request
// per message) to 8 partitions while 8 queue-mode consumers long-poll with pop
// batch 100 + ack. Latency is delivery time minus the *scheduled* send time,
// so a stalled broker or a saturated client is charged for every message that
// should have been sent meanwhile (coordinated omission corrected). The first
// half second is warm-up and not recorded.
// With parked > 0, that many idle long polls (parkedPolls) in groups
// consumer groups wait beside it.
func (h *harness) latencyScenario(rate float64, parked, groups int) (Result, error) {
	name := fmt.Sprintf("latency-%.0f", rate)
	if parked > 0 {
		name = fmt.Sprintf("latency-%.0f-parked%d", rate, parked)
		if groups > 1 {
			name += fmt.Sprintf("-groups%d", groups)
		}
	}
	q := h.queue(strings.ReplaceAll(name, "-", ""))
	ctx := context.Background()
	if parked > 0 {
		stopParked, err := h.parkedPolls(parked, groups)
		if err != nil {
			return Result{}, err
		}
		defer stopParked()
	}
	const partitions, consumers, maxInFlight = 8, 8, 1024
	for p := 0; p < partitions; p++ {
		if _, err := h.pushItems(ctx, []pushItem{{Queue: q, Partition: fmt.Sprintf("p%d", p), TransactionID: "warm", Payload: benchPayload{Seq: -1}}}); err != nil {
			return Result{}, err
		}
	}
	interval := time.Duration(float64(time.Second) / rate)
	total := int64(h.o.duration / interval)
	warm := int64(rate / 2)
	delivered, toAck, pushLat := &recorder{}, &recorder{}, &recorder{}
	seen := newTally(int(total))
	var received, redelivered atomic.Int64
	var queued atomic.Int64
	var firstErr firstError
	var start time.Time
	startSet := make(chan struct{})
	producing := atomic.Bool{}
	producing.Store(true)
	consumeDeadline := atomic.Int64{}
	consumeDeadline.Store(time.Now().Add(time.Hour).UnixNano())
	var cwg sync.WaitGroup
	w := h.begin(h.lanesDB, strings.ReplaceAll(name, "-", ""))
	for c := 0; c < consumers; c++ {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			stop := func() bool {
				return firstErr.get() != nil || (!producing.Load() && received.Load() >= queued.Load()) || time.Now().UnixNano() > consumeDeadline.Load()
			}
			err := h.consumeLoop(ctx, q, "", 100, stop, func(b consumedBatch) {
				<-startSet
				redelivered.Add(int64(b.Redelivered))
				for _, m := range b.Acked {
					var p benchPayload
					if json.Unmarshal(m.Data, &p) != nil || p.Seq < 0 {
						continue
					}
					seen.add(m.TransactionID)
					received.Add(1)
					if p.Seq >= warm {
						due := start.Add(time.Duration(p.Seq) * interval)
						delivered.add(b.PoppedAt.Sub(due))
						toAck.add(b.AckedAt.Sub(due))
					}
				}
			})
			if err != nil {
				firstErr.set(err)
			}
		}()
	}
	sem := make(chan struct{}, maxInFlight)
	var pwg sync.WaitGroup
	start = time.Now()
	close(startSet)
	for seq := int64(0); seq < total && firstErr.get() == nil; seq++ {
		due := start.Add(time.Duration(seq) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		sem <- struct{}{} // when full, the wait is charged to the messages through their scheduled time
		pwg.Add(1)
		go func(seq int64, due time.Time) {
			defer pwg.Done()
			defer func() { <-sem }()
			id := fmt.Sprintf("m%d", seq)
			n, err := h.pushItems(ctx, []pushItem{{Queue: q, Partition: fmt.Sprintf("p%d", seq%partitions), TransactionID: id, Payload: benchPayload{Seq: seq, Body: payloadBody}}})
			if err != nil {
				firstErr.set(err)
				return
			}
			seen.expect(id)
			queued.Add(int64(n))
			if seq >= warm {
				pushLat.add(time.Since(due))
			}
		}(seq, due)
	}
	pwg.Wait()
	sendSecs := time.Since(start).Seconds()
	const drainFor = 30 * time.Second
	consumeDeadline.Store(time.Now().Add(drainFor).UnixNano())
	producing.Store(false)
	cwg.Wait()
	r := Result{Scenario: name, System: "lanes", Available: true, Messages: received.Load(), Seconds: sendSecs, OfferedRate: rate,
		LatencyMs: delivered.percentiles(), AltLatencyMs: pushLat.percentiles(), AckLatencyMs: toAck.percentiles(),
		Description: fmt.Sprintf("open loop at %.0f msg/s (one push per message, 8 partitions), 8 long-poll consumers pop batch 100 + ack; latency = pop answered − scheduled send (coordinated omission corrected), alt = push answered − scheduled send, to ack = ack committed − scheduled send; first 0.5 s not recorded%s", rate, parkedText(parked, groups))}
	w.end(&r)
	r.Seconds = sendSecs
	r.MsgPerSec = float64(received.Load()) / sendSecs
	if err := firstErr.get(); err != nil {
		return r, err
	}
	r.setVerdict(seen.verdict())
	r.Redelivered = redelivered.Load()
	if received.Load() < queued.Load() {
		return r, drainDeadlineError(drainFor, received.Load(), queued.Load())
	}
	if unsent := total - queued.Load(); unsent > 0 {
		r.Note = fmt.Sprintf("%d of %d scheduled messages were not accepted", unsent, total)
	}
	return r, nil
}

func parkedText(parked, groups int) string {
	switch {
	case parked == 0:
		return ""
	case groups > 1:
		return fmt.Sprintf("; %d idle long polls in %d consumer groups parked on another queue meanwhile", parked, groups)
	}
	return fmt.Sprintf("; %d idle long polls of one group parked on another queue meanwhile", parked)
}

// sharedLanes is the produce-and-consume workload also run through River: n
// messages pushed by 8 producers in batches of 100 (8 partitions) while 8
// consumers pop batch 100 + ack; the clock stops when the last one is acked.
func (h *harness) sharedLanes(n int) (Result, error) {
	q := h.queue("shared")
	ctx := context.Background()
	const producers, consumers, batch = 8, 8, 100
	if _, err := h.do(ctx, "GET", "/api/v1/pop/queue/"+q, nil, nil); err != nil { // creates the queue
		return Result{}, err
	}
	seen := newTally(n)
	for i := range n {
		seen.expect(sharedID(i))
	}
	var received, redelivered atomic.Int64
	var firstErr firstError
	var pushEnd atomic.Int64
	drainFor := 10*h.o.duration + 2*time.Minute
	deadline := time.Now().Add(drainFor)
	var wg sync.WaitGroup
	w := h.begin(h.lanesDB, "shared")
	start := time.Now()
	pushed := make(chan struct{}) // closed once pushEnd is stored
	go func() {
		parallelBatches(producers, batchCount(n, batch), &firstErr, func(p, b int) error {
			base, k := batchSpan(b, batch, n)
			items := make([]pushItem, k)
			for i := range items {
				seq := int64(base + i)
				items[i] = pushItem{Queue: q, Partition: fmt.Sprintf("p%d", p), TransactionID: sharedID(int(seq)), Payload: benchPayload{Seq: seq, Body: payloadBody}}
			}
			_, err := h.pushItems(ctx, items)
			return err
		})
		pushEnd.Store(time.Now().UnixNano())
		close(pushed)
	}()
	for c := 0; c < consumers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stop := func() bool {
				return received.Load() >= int64(n) || firstErr.get() != nil || time.Now().After(deadline)
			}
			err := h.consumeLoop(ctx, q, "", batch, stop, func(b consumedBatch) {
				seen.add(transactionIDs(b.Acked)...)
				received.Add(int64(len(b.Acked)))
				redelivered.Add(int64(b.Redelivered))
			})
			if err != nil {
				firstErr.set(err)
			}
		}()
	}
	wg.Wait()
	<-pushed
	elapsed := time.Since(start).Seconds()
	r := Result{Scenario: "shared", System: "lanes", Available: true, Messages: received.Load(), Seconds: elapsed,
		MsgPerSec: float64(received.Load()) / elapsed, PushedPerSec: float64(n) / (float64(pushEnd.Load()-start.UnixNano()) / 1e9),
		Description: fmt.Sprintf("%d messages: 8 producers push batch 100 while 8 consumers pop batch 100 + ack; msg/s = messages / time until the last ack", n)}
	w.end(&r)
	r.Seconds = elapsed
	if err := firstErr.get(); err != nil {
		return r, err
	}
	r.setVerdict(seen.verdict())
	r.Redelivered = redelivered.Load()
	if r.Messages < int64(n) {
		return r, drainDeadlineError(drainFor, r.Messages, int64(n))
	}
	return r, nil
}

// sharedID is the transaction id of message i of the shared workload.
func sharedID(i int) string { return fmt.Sprintf("s%d", i) }
