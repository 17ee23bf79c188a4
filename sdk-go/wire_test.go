package lanes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeBroker scripts answers and records requests.
type fakeBroker struct {
	mu      sync.Mutex
	reqs    []*http.Request
	bodies  []string
	handler func(n int, w http.ResponseWriter, r *http.Request)
	n       atomic.Int64
}

func (f *fakeBroker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b)) // the handler may read it too
	f.mu.Lock()
	f.reqs = append(f.reqs, r)
	f.bodies = append(f.bodies, string(b))
	f.mu.Unlock()
	f.handler(int(f.n.Add(1)), w, r)
}

func (f *fakeBroker) count() int { return int(f.n.Load()) }

type sleepRec struct {
	mu     sync.Mutex
	sleeps []time.Duration
}

func (s *sleepRec) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.sleeps = append(s.sleeps, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleepRec) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.sleeps...)
}

func newFake(t *testing.T, h func(n int, w http.ResponseWriter, r *http.Request), opts ...Option) (*Client, *fakeBroker, *sleepRec) {
	t.Helper()
	fb := &fakeBroker{handler: h}
	srv := httptest.NewServer(fb)
	t.Cleanup(srv.Close)
	sr := &sleepRec{}
	all := append([]Option{WithURL(srv.URL), withClock(time.Now, func() float64 { return 0 }, sr.sleep)}, opts...)
	c, err := New(all...)
	require.NoError(t, err)
	closeWhenDone(t, c)
	return c, fb, sr
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

const pushOK = `[{"index":0,"message_id":"m","transaction_id":"t","queueName":"q","status":"queued"}]`

func TestRetry429TwiceThen200(t *testing.T) {
	t.Parallel()
	c, fb, sr := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n <= 2 {
			w.Header().Set("Retry-After", "1")
			writeJSON(w, 429, `{"error":"busy","code":"rate_limited"}`)
			return
		}
		writeJSON(w, 201, pushOK)
	})
	res, err := c.Queue("q").Push(context.Background(), Data(map[string]int{"a": 1}))
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, 3, fb.count())
	require.Equal(t, []time.Duration{time.Second, time.Second}, sr.all())
	// same transaction id on every attempt, attempt counter header
	require.Equal(t, fb.bodies[0], fb.bodies[2])
	require.Equal(t, "0", fb.reqs[0].Header.Get("X-Retry-Count"))
	require.Equal(t, "2", fb.reqs[2].Header.Get("X-Retry-Count"))
}

func TestRetry429BoundedOnPush(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		writeJSON(w, 429, `{"error":"busy","code":"rate_limited"}`)
	}, WithMax429Attempts(3))
	_, err := c.Queue("q").Push(context.Background(), Data(1))
	require.ErrorIs(t, err, ErrRateLimited)
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "rate_limited", ae.Code)
	require.Equal(t, time.Second, ae.RetryAfter)
	require.Equal(t, 4, fb.count())
}

func TestRetry429UnboundedOnLongPoll(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n <= 50 {
			w.Header().Set("Retry-After", "1")
			writeJSON(w, 429, `{"error":"busy","code":"rate_limited"}`)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}, WithMax429Attempts(3))
	msgs, err := c.Queue("q").Wait(true).Pop(context.Background())
	require.NoError(t, err)
	require.Empty(t, msgs)
	require.Equal(t, 51, fb.count())

	// the same pop without wait is bounded
	fb.n.Store(0)
	_, err = c.Queue("q").Wait(false).Pop(context.Background())
	require.ErrorIs(t, err, ErrRateLimited)
	require.Equal(t, 4, fb.count())
}

func TestRetryAfterAboveCapSurfaces(t *testing.T) {
	t.Parallel()
	c, fb, sr := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3600")
		writeJSON(w, 429, `{"error":"busy","code":"rate_limited"}`)
	})
	_, err := c.Queue("q").Push(context.Background(), Data(1))
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, time.Hour, ae.RetryAfter)
	require.Equal(t, 1, fb.count())
	require.Empty(t, sr.all())
}

func TestRetry5xxBackoffAndBudget(t *testing.T) {
	t.Parallel()
	c, fb, sr := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 503, `{"error":"db down","code":"unavailable"}`)
	})
	_, err := c.Queue("q").Push(context.Background(), Data(1))
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, 503, ae.Status)
	require.Equal(t, "unavailable", ae.Code)
	require.Equal(t, 3, fb.count())
	require.Equal(t, []time.Duration{500 * time.Millisecond, time.Second}, sr.all())
}

func TestNoRetryOn4xxAndTerminal(t *testing.T) {
	t.Parallel()
	for _, st := range []int{400, 403, 404, 409, 413, 501} {
		t.Run(strconv.Itoa(st), func(t *testing.T) {
			t.Parallel()
			c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
				w.Header().Set("x-should-retry", "true")
				if st == 409 {
					w.Header().Del("x-should-retry")
				}
				writeJSON(w, st, `{"error":"no","code":"x"}`)
			})
			_, err := c.Queue("q").Push(context.Background(), Data(1))
			var ae *APIError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, st, ae.Status)
			if st == 400 || st == 404 || st == 501 {
				// x-should-retry: true makes these retryable; the budget is 2
				require.Equal(t, 3, fb.count())
				return
			}
			require.Equal(t, 1, fb.count())
		})
	}
}

func TestNotImplementedSentinel(t *testing.T) {
	t.Parallel()
	c, _, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 501, `{"error":"not implemented","code":"not_implemented"}`)
	})
	_, err := c.Transaction().Queue("q").Push(Data(1)).Commit(context.Background())
	require.ErrorIs(t, err, ErrNotImplemented)
}

func TestDeadlineShortCircuits(t *testing.T) {
	t.Parallel()
	c, fb, sr := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, 503, `{"error":"x","code":"unavailable"}`)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := c.Queue("q").Push(ctx, Data(1))
	require.Error(t, err)
	require.Equal(t, 1, fb.count())
	require.Empty(t, sr.all())
}

func TestFailoverToSecondURL(t *testing.T) {
	t.Parallel()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	fb := &fakeBroker{handler: func(n int, w http.ResponseWriter, r *http.Request) { writeJSON(w, 201, pushOK) }}
	srv := httptest.NewServer(fb)
	defer srv.Close()
	sr := &sleepRec{}
	c, err := New(WithURL(deadURL, srv.URL), withClock(time.Now, func() float64 { return 0 }, sr.sleep))
	require.NoError(t, err)
	_, err = c.Queue("q").Push(context.Background(), Data(1))
	require.NoError(t, err)
	require.Equal(t, 1, fb.count())
	require.Equal(t, []time.Duration{0}, sr.all())
	// the dead URL is now skipped
	_, err = c.Queue("q").Push(context.Background(), Data(1))
	require.NoError(t, err)
	require.Equal(t, 2, fb.count())
}

func TestConnectionError(t *testing.T) {
	t.Parallel()
	dead := httptest.NewServer(http.NotFoundHandler())
	u := dead.URL
	dead.Close()
	c, err := New(WithURL(u), WithRetryAttempts(1), withClock(time.Now, func() float64 { return 0 }, (&sleepRec{}).sleep))
	require.NoError(t, err)
	_, err = c.Queue("q").Push(context.Background(), Data(1))
	require.ErrorIs(t, err, ErrConnection)
}

func TestConsumerStopsOn403(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 403, `{"error":"Insufficient permissions","code":"forbidden"}`)
	})
	var reported []error
	cons, err := c.Queue("q").OnError(func(err error) { reported = append(reported, err) }).
		Consume(context.Background(), func(context.Context, *Message) error { return nil })
	require.NoError(t, err)
	select {
	case <-cons.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("consumer did not stop on 403")
	}
	require.ErrorIs(t, cons.Err(), ErrForbidden)
	require.Equal(t, 1, fb.count())
	require.Len(t, reported, 1)
}

// A pop answered 200 with a body that is not JSON (a proxy's page) goes to OnError and the loop
// goes on after its error backoff (sdk-design.md §7), as in TS and Python.
func TestConsumerGoesOnAfterAPopAnswerItCannotUse(t *testing.T) {
	t.Parallel()
	c, _, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/api/v1/ack"):
			writeJSON(w, 200, `{"index":0,"transactionId":"t","success":true}`)
		case n == 1:
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html>portal</html>")
		default:
			writeJSON(w, 200, `{"success":true,"queue":"q","partition":"Default","partitionId":"p","leaseId":"L","consumerGroup":"__QUEUE_MODE__",`+
				`"messages":[{"id":"i","transactionId":"t","traceId":null,"data":{"a":1},"producerSub":null,"createdAt":"2026-01-01T00:00:00Z","partitionId":"p","partition":"Default","leaseId":"L","consumerGroup":"__QUEUE_MODE__"}],"partitionsClaimed":1}`)
		}
	})
	var mu sync.Mutex
	var reported []error
	var handled []string
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.Queue("q").Wait(false).Limit(1).OnError(func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }).
		Run(ctx, func(_ context.Context, m *Message) error {
			mu.Lock()
			handled = append(handled, m.TransactionID)
			mu.Unlock()
			return nil
		})
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"t"}, handled)
	require.Len(t, reported, 1)
	var ua *UnexpectedAnswerError
	require.ErrorAs(t, reported[0], &ua)
}

// A 501 on pop is terminal (consuming.md §4): the consumer and the iterator end with
// ErrNotImplemented instead of backing off and popping again forever.
func TestConsumerStopsOn501(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 501, `{"error":"not implemented","code":"not_implemented"}`)
	})
	var reported atomic.Int64
	cons, err := c.Queue("q").OnError(func(error) { reported.Add(1) }).
		Consume(context.Background(), func(context.Context, *Message) error { return nil })
	require.NoError(t, err)
	select {
	case <-cons.Done():
	case <-time.After(5 * time.Second):
		_ = cons.StopAndCancel(context.Background())
		t.Fatalf("consumer did not stop on 501 (%d pops)", fb.count())
	}
	require.ErrorIs(t, cons.Err(), ErrNotImplemented)
	require.Equal(t, 1, fb.count())
	require.Equal(t, int64(1), reported.Load())

	var last error
	pops := 0
	for _, err := range c.Queue("q").Messages(context.Background()) {
		pops++
		last = err
		if pops > 3 {
			break
		}
	}
	require.Equal(t, 1, pops)
	require.ErrorIs(t, last, ErrNotImplemented)
}

// A 408 that outlived the retry policy ends the consumer like any other 4xx (consuming.md §4),
// as in TS and Python.
func TestConsumerStopsOn408AfterRetries(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 408, `{"error":"slow","code":"timeout"}`)
	}, WithRetryAttempts(1))
	cons, err := c.Queue("q").Consume(context.Background(), func(context.Context, *Message) error { return nil })
	require.NoError(t, err)
	select {
	case <-cons.Done():
	case <-time.After(5 * time.Second):
		_ = cons.StopAndCancel(context.Background())
		t.Fatal("consumer did not stop on 408")
	}
	var ae *APIError
	require.ErrorAs(t, cons.Err(), &ae)
	require.Equal(t, 408, ae.Status)
	require.Equal(t, 2, fb.count())
}

func TestConsumerRetriesAfter5xx(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			writeJSON(w, 500, `{"error":"x","code":"internal"}`)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}, WithRetryAttempts(0))
	var errs atomic.Int64
	cons, err := c.Queue("q").Wait(false).OnError(func(error) { errs.Add(1) }).
		Consume(context.Background(), func(context.Context, *Message) error { return nil })
	require.NoError(t, err)
	require.Eventually(t, func() bool { return fb.count() >= 2 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, cons.Stop(context.Background()))
	require.NoError(t, cons.Err())
	require.Equal(t, int64(1), errs.Load())
}

func TestNo204Parse(t *testing.T) {
	t.Parallel()
	c, _, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		// a 204 that (wrongly) carries bytes must still not be parsed
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNoContent)
	})
	res, err := c.Queue("q").Wait(false).PopResult(context.Background())
	require.NoError(t, err)
	require.Empty(t, res.Messages)
}

// A second AckOpts is refused before any request, not silently dropped.
func TestAckRefusesASecondAckOpts(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `{"transactionId":"t","success":true}`)
	})
	msgs := []*Message{{TransactionID: "t", PartitionID: "p", LeaseID: "l"}}
	_, err := c.Ack(context.Background(), msgs, AckDLQ, AckOpts{Error: "poison"}, AckOpts{WithoutLease: true})
	require.EqualError(t, err, "lanes: Ack takes at most one AckOpts, got 2; put every option in one")
	require.Zero(t, fb.count(), "a refused ack must send nothing")
	_, err = c.Ack(context.Background(), msgs, AckDLQ, AckOpts{Error: "poison", WithoutLease: true})
	require.NoError(t, err)
	require.Equal(t, 1, fb.count())
}

// A status outside completed, failed, retry and dlq is refused before any request: the broker
// would read it as failed and spend retry budget (consuming.md §6).
func TestAckRefusesAnUnknownStatus(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `{"transactionId":"t","success":true}`)
	})
	msgs := []*Message{{TransactionID: "t", PartitionID: "p", LeaseID: "l"}}
	_, err := c.Ack(context.Background(), msgs, AckStatus("done"))
	require.EqualError(t, err, `lanes: unknown ack status "done"`)
	require.Zero(t, fb.count(), "a refused ack must send nothing")
}

func TestPushFailedItemTypedError(t *testing.T) {
	t.Parallel()
	c, _, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 201, `[{"index":0,"message_id":"a","transaction_id":"t1","queueName":"q","status":"queued"},`+
			`{"index":1,"message_id":"","transaction_id":"t2","queueName":"q","status":"failed","error":"disk full"}]`)
	})
	res, err := c.Queue("q").Push(context.Background(), Item{Data: 1, TransactionID: "t1"}, Item{Data: 2, TransactionID: "t2"})
	require.Len(t, res, 2)
	var pe *PushError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, []ItemError{{Index: 1, TransactionID: "t2", Status: "failed", Message: "disk full"}}, pe.Items)
}

// answerEveryItem answers a push with one queued result per item of the request.
func answerEveryItem(w http.ResponseWriter, r *http.Request) {
	var req struct{ Items []json.RawMessage }
	_ = json.NewDecoder(r.Body).Decode(&req)
	res := make([]PushResult, len(req.Items))
	for i := range res {
		res[i] = PushResult{Index: i, Status: StatusQueued}
	}
	b, _ := json.Marshal(res)
	writeJSON(w, 201, string(b))
}

// A push request's bytes, pinned: each payload is written once, as encoding/json encodes it, and a
// json.RawMessage exactly as given (it is validated, not re-encoded); an empty partition or
// trace id is left out.
func TestPushWireBody(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) { answerEveryItem(w, r) })
	ctx := context.Background()
	_, err := c.Queue("orders").Partition("eu/1").Push(ctx,
		Item{Data: map[string]any{"note": "<a&b>", "n": 1}, TransactionID: "t-1", TraceID: "trace-1"},
		Item{Data: json.RawMessage(`{ "raw": [1, 2], "html": "<b>" }`), TransactionID: "t\"2é\u2028"},
		Item{Data: []byte{0xff}, TransactionID: "t-3"})
	require.NoError(t, err)
	_, err = c.Queue("plain").Push(ctx, Item{Data: 7, TransactionID: "x"})
	require.NoError(t, err)

	require.Equal(t, []string{
		`{"items":[` +
			`{"queue":"orders","partition":"eu/1","payload":{"n":1,"note":"\u003ca\u0026b\u003e"},"transactionId":"t-1","traceId":"trace-1"},` +
			`{"queue":"orders","partition":"eu/1","payload":{ "raw": [1, 2], "html": "<b>" },"transactionId":"t\"2é\u2028"},` +
			`{"queue":"orders","partition":"eu/1","payload":"/w==","transactionId":"t-3"}]}`,
		`{"items":[{"queue":"plain","payload":7,"transactionId":"x"}]}`,
	}, fb.bodies)
}

// Queue names, partitions and ids are written as json.Marshal writes the string, whatever it holds.
func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain-id_1.2:3", " ~", "\x00", "\x1f", "\x7f", "tab\t", `quote"back\`,
		"<a&b>", "é", "\u2028\u2029", "\xff\xfe", "日本", "emoji 😀"} {
		want, err := json.Marshal(s)
		require.NoError(t, err)
		require.Equal(t, string(want), string(appendJSONString(nil, s)), "%q", s)
	}
}

// answerTransactionCommitted answers a transaction with success.
func answerTransactionCommitted(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, 200, `{"transactionId":"x","success":true,"results":[]}`)
}

// A transaction's bytes, pinned: a push payload is written as encodeItems encoded it, once, and a
// json.RawMessage exactly as given, as in a push request; acks, leases and riders follow.
func TestTransactionWireBody(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) { answerTransactionCommitted(w, r) })
	m := &Message{TransactionID: "in-1", PartitionID: "p-1", LeaseID: "L", ConsumerGroup: "g"}
	_, err := c.Transaction().
		Queue("orders").Partition("eu/1").Push(
		Item{Data: map[string]any{"note": "<a&b>"}, TransactionID: "t-1", TraceID: "trace-1"},
		Item{Data: json.RawMessage(`{ "raw": [1, 2], "html": "<b>" }`), TransactionID: "t-2"}).
		Ack(m, AckCompleted, "").
		Queue("plain").Push(Item{Data: 7, TransactionID: "x"}).
		Ack(&Message{TransactionID: "in-2", PartitionID: "p-2"}, AckFailed, "").
		KV(KVDelete("ns", "k")).
		Commit(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{`{"operations":[` +
		`{"type":"push","items":[` +
		`{"queue":"orders","partition":"eu/1","payload":{"note":"\u003ca\u0026b\u003e"},"transactionId":"t-1","traceId":"trace-1"},` +
		`{"queue":"orders","partition":"eu/1","payload":{ "raw": [1, 2], "html": "<b>" },"transactionId":"t-2"}]},` +
		`{"type":"ack","transactionId":"in-1","partitionId":"p-1","status":"completed","consumerGroup":"g","leaseId":"L"},` +
		`{"type":"push","items":[{"queue":"plain","payload":7,"transactionId":"x"}]},` +
		`{"type":"ack","transactionId":"in-2","partitionId":"p-2","status":"failed"}],` +
		`"requiredLeases":["L"],"kv":[{"key":"k","ns":"ns","op":"delete"}]}`,
	}, fb.bodies)
}

// countedPayload counts its MarshalJSON calls.
type countedPayload struct{ calls *int }

func (p countedPayload) MarshalJSON() ([]byte, error) {
	*p.calls++
	return []byte(`{"counted":true}`), nil
}

// A push payload is marshaled once whether it goes out in a push or in a transaction.
func TestPayloadMarshaledOnce(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/transaction" {
			answerTransactionCommitted(w, r)
			return
		}
		answerEveryItem(w, r)
	})
	ctx := context.Background()
	calls := 0
	_, err := c.Transaction().Queue("q").Push(Data(countedPayload{&calls})).Commit(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, calls, "transaction")
	_, err = c.Queue("q").Push(ctx, Data(countedPayload{&calls}))
	require.NoError(t, err)
	require.Equal(t, 2, calls, "push")
	for _, body := range fb.bodies {
		require.Contains(t, body, `"payload":{"counted":true}`)
	}
}

func TestTransactionRejectedReason(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `{"transactionId":"x","success":false,"reason":"ack_rejected","error":"invalid or expired lease","results":[]}`)
	})
	m := &Message{TransactionID: "t", PartitionID: "p", LeaseID: "L", ConsumerGroup: "g"}
	_, err := c.Transaction().Queue("out").Push(Data(1)).Ack(m, AckCompleted, "").Commit(context.Background())
	var te *TransactionError
	require.ErrorAs(t, err, &te)
	require.Equal(t, ReasonAckRejected, te.Reason)
	require.Contains(t, fb.bodies[0], `"requiredLeases":["L"]`)
	require.Contains(t, fb.bodies[0], `"consumerGroup":"g"`)
	_, err = c.Transaction().Commit(context.Background())
	require.True(t, errors.Is(err, ErrEmptyTransaction))
}

func TestPrintingAClientDoesNotShowItsBearerToken(t *testing.T) {
	t.Parallel()
	const token = "eyJ-secret-token-value"
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 201, pushOK)
	}, WithBearerToken(token))
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
		require.NotContains(t, fmt.Sprintf(verb, c), token, "fmt %s of *Client", verb)
		require.NotContains(t, fmt.Sprintf(verb, reflect.ValueOf(c).Elem()), token, "fmt %s of Client", verb) // as *c, without copying its mutex
		require.NotContains(t, fmt.Sprintf(verb, c.cfg), token, "fmt %s of the config", verb)
		require.NotContains(t, fmt.Sprintf(verb, c.cfg.token), token, "fmt %s of the token", verb)
	}
	_, err := c.Queue("q").Push(context.Background(), Data(1))
	require.NoError(t, err)
	require.Equal(t, "Bearer "+token, fb.reqs[0].Header.Get("Authorization"))
}

// A KV batch answered with another number of results than ops is an *UnexpectedAnswerError, as in
// TS and Python, rather than results the caller would misalign.
func TestKVBatchAnswerWithAnotherCountIsUnexpected(t *testing.T) {
	t.Parallel()
	c, _, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `{"results":[{"op":"get","ns":"ns","key":"a","found":false}]}`)
	})
	res, err := c.KV("ns").Batch(context.Background(), KVGet("ns", "a"), KVGet("ns", "b"))
	require.Nil(t, res)
	var ue *UnexpectedAnswerError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, "lanes: unexpected answer: kv: broker answered 1 results for 2 operations", err.Error())
	require.Zero(t, ue.Status)
}

// A timer call answered with another number of results than ops is an *UnexpectedAnswerError
// with status 0, as in TS and Python.
func TestTimerAnswerWithAnotherCountIsUnexpected(t *testing.T) {
	t.Parallel()
	c, _, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `{"results":[]}`)
	})
	res, err := c.Timers("q").Schedule(context.Background(), "k", time.Second, nil)
	require.Nil(t, res)
	var ue *UnexpectedAnswerError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, "lanes: unexpected answer: timers: broker answered 0 results for 1 operations", err.Error())
	require.Zero(t, ue.Status)
}

// A 2xx push answer that does not match the request is an *UnexpectedAnswerError, not a success
// and not a PushError: the push may have committed. Too few results, and a body that is not JSON.
func TestPushAnswerThatDoesNotMatchIsUnexpected(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, message string
	}{
		{"short", `[]`, "lanes: unexpected answer: push: broker answered 0 results for 1 items"},
		{"garbage", `<html>ok</html>`, "lanes: unexpected answer: POST /api/v1/push: cannot decode the answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, _, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) { writeJSON(w, 201, tc.body) })
			res, err := c.Queue("q").Push(context.Background(), Item{Data: 1, TransactionID: "t1"})
			require.Nil(t, res)
			var ue *UnexpectedAnswerError
			require.ErrorAs(t, err, &ue)
			require.Contains(t, err.Error(), tc.message)
			var pe *PushError
			require.False(t, errors.As(err, &pe), "no item is known to have failed")
		})
	}
}

// TestRetryAfterHTTPDate: an HTTP-date is read against the client's clock like seconds: slept
// when ahead, above the cap surfaced on the error, and in the past no hint (computed backoff).
func TestRetryAfterHTTPDate(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 4, 23, 59, 0, 0, time.UTC)
	fake := func(t *testing.T, dates ...time.Time) (*Client, *fakeBroker, *sleepRec) {
		fb := &fakeBroker{handler: func(n int, w http.ResponseWriter, r *http.Request) {
			if n <= len(dates) {
				w.Header().Set("Retry-After", dates[n-1].Format(http.TimeFormat))
				writeJSON(w, 429, `{"error":"busy","code":"rate_limited"}`)
				return
			}
			writeJSON(w, 201, pushOK)
		}}
		srv := httptest.NewServer(fb)
		t.Cleanup(srv.Close)
		sr := &sleepRec{}
		c, err := New(WithURL(srv.URL), WithMaxRetryAfter(time.Minute),
			withClock(func() time.Time { return now }, func() float64 { return 0 }, sr.sleep))
		require.NoError(t, err)
		return c, fb, sr
	}
	t.Run("ahead is slept", func(t *testing.T) {
		t.Parallel()
		c, fb, sr := fake(t, now.Add(2*time.Second))
		_, err := c.Queue("q").Push(context.Background(), Data(1))
		require.NoError(t, err)
		require.Equal(t, 2, fb.count())
		require.Equal(t, []time.Duration{2 * time.Second}, sr.all())
	})
	t.Run("above the cap is on the error", func(t *testing.T) {
		t.Parallel()
		c, fb, sr := fake(t, now.Add(time.Hour))
		_, err := c.Queue("q").Push(context.Background(), Data(1))
		var ae *APIError
		require.ErrorAs(t, err, &ae)
		require.ErrorIs(t, err, ErrRateLimited)
		require.Equal(t, time.Hour, ae.RetryAfter)
		require.Equal(t, 1, fb.count())
		require.Empty(t, sr.all())
	})
	t.Run("past is the computed backoff", func(t *testing.T) {
		t.Parallel()
		c, fb, sr := fake(t, now.Add(-time.Minute))
		_, err := c.Queue("q").Push(context.Background(), Data(1))
		require.NoError(t, err)
		require.Equal(t, 2, fb.count())
		require.Equal(t, []time.Duration{500 * time.Millisecond}, sr.all())
	})
}

// Without WithURL the client asks LANES_URL, else http://localhost:6632 (docs/sdk-design.md §1),
// as TS and Python do.
func TestDefaultURLIsLanesURLElseLocalhost(t *testing.T) {
	fb := &fakeBroker{handler: func(n int, w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, `{"status":"healthy"}`) }}
	srv := httptest.NewServer(fb)
	t.Cleanup(srv.Close)
	t.Setenv("LANES_URL", srv.URL)
	c, err := New()
	require.NoError(t, err)
	closeWhenDone(t, c)
	_, err = c.Health(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, fb.count())

	t.Setenv("LANES_URL", "")
	c, err = New()
	require.NoError(t, err)
	closeWhenDone(t, c)
	require.Equal(t, []string{"http://localhost:6632"}, c.cfg.urls)
}

// An item the broker answers buffered (its disk spool) is no error and is logged at warn level,
// as in TS and Python (docs/sdk-design.md §2).
func TestPushBufferedIsLoggedAtWarn(t *testing.T) {
	t.Parallel()
	rec := &recHandler{}
	c, _, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 201, `[{"index":0,"message_id":"m","transaction_id":"t","queueName":"q","status":"buffered"}]`)
	}, WithLogger(slog.New(rec)))
	res, err := c.Queue("q").Push(context.Background(), Data(1))
	require.NoError(t, err)
	require.Equal(t, StatusBuffered, res[0].Status)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var warns []slog.Record
	for _, r := range rec.recs {
		if r.Level >= slog.LevelWarn {
			warns = append(warns, r)
		}
	}
	require.Len(t, warns, 1)
	require.Equal(t, slog.LevelWarn, warns[0].Level)
	require.Contains(t, warns[0].Message, "disk spool")
}
