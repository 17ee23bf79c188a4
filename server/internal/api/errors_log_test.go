package api

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
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
