package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	// The load generator shares the cores with the broker and PostgreSQL, so it
	// encodes and decodes with the cheaper codec.
	json "github.com/goccy/go-json"
	"github.com/jackc/pgx/v5"
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

func (h *harness) queue(name string) string {
	if h.round > 1 { // a repeated scenario's later rounds start on fresh queues, so no id is a duplicate
		return fmt.Sprintf("bench-%s-%d-r%d", name, h.runID, h.round)
	}
	return fmt.Sprintf("bench-%s-%d", name, h.runID)
}

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

// tallyStored adds the transaction id of every message the log of queue holds
// (straight from PostgreSQL) to t as arrived, the check behind "lost" and
// "duplicated" of the push scenarios. The transaction index holds an id once
// per partition, so storedTwice counts the messages the segments hold beyond
// the index's rows: a message stored twice under one id.
func (h *harness) tallyStored(ctx context.Context, queue string, t *tally) (storedTwice int64, err error) {
	rows, err := h.lanesPool.Query(ctx, `SELECT t.transaction_id
		FROM lanes.txns t JOIN lanes.partitions p ON p.id = t.partition_id JOIN lanes.queues q ON q.id = p.queue_id
		WHERE q.name = $1`, queue)
	if err != nil {
		return 0, err
	}
	var indexed int64
	var id string
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		t.add(id)
		indexed++
		return nil
	})
	if err != nil {
		return 0, err
	}
	var stored int64
	err = h.lanesPool.QueryRow(ctx, `SELECT coalesce(sum(s.end_offset - s.base_offset + 1), 0)::bigint
		FROM lanes.segments s JOIN lanes.partitions p ON p.id = s.partition_id JOIN lanes.queues q ON q.id = p.queue_id
		WHERE q.name = $1`, queue).Scan(&stored)
	return max(stored-indexed, 0), err
}
