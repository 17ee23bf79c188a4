package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
)

// liveLeases counts cursor rows of queue q (and group, "" = any) holding an unexpired lease.
func liveLeases(t testing.TB, b *testBroker, q, group string) int {
	t.Helper()
	var n int
	if err := b.Pool.QueryRow(context.Background(), `SELECT count(*) FROM lanes.consumers c
		JOIN lanes.partitions p ON p.id = c.partition_id JOIN lanes.queues qu ON qu.id = p.queue_id
		WHERE qu.name = $1 AND ($2 = '' OR c.consumer_group = $2)
		  AND c.lease_id IS NOT NULL AND c.lease_expires_at > now()`, q, group).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// settleGoroutines waits until the goroutine count is back to at most limit.
func settleGoroutines(t *testing.T, limit int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		runtime.GC()
		n := runtime.NumGoroutine()
		if n <= limit || time.Now().After(deadline) {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClientDisconnectMidLongPollLeaksNothing parks long polls, drops their
// clients (some while a push is waking them, so a claim may commit after the
// client left), and checks that nothing stays behind: no parked waiter, no
// handler goroutine, no live lease, and every message not answered to a
// client is claimable at once.
func TestClientDisconnectMidLongPollLeaksNothing(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), testDSN)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(pool, engine.Config{})
	srv := NewServer(eng, Options{Version: "test", MaxBodyBytes: 1 << 20})
	h, err := srv.Handler()
	if err != nil {
		t.Fatal(err)
	}
	// The wrapper knows when the server is done with every request (give-back
	// included) and how many pops it answered 200.
	var inFlight, pops200 atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		rec := &statusRecorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if rec.status == http.StatusOK && isPopRequest(r) {
			pops200.Add(1)
		}
	}))
	t.Cleanup(func() { hs.Close(); eng.Close(); pool.Close() })
	b := &testBroker{URL: hs.URL, Engine: eng, Pool: pool}
	q := uniqueQueue(t)
	tr := &http.Transport{}
	client := &http.Client{Transport: tr}
	// Warm up the connection pool and the handler path, then take the baseline.
	b.call(t, "GET", "/api/v1/pop/queue/"+q, nil, nil)
	tr.CloseIdleConnections()
	time.Sleep(200 * time.Millisecond)
	runtime.GC()
	baseline := runtime.NumGoroutine()

	const rounds, pollers = 30, 4
	delivered := map[string]bool{}
	pushed := map[string]bool{}
	answered := 0
	start := time.Now()
	call := func(method, path string, body, out any) { b.call(t, method, path, body, out) }
	claimable := map[string]bool{}
	// drain claims what is claimable right now (a claim given back is) and acks it.
	drain := func() {
		var rest popBody
		call("GET", "/api/v1/pop/queue/"+q+"?batch=1000", nil, &rest)
		acks := make([]map[string]any, len(rest.Messages))
		for i, m := range rest.Messages {
			claimable[m.TransactionID] = true
			acks[i] = map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": rest.LeaseID}
		}
		if len(acks) > 0 {
			call("POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks}, nil)
		}
	}
	popsAnswered := func() int {
		waitFor(t, 10*time.Second, "the broker to finish every request", func() bool { return inFlight.Load() == 0 })
		return int(pops200.Load())
	}
	unread := 0
	for round := 0; round < rounds; round++ {
		drain()
		answeredBefore := popsAnswered()
		ctx, cancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		var got []popBody
		var wg sync.WaitGroup
		for i := 0; i < pollers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.URL+"/api/v1/pop/queue/"+q+"?wait=true&timeout=30000&batch=3", nil)
				resp, err := client.Do(req)
				if err != nil {
					return // the client left
				}
				defer resp.Body.Close()
				raw, err := io.ReadAll(resp.Body)
				if err != nil || resp.StatusCode != http.StatusOK {
					if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
						t.Errorf("long poll answered %d %s", resp.StatusCode, raw)
					}
					return
				}
				var p popBody
				if json.Unmarshal(raw, &p) == nil {
					mu.Lock()
					got = append(got, p)
					mu.Unlock()
				}
			}()
		}
		waitFor(t, 10*time.Second, fmt.Sprintf("the long polls of round %d to park", round), func() bool { return b.Engine.ParkedPops() >= pollers })
		if round%3 != 0 {
			// A push wakes the parked polls; the clients leave 0–3 ms later, so
			// some leave before, some during and some after the claim.
			txn := fmt.Sprintf("r%02d", round)
			pushed[txn] = true
			call("POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "partition": "p", "transactionId": txn, "payload": round}}}, nil)
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		}
		cancel()
		wg.Wait()
		// A client that read its answer owns that claim: it acks. Whatever a
		// client did not receive must hold no lease.
		for _, p := range got {
			answered++
			acks := make([]map[string]any, len(p.Messages))
			for i, m := range p.Messages {
				delivered[m.TransactionID] = true
				acks[i] = map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": p.LeaseID}
			}
			call("POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks}, nil)
		}
		// A claim answered into a socket whose client was closing at that very
		// moment is indistinguishable, for the broker, from a consumer that
		// crashed after receiving it: its lease frees at expiry. Every other
		// claim of a client that left must have been given back.
		unreadAnswers := popsAnswered() - answeredBefore - len(got)
		if n := liveLeases(t, b, q, ""); n > unreadAnswers {
			t.Fatalf("round %d: %d live leases, but only %d answers went to clients that had just left", round, n, unreadAnswers)
		} else if n > 0 {
			unread += n
			// Fast-forward those leases to their expiry; the next drain must see their messages.
			if _, err := b.Pool.Exec(context.Background(), `UPDATE lanes.consumers SET lease_expires_at = now() - interval '1 second'
				WHERE lease_expires_at > now() AND partition_id IN (SELECT p.id FROM lanes.partitions p
					JOIN lanes.queues qu ON qu.id = p.queue_id WHERE qu.name = $1)`, q); err != nil {
				t.Fatal(err)
			}
		}
	}
	tr.CloseIdleConnections()
	took := time.Since(start)

	waitFor(t, 10*time.Second, "every parked poll to leave", func() bool { return b.Engine.ParkedPops() == 0 })
	after := settleGoroutines(t, baseline+2)
	if after > baseline+2 {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines: %d before, %d after the disconnects\n%s", baseline, after, buf[:runtime.Stack(buf, true)])
	}
	// Every pushed message a client did not receive was claimable at once, not at lease expiry.
	drain()
	lost := 0
	for txn := range pushed {
		if !delivered[txn] && !claimable[txn] {
			lost++
			t.Errorf("message %s is neither delivered nor claimable (held by a leaked lease)", txn)
		}
	}
	t.Logf("load: %d rounds × %d long polls dropped by their clients in %v, %d pushes waking them; answered before the drop: %d; "+
		"claims given back: %d; answered into a closing socket (freed at lease expiry): %d; claimable afterwards: %d; lost: %d; goroutines %d → %d; parked %d",
		rounds, pollers, took.Round(time.Millisecond), len(pushed), answered, srv.metrics.LeasesGivenBack(), unread, len(claimable), lost, baseline, after, b.Engine.ParkedPops())
}

// TestClaimCommittedAfterTheClientLeftIsGivenBack drives the one window the
// engine cannot close by itself: the claim commits, then the handler finds its
// client gone. The middleware gives the claim back.
func TestClaimCommittedAfterTheClientLeftIsGivenBack(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{}, "")
	q := uniqueQueue(t)
	if status, _ := b.call(t, "POST", "/api/v1/push", pushItems(q, 3), nil); status != http.StatusCreated {
		t.Fatal("push")
	}
	for _, group := range []*string{nil, ptr("given-back")} {
		gone, cancel := context.WithCancel(context.Background())
		req := httptest.NewRequest(http.MethodGet, "/api/v1/pop/queue/"+q, nil).WithContext(gone)
		mode := "all"
		popReq := gen.PopQueueRequestObject{Queue: q, Params: gen.PopQueueParams{ConsumerGroup: group, SubscriptionMode: &mode}}
		handler := b.Server.strictMiddleware(func(ctx context.Context, _ http.ResponseWriter, _ *http.Request, request any) (any, error) {
			resp, err := b.Server.PopQueue(context.Background(), request.(gen.PopQueueRequestObject))
			cancel() // the client leaves after the claim committed
			return resp, err
		}, "PopQueue")
		if _, err := handler(gone, httptest.NewRecorder(), req, popReq); err == nil {
			t.Fatal("a pop whose client left must not answer")
		}
		name := "__QUEUE_MODE__"
		if group != nil {
			name = *group
		}
		if n := liveLeases(t, b.testBroker, q, name); n != 0 {
			t.Fatalf("group %v: %d live leases after the claim was given back", group, n)
		}
		path := "/api/v1/pop/queue/" + q + "?batch=10&subscriptionMode=all"
		if group != nil {
			path += "&consumerGroup=" + *group
		}
		var p popBody
		b.call(t, "GET", path, nil, &p)
		if len(p.Messages) != 3 {
			t.Fatalf("group %v: %d messages claimable again at once, want 3", group, len(p.Messages))
		}
	}
	if n := b.Server.metrics.LeasesGivenBack(); n != 2 {
		t.Errorf("lanes_pop_leases_given_back_total = %d, want 2", n)
	}
}

func ptr[T any](v T) *T { return &v }
