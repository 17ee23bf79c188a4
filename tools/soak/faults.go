package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"
)

// Fault kinds, as the report names them.
const (
	faultBrokerKill    = "broker SIGKILL + restart"
	faultPGCrash       = "PostgreSQL restart -m immediate (crash)"
	faultPGFast        = "PostgreSQL restart -m fast"
	faultPGOutage      = "PostgreSQL crash, down 1-5 s"
	faultConnDrop      = "client connections dropped"
	faultLullCrash     = "producers lull, PostgreSQL crash in the lull"
	faultEndCrash      = "PostgreSQL crash as the load ends"
	faultSkippedBusy   = "skipped: target still recovering"
	faultFailedRecover = "failed to recover"
)

// faultEvent is one injected fault: from its start until its target answered again.
type faultEvent struct {
	Kind   string    `json:"kind"`
	Target string    `json:"target"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Detail string    `json:"detail,omitempty"`
}

// injector picks a fault at random intervals (exponential, mean every) and runs it; a fault on
// a target still recovering from the last one is skipped, faults on other targets overlap.
type injector struct {
	c     *cluster
	lull  *lullGate
	rng   *rand.Rand
	every time.Duration
	log   io.Writer

	mu      sync.Mutex
	busy    map[string]bool
	events  []faultEvent
	skipped int
	failed  []string
	wg      sync.WaitGroup
}

func (in *injector) run(ctx context.Context) {
	for {
		wait := time.Duration(in.rng.ExpFloat64() * float64(in.every))
		wait = min(max(wait, 300*time.Millisecond), 4*in.every)
		select {
		case <-ctx.Done():
			in.wg.Wait()
			return
		case <-time.After(wait):
		}
		in.inject(ctx)
	}
}

func (in *injector) inject(ctx context.Context) {
	r := in.rng.Float64()
	broker := in.rng.IntN(len(in.c.brokers))
	var kind, target string
	var do func() (string, error)
	switch {
	case r < 0.30:
		kind, target = faultBrokerKill, fmt.Sprintf("broker %d", broker)
		down := time.Duration(in.rng.IntN(3000)) * time.Millisecond
		do = func() (string, error) {
			in.c.brokers[broker].kill()
			time.Sleep(down)
			return fmt.Sprintf("down %v", down), in.c.brokers[broker].start(context.WithoutCancel(ctx))
		}
	case r < 0.50:
		kind, target = faultPGCrash, "postgres"
		do = func() (string, error) { return "", in.c.pg(context.WithoutCancel(ctx), "restart", "immediate") }
	case r < 0.65:
		kind, target = faultPGFast, "postgres"
		do = func() (string, error) { return "", in.c.pg(context.WithoutCancel(ctx), "restart", "fast") }
	case r < 0.70:
		kind, target = faultPGOutage, "postgres"
		down := 1 + in.rng.IntN(5)
		do = func() (string, error) {
			return fmt.Sprintf("down %d s", down), in.c.pg(context.WithoutCancel(ctx), "restart", "immediate", fmt.Sprint(down))
		}
	case r < 0.80:
		kind, target = faultLullCrash, "postgres"
		quiet := time.Duration(100+in.rng.IntN(900)) * time.Millisecond
		do = func() (string, error) {
			in.lull.begin()
			defer in.lull.end()
			time.Sleep(quiet)
			return fmt.Sprintf("crash %v into the lull", quiet), in.c.pg(context.WithoutCancel(ctx), "restart", "immediate")
		}
	default:
		kind, target = faultConnDrop, fmt.Sprintf("proxy %d", broker)
		do = func() (string, error) { return fmt.Sprintf("%d connections", in.c.proxies[broker].dropAll()), nil }
	}
	in.start(kind, target, do, false)
}

// crashAsTheLoadEnds crashes PostgreSQL once the producers have stopped and the consumers
// caught up (at most 60 s on): their last acks wait for the WAL writer, no push flushes them,
// and a partition whose last ack the crash undoes gets no write afterwards to wake it.
func (in *injector) crashAsTheLoadEnds(ctx context.Context, caughtUp func() bool) {
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		start := time.Now()
		for time.Since(start) < time.Minute && !caughtUp() {
			time.Sleep(10 * time.Millisecond)
		}
		waited := time.Since(start)
		in.start(faultEndCrash, "postgres", func() (string, error) {
			return fmt.Sprintf("%v after the load", waited.Round(time.Millisecond)), in.c.pg(context.WithoutCancel(ctx), "restart", "immediate")
		}, true)
	}()
}

// start runs a fault on target, unless one is running there: then it is skipped, or with wait,
// run once that one is over.
func (in *injector) start(kind, target string, do func() (string, error), wait bool) {
	in.mu.Lock()
	for in.busy[target] && wait {
		in.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
		in.mu.Lock()
	}
	if in.busy[target] {
		in.skipped++
		in.mu.Unlock()
		return
	}
	in.busy[target] = true
	in.mu.Unlock()
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		ev := faultEvent{Kind: kind, Target: target, Start: time.Now()}
		detail, err := do()
		ev.End, ev.Detail = time.Now(), detail
		in.mu.Lock()
		defer in.mu.Unlock()
		in.busy[target] = false
		in.events = append(in.events, ev)
		if err != nil {
			in.failed = append(in.failed, fmt.Sprintf("%s on %s: %v", kind, target, err))
		}
		fmt.Fprintf(in.log, "%s %-45s %-9s %6.2fs %s %v\n", ev.Start.Format("15:04:05.000"), kind, target,
			ev.End.Sub(ev.Start).Seconds(), detail, errOrEmpty(err))
	}()
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return "ERROR " + err.Error()
}

// counts is how many faults of each kind ran.
func (in *injector) counts() map[string]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := map[string]int{}
	for _, e := range in.events {
		out[e.Kind]++
	}
	if in.skipped > 0 {
		out[faultSkippedBusy] = in.skipped
	}
	if len(in.failed) > 0 {
		out[faultFailedRecover] = len(in.failed)
	}
	return out
}

// faultBetween reports a fault that was running at some moment in [from, to].
func (in *injector) faultBetween(from, to time.Time) (faultEvent, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, e := range in.events {
		if !e.Start.After(to) && !e.End.Before(from) {
			return e, true
		}
	}
	return faultEvent{}, false
}
