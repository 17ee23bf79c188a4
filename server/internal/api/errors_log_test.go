package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/spool"
)

// syncBuffer collects log lines from the handlers' goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestRequestsFailingForWantOfTheDatabaseLogOneLine: during an outage the
// first request answered database_unavailable logs an ERROR; the ones after
// it within the minute add no line, whatever their number.
func TestRequestsFailingForWantOfTheDatabaseLogOneLine(t *testing.T) {
	var out syncBuffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	b := newBrokerWith(t, "postgres://lanes@127.0.0.1:1/lanes?sslmode=disable&connect_timeout=1", Options{Logger: log}, "")
	for range 5 {
		var e errorBody
		if status, _ := b.call(t, "GET", "/api/v1/pop/queue/outage", nil, &e); status != http.StatusInternalServerError || e.Code != CodeDatabase {
			t.Fatalf("pop with the database down: %d %+v", status, e)
		}
	}
	if n := strings.Count(out.String(), `msg="database unavailable"`); n != 1 {
		t.Fatalf("want one database unavailable line for 5 failing requests, got %d:\n%s", n, out.String())
	}
}

// TestSpoolWritesFailingLogOneLine: while the spool is full every push it
// refuses is answered failed, but only the first one within the minute logs
// an ERROR, as for requests failing for want of the database.
func TestSpoolWritesFailingLogOneLine(t *testing.T) {
	var out syncBuffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	sp, err := spool.Open(spool.Options{Dir: t.TempDir(), MaxBytes: 200, Logger: log,
		Push: func(context.Context, []engine.PushItem) ([]engine.PushResult, error) {
			return nil, errors.New("this test runs no drain")
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sp.Close() })
	b := newBrokerWith(t, testDSN, Options{Logger: log, Spool: sp}, "")
	maintenance := func(on bool) {
		if status, _ := b.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": on}, nil); status != http.StatusOK {
			t.Fatalf("push maintenance %v: %d", on, status)
		}
	}
	maintenance(true)
	t.Cleanup(func() { maintenance(false) })
	push := func(txn string, want engine.PushStatus) {
		t.Helper()
		var results []engine.PushResult
		body := `{"items":[{"queue":"spool-full-log","transactionId":"` + txn + `","payload":{"n":1}}]}`
		if status, _ := b.call(t, "POST", "/api/v1/push", body, &results); status != http.StatusCreated || len(results) != 1 || results[0].Status != want {
			t.Fatalf("push %s: want 201 %s, got %d %+v", txn, want, status, results)
		}
	}
	push("fits", engine.PushBuffered)
	for i := range 5 {
		push(fmt.Sprint("full-", i), engine.PushFailed)
	}
	if n := strings.Count(out.String(), `msg="spool write failed; push answered failed"`); n != 1 {
		t.Fatalf("want one spool write failed line for 5 refused pushes, got %d:\n%s", n, out.String())
	}
}

// TestLagRefreshFailingLogsAWarning: backlog refreshes that keep failing
// (the gauges then keep their last values) log one WARN, not nothing, so an
// operator learns why lanes_queue_lag_refresh_timestamp_seconds stopped.
func TestLagRefreshFailingLogsAWarning(t *testing.T) {
	var out syncBuffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	b := newBrokerWith(t, "postgres://lanes@127.0.0.1:1/lanes?sslmode=disable&connect_timeout=1", Options{Logger: log}, "")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	b.Server.RunLagCollector(ctx, 20*time.Millisecond, 10)
	if n := strings.Count(out.String(), "level=WARN msg=\"lag refresh failed"); n != 1 {
		t.Fatalf("want one WARN line for the failing lag refreshes, got %d:\n%s", n, out.String())
	}
}

// TestRequestsPassingTheirDeadlineLogOneLine: requests answered
// database_timeout (a slow or locked database) log the first at once and then
// once a minute with the count, not one ERROR line each.
func TestRequestsPassingTheirDeadlineLogOneLine(t *testing.T) {
	var out syncBuffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	b := newBrokerWith(t, testDSN, Options{Logger: log, DBTimeout: 200 * time.Millisecond}, "")
	ack, unlock := holdConsumerRow(t, b, uniqueQueue(t))
	defer unlock()
	for range 3 {
		var e errorBody
		if status, _ := b.call(t, "POST", "/api/v1/ack", ack, &e); status != http.StatusInternalServerError || e.Code != CodeDatabaseTimeout {
			t.Fatalf("ack blocked past the deadline: %d %+v", status, e)
		}
	}
	if n := strings.Count(out.String(), `msg="database work passed its deadline"`); n != 1 {
		t.Fatalf("want one deadline line for 3 requests past it, got %d:\n%s", n, out.String())
	}
}
