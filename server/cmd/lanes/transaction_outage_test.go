package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestATransactionCutOffByADatabaseRestartAnswers500 sends a bundle that
// waits on a partition row lock, then ends its database session as a
// PostgreSQL shutdown does (pg_terminate_backend: FATAL 57P01). The answer must
// be the one every other route gives when the database goes away, 500
// database_unavailable, which the SDKs retry, and not 200 success:false
// db_error, a final "rolled back" they hand to the caller as an error.
func TestATransactionCutOffByADatabaseRestartAnswers500(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	b := startBroker(t, dsn, freePort(t), t.TempDir(), "LANES_LOG_LEVEL=error")
	b.waitHealth(t, http.StatusOK, 30*time.Second)
	const queue, partition = "txn-restart", "locked"
	push := map[string]any{"items": []any{map[string]any{"queue": queue, "partition": partition, "transactionId": "first", "payload": 1}}}
	if status, err := b.do("POST", "/api/v1/push", push, nil); err != nil || status != http.StatusCreated {
		t.Fatalf("push: %d %v", status, err)
	}
	lockPartitionRow(t, dsn, partition)

	type answer struct {
		status int
		body   map[string]any
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		var body map[string]any
		bundle := map[string]any{"operations": []any{map[string]any{"type": "push", "items": []any{
			map[string]any{"queue": queue, "partition": partition, "transactionId": "second", "payload": 2}}}}}
		status, err := b.do("POST", "/api/v1/transaction", bundle, &body)
		answered <- answer{status, body, err}
	}()

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	terminated := false
	for deadline := time.Now().Add(10 * time.Second); !terminated && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) > 0 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&terminated)
		if err != nil {
			t.Fatal(err)
		}
	}
	if !terminated {
		t.Fatal("the bundle never waited for the partition lock")
	}
	a := <-answered
	if a.err != nil {
		t.Fatal(a.err)
	}
	raw, _ := json.Marshal(a.body)
	if a.status != http.StatusInternalServerError || a.body["code"] != "database_unavailable" {
		t.Fatalf("bundle cut off by a database shutdown: %d %s, want 500 database_unavailable", a.status, raw)
	}
}
