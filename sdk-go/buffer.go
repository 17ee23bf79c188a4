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
	// MaxSize bounds waiting items; Push blocks while it is reached (default 4 × MessageCount).
	MaxSize int
	// RetryDelay is the pause before retrying a failed flush (default 250 ms).
	RetryDelay time.Duration
	// OnError receives flush errors. A 400, 403 or 413 drops the batch; any other failure keeps
	// it at the front, retried every RetryDelay.
	OnError func(error)
}

// Buffer batches pushes for one (queue, partition) on the client. Buffered is not sent: call
// Flush, Client.FlushAll or Client.Close before exiting.
type Buffer struct {
	c         *Client
	queue     string
	partition string
	opts      BufferOptions

	mu      sync.Mutex
	cond    *sync.Cond
	items   []pushItemWire
	timer   *time.Timer
	flushMu sync.Mutex
	kick    chan struct{}
}

// Buffer returns the client's shared buffer for this queue and partition, creating it with opts
// on first use.
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
	key := q.queue + "/" + q.partition
	q.c.mu.Lock()
	defer q.c.mu.Unlock()
	if b, ok := q.c.buffers[key]; ok {
		return b
	}
	b := &Buffer{c: q.c, queue: q.queue, partition: q.partition, opts: opts, kick: make(chan struct{}, 1)}
	b.cond = sync.NewCond(&b.mu)
	q.c.buffers[key] = b
	go b.loop()
	return b
}

// Push enqueues items (transaction ids minted now). It blocks while MaxSize items wait, until
// ctx ends. An item that cannot be encoded fails the call (*InvalidItemError) before anything is
// enqueued.
func (b *Buffer) Push(ctx context.Context, items ...Item) error {
	wire, err := encodeItems(b.queue, b.partition, items)
	if err != nil {
		return err
	}
	for _, w := range wire {
		b.mu.Lock()
		for len(b.items) >= b.opts.MaxSize {
			if ctx.Err() != nil {
				b.mu.Unlock()
				return ctx.Err()
			}
			stop := context.AfterFunc(ctx, func() { b.mu.Lock(); b.cond.Broadcast(); b.mu.Unlock() })
			b.signal()
			b.cond.Wait()
			stop()
		}
		b.items = append(b.items, w)
		n := len(b.items)
		if n == 1 {
			b.timer = time.AfterFunc(b.opts.FlushInterval, b.signal)
		}
		b.mu.Unlock()
		if n >= b.opts.MessageCount {
			b.signal()
		}
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
	for range b.kick {
		for {
			err := b.flushOnce(context.Background())
			if err == nil {
				break
			}
			time.Sleep(b.opts.RetryDelay)
		}
	}
}

// flushOnce sends the waiting items MessageCount at a time while a full batch
// waits; on a retryable failure the failed items stay at the front.
func (b *Buffer) flushOnce(ctx context.Context) error {
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	for {
		more, err := b.sendFront(ctx)
		if err != nil || !more {
			return err
		}
	}
}

// sendFront sends up to MessageCount items from the front; more reports that
// a full batch is waiting after them. The caller holds flushMu.
func (b *Buffer) sendFront(ctx context.Context) (more bool, err error) {
	b.mu.Lock()
	n := min(len(b.items), b.opts.MessageCount)
	if n == 0 {
		b.mu.Unlock()
		return false, nil
	}
	batch := append([]pushItemWire(nil), b.items[:n]...)
	b.mu.Unlock()
	_, err = b.c.pushWire(ctx, batch)
	var pe *PushError
	drop := err == nil || dropsBatch(err)
	if errors.As(err, &pe) {
		// keep only the failed items (same transaction ids, so the retry deduplicates)
		failed := make([]pushItemWire, 0, len(pe.Items))
		for _, it := range pe.Items {
			failed = append(failed, batch[it.Index])
		}
		b.mu.Lock()
		b.items = append(failed, b.items[n:]...)
		b.cond.Broadcast()
		b.mu.Unlock()
		b.report(err)
		return false, err
	}
	if drop {
		b.mu.Lock()
		b.items = b.items[n:]
		if len(b.items) == 0 && b.timer != nil {
			b.timer.Stop()
		}
		more = len(b.items) >= b.opts.MessageCount
		if len(b.items) > 0 && !more {
			b.timer = time.AfterFunc(b.opts.FlushInterval, b.signal)
		}
		b.cond.Broadcast()
		b.mu.Unlock()
		if err != nil {
			b.report(err)
		}
		return more, nil
	}
	b.report(err)
	return false, err
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

func (b *Buffer) report(err error) {
	if b.opts.OnError != nil {
		b.opts.OnError(err)
	} else {
		b.c.log.Warn("lanes: buffer flush failed", "queue", b.queue, "error", err)
	}
}

// Flush sends every waiting item, retrying failures every RetryDelay until ctx ends.
func (b *Buffer) Flush(ctx context.Context) error {
	for b.Len() > 0 {
		if err := b.flushOnce(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err := sleepCtx(ctx, b.opts.RetryDelay); err != nil {
				return err
			}
		}
	}
	return nil
}

// FlushAll flushes every buffer of the client.
func (c *Client) FlushAll(ctx context.Context) error {
	c.mu.Lock()
	bufs := make([]*Buffer, 0, len(c.buffers))
	for _, b := range c.buffers {
		bufs = append(bufs, b)
	}
	c.mu.Unlock()
	var errs []error
	for _, b := range bufs {
		if err := b.Flush(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
