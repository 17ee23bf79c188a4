package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lanesmq/lanes/server/internal/brokertest"
)

// TestSIGTERMFinishesInFlightWorkAndExitsZero runs the real binary: a push
// held inside PostgreSQL and a parked long poll are in flight when SIGTERM
// arrives; the push still answers queued, the poll answers 204, the process
// exits 0 and the pushed message is stored.
func TestSIGTERMFinishesInFlightWorkAndExitsZero(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	bin := brokertest.Binary(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "LANES_DATABASE_URL="+dsn, fmt.Sprintf("LANES_PORT=%d", port),
		"LANES_BIND_ADDR=127.0.0.1", "LANES_SPOOL_DIR="+t.TempDir(), "LANES_SHUTDOWN_TIMEOUT_MS=20000")
	var logs strings.Builder
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker did not become healthy: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	push := func(txn string) (int, string) {
		body := `{"items":[{"queue":"shutdown","partition":"p","transactionId":"` + txn + `","payload":1}]}`
		resp, err := http.Post(base+"/api/v1/push", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	if status, body := push("first"); status != 201 || !strings.Contains(body, `"queued"`) {
		t.Fatalf("first push: %d %s", status, body)
	}

	// Hold the partition lock so the next push stays in flight inside PostgreSQL.
	conn, tx := lockPartitionRow(t, dsn, "p")
	type answer struct {
		status int
		body   string
	}
	inFlight := make(chan answer, 1)
	go func() { s, b := push("in-flight"); inFlight <- answer{s, b} }()
	parked := make(chan int, 1)
	go func() {
		resp, err := http.Get(base + "/api/v1/pop/queue/empty-queue?wait=true&timeout=30000")
		if err != nil {
			parked <- 0
			return
		}
		resp.Body.Close()
		parked <- resp.StatusCode
	}()
	time.Sleep(300 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case status := <-parked:
		if status != http.StatusNoContent {
			t.Fatalf("parked long poll at shutdown answered %d, want 204", status)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("parked long poll was not released at shutdown")
	}
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-exited:
		t.Fatalf("broker exited (%v) with a push still in flight\n%s", err, logs.String())
	default:
	}
	// New connections are refused while the in-flight push waits.
	if _, err := http.Get(base + "/health"); err == nil {
		t.Error("a draining broker must not accept new requests")
	}
	_ = tx.Rollback(ctx)
	select {
	case a := <-inFlight:
		if a.status != 201 || !strings.Contains(a.body, `"queued"`) {
			t.Fatalf("in-flight push answered %d %s", a.status, a.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("in-flight push never answered")
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("broker exit: %v\n%s", err, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("broker did not exit after SIGTERM\n%s", logs.String())
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM lanes.txns WHERE transaction_id IN ('first', 'in-flight')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("stored %d of the 2 acknowledged pushes", n)
	}
}

// lockPartitionRow holds partition name's row locked FOR UPDATE from another
// connection, as a long writer would, until the test ends or tx is rolled back.
func lockPartitionRow(t *testing.T, dsn, name string) (*pgx.Conn, pgx.Tx) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, `SELECT 1 FROM lanes.partitions WHERE name = $1 FOR UPDATE`, name); err != nil {
		t.Fatal(err)
	}
	return conn, tx
}
