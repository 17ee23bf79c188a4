package main

import (
	"context"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSecondSignalCutsTheInFlightRequests: with a push held inside
// PostgreSQL and a 20 s shutdown timeout, a second SIGTERM makes the broker
// cut the push's connection at once instead of waiting out the timeout, and
// cancel its group commit rather than wait for the lock.
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
	lockPartitionRow(t, dsn, "p")
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
	// The lock is still held: the group commit waiting for it is canceled.
	select {
	case <-b.Done():
	case <-time.After(3 * time.Second):
		t.Fatalf("the broker still runs %v after a second SIGTERM\n%s", time.Since(start), b.logs.String())
	}
	if !strings.Contains(b.logs.String(), "second signal") {
		t.Fatalf("no log line says the second signal cut the requests:\n%s", b.logs.String())
	}
	t.Logf("exited %v after the second SIGTERM", time.Since(start).Round(time.Millisecond))
}

// TestShutdownIsBoundedByTheTimeoutAndTheGiveBackGrace: a push whose group
// commit waits for a partition row another connection keeps locked does not
// hold the broker past LANES_SHUTDOWN_TIMEOUT_MS plus the give-back grace:
// the commit is canceled then, and the broker exits without answering it.
func TestShutdownIsBoundedByTheTimeoutAndTheGiveBackGrace(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	const timeout = time.Second
	b := startBroker(t, dsn, freePort(t), t.TempDir(), "LANES_SHUTDOWN_TIMEOUT_MS=1000")
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := b.WaitHealth(waitCtx, http.StatusOK); err != nil {
		t.Fatal(err)
	}
	push := func(txn string) (int, error) {
		body := `{"items":[{"queue":"bounded","partition":"p","transactionId":"` + txn + `","payload":1}]}`
		resp, err := http.Post(b.URL+"/api/v1/push", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if _, err := push("first"); err != nil {
		t.Fatal(err)
	}
	lockPartitionRow(t, dsn, "p")
	type answer struct {
		status int
		err    error
	}
	held := make(chan answer, 1)
	go func() { s, err := push("held"); held <- answer{s, err} }()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if err := b.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	bound := timeout + giveBackGrace
	select {
	case <-b.Done():
	case <-time.After(bound + 2*time.Second):
		t.Fatalf("the broker still runs %v after SIGTERM (bound %v) with a group commit stuck on a lock\n%s",
			time.Since(start), bound, b.logs.String())
	}
	t.Logf("exited %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	if a := <-held; a.err == nil {
		t.Fatalf("the held push answered %d although its commit never got the lock", a.status)
	}
	for _, line := range []string{"waiting for group commits", "canceling group commits"} {
		if !strings.Contains(b.logs.String(), line) {
			t.Errorf("no %q in the shutdown log:\n%s", line, b.logs.String())
		}
	}
}
