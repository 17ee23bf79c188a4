package lanes

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"
)

// BufferOptions configure a client-side push buffer.
type BufferOptions struct {
	// MessageCount flushes when this many items wait (default 100).
	MessageCount int
	// FlushInterval flushes this long after the first waiting item (default 1 s).
	FlushInterval time.Duration
	// MaxSize bounds waiting items; Push blocks until its whole call fits (default 4 × MessageCount).
	MaxSize int
	// RetryDelay is the pause before retrying a failed flush (default 250 ms).
	RetryDelay time.Duration
	// OnError receives flush errors. Items the broker refuses (each alone on 400 or 413, or
	// the batch on 403) are dropped and arrive as one *DroppedError per flush carrying all of
	// them; any other failure keeps the items at the front, retried every RetryDelay.
	OnError func(error)
}

// Buffer batches pushes for one (queue, partition) on the client. Buffered is not sent: call
// Flush, Client.FlushAll or Client.Close before exiting.
type Buffer struct {
	c         *Client
	queue     string
	partition string
	opts      BufferOptions
	// invalid is why the queue or partition name can never be pushed to; Push answers it.
	invalid error

	mu      sync.Mutex
	cond    *sync.Cond
	items   []pushItemWire
	timer   *time.Timer
	closed  bool
	flushes int // batches sent, for BufferStats
	// flushing holds a token while one sender (the flusher or a Flush) owns the front; a lock
	// a caller can stop waiting for when its ctx ends, which sync.Mutex is not.
	flushing chan struct{}
	kick     chan struct{}

	// ctx ends the background flusher; cancel is called once by shutdown.
	ctx    context.Context
	cancel context.CancelFunc
}

// Buffer returns the client's shared buffer for this queue and partition, creating it with opts
// on first use. After Client.Close it returns a closed buffer whose Push answers ErrClientClosed.
// A queue or partition name the broker would refuse gives a buffer whose Push answers
// *InvalidNameError, so it never fills with items that could only be dropped.
func (q QueueBuilder) Buffer(opts BufferOptions) *Buffer {
	if opts.MessageCount <= 0 {
		opts.MessageCount = 100
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = time.Second
	}
	if opts.MaxSize <= 0 {
		opts.MaxSize = 4 * opts.MessageCount
	}
	if opts.RetryDelay <= 0 {
		opts.RetryDelay = 250 * time.Millisecond
	}
	if err := checkPushNames(q.queue, q.partition); err != nil {
		return &Buffer{c: q.c, queue: q.queue, partition: q.partition, opts: opts, invalid: err}
	}
	key := q.queue + "/" + q.partition
	q.c.mu.Lock()
	defer q.c.mu.Unlock()
	if b, ok := q.c.buffers[key]; ok {
		return b
	}
	b := &Buffer{c: q.c, queue: q.queue, partition: q.partition, opts: opts, kick: make(chan struct{}, 1),
		flushing: make(chan struct{}, 1)}
	b.cond = sync.NewCond(&b.mu)
	b.ctx, b.cancel = context.WithCancel(context.Background())
	if q.c.closed {
		b.closed = true
		b.cancel()
		return b
	}
	q.c.buffers[key] = b
	go b.loop()
	return b
}

// Push enqueues items (transaction ids minted now), all or nothing: it waits until the whole
// call fits under MaxSize (a call larger than MaxSize waits for an empty buffer), then queues it
// in one step. When ctx ends first, or the client closes, nothing of the call is queued, so the
// caller may push the same items again without duplicates. An item that cannot be encoded fails
// the call (*InvalidItemError) before anything is enqueued, so it can never block the items
// behind it; after Client.Close it returns ErrClientClosed.
func (b *Buffer) Push(ctx context.Context, items ...Item) error {
	if b.invalid != nil {
		return b.invalid
	}
	wire, err := encodeItems(b.queue, b.partition, items)
	if err != nil || len(wire) == 0 {
		return err
	}
	b.mu.Lock()
	for len(b.items) > 0 && len(b.items)+len(wire) > b.opts.MaxSize && !b.closed {
		if ctx.Err() != nil {
			b.mu.Unlock()
			return ctx.Err()
		}
		stop := context.AfterFunc(ctx, func() { b.mu.Lock(); b.cond.Broadcast(); b.mu.Unlock() })
		b.signal()
		b.cond.Wait()
		stop()
	}
	if b.closed {
		b.mu.Unlock()
		return ErrClientClosed
	}
	if len(b.items) == 0 {
		b.timer = time.AfterFunc(b.opts.FlushInterval, b.signal)
	}
	b.items = append(b.items, wire...)
	n := len(b.items)
	b.mu.Unlock()
	if n >= b.opts.MessageCount {
		b.signal()
	}
	return nil
}

func (b *Buffer) signal() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// Len is the number of waiting items.
func (b *Buffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.items)
}

func (b *Buffer) loop() {
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-b.kick:
		}
		for b.flushOnce(b.ctx) != nil {
			if sleepCtx(b.ctx, b.opts.RetryDelay) != nil {
				return
			}
		}
	}
}

// refuse makes later pushes answer ErrClientClosed and wakes the ones waiting for room.
func (b *Buffer) refuse() {
	b.mu.Lock()
	b.closed = true
	b.cond.Broadcast()
	b.mu.Unlock()
}

// shutdown ends the background flusher; what is left can still be sent by Flush.
func (b *Buffer) shutdown() {
	b.cancel()
	b.mu.Lock()
	if b.timer != nil {
		b.timer.Stop()
	}
	b.mu.Unlock()
}

// refused gathers the items one flush drops, so they are logged and reported once.
type refused struct {
	items []pushItemWire
	// err is the broker's answer to the first dropped batch.
	err error
}

func (r *refused) add(batch []pushItemWire, err error) {
	if r.err == nil {
		r.err = err
	}
	r.items = append(r.items, batch...)
}

// flushOnce sends the waiting items MessageCount at a time while a full batch
// waits; on a retryable failure the failed items stay at the front. When another sender holds
// the front it waits for it, until ctx ends: that send is the other's, under its own ctx, so
// it is neither cut nor waited out.
func (b *Buffer) flushOnce(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case b.flushing <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-b.flushing }()
	var dropped refused
	defer func() {
		if len(dropped.items) > 0 {
			b.drop(dropped.items, dropped.err)
		}
	}()
	for {
		more, err := b.sendFront(ctx, &dropped)
		if err != nil || !more {
			return err
		}
	}
}

// sendFront sends up to MessageCount items from the front; more reports that
// a full batch is waiting after them. The caller holds the flushing token.
func (b *Buffer) sendFront(ctx context.Context, dropped *refused) (more bool, err error) {
	b.mu.Lock()
	n := min(len(b.items), b.opts.MessageCount)
	if n == 0 {
		b.mu.Unlock()
		return false, nil
	}
	batch := append([]pushItemWire(nil), b.items[:n]...)
	b.mu.Unlock()
	keep, err := b.send(ctx, batch, dropped)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.items = append(keep, b.items[n:]...)
	b.cond.Broadcast()
	if err != nil {
		return false, err
	}
	b.flushes++
	if len(b.items) == 0 && b.timer != nil {
		b.timer.Stop()
	}
	more = len(b.items) >= b.opts.MessageCount
	if len(b.items) > 0 && !more {
		b.timer = time.AfterFunc(b.opts.FlushInterval, b.signal)
	}
	return more, nil
}

// send pushes batch and returns the items to keep at the front for a retry, with the retryable
// error. The buffer built the batch, so a batch the broker refuses as a whole (413, or a 400
// for several items) is halved until each refused item is alone; only those are dropped (added
// to dropped).
func (b *Buffer) send(ctx context.Context, batch []pushItemWire, dropped *refused) ([]pushItemWire, error) {
	_, err := b.c.pushWire(ctx, batch)
	var pe *PushError
	switch {
	case err == nil:
		return nil, nil
	case errors.As(err, &pe):
		// keep only the failed items (same transaction ids, so the retry deduplicates)
		failed := make([]pushItemWire, 0, len(pe.Items))
		for _, it := range pe.Items {
			failed = append(failed, batch[it.Index])
		}
		b.report(err)
		return failed, err
	case len(batch) > 1 && splitsBatch(err):
		half := len(batch) / 2
		keep, err := b.send(ctx, batch[:half], dropped)
		if err != nil {
			return append(append([]pushItemWire(nil), keep...), batch[half:]...), err
		}
		return b.send(ctx, batch[half:], dropped)
	case dropsBatch(err):
		dropped.add(batch, err)
		return nil, nil
	}
	if ctx.Err() == nil { // a flush cut short by its own deadline or by Close is no failure to report
		b.report(err)
	}
	return batch, err
}

// splitsBatch reports whether a refused batch may hold items the broker would take alone: a
// 413 (the body was too big) or a 400 (one item may be bad).
func splitsBatch(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && (ae.Status == http.StatusBadRequest || ae.Status == http.StatusRequestEntityTooLarge)
}

// dropsBatch reports whether a failed flush is dropped instead of retried
// (docs/sdk-design.md §2): only 400, 403 and 413, which the same bytes would
// get again. It is narrower than APIError.Terminal, which stops consume loops:
// a 401, 404 or 409 can pass once a token, a route or a conflict changes, and
// a buffer that dropped on them would lose messages a later flush could store.
func dropsBatch(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Status {
	case http.StatusBadRequest, http.StatusForbidden, http.StatusRequestEntityTooLarge:
		return true
	}
	return false
}

// drop gives up on the items of one flush: logged once (lost messages must not pass silently,
// so without WithLogger this goes to slog.Default) and handed to OnError with the items.
func (b *Buffer) drop(batch []pushItemWire, err error) {
	items := make([]Item, len(batch))
	for i, w := range batch {
		items[i] = Item{Data: w.Payload, TransactionID: w.TransactionID, TraceID: w.TraceID}
	}
	b.c.warnLog.Error("lanes: push buffer dropped items the broker refuses", "queue", b.queue,
		"partition", b.partition, "count", len(items), "firstTransactionId", items[0].TransactionID, "error", err)
	if b.opts.OnError != nil {
		b.opts.OnError(&DroppedError{Items: items, Err: err})
	}
}

func (b *Buffer) report(err error) {
	if b.opts.OnError != nil {
		b.opts.OnError(err)
	} else {
		b.c.log.Warn("lanes: buffer flush failed", "queue", b.queue, "error", err)
	}
}

// Flush sends every waiting item, retrying failures every RetryDelay until ctx ends; then it
// returns *UnsentError (wrapping ctx.Err()) with the count still waiting. A send Flush makes
// runs under ctx, so ctx's end cuts it (its items stay at the front, same transaction ids);
// while the background flusher or another Flush is sending, Flush waits for it until ctx ends
// and cuts nothing: those items count as unsent until their answer comes.
func (b *Buffer) Flush(ctx context.Context) error {
	for b.Len() > 0 {
		if err := b.flushOnce(ctx); err != nil {
			if ctx.Err() != nil {
				return &UnsentError{Unsent: b.Len(), Err: ctx.Err()}
			}
			if err := sleepCtx(ctx, b.opts.RetryDelay); err != nil {
				return &UnsentError{Unsent: b.Len(), Err: err}
			}
		}
	}
	return nil
}

// BufferStats is what Client.BufferStats reports of the client's push buffers.
type BufferStats struct {
	// ActiveBuffers is how many buffers the client holds (one per queue and partition).
	ActiveBuffers int
	// TotalBufferedMessages is how many items wait in them, not sent yet.
	TotalBufferedMessages int
	// FlushesPerformed counts the batches the buffers sent (a batch halved to set a refused
	// item apart counts once); a batch that failed and stays to be retried is not counted.
	FlushesPerformed int
}

// BufferStats reports the client's push buffers (TS bufferStats(), Python buffer_stats()):
// for instance the messages still waiting before a process exits.
func (c *Client) BufferStats() BufferStats {
	c.mu.Lock()
	bufs := make([]*Buffer, 0, len(c.buffers))
	for _, b := range c.buffers {
		bufs = append(bufs, b)
	}
	c.mu.Unlock()
	stats := BufferStats{ActiveBuffers: len(bufs)}
	for _, b := range bufs {
		b.mu.Lock()
		stats.TotalBufferedMessages += len(b.items)
		stats.FlushesPerformed += b.flushes
		b.mu.Unlock()
	}
	return stats
}

// FlushAll flushes every buffer of the client at once, so a buffer that cannot be sent does not
// use up the others' time. It returns *UnsentError with the total left when ctx ended first.
func (c *Client) FlushAll(ctx context.Context) error {
	c.mu.Lock()
	bufs := make([]*Buffer, 0, len(c.buffers))
	for _, b := range c.buffers {
		bufs = append(bufs, b)
	}
	c.mu.Unlock()
	errs := make([]error, len(bufs))
	var wg sync.WaitGroup
	for i, b := range bufs {
		wg.Go(func() { errs[i] = b.Flush(ctx) })
	}
	wg.Wait()
	total := &UnsentError{}
	for _, err := range errs {
		var ue *UnsentError
		if errors.As(err, &ue) {
			total.Unsent += ue.Unsent
			total.Err = ue.Err
		}
	}
	if total.Err != nil {
		return total
	}
	return nil
}
