package engine

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/internal/testlog"
)

// newUnreachableEngine is an engine on a database that refuses every
// connection, logging into the returned buffer.
func newUnreachableEngine(t *testing.T) (*Engine, *testlog.Buffer) {
	t.Helper()
	out := &testlog.Buffer{}
	pool, err := pgxpool.New(context.Background(), "postgres://lanes@127.0.0.1:1/lanes?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	e := New(pool, Config{Logger: slog.New(slog.NewTextHandler(out, nil))})
	t.Cleanup(func() { e.Close(); pool.Close() })
	return e, out
}

// TestFailingRetentionPassLogsAWarningOnce: a pass PostgreSQL refuses (here a
// read-only session, so the sweeper lease cannot be written) logs at WARN,
// and passes failing again within the minute add no lines.
func TestFailingRetentionPassLogsAWarningOnce(t *testing.T) {
	var out testlog.Buffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEngineWith(t, Config{Logger: log}, map[string]string{"default_transaction_read_only": "on"})
	e.StartRetention(20 * time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "level=WARN msg=\"retention pass failed\"") {
		if time.Now().After(deadline) {
			t.Fatalf("no WARN for failing retention passes; log:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // several more failing passes
	if n := strings.Count(out.String(), "msg=\"retention pass failed\""); n != 1 {
		t.Fatalf("want one line for a minute of failures, got %d:\n%s", n, out.String())
	}
}

// TestRetentionPassesThatDeleteLogAtDebug: a pass that deletes segments logs
// its figures at DEBUG, not INFO: a queue with retention deletes at every
// pass on a busy broker, and the lanes_retention_* counters carry them.
func TestRetentionPassesThatDeleteLogAtDebug(t *testing.T) {
	var out testlog.Buffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sweepAnExpiredSegmentInTheBackground(t, newEngineWith(t, Config{Logger: log}, nil), 50*time.Millisecond)
	// The pass logs once it has finished (the transaction-index purge comes after the segment's
	// delete), so its line can follow the segment's disappearance by a slow statement.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), `level=DEBUG msg="retention pass"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no DEBUG line for the pass that deleted the segment:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if strings.Contains(out.String(), `level=INFO msg="retention pass"`) {
		t.Errorf("a retention pass logged at INFO:\n%s", out.String())
	}
}

// TestTransactionBundlesPostgreSQLFailsLogOneLine: bundles PostgreSQL
// refuses (here a read-only session) are answered failed one by one, but
// only the first within the minute logs an ERROR line.
func TestTransactionBundlesPostgreSQLFailsLogOneLine(t *testing.T) {
	var out testlog.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	e := newEngineWith(t, Config{Logger: log}, map[string]string{"default_transaction_read_only": "on"})
	q := queueName(t)
	for i := range 5 {
		res, err := e.Transaction(context.Background(), TransactionRequest{Ops: []TxOp{
			{Push: &PushItem{Queue: q, Partition: "p", TransactionID: fmt.Sprint("ro-", i), Payload: []byte(`{}`)}}}})
		if err != nil || res.Success {
			t.Fatalf("bundle %d on a read-only session: %+v %v", i, res, err)
		}
	}
	if n := strings.Count(out.String(), `msg="transaction bundle failed"`); n != 1 {
		t.Fatalf("want one line for 5 failed bundles, got %d:\n%s", n, out.String())
	}
}
