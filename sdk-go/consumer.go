package lanes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Handler processes one message. Returning an error (or panicking) nacks it as `failed`; an error
// that is, or wraps, the SDK's own error for want of a broker (a *ConnectionError, or an *APIError
// with status 502, 503, 504 or 429) releases it with `retry` instead, spending no retry
// (docs/consuming.md §3 step 5).
type Handler func(ctx context.Context, m *Message) error

// BatchHandler processes the messages of one partition from one pop, in order. Returning an
// error nacks the first of them as `failed` (the rest redeliver after it), or releases it with
// `retry` as for Handler.
type BatchHandler func(ctx context.Context, ms []*Message) error

type consumeOpts struct {
	concurrency     int
	limit           int64
	idle            time.Duration
	renew           bool
	renewEvery      time.Duration
	autoAck         bool
	onError         func(error)
	softStopTimeout time.Duration
	reportHandler   bool
}

func defaultConsumeOpts() consumeOpts {
	return consumeOpts{concurrency: 1, autoAck: true, renew: true}
}

// Concurrency sets the number of workers (default 1). Each worker holds its own lease, so
// order per partition holds with any concurrency.
func (q QueueBuilder) Concurrency(n int) QueueBuilder { q.consume.concurrency = n; return q }

// Limit stops the consumer after n messages were handed to the handler (all workers; 0 = none).
// ConsumeBatch cuts a slice larger than what is left to it and releases the rest with `retry`.
func (q QueueBuilder) Limit(n int) QueueBuilder { q.consume.limit = int64(max(n, 0)); return q }

// IdleTimeout stops the consumer (a soft stop, Err() nil) once it has been idle for d (0 =
// never). A consumer is idle when no worker is handling a pop; idle time counts from the later
// of the last pop that returned messages and the end of the last pop's handling, so a slow
// handler working through a batch is never stopped by it (as in the TypeScript and Python SDKs).
// Each pop of the loop (and of Messages) waits at most the idle time left, so it ends within a
// moment of its deadline even with a longer Timeout.
func (q QueueBuilder) IdleTimeout(d time.Duration) QueueBuilder { q.consume.idle = d; return q }

// RenewLease sets lease renewal, which is on by default: while handlers run, the pop's lease is
// extended every `every` (0 = the default: a third of the lease the pop's answer names, else of
// LeaseSeconds, at most 10 s; from an older broker without LeaseSeconds, 1 s after the pop,
// then a third of the lease the renewal's answer shows, at most 10 s), so a
// handler slower than the lease keeps its messages. RenewLease(false, 0) turns it off.
func (q QueueBuilder) RenewLease(on bool, every time.Duration) QueueBuilder {
	q.consume.renew, q.consume.renewEvery = on, every
	return q
}

// Each selects one handler call per message (the default for Consume); kept for the fluent
// chain of the other SDKs.
func (q QueueBuilder) Each() QueueBuilder { return q }

// AutoAck sets client-side acking after the handler (default true). With false the handler acks
// (e.g. in a transaction) and the loop acks nothing: a stop or Limit releases only the
// partitions of a pop of which nothing was handed over (a `retry` below a message the handler
// has not acked would release that one too); the rest redelivers when the lease expires.
func (q QueueBuilder) AutoAck(on bool) QueueBuilder { q.consume.autoAck = on; return q }

// OnError sets the callback for loop errors (failed pops, acks, renewals, messages dropped under
// server auto-ack). Without it each is logged at warning level on the client's logger
// (WithLogger; slog.Default() without one). It runs on the worker or lease-renewal goroutine,
// so it may be called concurrently, and must not block for long; Stop called from it returns at
// once, as from a handler.
func (q QueueBuilder) OnError(fn func(error)) QueueBuilder { q.consume.onError = fn; return q }

// SoftStopTimeout makes a soft stop escalate to a hard stop after d (0 = never).
func (q QueueBuilder) SoftStopTimeout(d time.Duration) QueueBuilder {
	q.consume.softStopTimeout = d
	return q
}

// ReportHandlerErrors also passes handler errors to OnError, each as a *HandlerError naming the
// messages it was about; with or without it their messages are nacked `failed` (with the
// handler's own error text), or released with `retry` when the broker was unreachable.
func (q QueueBuilder) ReportHandlerErrors(on bool) QueueBuilder {
	q.consume.reportHandler = on
	return q
}

// Consume starts the consume loop and returns at once (docs/consuming.md). Canceling ctx is a
// hard stop: handler contexts end too, and a handler that returns that cancellation has its
// message released with `retry` (no retry budget spent; not with AutoAck(false)), as with
// StopAndCancel; a pop in flight is half-closed, not canceled, as Stop does.
func (q QueueBuilder) Consume(ctx context.Context, h Handler) (*Consumer, error) {
	if h == nil {
		return nil, errors.New("lanes: nil handler")
	}
	return q.start(ctx, h, nil)
}

// ConsumeBatch is Consume with one handler call per partition slice of each pop.
func (q QueueBuilder) ConsumeBatch(ctx context.Context, h BatchHandler) (*Consumer, error) {
	if h == nil {
		return nil, errors.New("lanes: nil handler")
	}
	return q.start(ctx, nil, h)
}

// Run is Consume that blocks until the consumer ends and returns Err().
func (q QueueBuilder) Run(ctx context.Context, h Handler) error {
	c, err := q.Consume(ctx, h)
	if err != nil {
		return err
	}
	<-c.Done()
	return c.Err()
}

// Consumer is a running consume loop.
type Consumer struct {
	q      QueueBuilder
	parent context.Context // the ctx given to Consume
	h      Handler
	bh     BatchHandler
	opts   consumeOpts
	ackCx  context.Context

	fetchCtx    context.Context
	stopFetch   context.CancelFunc
	workCtx     context.Context
	cancelWork  context.CancelCauseFunc
	done        chan struct{}
	wg          sync.WaitGroup
	delivered   atomic.Int64
	budget      *limitBudget // under server auto-ack with a Limit: what is left to pop
	workerIDs   sync.Map     // goroutine ids of the workers and their lease renewals, which run handlers and OnError
	lastMessage atomic.Int64 // unix ns: the last pop with messages, or the end of handling one
	busy        atomic.Int64 // workers handling a pop (handlers, then acks)

	mu            sync.Mutex
	err           error
	stopRequested bool
	escalation    *time.Timer
}

func (q QueueBuilder) start(ctx context.Context, h Handler, bh BatchHandler) (*Consumer, error) {
	if q.queue == "" && q.namespace == "" && q.task == "" {
		return nil, errors.New("lanes: consume needs a queue, or a namespace/task")
	}
	if err := q.checkPopNames(); err != nil {
		return nil, err
	}
	if q.consume.concurrency < 1 || q.consume.concurrency > 10000 {
		return nil, fmt.Errorf("lanes: concurrency %d out of 1..10000", q.consume.concurrency)
	}
	c := &Consumer{q: q, parent: ctx, h: h, bh: bh, opts: q.consume, done: make(chan struct{})}
	c.workCtx, c.cancelWork = context.WithCancelCause(ctx)
	c.fetchCtx, c.stopFetch = context.WithCancel(c.workCtx)
	c.ackCx = context.WithoutCancel(ctx)
	c.lastMessage.Store(time.Now().UnixNano())
	if q.committedOnDelivery() && c.opts.limit > 0 {
		c.budget = newLimitBudget(c.opts.limit)
	}
	for i := 0; i < c.opts.concurrency; i++ {
		c.wg.Add(1)
		go c.worker()
	}
	go func() {
		select {
		case <-ctx.Done():
			c.mu.Lock()
			if !c.stopRequested && c.err == nil {
				c.err = context.Cause(ctx)
			}
			c.stopRequested = true
			c.mu.Unlock()
			c.stopFetch()
			c.cancelWork(ErrConsumerStopped)
		case <-c.done:
		}
	}()
	if c.opts.idle > 0 {
		go c.idleWatch()
	}
	go func() {
		c.wg.Wait()
		c.mu.Lock()
		if !c.stopRequested && c.err == nil && ctx.Err() != nil {
			c.err = context.Cause(ctx)
		}
		if c.escalation != nil {
			c.escalation.Stop()
		}
		c.mu.Unlock()
		c.stopFetch()
		c.cancelWork(ErrConsumerStopped)
		close(c.done)
	}()
	return c, nil
}

// Done is closed when every worker has exited and the final acks were sent.
func (c *Consumer) Done() <-chan struct{} { return c.done }

// Err is the terminal error once Done is closed (nil after a requested stop, a Limit or an
// IdleTimeout).
func (c *Consumer) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Stop is a soft stop: no more pops, handlers finish their current message, handled messages
// are acked and the rest released (with AutoAck(false), see AutoAck). A pop in flight is ended
// by half-closing its connection, so the messages of an answer the broker already wrote are
// released, not left leased; it is canceled when no answer has begun 2 s later, and at once
// where it cannot be half-closed (docs/consuming.md §5, "Cutting a pop in flight"). Under
// ServerAutoAck(true) a pop in flight is not cut (its messages may be committed already): the
// stop waits for its answer, at most the long-poll Timeout, and hands its messages over. It
// returns ctx.Err() if ctx ends first (the stop goes on, and Stop or StopAndCancel may be called
// again). Called from one of this consumer's handlers, it only requests the stop and returns nil
// at once: the end waits for that handler.
func (c *Consumer) Stop(ctx context.Context) error {
	c.softStop()
	return c.wait(ctx)
}

// StopAndCancel is a hard stop: Stop plus canceling every handler context with the cause
// ErrConsumerStopped. A pop in flight is half-closed as Stop does (it holds no handler's work,
// and an answer the broker already wrote is released); under ServerAutoAck(true) it is
// canceled. Called from one of this consumer's handlers, it returns nil at once, as Stop does.
func (c *Consumer) StopAndCancel(ctx context.Context) error {
	c.softStop()
	c.cancelWork(ErrConsumerStopped)
	return c.wait(ctx)
}

// wait waits for the end of the consumer, except on a worker's or its lease renewal's goroutine
// (a handler or OnError calling Stop), whose own return the end waits for.
func (c *Consumer) wait(ctx context.Context) error {
	if _, inWorker := c.workerIDs.Load(goroutineID()); inWorker {
		return nil
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// goroutineID is the id of the calling goroutine, read from the first line of its stack
// ("goroutine 42 [running]:"); Go exposes it nowhere else.
func goroutineID() uint64 {
	var buf [64]byte
	line := buf[:runtime.Stack(buf[:], false)]
	line = bytes.TrimPrefix(line, []byte("goroutine "))
	if i := bytes.IndexByte(line, ' '); i >= 0 {
		line = line[:i]
	}
	id, _ := strconv.ParseUint(string(line), 10, 64)
	return id
}

func (c *Consumer) softStop() {
	c.mu.Lock()
	c.stopRequested = true
	if c.opts.softStopTimeout > 0 && c.escalation == nil {
		c.escalation = time.AfterFunc(c.opts.softStopTimeout, func() { c.cancelWork(ErrConsumerStopped) })
	}
	c.mu.Unlock()
	c.stopFetch()
}

func (c *Consumer) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.softStop()
}

func (c *Consumer) idleWatch() {
	t := time.NewTicker(min(c.opts.idle/4+time.Millisecond, 250*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-c.fetchCtx.Done():
			return
		case <-t.C:
			if c.idleOver() {
				c.q.c.log.Debug("lanes: consumer idle timeout", "queue", c.q.queue)
				c.softStop()
				return
			}
		}
	}
}

// idleDeadline is when the consumer's idle time runs out, counted as idleWatch counts it: while
// a worker handles a pop the consumer is not idle, so the deadline is a whole IdleTimeout away.
func (c *Consumer) idleDeadline() time.Time {
	if c.busy.Load() > 0 {
		return time.Now().Add(c.opts.idle)
	}
	return time.Unix(0, c.lastMessage.Load()).Add(c.opts.idle)
}

// idleOver reports whether the consumer has been idle for IdleTimeout.
func (c *Consumer) idleOver() bool {
	return c.opts.idle > 0 && !time.Now().Before(c.idleDeadline())
}

// markWorkerGoroutine records the calling goroutine as one the end of the consumer waits for, so
// Stop called on it (from a handler or OnError) returns at once; it returns the unmarking.
func (c *Consumer) markWorkerGoroutine() (unmark func()) {
	id := goroutineID()
	c.workerIDs.Store(id, struct{}{})
	return func() { c.workerIDs.Delete(id) }
}

func (c *Consumer) limitReached() bool {
	return c.opts.limit > 0 && c.delivered.Load() >= c.opts.limit
}

func (c *Consumer) worker() {
	defer c.wg.Done()
	defer c.markWorkerGoroutine()()
	// Every stop ends fetchCtx, which half-closes a pop in flight (popCut): an answer the broker
	// wrote still arrives and is released. The pop runs on a ctx no stop cancels, or a hard stop
	// would cancel it and lose that answer. Under server auto-ack a soft stop leaves it to answer
	// (its messages may be committed already, and are handed over) and a hard stop cancels it.
	p := poller{q: c.q, popCtx: c.workCtx}
	if !c.q.committedOnDelivery() {
		p.popCtx, p.cutOnStop = context.WithoutCancel(c.workCtx), true
	}
	if c.opts.idle > 0 {
		p.idleDeadline = c.idleDeadline
	}
	if c.budget != nil {
		p.reserve = c.budget.reserve
	}
	outages := 0 // consecutive pops in which a handler failed for want of a broker, 429s aside
	for {
		if c.fetchCtx.Err() != nil {
			return
		}
		if c.limitReached() {
			c.softStop()
			return
		}
		pr, err := p.next(c.fetchCtx, c.limitReached)
		if err != nil {
			c.q.reportLoopError("pop", err)
			c.fail(err)
			return
		}
		if pr == nil {
			if c.idleOver() {
				c.q.c.log.Debug("lanes: consumer idle timeout", "queue", c.q.queue)
				c.softStop()
				return
			}
			if c.budget != nil && c.budget.spent() {
				return // the whole Limit is popped; the workers holding it hand it over
			}
			continue // the checks above tell why
		}
		c.busy.Add(1)
		c.lastMessage.Store(time.Now().UnixNano())
		outage := c.process(pr)
		c.lastMessage.Store(time.Now().UnixNano())
		c.busy.Add(-1)
		if c.limitReached() {
			c.softStop()
			return
		}
		if len(outage) == 0 {
			outages = 0
			continue
		}
		// The broker the handler needed is down: pop again after the wait of a failed pop, not at
		// once, or the released message would come back to fail in a tight loop.
		delay := outagePause(outage, outages)
		if !allRateLimited(outage) {
			outages++
		}
		if left, ok := p.idleLeft(); ok {
			delay = min(delay, max(left, 0))
		}
		_ = sleepCtx(c.fetchCtx, delay)
	}
}

// process hands one pop's messages to the handler partition by partition, then acks. It
// returns the failures of the pop's handlers for want of a broker.
func (c *Consumer) process(pr *PopResult) (outage []error) {
	committed := c.q.committedOnDelivery()
	var order []string
	byPart := map[string][]*Message{}
	for _, m := range pr.Messages {
		if _, ok := byPart[m.PartitionID]; !ok {
			order = append(order, m.PartitionID)
		}
		byPart[m.PartitionID] = append(byPart[m.PartitionID], m)
	}
	leased := !committed && popLeaseID(pr) != ""
	expiry := newLeaseExpiry(popLeaseSeconds(pr, c.q.leaseSeconds))
	stopRenew := func() {}
	if leased && c.opts.renew {
		stopRenew = renewLease(c.ackCx, c.q, pr, expiry, c.markWorkerGoroutine)
	}
	var entries []ackEntry
	handed := 0
	for _, pid := range order {
		ms := byPart[pid]
		var es []ackEntry
		var n int
		var failure error
		if c.bh != nil {
			es, n, failure = c.runBatch(ms, committed)
		} else {
			es, n, failure = c.runEach(ms, committed)
		}
		if brokerUnavailable(failure) {
			outage = append(outage, failure)
		}
		// With AutoAck(false) the handler owns what it was handed and may not have acked it,
		// and a retry below an unacked message would release that one too: only a partition
		// of which nothing was handed over is released (one a stop reached first).
		if c.opts.autoAck || n == 0 {
			entries = append(entries, es...)
		}
		handed += n
	}
	stopRenew()
	if committed && handed < len(pr.Messages) {
		c.q.reportLoopError("server auto-ack", &AutoAckDroppedError{Count: len(pr.Messages) - handed})
	}
	if !leased || len(entries) == 0 {
		return outage
	}
	if err := ackUntilDone(c.ackCx, c.workCtx, c.q, entries, expiry); err != nil {
		c.q.reportLoopError("ack", err)
		c.fail(err)
	}
	return outage
}

// outagePause is the wait before the next pop after handlers failed for want of a broker: the
// wait of a failed pop (loopErrorDelay) for the longest of them, so a 429's Retry-After hint
// is waited out in full, as after a pop's 429, and a 429 without one waits 1 s; streak counts
// the pops before this one whose handlers so failed, 429s left out.
func outagePause(failures []error, streak int) time.Duration {
	var pause time.Duration
	for _, err := range failures {
		pause = max(pause, loopErrorDelay(err, streak))
	}
	return pause
}

// allRateLimited reports whether every failure is a 429, which the outage streak leaves out as
// the pop's does: the broker answered, and said how long to wait.
func allRateLimited(failures []error) bool {
	for _, err := range failures {
		if !rateLimited(err) {
			return false
		}
	}
	return true
}

// stopping reports a requested stop (soft or hard) or a reached limit.
func (c *Consumer) stopping() bool { return c.fetchCtx.Err() != nil }

// take reserves up to n messages of the Limit budget and returns how many may be handed to the
// handler: n without a Limit, at most what is left of it with one, 0 when stopping.
func (c *Consumer) take(n int) int {
	if c.stopping() {
		return 0
	}
	if c.opts.limit <= 0 {
		c.delivered.Add(int64(n))
		return n
	}
	for {
		cur := c.delivered.Load()
		room := c.opts.limit - cur
		if room <= 0 {
			return 0
		}
		k := min(int64(n), room)
		if c.delivered.CompareAndSwap(cur, cur+k) {
			return int(k)
		}
	}
}

// admit is take for n messages of a pop; under server auto-ack (committed) they are all handed,
// even past Limit or after a soft stop, since nothing can release them; only a hard stop drops
// them.
func (c *Consumer) admit(n int, committed bool) int {
	if !committed {
		return c.take(n)
	}
	if c.workCtx.Err() != nil {
		return 0
	}
	c.delivered.Add(int64(n))
	return n
}

// runEach hands ms to the handler one by one; it returns their acks, how many were handed, and
// the handler's failure (nil when none failed, or a hard stop canceled it).
func (c *Consumer) runEach(ms []*Message, committed bool) ([]ackEntry, int, error) {
	var out []ackEntry
	for i, m := range ms {
		if c.admit(1, committed) == 0 {
			return append(out, ackEntry{msg: ms[i], status: AckRetry}), i, nil
		}
		err := c.call(func(ctx context.Context) error { return c.h(ctx, m) })
		if err == nil {
			out = append(out, ackEntry{msg: m, status: AckCompleted})
			continue
		}
		if c.stoppedByCancel(err) {
			return append(out, ackEntry{msg: m, status: AckRetry}), i + 1, nil
		}
		if c.opts.reportHandler {
			c.q.reportLoopError("handler", &HandlerError{Messages: []*Message{m}, Err: err})
		}
		return append(out, handlerFailureAck(m, err)), i + 1, err
	}
	return out, len(ms), nil
}

// runBatch hands the slice to the batch handler, cut to what is left of the Limit budget; the
// messages cut off are released with `retry` (the first of them; the rest follow it). It
// returns the acks, how many messages were handed, and the handler's failure as runEach does.
func (c *Consumer) runBatch(ms []*Message, committed bool) ([]ackEntry, int, error) {
	k := c.admit(len(ms), committed)
	if k == 0 {
		return []ackEntry{{msg: ms[0], status: AckRetry}}, 0, nil
	}
	handed := ms[:k]
	err := c.call(func(ctx context.Context) error { return c.bh(ctx, handed) })
	if err == nil {
		out := make([]ackEntry, 0, len(ms))
		for _, m := range handed {
			out = append(out, ackEntry{msg: m, status: AckCompleted})
		}
		if k < len(ms) {
			out = append(out, ackEntry{msg: ms[k], status: AckRetry})
		}
		return out, k, nil
	}
	if c.stoppedByCancel(err) {
		return []ackEntry{{msg: ms[0], status: AckRetry}}, k, nil
	}
	if c.opts.reportHandler {
		c.q.reportLoopError("handler", &HandlerError{Messages: handed, Err: err})
	}
	return []ackEntry{handlerFailureAck(ms[0], err)}, k, err
}

// handlerFailureAck is the ack of a message whose handler failed with err: `retry` (no retry
// spent) when it failed for want of a broker, so an outage dead-letters nothing, else `failed`
// with the error text, which spends one retry of the message.
func handlerFailureAck(m *Message, err error) ackEntry {
	if brokerUnavailable(err) {
		return ackEntry{msg: m, status: AckRetry}
	}
	return ackEntry{msg: m, status: AckFailed, err: err.Error()}
}

// stoppedByCancel: the handler failed because a hard stop canceled it; release, don't charge. A
// hard stop is StopAndCancel (or an escalated soft stop), whose cause is ErrConsumerStopped, or the
// end of the ctx given to Consume, whose cause is that ctx's own (context.Canceled, a deadline, or
// the cause given to its cancel function).
func (c *Consumer) stoppedByCancel(err error) bool {
	if c.workCtx.Err() == nil {
		return false
	}
	if errors.Is(err, ErrConsumerStopped) {
		return true
	}
	if errors.Is(context.Cause(c.workCtx), ErrConsumerStopped) {
		return errors.Is(err, context.Canceled)
	}
	if c.parent.Err() == nil {
		return false
	}
	return errors.Is(err, c.parent.Err()) || errors.Is(err, context.Cause(c.parent))
}

func (c *Consumer) call(fn func(ctx context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &HandlerPanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return fn(c.workCtx)
}
