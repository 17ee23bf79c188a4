package api

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// A request whose database connection PostgreSQL ends (a restart or fast
// shutdown sends FATAL 57P01 to every backend, as pg_terminate_backend does)
// answers the documented 500 database_unavailable, not internal_error.
func TestARequestWhoseBackendIsTerminatedIsDatabaseUnavailable(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	if status, _ := b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q}, nil); status != http.StatusOK {
		t.Fatalf("configure: %d", status)
	}
	ctx := context.Background()
	// Hold the queue row so the next configure waits inside PostgreSQL.
	holder, err := b.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	var holderPID int
	if err := holder.QueryRow(ctx, `SELECT pg_backend_pid() FROM lanes.queues WHERE name = $1 FOR UPDATE`, q).Scan(&holderPID); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		status int
		body   errorBody
	}
	answered := make(chan answer, 1)
	go func() {
		var e errorBody
		status, _ := b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"leaseTime": 30}}, &e)
		answered <- answer{status, e}
	}()
	var terminated bool
	waitFor(t, 5*time.Second, "the configure to wait on the queue row and be terminated", func() bool {
		err := b.Pool.QueryRow(ctx, `SELECT coalesce(bool_or(pg_terminate_backend(pid)), false) FROM pg_stat_activity
			WHERE $1 = ANY(pg_blocking_pids(pid))`, holderPID).Scan(&terminated)
		return err == nil && terminated
	})
	select {
	case a := <-answered:
		if a.status != http.StatusInternalServerError || a.body.Code != CodeDatabase {
			t.Fatalf("configure whose backend was terminated: %d %+v; want 500 %s", a.status, a.body, CodeDatabase)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("configure did not answer after its backend was terminated")
	}
}
