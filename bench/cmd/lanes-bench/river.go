package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverArgs is the job of the shared workload: the same payload a Lanes message carries.
type riverArgs struct {
	Seq  int64  `json:"seq"`
	Body string `json:"body"`
}

// Kind names the job kind for River.
func (riverArgs) Kind() string { return "bench" }

// riverWorker records every job it runs; the job then completes (River's ack).
type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	seen *tally
}

// Work records the delivery.
func (w *riverWorker) Work(_ context.Context, job *river.Job[riverArgs]) error {
	w.seen.add(strconv.FormatInt(job.Args.Seq, 10))
	return nil
}

// sharedRiver runs the shared produce-and-consume workload through River on
// the same PostgreSQL, in its own database migrated with rivermigrate: n jobs
// inserted by 8 producers with InsertManyFast in batches of 100 while one River
// client works them; the clock stops when the last job is completed in the
// database (River completes jobs in batches, as Lanes acks them).
func (h *harness) sharedRiver(n int) (Result, error) {
	ctx := context.Background()
	pool, err := newPool(ctx, h.riverURL, 40)
	if err != nil {
		return Result{}, err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return Result{}, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return Result{}, fmt.Errorf("rivermigrate: %w", err)
	}
	// Every round (-rounds) starts on an empty job table, as the first does:
	// the drain counts the completed jobs.
	if _, err := pool.Exec(ctx, "TRUNCATE river_job"); err != nil {
		return Result{}, err
	}
	seen := newTally(n)
	for i := range n {
		seen.expect(strconv.Itoa(i))
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{seen: seen})
	client, err := river.NewClient(driver, &river.Config{
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: h.o.riverWorkers}},
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 100 * time.Millisecond,
		Workers:           workers,
	})
	if err != nil {
		return Result{}, err
	}
	if err := client.Start(ctx); err != nil {
		return Result{}, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	}()
	const producers, batch = 8, 100
	var firstErr firstError
	var pushEnd atomic.Int64
	w := h.begin(h.riverDB, "")
	start := time.Now()
	pushed := make(chan struct{}) // closed once pushEnd is stored
	go func() {
		parallelBatches(producers, batchCount(n, batch), &firstErr, func(_, b int) error {
			base, k := batchSpan(b, batch, n)
			params := make([]river.InsertManyParams, k)
			for i := range params {
				params[i] = river.InsertManyParams{Args: riverArgs{Seq: int64(base + i), Body: payloadBody}}
			}
			_, err := client.InsertManyFast(ctx, params)
			return err
		})
		pushEnd.Store(time.Now().UnixNano())
		close(pushed)
	}()
	drainFor := 10*h.o.duration + 2*time.Minute
	deadline := time.Now().Add(drainFor)
	var completed int64
	for time.Now().Before(deadline) && firstErr.get() == nil {
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&completed); err != nil {
			firstErr.set(err)
			break
		}
		if completed >= int64(n) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	<-pushed
	elapsed := time.Since(start).Seconds()
	r := Result{Scenario: "shared", System: "river", Available: true, Messages: completed, Seconds: elapsed,
		MsgPerSec: float64(completed) / elapsed, PushedPerSec: float64(n) / (float64(pushEnd.Load()-start.UnixNano()) / 1e9),
		Description: fmt.Sprintf("River %s (riverpgxv5): %d jobs inserted by 8 producers with InsertManyFast × 100 while one client works them (MaxWorkers %d, FetchCooldown 5 ms); jobs/s = jobs / time until the last is completed in the database",
			riverVersion, n, h.o.riverWorkers)}
	w.end(&r)
	r.Seconds = elapsed
	if err := firstErr.get(); err != nil {
		return r, err
	}
	r.setVerdict(seen.verdict())
	if completed < int64(n) {
		return r, drainDeadlineError(drainFor, completed, int64(n))
	}
	return r, nil
}

// riverVersion is the River release pinned in bench/go.mod.
const riverVersion = "v0.51.2"
