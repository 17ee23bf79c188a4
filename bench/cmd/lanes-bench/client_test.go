package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestNoteServerErrorGroupsByMethodRouteAndAnswer(t *testing.T) {
	h := &harness{}
	// the queue name and query vary per run and per request: they must not split the count
	h.noteServerError("GET /api/v1/pop/queue/bench-a-1?batch=100: 500 boom")
	h.noteServerError("GET /api/v1/pop/queue/bench-b-2?wait=true: 500 boom")
	h.noteServerError("POST /api/v1/push: 503 draining")
	want := map[string]int{
		"GET /api/v1/pop/queue/…: 500 boom": 2,
		"POST /api/v1/push: 503 draining":   1,
	}
	if len(h.errSamples) != len(want) {
		t.Fatalf("errSamples = %v, want %v", h.errSamples, want)
	}
	for k, n := range want {
		if h.errSamples[k] != n {
			t.Errorf("errSamples[%q] = %d, want %d (all: %v)", k, h.errSamples[k], n, h.errSamples)
		}
	}
}

func TestNoteServerErrorTruncatesLongAnswers(t *testing.T) {
	h := &harness{}
	h.noteServerError("POST /api/v1/push: 500 " + strings.Repeat("x", 1000))
	for k := range h.errSamples {
		if len(k) != 300 {
			t.Fatalf("key of %d bytes, want it cut to 300", len(k))
		}
	}
}

// fakeBroker answers each request with the next of answers (the last one
// repeats) and counts the requests.
type fakeBroker struct {
	requests atomic.Int64
	bodies   chan string
}

type answer struct {
	status int
	body   string
	header map[string]string
}

func startFakeBroker(t *testing.T, answers ...answer) (*harness, *fakeBroker) {
	t.Helper()
	fb := &fakeBroker{bodies: make(chan string, 100)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(fb.requests.Add(1)) - 1
		a := answers[min(i, len(answers)-1)]
		if raw, err := io.ReadAll(r.Body); err == nil && len(raw) > 0 {
			select {
			case fb.bodies <- string(raw):
			default:
			}
		}
		for k, v := range a.header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}))
	t.Cleanup(srv.Close)
	return &harness{http: &fasthttp.Client{}, brokerURL: srv.URL}, fb
}

func TestDoRetriesAServerErrorAndCountsIt(t *testing.T) {
	h, fb := startFakeBroker(t, answer{status: 503, body: `{"error":"draining"}`}, answer{status: 200, body: `{"ok":true}`})
	var out struct {
		OK bool `json:"ok"`
	}
	status, err := h.do(context.Background(), http.MethodGet, "/api/v1/x", nil, &out)
	if err != nil || status != 200 || !out.OK {
		t.Fatalf("do = %d, %v, %+v; want 200 after one retry", status, err, out)
	}
	if n := fb.requests.Load(); n != 2 {
		t.Errorf("requests = %d, want 2 (one 503, one retry)", n)
	}
	if n := h.serverErrors.Load(); n != 1 {
		t.Errorf("serverErrors = %d, want 1", n)
	}
}

func TestDoGivesUpOnAPersistentServerErrorAfterThreeRetries(t *testing.T) {
	h, fb := startFakeBroker(t, answer{status: 500, body: "boom"})
	status, err := h.do(context.Background(), http.MethodPost, "/api/v1/push", map[string]any{"items": []int{}}, nil)
	var he *httpError
	if !errors.As(err, &he) || status != 500 || he.status != 500 {
		t.Fatalf("do = %d, %v; want the last 500 as an *httpError", status, err)
	}
	if !strings.Contains(err.Error(), "POST /api/v1/push: 500 boom") {
		t.Errorf("error %q lacks method, path, status and body", err)
	}
	if n := fb.requests.Load(); n != 4 {
		t.Errorf("requests = %d, want 4 (the first and 3 retries)", n)
	}
	// every 5xx answer is counted, the last one included
	if n := h.serverErrors.Load(); n != 4 {
		t.Errorf("serverErrors = %d, want 4", n)
	}
	if n := h.errSamples["POST /api/v1/push: 500 boom"]; n != 4 {
		t.Errorf("errSamples = %v, want 4 under the push route", h.errSamples)
	}
}

func TestDoRetriesAThrottledRequestWithoutCountingAServerError(t *testing.T) {
	h, fb := startFakeBroker(t, answer{status: 429, body: "slow down"}, answer{status: 204})
	status, err := h.do(context.Background(), http.MethodGet, "/api/v1/pop/queue/q", nil, nil)
	if err != nil || status != 204 {
		t.Fatalf("do = %d, %v; want 204 after the 429", status, err)
	}
	if fb.requests.Load() != 2 || h.throttled.Load() != 1 || h.serverErrors.Load() != 0 {
		t.Errorf("requests %d throttled %d serverErrors %d, want 2 1 0", fb.requests.Load(), h.throttled.Load(), h.serverErrors.Load())
	}
}

func TestDoDoesNotRetryAClientError(t *testing.T) {
	h, fb := startFakeBroker(t, answer{status: 400, body: "bad"})
	status, err := h.do(context.Background(), http.MethodGet, "/api/v1/x", nil, nil)
	if err == nil || status != 400 {
		t.Fatalf("do = %d, %v; want the 400 as an error", status, err)
	}
	if fb.requests.Load() != 1 || h.serverErrors.Load() != 0 {
		t.Errorf("requests %d serverErrors %d, want 1 0", fb.requests.Load(), h.serverErrors.Load())
	}
}

func TestPushItemsCountsQueuedAndBufferedItems(t *testing.T) {
	h, fb := startFakeBroker(t, answer{status: 201, body: `[{"status":"queued"},{"status":"buffered"},{"status":"queued"}]`})
	n, err := h.pushItems(context.Background(), []pushItem{{Queue: "q", Partition: "p", TransactionID: "t1", Payload: benchPayload{Seq: 7, Body: "b"}}})
	if err != nil || n != 3 {
		t.Fatalf("pushItems = %d, %v; want 3, nil", n, err)
	}
	if h.buffered.Load() != 1 {
		t.Errorf("buffered = %d, want 1", h.buffered.Load())
	}
	// the request carries the items under "items" with the broker's field names
	body := <-fb.bodies
	if want := `{"items":[{"queue":"q","partition":"p","transactionId":"t1","payload":{"seq":7,"body":"b"}}]}`; body != want {
		t.Errorf("push body = %s, want %s", body, want)
	}
}

func TestPushItemsFailsOnAnItemThatWasNotQueued(t *testing.T) {
	h, _ := startFakeBroker(t, answer{status: 201, body: `[{"status":"queued"},{"status":"failed","error":"too big"}]`})
	n, err := h.pushItems(context.Background(), []pushItem{{Queue: "q"}, {Queue: "q"}})
	if err == nil || !strings.Contains(err.Error(), `"failed" too big`) {
		t.Fatalf("pushItems error = %v, want the item's status and error", err)
	}
	if n != 1 {
		t.Errorf("pushItems counted %d, want the 1 queued before the failure", n)
	}
}

func TestQueueNamesCarryTheRunID(t *testing.T) {
	// every run uses fresh queues, so a rerun against the same database does not count old messages
	h := &harness{runID: 42}
	if got := h.queue("push-b1"); got != "bench-push-b1-42" {
		t.Fatalf("queue = %q", got)
	}
	// and every round of a repeated scenario after the first, so its ids are not duplicates
	h.round = 1
	if got := h.queue("push-b1"); got != "bench-push-b1-42" {
		t.Fatalf("first round's queue = %q", got)
	}
	h.round = 2
	if got := h.queue("push-b1"); got != "bench-push-b1-42-r2" {
		t.Fatalf("second round's queue = %q", got)
	}
}
