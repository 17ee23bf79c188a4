package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/config"
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
