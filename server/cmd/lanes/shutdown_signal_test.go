package main

import (
	"context"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestSecondSignalCutsTheInFlightRequests: with a push held inside
// PostgreSQL and a 20 s shutdown timeout, a second SIGTERM makes the broker
// cut the push's connection at once instead of waiting out the timeout.
func TestSecondSignalCutsTheInFlightRequests(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	b := startBroker(t, dsn, freePort(t), t.TempDir(), "LANES_SHUTDOWN_TIMEOUT_MS=20000")
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := b.WaitHealth(waitCtx, http.StatusOK); err != nil {
		t.Fatal(err)
	}
	push := func(txn string) error {
		body := `{"items":[{"queue":"hurry","partition":"p","transactionId":"` + txn + `","payload":1}]}`
		resp, err := http.Post(b.URL+"/api/v1/push", "application/json", strings.NewReader(body))
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := push("first"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM lanes.partitions WHERE name = 'p' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() { held <- push("held") }()
	time.Sleep(300 * time.Millisecond)
	if err := b.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	select {
	case <-b.Done():
		t.Fatalf("the broker exited with a push in flight after one SIGTERM\n%s", b.logs.String())
	default:
	}
	start := time.Now()
	if err := b.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-held:
		if err == nil {
			t.Fatalf("the held push answered instead of having its connection cut\n%s", b.logs.String())
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("the held push's connection was not cut %v after a second SIGTERM (shutdown timeout 20 s)\n%s", time.Since(start), b.logs.String())
	}
	// The push itself still waits inside PostgreSQL; the engine lets it finish.
	_ = tx.Rollback(ctx)
	select {
	case <-b.Done():
	case <-time.After(8 * time.Second):
		t.Fatalf("the broker still runs %v after a second SIGTERM\n%s", time.Since(start), b.logs.String())
	}
	if !strings.Contains(b.logs.String(), "second signal") {
		t.Fatalf("no log line says the second signal cut the requests:\n%s", b.logs.String())
	}
	t.Logf("exited %v after the second SIGTERM", time.Since(start).Round(time.Millisecond))
}
