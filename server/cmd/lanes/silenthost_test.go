package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lanesmq/lanes/server/internal/testdb"
)

// A push and a pop whose statements run when the database host falls silent
// (every connection through a proxy that stops passing bytes, new ones
// passing: a failover behind the same address) answer once the broker's
// listener finds the host silent: the push buffered in the spool, the pop
// 500 database_unavailable. Before, the push answered at its
// LANES_PUSH_TIMEOUT_MS and the pop at its claim's deadline (twice
// LANES_DB_STATEMENT_TIMEOUT_MS). The push's commit landed unseen; its
// spooled copy and the same push sent again store nothing twice.
func TestRequestsInFlightWhenTheDatabaseHostFallsSilentAnswerOnceTheListenerNotices(t *testing.T) {
	const check = 200 * time.Millisecond
	const deadline = 5 * time.Second // the push's; the claim's is twice the statement timeout
	const bound = deadline / 2       // well past the listener's detection (about 0.6 s)
	dsn := newDatabase(t)
	direct, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.Close(context.Background()) })
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testdb.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	b := startBroker(t, u.String(), freePort(t), t.TempDir(), "LANES_LOG_LEVEL=warn",
		fmt.Sprintf("LANES_LISTENER_CHECK_MS=%d", check.Milliseconds()),
		fmt.Sprintf("LANES_PUSH_TIMEOUT_MS=%d", deadline.Milliseconds()),
		fmt.Sprintf("LANES_REQUEST_DB_TIMEOUT_MS=%d", deadline.Milliseconds()),
		fmt.Sprintf("LANES_DB_STATEMENT_TIMEOUT_MS=%d", deadline.Milliseconds()))
	b.waitHealth(t, http.StatusOK, 30*time.Second)
	exec := func(ctx context.Context, sql string) error {
		_, err := direct.Exec(ctx, sql)
		return err
	}
	push := func(txns ...string) ([]string, int, error) {
		items := make([]map[string]any, len(txns))
		for i, id := range txns {
			items[i] = map[string]any{"queue": "silent", "partition": "p", "transactionId": id, "payload": id}
		}
		var res []struct {
			Status string `json:"status"`
		}
		status, err := b.do("POST", "/api/v1/push", map[string]any{"items": items}, &res)
		statuses := make([]string, len(res))
		for i, r := range res {
			statuses[i] = r.Status
		}
		return statuses, status, err
	}
	if _, status, err := push("warm"); err != nil || status != http.StatusCreated {
		t.Fatalf("push: %d %v", status, err)
	}
	// waitListener waits until the listener has made more than connections.
	waitListener := func(connections int) {
		for limit := time.Now().Add(10 * time.Second); proxy.Sent(listenQuery) <= connections; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(limit) {
				t.Fatal("the broker's listener did not connect within 10 s")
			}
		}
		time.Sleep(2 * check) // on LISTEN, its connection set up
	}
	waitListener(0)

	t.Run("push", func(t *testing.T) {
		awaitStall := testdb.StallNextSegmentWritePastCancel(t, direct, "silent", "p", 3*time.Second)
		answered := make(chan string, 1)
		go func() {
			statuses, status, err := push("t1", "t2")
			answered <- fmt.Sprint(status, statuses, err)
		}()
		awaitStall()
		silent := time.Now()
		proxy.Kill("")
		answer := <-answered
		took := time.Since(silent)
		t.Logf("the push in flight answered %v after the host fell silent (check %v, push deadline %v): %s", took.Round(time.Millisecond), check, deadline, answer)
		if want := fmt.Sprint(http.StatusCreated, []string{"buffered", "buffered"}, nil); answer != want || took > bound {
			t.Fatalf("the push in flight answered %s after %v, want %s within %v", answer, took, want, bound)
		}
		// The host answers again: the same push again is stored once.
		statuses, status, err := push("t1", "t2")
		if err != nil || status != http.StatusCreated {
			t.Fatalf("the push sent again: %d %v", status, err)
		}
		t.Logf("the same push sent again: %v", statuses)
	})

	t.Run("pop", func(t *testing.T) {
		waitListener(proxy.Sent(listenQuery) - 1) // back after the push's silence
		testdb.StallNextClaim(t, exec, "workers", 3*time.Second)
		answered := make(chan string, 1)
		go func() {
			var e struct {
				Code string `json:"code"`
			}
			status, err := b.do("GET", "/api/v1/pop/queue/silent?consumerGroup=workers&subscriptionMode=all&batch=10", nil, &e)
			answered <- fmt.Sprint(status, " ", e.Code, " ", err)
		}()
		testdb.AwaitSleepingStatement(t, direct)
		silent := time.Now()
		proxy.Kill("")
		answer := <-answered
		took := time.Since(silent)
		t.Logf("the pop in flight answered %v after the host fell silent (check %v, claim deadline %v): %s", took.Round(time.Millisecond), check, 2*deadline, answer)
		if want := fmt.Sprint(http.StatusInternalServerError, " database_unavailable <nil>"); answer != want || took > bound {
			t.Fatalf("the pop in flight answered %q after %v, want %q within %v", answer, took, want, bound)
		}
	})

	// Every message once, the spooled copy drained.
	var txns []string
	for limit := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var p popped
		status, err := b.do("GET", "/api/v1/pop/queue/silent?consumerGroup=all-once&subscriptionMode=all&batch=10&autoAck=true", nil, &p)
		if err == nil && status == http.StatusOK {
			for _, m := range p.Messages {
				txns = append(txns, m.TransactionID)
			}
		}
		if len(txns) >= 3 || time.Now().After(limit) {
			break
		}
	}
	time.Sleep(time.Second) // the spool's drain, had it stored a copy
	var p popped
	if status, err := b.do("GET", "/api/v1/pop/queue/silent?consumerGroup=all-once&batch=10&autoAck=true", nil, &p); err == nil && status == http.StatusOK {
		for _, m := range p.Messages {
			txns = append(txns, m.TransactionID)
		}
	}
	if fmt.Sprint(txns) != "[warm t1 t2]" {
		t.Fatalf("the queue delivered %v, want warm, t1, t2 once each", txns)
	}
}
