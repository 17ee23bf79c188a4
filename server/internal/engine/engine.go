// Package engine implements the Lanes message plane on PostgreSQL: the segment
// log, consumer cursors with leases, and the background loops around them.
// It knows nothing about HTTP; the api package translates wire types to the
// calls here.
package engine

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schemaFiles are applied in name order at every boot; each must be idempotent.
// A feature that needs tables adds its own numbered file.
//
//go:embed schema/*.sql
var schemaFiles embed.FS

// schemaLockKey is the advisory lock taken while the schema is applied, so
// several brokers booting at once apply it one after the other.
const schemaLockKey = 7781200100

// QueueModeGroup is the implicit consumer group of group-less pops.
const QueueModeGroup = "__QUEUE_MODE__"

// DefaultPartition is the partition a push lands in when it names none.
const DefaultPartition = "Default"

// Config tunes the engine. Zero values take the documented defaults.
type Config struct {
	// PushCommitters is the number of concurrent group-commit transactions.
	PushCommitters int
	// PushMaxBatchMessages caps the messages coalesced into one commit.
	PushMaxBatchMessages int
	// DefaultSubscriptionMode seeds named groups on first contact: "new" or "all".
	DefaultSubscriptionMode string
	// PopAutopilot is "on" (default), "shadow" or "off"; see autopilot.go.
	PopAutopilot string
	// AckSyncCommit makes a plain ack wait for the WAL flush before it
	// answers. Off (the default), a database crash may undo the last acks
	// before the WAL writer flushed them; their messages then redeliver, which
	// at-least-once allows (see beginAck).
	AckSyncCommit bool
	// AdmitPopCheck, when set, is called before each database check of a pop
	// (not while it is parked); it returns a release func or a rejection.
	AdmitPopCheck func(ctx context.Context) (release func(), err error)
	// AdmitPopRecheck, when set, admits a parked pop's re-check without
	// queueing: a re-check that finds no free slot counts as empty and the pop
	// keeps waiting, so parked pops never take the place of a request in the
	// waiting line (nor count as rejected).
	AdmitPopRecheck func() (release func(), ok bool)
	// OnRetentionPass, when set, is told about every retention pass (metrics).
	OnRetentionPass func(st RetentionStats, took time.Duration, err error)
	Logger          *slog.Logger
}

func (c *Config) withDefaults() {
	if c.PushCommitters <= 0 {
		c.PushCommitters = 1
	}
	if c.PushMaxBatchMessages <= 0 {
		c.PushMaxBatchMessages = 5000
	}
	if c.DefaultSubscriptionMode == "" {
		c.DefaultSubscriptionMode = "new"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Engine is the message plane. It is safe for concurrent use.
type Engine struct {
	pool     *pgxpool.Pool
	cfg      Config
	log      *slog.Logger
	pusher   *pusher
	notifier *notifier
	// knownPartitions lets plain pushes skip provisioning partitions that exist.
	knownPartitions partitionCache
	waiters         *waiters
	// popPlans lets a repeat pop run in one round trip (popInOneTrip).
	popPlans popPlanCache
	// holds knows the queues whose waiting pops hold an under-full batch.
	holds popHolds
	// leases resolves acks under leases this broker granted without lanes.txns.
	leases *leaseIndex
	// claims counts claims, to make every claimFullScanEvery-th one a full scan.
	claims atomic.Uint64
	// continuations counts the ack hand-offs that may continue a partition,
	// to send every claimFullScanEvery-th one through the claim statement.
	continuations atomic.Uint64
	// unprobedPausedUntil (unix nanoseconds) holds pushes to probing lanes.txns
	// first; see pushWrite.unprobed.
	unprobedPausedUntil atomic.Int64
	hot                 hotPathCounters
	// brokerID tells this broker's own NOTIFY payloads from other brokers'.
	brokerID string
	// autopilot sizes pops that leave batch or width to the broker.
	autopilot *autopilot

	closeOnce   sync.Once
	stopParking atomic.Bool
	// popsPaused, when set, reports pop maintenance: a paused engine claims
	// nothing for a pop, parked ones included (see PausePopsWhen).
	popsPaused func() bool
	stop       chan struct{}
	wg         sync.WaitGroup
}

// New starts an engine on pool. Call ApplySchema first (once per process).
func New(pool *pgxpool.Pool, cfg Config) *Engine {
	cfg.withDefaults()
	e := &Engine{pool: pool, cfg: cfg, log: cfg.Logger, stop: make(chan struct{})}
	e.waiters = newWaiters()
	e.leases = newLeaseIndex()
	e.brokerID = uuid.NewString()
	e.autopilot = newAutopilot(cfg.PopAutopilot, cfg.Logger)
	e.notifier = newNotifier(e)
	e.pusher = newPusher(e)
	e.wg.Add(2)
	go func() { defer e.wg.Done(); e.listenLoop() }()
	go func() { defer e.wg.Done(); e.notifier.run(e.stop) }()
	return e
}

// Pool exposes the connection pool to sibling services (retention, admin).
func (e *Engine) Pool() *pgxpool.Pool { return e.pool }

// Close stops background work; in-flight pushes finish first.
func (e *Engine) Close() {
	e.closeOnce.Do(func() {
		e.pusher.close()
		close(e.stop)
		e.waiters.wakeAll()
		e.wg.Wait()
	})
}

// ApplySchema creates or upgrades the schema idempotently under an advisory
// lock. It runs at every boot, and the files' DDL waits for locks on hot tables
// even when there is nothing to change (CREATE INDEX IF NOT EXISTS takes a
// share lock, ADD COLUMN IF NOT EXISTS an exclusive one): a broker restarting
// under load would stall pushes and pops behind them. So the digest of the
// files applied is stored, and a boot that finds the same one applies nothing.
func ApplySchema(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(schemaLockKey)); err != nil {
		return fmt.Errorf("schema lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", int64(schemaLockKey))
	}()
	files, digest, err := schemaSources()
	if err != nil {
		return err
	}
	var recorded bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('lanes.schema_applied') IS NOT NULL`).Scan(&recorded); err != nil {
		return fmt.Errorf("schema digest: %w", err)
	}
	if recorded {
		var applied string
		err := conn.QueryRow(ctx, `SELECT digest FROM lanes.schema_applied WHERE id = 1`).Scan(&applied)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("schema digest: %w", err)
		}
		if applied == digest {
			return nil
		}
	}
	for _, f := range files {
		if _, err := conn.Exec(ctx, f.sql); err != nil {
			return fmt.Errorf("apply schema %s: %w", f.name, err)
		}
	}
	if _, err := conn.Exec(ctx, `INSERT INTO lanes.schema_applied (id, digest, applied_at) VALUES (1, $1, now())
		ON CONFLICT (id) DO UPDATE SET digest = EXCLUDED.digest, applied_at = EXCLUDED.applied_at`, digest); err != nil {
		return fmt.Errorf("record schema digest: %w", err)
	}
	return nil
}

type schemaFile struct{ name, sql string }

// schemaSources reads the schema files in name order with their SHA-256 digest.
func schemaSources() ([]schemaFile, string, error) {
	entries, err := fs.ReadDir(schemaFiles, "schema")
	if err != nil {
		return nil, "", err
	}
	h := sha256.New()
	var files []schemaFile
	for _, entry := range entries { // ReadDir sorts by name
		sql, err := fs.ReadFile(schemaFiles, "schema/"+entry.Name())
		if err != nil {
			return nil, "", err
		}
		h.Write([]byte(entry.Name()))
		h.Write([]byte{0})
		h.Write(sql)
		h.Write([]byte{0})
		files = append(files, schemaFile{entry.Name(), string(sql)})
	}
	return files, hex.EncodeToString(h.Sum(nil)), nil
}

// Ping does one database round trip.
func (e *Engine) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var one int
	return e.pool.QueryRow(ctx, "SELECT 1").Scan(&one)
}

// ErrNotFound reports a missing queue, partition or lease.
var ErrNotFound = errors.New("not found")

// InvalidInputError is a caller mistake; Field names the offending input.
type InvalidInputError struct {
	Field   string
	Message string
}

func (e *InvalidInputError) Error() string { return e.Message }

func invalid(field, format string, args ...any) error {
	return &InvalidInputError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// ReleaseParkedPops ends every parked long poll now (each answers empty); used
// at shutdown so parked requests do not hold the HTTP server open.
func (e *Engine) ReleaseParkedPops() {
	e.stopParking.Store(true)
	e.waiters.wakeAll()
}

// PausePopsWhen makes every pop check, a parked pop's re-checks and the
// claims a push or an ack runs for a parked pop find nothing while paused
// reports true (pop maintenance). The HTTP layer answers a new pop 204 itself;
// this holds the pops that were already parked when maintenance went on. Call
// it before the engine serves.
func (e *Engine) PausePopsWhen(paused func() bool) { e.popsPaused = paused }

func (e *Engine) popsArePaused() bool { return e.popsPaused != nil && e.popsPaused() }

// admittedPopOnce runs one pop check inside the admission budget. A
// rejection fails the first check; a re-check of a parked pop that cannot get a
// slot counts as empty and keeps waiting, so parking never answers 429.
func (e *Engine) admittedPopOnce(ctx context.Context, req *PopRequest, first bool) (*PopResult, error) {
	if e.popsArePaused() {
		return &PopResult{}, nil
	}
	release := func() {}
	switch {
	case !first && req.Wait && e.cfg.AdmitPopRecheck != nil:
		r, ok := e.cfg.AdmitPopRecheck()
		if !ok {
			return &PopResult{}, nil
		}
		release = r
	case e.cfg.AdmitPopCheck != nil:
		r, err := e.cfg.AdmitPopCheck(ctx)
		if err != nil {
			if first || !req.Wait {
				return nil, err
			}
			return &PopResult{}, nil
		}
		release = r
	}
	defer release()
	return e.claimOnce(ctx, req)
}

// claimOnce runs one pop check that a caller leaving cannot interrupt (its
// deadline still applies): a cancel arriving during COMMIT would leave the
// claim's outcome unknown, a lease written for nobody. The result reaches the
// caller, who gives the claim back if its client is gone.
func (e *Engine) claimOnce(ctx context.Context, req *PopRequest) (*PopResult, error) {
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	claimCtx := context.WithoutCancel(ctx)
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		claimCtx, cancel = context.WithDeadline(claimCtx, deadline)
		defer cancel()
	}
	return e.popOnce(claimCtx, req)
}

// NormalizePushItems applies the push defaults (partition, transaction id) and
// checks what the push path checks, for callers that store items elsewhere first.
func NormalizePushItems(items []PushItem) error {
	for i := range items {
		if err := normalizePushItem(&items[i], i); err != nil {
			return err
		}
	}
	return nil
}

// runEvery calls tick every interval on its own goroutine until the engine
// closes, then onStop (if any). Ticks never overlap.
func (e *Engine) runEvery(interval time.Duration, tick func(), onStop func()) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			select {
			case <-e.stop:
				if onStop != nil {
					onStop()
				}
				return
			case <-ticker.C:
				tick()
			}
		}
	}()
}
