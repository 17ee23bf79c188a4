package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lanesmq/lanes/server/internal/testdb"
)

// TestSIGTERMLeavesNoLeaseWithoutAnAnswer stops a broker with SIGTERM while a
// pop's claim is stalled in PostgreSQL past the shutdown timeout and other
// pops are parked. The parked ones answer 204; the stalled one's connection
// is cut when the timeout passes, and its claim, which commits after that, is
// given back before the broker exits: no lease outlives the broker unless a
// client received its answer.
func TestSIGTERMLeavesNoLeaseWithoutAnAnswer(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	// A claim given back is logged at DEBUG only.
	b := startBroker(t, dsn, freePort(t), t.TempDir(), "LANES_SHUTDOWN_TIMEOUT_MS=1000", "LANES_LOG_LEVEL=debug")
	b.waitHealth(t, http.StatusOK, 30*time.Second)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	const q, group = "stopping", "stalled"
	items := make([]map[string]any, 3)
	for i := range items {
		items[i] = map[string]any{"queue": q, "partition": "p", "transactionId": fmt.Sprintf("m%d", i), "payload": i}
	}
	if status, err := b.do("POST", "/api/v1/push", map[string]any{"items": items}, nil); status != http.StatusCreated {
		t.Fatalf("push: %d %v", status, err)
	}
	testdb.StallNextClaim(t, func(ctx context.Context, sql string) error { _, err := conn.Exec(ctx, sql); return err }, group, 3*time.Second)

	type answer struct {
		status int
		err    error
	}
	pop := func(path string, out chan<- answer) {
		resp, err := http.Get(b.URL + path)
		if err != nil {
			out <- answer{err: err}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out <- answer{status: resp.StatusCode}
	}
	stalled := make(chan answer, 1)
	go pop("/api/v1/pop/queue/"+q+"?batch=10&subscriptionMode=all&consumerGroup="+group, stalled)
	parked := make(chan answer, 3)
	for range 3 {
		go pop("/api/v1/pop/queue/idle?wait=true&timeout=30000", parked)
	}
	time.Sleep(500 * time.Millisecond) // the claim is stalled, the other pops parked
	stopped := time.Now()
	if err := b.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if a := <-parked; a.status != http.StatusNoContent {
			t.Errorf("a parked pop at shutdown answered %d %v, want 204", a.status, a.err)
		}
	}
	select {
	case <-b.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("the broker did not exit\n%s", b.logs.String())
	}
	exitedAfter := time.Since(stopped)
	a := <-stalled
	var live int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM lanes.consumers WHERE consumer_group = $1
		AND lease_id IS NOT NULL AND lease_expires_at > now()`, group).Scan(&live); err != nil {
		t.Fatal(err)
	}
	if a.status == http.StatusOK {
		t.Fatalf("the stalled pop was answered although the shutdown timeout passed first")
	}
	if live != 0 {
		t.Fatalf("the stalled pop's client got no answer (%v) but its claim holds %d live lease(s) after the broker exited\n%s", a.err, live, b.logs.String())
	}
	var leased int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM lanes.consumers WHERE consumer_group = $1 AND lease_id IS NOT NULL`, group).Scan(&leased); err != nil {
		t.Fatal(err)
	}
	if logs := b.logs.String(); !strings.Contains(logs, "claim given back") || leased != 0 {
		t.Fatalf("the stalled claim must have committed and been given back (leases on record: %d)\n%s", leased, logs)
	}
	t.Logf("claim stalled 3 s, shutdown timeout 1 s: the broker exited %v after SIGTERM, the claim given back", exitedAfter.Round(time.Millisecond))
}
