package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	// The load generator shares the cores with the broker and PostgreSQL, so it
	// encodes and decodes with the cheaper codec.
	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"
)

// payloadBody pads every benchmark message to about 100 bytes of JSON.
const payloadBody = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789"

type pushItem struct {
	Queue         string `json:"queue"`
	Partition     string `json:"partition"`
	TransactionID string `json:"transactionId"`
	Payload       any    `json:"payload"`
}

type benchPayload struct {
	Seq  int64  `json:"seq"`
	Body string `json:"body"`
}

type pushResult struct {
	Status string `json:"status"`
	Error  string `json:"error"`
}

type popMessage struct {
	TransactionID string          `json:"transactionId"`
	PartitionID   string          `json:"partitionId"`
	Partition     string          `json:"partition"`
	Data          json.RawMessage `json:"data"`
}

type popResponse struct {
	LeaseID  string       `json:"leaseId"`
	Messages []popMessage `json:"messages"`
}

type ackItem struct {
	TransactionID string `json:"transactionId"`
	PartitionID   string `json:"partitionId"`
	LeaseID       string `json:"leaseId,omitempty"`
	Status        string `json:"status"`
}

// httpError is a non-2xx answer.
type httpError struct {
	status     int
	msg        string
	retryAfter time.Duration
}

func (e *httpError) Error() string { return e.msg }

// do sends one request and decodes a 2xx answer into out. A 500 or 503 is
// retried up to 3 times after a short pause, as the SDKs do (pushes carry
// transaction ids, so a retried push deduplicates); every such answer is
// counted and reported with the scenario, and the last one is returned.
func (h *harness) do(ctx context.Context, method, path string, body any, out any) (int, error) {
	var buf []byte
	if body != nil {
		var err error
		if buf, err = json.Marshal(body); err != nil {
			return 0, err
		}
	}
	for attempt := 0; ; attempt++ {
		status, err := h.doOnce(ctx, method, path, buf, out)
		var he *httpError
		if attempt < 30 && errors.As(err, &he) && he.status == http.StatusTooManyRequests {
			// backpressure: honor Retry-After and retry in place (the wait counts in the latencies)
			h.throttled.Add(1)
			time.Sleep(max(he.retryAfter, 50*time.Millisecond))
			continue
		}
		if attempt < 3 && errors.As(err, &he) && (he.status == http.StatusInternalServerError || he.status == http.StatusServiceUnavailable) {
			h.serverErrors.Add(1)
			h.noteServerError(he.msg)
			time.Sleep(time.Duration(attempt+1) * 20 * time.Millisecond)
			continue
		}
		if errors.As(err, &he) && he.status >= 500 {
			h.serverErrors.Add(1)
			h.noteServerError(he.msg)
		}
		return status, err
	}
}

func (h *harness) noteServerError(msg string) {
	h.errMu.Lock()
	defer h.errMu.Unlock()
	if h.errSamples == nil {
		h.errSamples = map[string]int{}
	}
	// group by method, route and answer (the path's queue name and query vary)
	method, rest, _ := strings.Cut(msg, " ")
	path, answer, _ := strings.Cut(rest, ": ")
	if i := strings.Index(path, "/queue/"); i >= 0 {
		path = path[:i+len("/queue/")] + "…"
	}
	key := method + " " + path + ": " + answer
	if len(key) > 300 {
		key = key[:300]
	}
	h.errSamples[key]++
}

// doOnce sends one request. The load generator speaks HTTP/1.1 through
// fasthttp: it shares the 2 cores with the broker and PostgreSQL, and
// net/http's client spent about twice the CPU per request (its read and write
// loops are goroutines of their own), CPU the system under test then lacked.
func (h *harness) doOnce(ctx context.Context, method, path string, body []byte, out any) (int, error) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI(h.brokerURL + path)
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(body)
	}
	deadline := time.Now().Add(2 * time.Minute)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := h.http.DoDeadline(req, resp, deadline); err != nil {
		return 0, err
	}
	status, raw := resp.StatusCode(), resp.Body()
	if status >= 300 {
		he := &httpError{status: status, msg: fmt.Sprintf("%s %s: %d %s", method, path, status, bytes.TrimSpace(raw))}
		if secs, err := strconv.Atoi(string(resp.Header.Peek("Retry-After"))); err == nil && secs > 0 {
			he.retryAfter = time.Duration(secs) * time.Second
		}
		return status, he
	}
	if out != nil && len(raw) > 0 {
		// raw belongs to the pooled response: decode a copy, as out may keep raw JSON.
		return status, json.Unmarshal(bytes.Clone(raw), out)
	}
	return status, nil
}

func (h *harness) queue(name string) string { return fmt.Sprintf("bench-%s-%d", name, h.runID) }

// pushItems pushes items and counts the queued ones; any other status is an error.
func (h *harness) pushItems(ctx context.Context, items []pushItem) (int, error) {
	var res []pushResult
	if _, err := h.do(ctx, http.MethodPost, "/api/v1/push", map[string]any{"items": items}, &res); err != nil {
		return 0, err
	}
	n := 0
	for _, r := range res {
		switch r.Status {
		case "queued":
			n++
		case "buffered": // on the broker's disk spool, delivered once drained
			n++
			h.buffered.Add(1)
		default:
			return n, fmt.Errorf("push item status %q %s", r.Status, r.Error)
		}
	}
	return n, nil
}

// storedMessages counts the messages the log holds for queue (straight from PostgreSQL),
// the check behind "lost" and "duplicated" of push scenarios.
func (h *harness) storedMessages(ctx context.Context, queue string) (int64, error) {
	var n int64
	err := h.lanesPool.QueryRow(ctx, `SELECT coalesce(sum(s.end_offset - s.base_offset + 1), 0)::bigint
		FROM lanes.segments s JOIN lanes.partitions p ON p.id = s.partition_id JOIN lanes.queues q ON q.id = p.queue_id
		WHERE q.name = $1`, queue).Scan(&n)
	return n, err
}

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

// preload fills partitions × perPartition messages (transaction ids "p<i>-<n>") with 8 pushers.
func (h *harness) preload(ctx context.Context, q string, partitions, perPartition int) error {
	const batch = 100
	jobs := make(chan [2]int, partitions*(perPartition/batch+1))
	for p := 0; p < partitions; p++ {
		for off := 0; off < perPartition; off += batch {
			jobs <- [2]int{p, off}
		}
	}
	close(jobs)
	var wg sync.WaitGroup
	var firstErr firstError
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				p, off := j[0], j[1]
				n := min(batch, perPartition-off)
				items := make([]pushItem, n)
				for k := range items {
					items[k] = pushItem{Queue: q, Partition: fmt.Sprintf("p%d", p), TransactionID: fmt.Sprintf("p%d-%d", p, off+k), Payload: benchPayload{Seq: int64(off + k), Body: payloadBody}}
				}
				if _, err := h.pushItems(ctx, items); err != nil {
					firstErr.set(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := firstErr.get(); err != nil {
		return err
	}
	return nil
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
		if _, err := h.pushItems(ctx, []pushItem{{Queue: q, Partition: "p", TransactionID: fmt.Sprintf("w%d", i), Payload: i}}); err != nil {
			return leased, autoAck, err
		}
		acked := time.Now()
		delivered, pop := <-got, <-popped
		if err := <-errc; err != nil {
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
	seen := newTally(int(total))
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
						{"type": "push", "items": []map[string]any{{"queue": qb, "partition": m.Partition, "transactionId": m.PartitionID + "/" + m.TransactionID, "payload": m.Data}}},
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
				seen.add(m.PartitionID + "/" + m.TransactionID)
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
	// and no message of stage A may have been handed off twice.
	_, r.Duplicated = seen.verdict(total)
	stored, err := h.storedMessages(ctx, qb)
	if err != nil {
		return r, err
	}
	if stored < r.Messages {
		r.Lost = r.Messages - stored
	} else if stored > r.Messages {
		r.Duplicated += stored - r.Messages
	}
	return r, nil
}

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
