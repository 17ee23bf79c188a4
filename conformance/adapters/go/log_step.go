package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
)

// logRecorder keeps each record the logger of a client built with captureLogs got: its level
// and its message with its attributes as key=value.
type logRecorder struct {
	mu      sync.Mutex
	records []logRecord
}

// recordingHandler is that logger's slog.Handler; a logger.With shares the recorder.
type recordingHandler struct {
	to    *logRecorder
	attrs []slog.Attr
}

type logRecord struct {
	level   slog.Level
	message string
}

func (h recordingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h recordingHandler) Handle(_ context.Context, rec slog.Record) error {
	parts := []string{rec.Message}
	add := func(a slog.Attr) bool { parts = append(parts, fmt.Sprintf("%s=%v", a.Key, a.Value)); return true }
	for _, a := range h.attrs {
		add(a)
	}
	rec.Attrs(add)
	h.to.mu.Lock()
	defer h.to.mu.Unlock()
	h.to.records = append(h.to.records, logRecord{level: rec.Level, message: strings.Join(parts, " ")})
	return nil
}

func (h recordingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return recordingHandler{to: h.to, attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...)}
}

// WithGroup flattens: a case reads the message and the attributes' values, not their nesting.
func (h recordingHandler) WithGroup(string) slog.Handler { return h }

type logsArgs struct {
	Level string `json:"level"`
}

// levelNames are the neutral level names of docs/conformance.md, lowest first.
var levelNames = []struct {
	name  string
	level slog.Level
}{{"debug", slog.LevelDebug}, {"info", slog.LevelInfo}, {"warn", slog.LevelWarn}, {"error", slog.LevelError}}

func levelName(l slog.Level) string {
	name := levelNames[0].name
	for _, n := range levelNames {
		if l >= n.level {
			name = n.name
		}
	}
	return name
}

// logs answers the records the client's logger got so far, at the step's level or above.
func (s *state) logs(_ context.Context, a logsArgs) (map[string]any, error) {
	if s.logged == nil {
		return nil, fmt.Errorf("logs: the case's client has no captureLogs")
	}
	least := slog.LevelDebug
	if a.Level != "" {
		found := false
		for _, n := range levelNames {
			if n.name == a.Level {
				least, found = n.level, true
			}
		}
		if !found {
			return nil, fmt.Errorf("logs: level %q, want debug, info, warn or error", a.Level)
		}
	}
	s.logged.mu.Lock()
	defer s.logged.mu.Unlock()
	records := []any{}
	for _, r := range s.logged.records {
		if r.level >= least {
			records = append(records, map[string]any{"level": levelName(r.level), "message": r.message})
		}
	}
	return map[string]any{"records": records}, nil
}
