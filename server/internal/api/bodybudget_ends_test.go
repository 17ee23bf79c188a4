package api

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/lanesmq/lanes/server/internal/admission"
	"github.com/lanesmq/lanes/server/internal/engine"
)

// bodyBudgetEndsMaxBody is the cap, the budget and the client's share of the
// brokers below: a chunked body then counts as the whole budget, so one is let
// in at once only when no byte is held and no other body is being read.
const bodyBudgetEndsMaxBody = 1 << 20

// newBodyBudgetBroker is a broker whose body budget and client share are the cap.
func newBodyBudgetBroker(t *testing.T, maxWait, readTimeout time.Duration) (*resilientBroker, *admission.ByteBudget) {
	t.Helper()
	budget := admission.NewByteBudget(bodyBudgetEndsMaxBody, maxWait).LimitPerClient(bodyBudgetEndsMaxBody)
	b := newBrokerWith(t, testDSN, Options{MaxBodyBytes: bodyBudgetEndsMaxBody, BodyBudget: budget, BodyReadTimeout: readTimeout}, "")
	return b, budget
}

// wantBudgetGivenBack waits for the budget to hold nothing and have no waiter,
// then checks that a chunked push is served: it is, only if no room is left
// counted as held or as a body being read (else it waits, then answers 429).
func wantBudgetGivenBack(t *testing.T, b *resilientBroker, budget *admission.ByteBudget, after string) {
	t.Helper()
	waitFor(t, 3*time.Second, "the body budget to be given back "+after, func() bool {
		s := budget.Stats()
		return s.Held == 0 && s.Waiting == 0
	})
	var metrics map[string]any
	b.call(t, "GET", "/metrics", nil, &metrics)
	if bodyBytes, _ := metrics["bodyBytes"].(map[string]any); bodyBytes["held"] != float64(0) || bodyBytes["waiting"] != float64(0) {
		t.Fatalf("metrics bodyBytes %s: %+v; want nothing held or waiting", after, metrics["bodyBytes"])
	}
	if resp, e := mustPostPush(t, b.URL, pushOfSize(uniqueQueue(t), 1000), true); resp.StatusCode != http.StatusCreated {
		t.Fatalf("chunked push %s: %d %+v; want 201 (room left counted as a body being read?)", after, resp.StatusCode, e)
	}
}

// readAnswer reads the broker's answer on conn.
func readAnswer(t *testing.T, conn net.Conn) *http.Response {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

// Review of the body budget: however a request with a body ends, the room
// its body took is given back, both the bytes held (lanes_body_bytes_inflight)
// and its place among the bodies being read, which no metric shows but which
// would keep every chunked body waiting.
func TestEveryWayABodyEndsGivesItsRoomBack(t *testing.T) {
	const maxWait, readTimeout = 300 * time.Millisecond, time.Minute
	full := pushOfSize("q", bodyBudgetEndsMaxBody)

	t.Run("the client hangs up mid-body", func(t *testing.T) {
		b, budget := newBodyBudgetBroker(t, maxWait, readTimeout)
		conn := stallBodyAfter(t, b.URL, "/api/v1/push", full, 300<<10)
		waitForHeld(t, budget, 2*bodyReserveStep)
		_ = conn.Close()
		wantBudgetGivenBack(t, b, budget, "after a hang-up mid-body")
	})

	t.Run("the body stalls past its read deadline (408)", func(t *testing.T) {
		b, budget := newBodyBudgetBroker(t, maxWait, 500*time.Millisecond)
		conn := stallBodyAfter(t, b.URL, "/api/v1/push", full, 300<<10)
		if resp := readAnswer(t, conn); resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("stalled body: %d; want 408", resp.StatusCode)
		}
		wantBudgetGivenBack(t, b, budget, "after a 408")
	})

	t.Run("a chunked body passes the cap (413 mid-body)", func(t *testing.T) {
		b, budget := newBodyBudgetBroker(t, maxWait, readTimeout)
		conn, host := dialBroker(t, b.URL)
		body := pushOfSize("q", bodyBudgetEndsMaxBody+1000)
		go func() {
			_, _ = fmt.Fprintf(conn, "POST /api/v1/push HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", host, len(body), body)
		}()
		if resp := readAnswer(t, conn); resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("chunked body past the cap: %d; want 413", resp.StatusCode)
		}
		wantBudgetGivenBack(t, b, budget, "after a 413 mid-body")
	})

	t.Run("a Content-Length above the cap (413 unread)", func(t *testing.T) {
		b, budget := newBodyBudgetBroker(t, maxWait, readTimeout)
		conn := postHead(t, b.URL, "/api/v1/push", pushOfSize("q", bodyBudgetEndsMaxBody+1), "")
		if resp := readAnswer(t, conn); resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("declared length past the cap: %d; want 413", resp.StatusCode)
		}
		wantBudgetGivenBack(t, b, budget, "after a 413 from the declared length")
	})

	t.Run("a body sends more than it declared", func(t *testing.T) {
		b, budget := newBodyBudgetBroker(t, maxWait, readTimeout)
		conn, host := dialBroker(t, b.URL)
		body := pushOfSize(uniqueQueue(t), 1000)
		if _, err := fmt.Fprintf(conn, "POST /api/v1/push HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s%s", host, len(body), body, strings.Repeat("y", 300<<10)); err != nil {
			t.Fatal(err)
		}
		if resp := readAnswer(t, conn); resp.StatusCode != http.StatusCreated {
			t.Fatalf("push followed by bytes past its length: %d; want 201 (the rest is the next request)", resp.StatusCode)
		}
		wantBudgetGivenBack(t, b, budget, "after a body followed by more bytes than it declared")
	})

	t.Run("a body refused for want of room, and one whose client hangs up while it waits", func(t *testing.T) {
		b, budget := newBodyBudgetBroker(t, maxWait, readTimeout)
		stalled := stallBodyAfter(t, b.URL, "/api/v1/push", full, bodyBudgetEndsMaxBody-1000)
		waitForHeld(t, budget, bodyBudgetEndsMaxBody)

		start := time.Now()
		resp, e := mustPostPush(t, b.URL, pushOfSize(uniqueQueue(t), 1000), false)
		if resp.StatusCode != http.StatusTooManyRequests || time.Since(start) < maxWait {
			t.Fatalf("push with the budget full: %d %+v after %s; want 429 after waiting %s", resp.StatusCode, e, time.Since(start), maxWait)
		}
		leaving := stallBodyAfter(t, b.URL, "/api/v1/push", pushOfSize("q", 1000), 10)
		waitFor(t, 3*time.Second, "the body to wait for room", func() bool { return budget.Stats().Waiting == 1 })
		_ = leaving.Close()
		_ = stalled.Close()
		wantBudgetGivenBack(t, b, budget, "after a 429 and a hang-up while waiting for room")
	})

	t.Run("a waiting pop holds its body until it is answered, then gives it back", func(t *testing.T) {
		b, budget := newBodyBudgetBroker(t, maxWait, readTimeout)
		q := uniqueQueue(t)
		popPath := "/api/v1/pop/queue/" + q + "?wait=true&timeout=1000&consumerGroup=g"
		conn := stallRequestBody(t, b.URL, http.MethodGet, popPath, "{}", 2)
		waitForHeld(t, budget, 2)
		if resp := readAnswer(t, conn); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("waiting pop of an empty queue: %d; want 204", resp.StatusCode)
		}
		wantBudgetGivenBack(t, b, budget, "after a waiting pop's answer")

		leaving := stallRequestBody(t, b.URL, http.MethodGet, popPath, "{}", 2)
		waitForHeld(t, budget, 2)
		time.Sleep(100 * time.Millisecond) // parked
		_ = leaving.Close()
		wantBudgetGivenBack(t, b, budget, "after a waiting pop's client hung up")
	})

	t.Run("the handler panics", func(t *testing.T) {
		budget := admission.NewByteBudget(bodyBudgetEndsMaxBody, maxWait).LimitPerClient(bodyBudgetEndsMaxBody)
		pool := newEnginePool(t, testDSN)
		eng := engine.New(pool, engine.Config{})
		t.Cleanup(func() { eng.Close(); pool.Close() })
		s := NewServer(eng, Options{Version: "test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxBodyBytes: bodyBudgetEndsMaxBody, BodyBudget: budget, BodyReadTimeout: readTimeout})
		panicky := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("handler bug") })
		srv := httptest.NewServer(s.observeAndRecover(s.limitBody(panicky, func(*http.Request) routeBody { return routeWithBody }), mux.NewRouter()))
		t.Cleanup(srv.Close)
		for _, chunked := range []bool{false, true} {
			resp, e := mustPostPush(t, srv.URL, pushOfSize("q", 300<<10), chunked)
			if resp.StatusCode != http.StatusInternalServerError || e.Code != CodeInternal {
				t.Fatalf("panicking handler (chunked %v): %d %+v; want 500 %s", chunked, resp.StatusCode, e, CodeInternal)
			}
			waitForHeld(t, budget, 0)
		}
		// Room left counted as a body being read would keep this waiting, then 429.
		room := budget.Body("addr:127.0.0.1", bodyBudgetEndsMaxBody)
		if err := room.Grow(t.Context(), bodyReserveStep); err != nil {
			t.Fatalf("a body as large as the budget after two panics: %v; want room at once", err)
		}
	})
}

// dialBrokerFrom is dialBroker from the loopback address from, so that the
// broker counts the connection as another client.
func dialBrokerFrom(t *testing.T, brokerURL, from string) (net.Conn, string) {
	t.Helper()
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	dialer := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := dialer.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, u.Host
}

// Review of the body budget: small pushes beside a large body another client
// stalled on, nearly whole, are all served, whether they declare their
// length or not, even many at once. (Those without a length are read one at a
// time, since each counts as the cap and the stalled body holds the rest of
// the budget: the slowest answer is logged, and the wait is long enough not
// to refuse one on a loaded machine.)
func TestSmallPushesBesideALargeStalledBodyDoNotWait(t *testing.T) {
	const maxBody, maxWait, pushes = 1 << 20, 5 * time.Second, 100
	budget := admission.NewByteBudget(2*maxBody, maxWait).LimitPerClient(maxBody)
	b := newBrokerWith(t, testDSN, Options{MaxBodyBytes: maxBody, BodyBudget: budget, BodyReadTimeout: time.Minute}, "")
	q := uniqueQueue(t)
	large := pushOfSize(q, maxBody)
	conn, host := dialBrokerFrom(t, b.URL, "127.0.0.2")
	if _, err := fmt.Fprintf(conn, "POST /api/v1/push HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s", host, len(large), large[:maxBody-1000]); err != nil {
		t.Fatal(err)
	}
	waitForHeld(t, budget, maxBody)

	for _, chunked := range []bool{false, true} {
		var slowest atomic.Int64
		var wg sync.WaitGroup
		for range pushes {
			wg.Go(func() {
				start := time.Now()
				resp, e, err := postPush(b.URL, pushOfSize(q, 1000), chunked)
				took := time.Since(start)
				for old := slowest.Load(); took > time.Duration(old) && !slowest.CompareAndSwap(old, int64(took)); old = slowest.Load() {
				}
				switch {
				case err != nil:
					t.Errorf("push (chunked %v): %v", chunked, err)
				case resp.StatusCode != http.StatusCreated:
					t.Errorf("push (chunked %v) beside a stalled body: %d %+v; want 201", chunked, resp.StatusCode, e)
				}
			})
		}
		wg.Wait()
		t.Logf("%d concurrent 1000-byte pushes (chunked %v) beside a stalled body holding half the budget: slowest %s", pushes, chunked, time.Duration(slowest.Load()))
		if s := budget.Stats(); s.Rejected != 0 {
			t.Fatalf("chunked %v: %d pushes refused for want of room", chunked, s.Rejected)
		}
	}
	waitForHeld(t, budget, maxBody)
}
