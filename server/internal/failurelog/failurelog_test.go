package failurelog

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestFirstFailureLogsThenOncePerIntervalWithCountThenRecovery(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	clock := time.Unix(1000, 0)
	r := New(log, slog.LevelWarn, "loop failed", "database reachable again")
	r.now = func() time.Time { return clock }
	boom := errors.New("boom")

	for range 960 { // four minutes of failures every quarter second
		r.Failed(boom)
		clock = clock.Add(250 * time.Millisecond)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("want 4 lines for 4 minutes of failures, got %d:\n%s", len(lines), out.String())
	}
	if !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "failures=1") {
		t.Fatalf("first line: %s", lines[0])
	}
	if !strings.HasSuffix(lines[1], "failures=240") {
		t.Fatalf("the second line, a minute on, should count the 240 failures since the first: %s", lines[1])
	}
	out.Reset()
	r.Succeeded()
	r.Succeeded()
	got := out.String()
	if strings.Count(got, "\n") != 1 || !strings.Contains(got, "level=INFO") || !strings.Contains(got, "database reachable again after 4m0s") || !strings.Contains(got, "failures=960") {
		t.Fatalf("want one INFO recovery line with the duration and count, got:\n%s", got)
	}
	out.Reset()
	r.Failed(boom)
	if !strings.Contains(out.String(), "failures=1") {
		t.Fatalf("a failure after a recovery logs at once: %q", out.String())
	}
}
