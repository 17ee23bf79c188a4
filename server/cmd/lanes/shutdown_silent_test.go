package main

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/testdb"
)

// TestShutdownWithTheDatabaseHostSilentEndsWithinTheBudget: SIGTERM while the
// database host has stopped answering (every byte it would send held back, on
// open connections and new ones) and a push waits on it. The broker exits
// within LANES_SHUTDOWN_TIMEOUT_MS plus the 5 s give-back grace, the budget
// operations.md tells orchestrators to allow, not after it while it closes
// connections the silent host never answers (pgxpool gives each 15 s).
func TestShutdownWithTheDatabaseHostSilentEndsWithinTheBudget(t *testing.T) {
	const timeout = time.Second
	const budget = timeout + giveBackGrace
	const slack = forcedExitSlack + 750*time.Millisecond // the exit's own slack, then process exit and scheduling on a loaded machine
	dsn := newDatabase(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testdb.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	b := startBroker(t, u.String(), freePort(t), t.TempDir(),
		fmt.Sprintf("LANES_SHUTDOWN_TIMEOUT_MS=%d", timeout.Milliseconds()),
		"LANES_PUSH_TIMEOUT_MS=60000", "LANES_REQUEST_DB_TIMEOUT_MS=60000")
	b.waitHealth(t, http.StatusOK, 30*time.Second)
	push := func(txn string) (int, error) {
		return b.do("POST", "/api/v1/push", map[string]any{"items": []map[string]any{
			{"queue": "silent-stop", "partition": "p", "transactionId": txn, "payload": 1}}}, nil)
	}
	if status, err := push("warm"); err != nil || status != http.StatusCreated {
		t.Fatalf("push: %d %v", status, err)
	}
	proxy.Slow("", time.Minute)
	go func() { _, _ = push("held") }()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if err := b.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Done():
	case <-time.After(budget + 20*time.Second):
		t.Fatalf("the broker still runs %v after SIGTERM (budget %v)\n%s", time.Since(start), budget, b.logs.String())
	}
	took := time.Since(start)
	if took > budget+slack {
		t.Fatalf("the broker exited %v after SIGTERM, past its budget of %v (shutdown timeout %v + give-back grace %v)\n%s",
			took.Round(time.Millisecond), budget, timeout, giveBackGrace, b.logs.String())
	}
	if b.Err() == nil {
		t.Fatalf("the broker exited 0 although a request was cut\n%s", b.logs.String())
	}
	if !strings.Contains(b.logs.String(), "shutdown budget spent while closing the database connections") {
		t.Fatalf("no log line says the shutdown budget ran out:\n%s", b.logs.String())
	}
	t.Logf("exited %v after SIGTERM with the database host silent (budget %v): %v", took.Round(time.Millisecond), budget, b.Err())
}
