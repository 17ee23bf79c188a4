// Package engine implements the Lanes message plane on PostgreSQL: the segment
// log, consumer cursors with leases, and the background loops around them.
// It knows nothing about HTTP; the api package translates wire types to the
// calls here.
package engine

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/internal/failurelog"
)

// QueueModeGroup is the implicit consumer group of group-less pops.
const QueueModeGroup = "__QUEUE_MODE__"

// DefaultPartition is the partition a push lands in when it names none.
const DefaultPartition = "Default"

// defaultClaimTimeout is twice the broker's default statement_timeout.
const defaultClaimTimeout = 60 * time.Second

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
	// ParkedRecheckRate bounds the re-checks a second the parked pops run
	// between them (see recheckCap); 0 = no bound.
	ParkedRecheckRate float64
	// PopMaxBytes bounds the stored frames one pop answers with, counted by
	// whole segments: once the segments taken reach it, the claim takes no
	// more, so the lease (or an autoAck cursor) covers only what is
	// delivered. The first segment always goes, however large. 0 = no bound.
	PopMaxBytes int64
	// ClaimTimeout bounds a pop's claim (its transaction, COMMIT included),
	// which its request's deadline does not (see claimOnce); default 60 s.
	// Keep it above the connections' statement_timeout, so PostgreSQL ends a
	// slow claim first and the claim is known to be rolled back: one cut
	// short here may have committed, and its lease then holds its messages
	// until it expires.
	ClaimTimeout time.Duration
	// ListMaxBytes bounds the payload bytes one page of a message, dead-letter
	// or timer listing, or of the KV console listing, answers (see
	// pageBudget); 0 = no bound.
	ListMaxBytes int64
	// ListenerCheckInterval is how long the notification listener waits
	// without a word from PostgreSQL before it pings its connection; the
	// ping's answer may take twice as long (see listenOnce); default 5 s.
	ListenerCheckInterval time.Duration
	// PoolWatch, from ConfigurePool, tells the engine when a new connection
	// of its pool meets a server started since the last one (the engine then
	// acts as on a lost listener connection at once), and lets it cut off the
	// pool's connections when the listener finds the host silent.
	PoolWatch *PoolWatch
	// ListenLater leaves the notification listener to StartListener, for a
	// caller that first checks PostgreSQL admits its login (the broker's
	// boot): a listener started at once would warn about a refusal the boot
	// reports itself. Off, New starts it.
	ListenLater bool
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
	if c.ClaimTimeout <= 0 {
		c.ClaimTimeout = defaultClaimTimeout
	}
	if c.ListenerCheckInterval <= 0 {
		c.ListenerCheckInterval = defaultListenerCheckInterval
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
	// listening is true while the notification listener is on LISTEN.
	listening atomic.Bool
	// retentionGeneration counts this engine's sweeper lease releases (retentionHolder).
	retentionGeneration atomic.Uint64
	// knownPartitions lets plain pushes skip provisioning partitions that exist.
	knownPartitions partitionCache
	waiters         *waiters
	// popPlans lets a repeat pop run in one round trip (popInOneTrip).
	popPlans popPlanCache
	// holds knows the queues whose waiting pops hold an under-full batch.
	holds popHolds
	// stored counts the messages each source committed (StoredMessages).
	stored storedCounters
	// popClaimObserver is told how long each pop's claim took (ObservePopClaims).
	popClaimObserver atomic.Pointer[func(time.Duration)]
	// timerFireObserver is told how late each timer this engine fired was (ObserveTimerFires).
	timerFireObserver atomic.Pointer[func(time.Duration)]
	// pushCommitObserver is told about each push group commit (ObservePushCommits).
	pushCommitObserver atomic.Pointer[func(PushCommit)]
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
	// expiredLeases counts the expired partition leases this engine's
	// claims took over (LeasesExpired).
	expiredLeases atomic.Uint64
	// health is /health's own connection (see Ping).
	health *healthConn
	// brokerID tells this broker's own NOTIFY payloads from other brokers'.
	brokerID string
	// autopilot sizes pops that leave batch or width to the broker.
	autopilot *autopilot
	// retentionPassPartitions caps the partitions one retention pass steps; 0
	// means defaultRetentionPassPartitions (tests lower it).
	retentionPassPartitions int

	closeOnce       sync.Once
	listenerStarted sync.Once
	stopParking     atomic.Bool
	// popsPaused, when set, reports pop maintenance: a paused engine claims
	// nothing for a pop, parked ones included (see PausePopsWhen).
	popsPaused func() bool
	// pushesPaused, when set, reports push maintenance: the engine's own
	// pushes wait (see PausePushesWhen).
	pushesPaused func() bool
	stop         chan struct{}
	// serverRestarted ends the listener's connection (errServerRestarted).
	serverRestarted chan struct{}
	wg              sync.WaitGroup
	// halt is the parent of the database work that outlives its request (group
	// commits, timer firing, KV sweeps); Shutdown cancels it when its budget
	// runs out, so a commit stuck on a lock does not hold the exit.
	halt       context.Context
	cancelHalt context.CancelFunc
	// background is the context of the tasks started with RunInBackground;
	// Shutdown cancels it and waits for them before the pool may close.
	background       context.Context
	cancelBackground context.CancelFunc
	backgroundMu     sync.Mutex
	backgroundClosed bool
	// bundleFailures logs transaction bundles PostgreSQL failed, once a
	// minute with the count, so an outage does not log each request.
	bundleFailures *failurelog.Reporter
	// handOffFailures logs claims a write ran for a parked pop that failed
	// after the write committed, once a minute with the count: while the
	// database is down every write with a pop parked fails one.
	handOffFailures *failurelog.Reporter
	// corruptSegments logs stored segments that do not decode, once a minute
	// with the count: every pop or listing reaching one meets it again.
	corruptSegments *failurelog.Reporter
}

// New starts an engine on pool. Call ApplySchema first (once per process).
func New(pool *pgxpool.Pool, cfg Config) *Engine {
	cfg.withDefaults()
	e := &Engine{pool: pool, cfg: cfg, log: cfg.Logger, stop: make(chan struct{}), serverRestarted: make(chan struct{}, 1)}
	e.halt, e.cancelHalt = context.WithCancel(context.Background())
	e.background, e.cancelBackground = context.WithCancel(context.Background())
	e.waiters = newWaiters()
	e.health = newHealthConn()
	e.leases = newLeaseIndex()
	e.holds.readFailures = failurelog.New(e.log, slog.LevelWarn, "reading the queues' minPopWaitTime failed; pops act on the last read", "")
	e.bundleFailures = failurelog.New(e.log, slog.LevelError, "transaction bundle failed", "")
	e.corruptSegments = failurelog.New(e.log, slog.LevelError, "stored segment does not decode", "")
	e.handOffFailures = failurelog.New(e.log, slog.LevelWarn, "claim for a parked pop after a write failed; the pop claims for itself", "")
	e.brokerID = uuid.NewString()
	e.autopilot = newAutopilot(cfg.PopAutopilot, cfg.Logger)
	e.notifier = newNotifier(e)
	e.pusher = newPusher(e)
	if cfg.PoolWatch != nil {
		cfg.PoolWatch.starts.notify(e.noticeServerRestart)
	}
	e.wg.Add(1)
	go func() { defer e.wg.Done(); e.notifier.run(e.stop) }()
	if !cfg.ListenLater {
		e.StartListener()
	}
	return e
}

// StartListener starts the notification listener (see listenLoop), once; a
// call after Shutdown began starts nothing.
func (e *Engine) StartListener() {
	e.listenerStarted.Do(func() {
		e.backgroundMu.Lock()
		defer e.backgroundMu.Unlock()
		if e.backgroundClosed {
			return
		}
		e.wg.Add(1)
		go func() { defer e.wg.Done(); e.listenLoop() }()
	})
}

// Pool exposes the connection pool to sibling services (retention, admin).
func (e *Engine) Pool() *pgxpool.Pool { return e.pool }

// Close stops background work; in-flight pushes finish first.
func (e *Engine) Close() { e.Shutdown(context.Background()) }

// Shutdown stops background work; in-flight pushes finish first, until ctx is
// done: then the database work still running is canceled (a canceled group
// commit either committed or did not, and its waiting requests get an error),
// so Shutdown returns soon after ctx is done.
func (e *Engine) Shutdown(ctx context.Context) {
	e.closeOnce.Do(func() {
		stopHalting := context.AfterFunc(ctx, e.cancelHalt)
		defer stopHalting()
		e.pusher.close(ctx)
		e.stopBackground()
		close(e.stop)
		e.waiters.wakeAll()
		e.wg.Wait()
		e.health.close()
		e.cancelHalt()
	})
}

// RunInBackground runs task on its own goroutine for a user of the engine
// (the api layer's maintenance reads). Shutdown cancels its ctx and waits for
// it, so it never outlives the engine into the pool's close, where its
// failure would read as an outage. Once shutdown has begun it runs nothing
// and reports false.
func (e *Engine) RunInBackground(task func(ctx context.Context)) bool {
	e.backgroundMu.Lock()
	defer e.backgroundMu.Unlock()
	if e.backgroundClosed {
		return false
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		task(e.background)
	}()
	return true
}

func (e *Engine) stopBackground() {
	e.backgroundMu.Lock()
	e.backgroundClosed = true
	e.backgroundMu.Unlock()
	e.cancelBackground()
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
