// Package failurelog logs a repeating failure without flooding the log: the
// first failure at once, then at most one line per interval carrying how many
// failures it stands for, and one INFO line when it succeeds again.
package failurelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Interval is how often a continuing failure is logged again.
const Interval = time.Minute

// Reporter tracks one kind of failure (a loop's pass, a request's database call).
type Reporter struct {
	log       *slog.Logger
	level     slog.Level
	msg       string // the failure's log message
	recovered string // the recovery's log message; "" logs none
	now       func() time.Time

	mu          sync.Mutex
	failingFrom time.Time // zero while succeeding
	lastLogged  time.Time
	unlogged    int // failures since the last line
	total       int // failures since failingFrom
}

// New reports failures as msg at level and, when recovered is not empty, the
// first success after them as recovered at INFO.
func New(log *slog.Logger, level slog.Level, msg, recovered string) *Reporter {
	return &Reporter{log: log, level: level, msg: msg, recovered: recovered, now: time.Now}
}

// Failed records a failure and logs it unless a line went out within Interval;
// the line carries "failures", the count it stands for.
func (r *Reporter) Failed(err error, attrs ...any) {
	r.mu.Lock()
	now := r.now()
	if r.failingFrom.IsZero() {
		r.failingFrom = now
	}
	r.total++
	r.unlogged++
	if !r.lastLogged.IsZero() && now.Sub(r.lastLogged) < Interval {
		r.mu.Unlock()
		return
	}
	count := r.unlogged
	r.unlogged = 0
	r.lastLogged = now
	r.mu.Unlock()
	r.log.Log(context.Background(), r.level, r.msg, append(attrs, "err", err, "failures", count)...)
}

// Succeeded ends a run of failures: the next failure logs at once, and the
// recovery message says how long the failures lasted and how many there were.
func (r *Reporter) Succeeded() {
	r.mu.Lock()
	if r.failingFrom.IsZero() {
		r.mu.Unlock()
		return
	}
	failingFor, total := r.now().Sub(r.failingFrom), r.total
	r.failingFrom, r.lastLogged, r.unlogged, r.total = time.Time{}, time.Time{}, 0, 0
	r.mu.Unlock()
	if r.recovered != "" {
		r.log.Info(r.recovered+" after "+failingFor.Round(time.Millisecond).String(), "failingFor", failingFor, "failures", total)
	}
}
