package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lanesmq/lanes/server/internal/failurelog"
)

// notifyChannel carries the names of queues that received messages, so parked
// pops on every broker sharing the database wake up.
const notifyChannel = "lanes_push"

// wakeEverything is sent when the queue list does not fit a NOTIFY payload, or
// a name would not survive its one-name-a-line form.
const wakeEverything = "*"

// A payload is the sending broker's id line ("@" + id), then one queue name per
// line; a broker skips its own notifications (it woke its pops already).
// Brokers that predate the id line read it as a queue name nobody waits on.
// A name holding a line break would be read as two other names, so its
// pops would wait for their next re-check: such a payload wakes everything.
func notifyPayload(sender string, queues map[string]bool) string {
	names := make([]string, 0, len(queues)+1)
	size := 0
	for q := range queues {
		if strings.Contains(q, "\n") {
			return wakeEverything
		}
		names = append(names, q)
		size += len(q) + 1
	}
	if size > 7000 {
		return wakeEverything
	}
	sort.Strings(names)
	return "@" + sender + "\n" + strings.Join(names, "\n")
}

// defaultListenerCheckInterval: a silently dead listener connection is
// noticed within three times this, for one empty query per quiet interval.
const defaultListenerCheckInterval = 5 * time.Second

// listenReconnectFirst and listenReconnectMax bound the listener's backoff.
const (
	listenReconnectFirst = 100 * time.Millisecond
	listenReconnectMax   = 5 * time.Second
)

// A ping's deadline is its own, longer than the check interval: a database
// busy for seconds answers late, and a ping cut short closes the connection
// (pgx's deadline), which then counts as lost. Each unanswered ping in a row
// doubles the next one's, up to pingDeadlineMaxFactor times the first, so a
// longer overload ends the reconnects instead of causing one per check; a
// ping answered within the first deadline starts it over.
const (
	pingDeadlineChecks    = 2
	pingDeadlineMaxFactor = 4
)

// errPingUnanswered marks a listener connection that fell silent: its host
// died without closing it, or is too busy to answer an empty query (or the
// connection's setup, LISTEN included).
var errPingUnanswered = errors.New("no answer from the database")

// errServerRestarted ends the listener's connection when one of the pool's
// new connections met another server (see ServerStarts): the listener's is
// to the old one.
var errServerRestarted = errors.New("a new connection of the pool met a restarted or another server")

// listenLoop keeps a dedicated connection on LISTEN and turns notifications
// from any broker into local wake-ups. It reconnects with backoff, which
// starts over once LISTEN works again: a connection lost now and then must
// not leave later reconnects waiting seconds. A connection lost to an
// unanswered ping starts it over only when its pings came back in time
// before: while such losses follow one another the next one may be as slow.
func (e *Engine) listenLoop() {
	backoff := listenReconnectFirst
	firstPingDeadline := pingDeadlineChecks * e.cfg.ListenerCheckInterval
	pingDeadline := firstPingDeadline
	failures := failurelog.New(e.log, slog.LevelWarn, "notification listener lost its connection; parked pops fall back to polling", "")
	for {
		select {
		case <-e.stop:
			return
		default:
		}
		listened, err := e.listenOnce(&pingDeadline, firstPingDeadline)
		if err == nil || errors.Is(err, context.Canceled) {
			return
		}
		silent := errors.Is(err, errPingUnanswered)
		if listened && !silent {
			backoff = listenReconnectFirst
			failures.Succeeded()
		}
		failures.Failed(err)
		if silent {
			if pingDeadline == firstPingDeadline {
				// Its pings came back in time until this one (or it is the
				// first of a run): a new run of losses, not the same overload.
				backoff = listenReconnectFirst
			}
			pingDeadline = min(2*pingDeadline, pingDeadlineMaxFactor*firstPingDeadline)
			e.dropSilentConnections()
		}
		// The database restarted or crashed, or cannot be reached: a crash undoes
		// commits the cached pop plans were computed from.
		e.popPlans.forgetAll()
		// A missed notification only delays a wake-up until the pop's next re-check.
		e.waiters.wakeAll()
		select {
		case <-e.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, listenReconnectMax)
	}
}

// dropSilentConnections acts on the listener's finding that the database host
// fell silent: the pool's connections are to that host too. Reset closes the
// idle ones, so a request given one does not wait out its database deadline;
// the checked-out ones are cut off, so a statement already waiting on one
// (a push's commit, a pop's claim) fails now, as in an outage, instead of at
// its deadline (30 s; a claim 60 s). Only the listener's decision, after its
// ping's own deadline, does this: a slow statement alone never does. The cut
// comes before Reset so that a connection the pool opens in between (perhaps
// to a promoted server) is one Reset marks, not one cut without the mark.
func (e *Engine) dropSilentConnections() {
	if watch := e.cfg.PoolWatch; watch != nil {
		if n := watch.conns.cutOff(); n > 0 {
			e.log.Warn("closed the pool's connections to the silent database host; their requests fail and may be retried", "connections", n)
		}
	}
	e.pool.Reset()
}

// listenOnce listens until its connection fails; listened says whether LISTEN
// succeeded first. A database host that dies without closing the connection
// (power loss, a network partition, a failover behind the same address) sends
// nothing more, and TCP keepalive gives up on it only after minutes; meanwhile
// the pool may reach a restarted or promoted server whose cursors the crash
// moved back behind the cached pop plans. So after a check interval without a
// notification the listener pings, and a ping unanswered within *pingDeadline
// counts as a lost connection (errPingUnanswered). A ping answered within
// firstPingDeadline sets *pingDeadline back to it.
func (e *Engine) listenOnce(pingDeadline *time.Duration, firstPingDeadline time.Duration) (listened bool, err error) {
	select {
	case <-e.serverRestarted:
		// Met while this listener was between connections: the one it opens
		// now reaches that server.
	default:
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		select {
		case <-e.stop:
			cancel(nil)
		case <-e.serverRestarted:
			cancel(errServerRestarted)
		case <-ctx.Done():
		}
	}()
	// Each step of the setup (connecting, LISTEN, reading the server's start
	// time) has a ping's deadline: no ping runs before it is answered, and a
	// host that falls silent meanwhile would hold the listener until TCP
	// gives up (minutes). One deadline for the whole setup failed it on a
	// database whose every answer came within a ping's deadline but two not,
	// and the listener reconnected for as long as that lasted.
	stepDeadline := *pingDeadline
	step := func(run func(ctx context.Context) error) error {
		stepCtx, cancelStep := context.WithTimeout(ctx, stepDeadline)
		defer cancelStep()
		err := run(stepCtx)
		if err != nil && ctx.Err() == nil && stepCtx.Err() != nil {
			return fmt.Errorf("%w within %v: %w", errPingUnanswered, stepDeadline, err)
		}
		return causeOr(ctx, err)
	}
	var conn *pgx.Conn
	if err := step(func(ctx context.Context) (err error) {
		conn, err = pgx.ConnectConfig(ctx, e.pool.Config().ConnConfig.Copy())
		return err
	}); err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	if err := step(func(ctx context.Context) error {
		_, err := conn.Exec(ctx, "LISTEN "+notifyChannel)
		return err
	}); err != nil {
		return false, err
	}
	if watch := e.cfg.PoolWatch; watch != nil {
		// This reconnect acts on a new server itself; the pool's connections
		// then meet the same one and change nothing.
		var started time.Time
		if err := step(func(ctx context.Context) (err error) {
			started, err = serverStart(ctx, conn)
			return err
		}); err != nil {
			return false, err
		}
		watch.starts.record(started)
	}
	e.listening.Store(true)
	defer e.listening.Store(false)
	check := e.cfg.ListenerCheckInterval
	for {
		waitCtx, cancelWait := context.WithTimeout(ctx, check)
		n, err := conn.WaitForNotification(waitCtx)
		cancelWait()
		if err == nil {
			e.dispatchNotification(n)
			continue
		}
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return true, causeOr(ctx, err)
		}
		// A wait cut short by its deadline leaves the connection usable.
		deadline := *pingDeadline
		pingCtx, cancelPing := context.WithTimeout(ctx, deadline)
		sent := time.Now()
		err = conn.Ping(pingCtx)
		cancelPing()
		if err != nil {
			if ctx.Err() != nil {
				return true, context.Cause(ctx)
			}
			return true, fmt.Errorf("%w within %v: %w", errPingUnanswered, deadline, err)
		}
		if time.Since(sent) <= firstPingDeadline {
			*pingDeadline = firstPingDeadline
		}
	}
}

// causeOr is why ctx ended, when it did (the engine stopping, or
// errServerRestarted), else err.
func causeOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

func (e *Engine) dispatchNotification(n *pgconn.Notification) {
	lines := strings.Split(n.Payload, "\n")
	if len(lines) > 0 && strings.HasPrefix(lines[0], "@") {
		if lines[0][1:] == e.brokerID {
			return
		}
		lines = lines[1:]
	}
	for _, q := range lines {
		if q != "" {
			// Another broker's commit: which partitions is not said, so every
			// parked pop of the queue re-checks.
			e.waiters.wake(q, nil)
		}
	}
}

// retryTransient runs attempt up to three times while it fails with a
// serialization failure or a deadlock, and returns its last error.
func retryTransient(attempt func() error) error {
	var err error
	for range 3 {
		if err = attempt(); err == nil || !IsRetryable(err) {
			return err
		}
	}
	return err
}

// notifier sends NOTIFY for committed writes from outside their transactions.
// Names published while a NOTIFY is in flight are coalesced into the next one,
// so a busy broker sends a few notifications per commit cycle, not one per push.
type notifier struct {
	e       *Engine
	mu      sync.Mutex
	pending map[string]bool
	kick    chan struct{}
	// failures logs failed flushes once a minute: with the database's
	// notification queue full every push commit's flush fails.
	failures *failurelog.Reporter
}

func newNotifier(e *Engine) *notifier {
	return &notifier{e: e, pending: map[string]bool{}, kick: make(chan struct{}, 1),
		failures: failurelog.New(e.log, slog.LevelWarn, "notify other brokers failed", "")}
}

// publish queues the names of queues that received messages.
func (n *notifier) publish(queues map[string][]string) {
	if len(queues) == 0 {
		return
	}
	n.mu.Lock()
	for q := range queues {
		n.pending[q] = true
	}
	n.mu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

func (n *notifier) run(stop <-chan struct{}) {
	for {
		select {
		case <-n.kick:
			n.flush()
		case <-stop:
			n.flush()
			return
		}
	}
}

func (n *notifier) flush() {
	n.mu.Lock()
	batch := n.pending
	n.pending = map[string]bool{}
	n.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Any session will do: a pg_notify per push commit must not switch a hot one.
	if _, err := n.e.pool.Exec(withSessionMode(ctx, sessionAny), "SELECT pg_notify($1, $2)", notifyChannel, notifyPayload(n.e.brokerID, batch)); err != nil {
		// Other brokers' parked pops still find the messages at their next re-check.
		n.failures.Failed(err)
		return
	}
	n.failures.Succeeded()
}
