package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/config"
	"github.com/lanesmq/lanes/server/internal/testlog"
)

// JSON logs show durations as text ("200ms"), not nanoseconds.
func TestLogsPrintDurationsAsText(t *testing.T) {
	var out bytes.Buffer
	log := newLogger(&config.Config{LogFormat: "json", LogLevel: "info"}, &out)
	log.Warn("spool drain failed; will retry", "retryIn", 200*time.Millisecond, slog.Group("g", "took", 1500*time.Millisecond))
	if got := out.String(); !strings.Contains(got, `"retryIn":"200ms"`) || !strings.Contains(got, `"took":"1.5s"`) {
		t.Fatalf("durations not logged as text: %s", got)
	}
}

// TestNetHTTPMessagesAreBrokerLogLines: what net/http logs itself (here a
// handler writing its status twice, as the broker did for a client that hung
// up mid-answer) is an ERROR line in the broker's format, not a bare line on
// stderr that LANES_LOG_FORMAT=json and level-based alerts miss.
func TestNetHTTPMessagesAreBrokerLogLines(t *testing.T) {
	var out testlog.Buffer
	log := newLogger(&config.Config{LogFormat: "json", LogLevel: "warn"}, &out)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	srv.Config.ErrorLog = httpErrorLog(log)
	srv.Start()
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	var line struct{ Level, Msg string }
	if err := json.Unmarshal([]byte(strings.TrimSpace(out.String())), &line); err != nil {
		t.Fatalf("net/http's message is not one JSON log line: %q (%v)", out.String(), err)
	}
	if line.Level != "ERROR" || !strings.Contains(line.Msg, "superfluous response.WriteHeader") {
		t.Fatalf("want an ERROR line carrying net/http's message, got %+v", line)
	}
}
