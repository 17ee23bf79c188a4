package engine

import (
	"context"
	"sync"
	"time"

	"github.com/lanesmq/lanes/server/internal/failurelog"
)

// A queue's minPopWaitTime holds a waiting pop that finds an under-full batch
// so one claim (and one commit, one ack) carries more: the pop claims when
// the batch is full, when the hold has lasted minPopWaitTime or when its own
// timeout comes, whichever is first. As in the reference, it applies to
// waiting pops of a whole queue (no partition named) with a batch above one,
// and only once the queue has something to deliver: an empty queue parks the
// pop as usual, and the hold starts at the first check that sees a message.
// The pop claims nothing while it holds, so the messages stay claimable by
// any other consumer meanwhile.

// popHoldsMaxAge is how stale the per-queue minPopWaitTime a broker acts on
// may be: a queue configured through another broker holds pops here within it.
const popHoldsMaxAge = time.Second

// popHolds caches the queues with a minPopWaitTime, read all at once at most
// every popHoldsMaxAge, and only while waiting pops ask.
type popHolds struct {
	mu      sync.Mutex
	byQueue map[string]time.Duration
	readAt  time.Time
	reading chan struct{} // closed when the read in flight ends
	// readFailures logs failed reads once a minute: while the database is
	// down every waiting batch pop tries one.
	readFailures *failurelog.Reporter
}

// popHoldFor is how long req may hold an under-full batch; 0 when it may not.
func (e *Engine) popHoldFor(ctx context.Context, req *PopRequest) time.Duration {
	if !req.Wait || req.Batch <= 1 || req.Queue == "" || req.Partition != "" {
		return 0
	}
	return e.holds.get(ctx, e, req.Queue)
}

func (h *popHolds) get(ctx context.Context, e *Engine, queue string) time.Duration {
	for {
		h.mu.Lock()
		if time.Since(h.readAt) < popHoldsMaxAge {
			d := h.byQueue[queue]
			h.mu.Unlock()
			return d
		}
		if h.reading != nil {
			// Another pop is reading: wait for it rather than read again.
			wait := h.reading
			h.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return 0
			}
		}
		done := make(chan struct{})
		h.reading = done
		h.mu.Unlock()
		byQueue, err := readPopHolds(ctx, e)
		h.mu.Lock()
		h.reading = nil
		if err == nil {
			h.byQueue, h.readAt = byQueue, time.Now()
			h.readFailures.Succeeded()
		} else if ctx.Err() == nil {
			// Keep acting on what was read last; the next pop reads again.
			h.readFailures.Failed(err)
		}
		d := h.byQueue[queue]
		h.mu.Unlock()
		close(done)
		return d
	}
}

// forget makes the next waiting pop read the queues' holds again, so a
// configure on this broker applies to the very next pop.
func (h *popHolds) forget() {
	h.mu.Lock()
	h.readAt = time.Time{}
	h.mu.Unlock()
}

func readPopHolds(ctx context.Context, e *Engine) (map[string]time.Duration, error) {
	rows, err := e.pool.Query(ctx, `SELECT name, min_pop_wait_time FROM lanes.queues WHERE min_pop_wait_time > 0`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	byQueue := map[string]time.Duration{}
	for rows.Next() {
		var name string
		var ms int
		if err := rows.Scan(&name, &ms); err != nil {
			return nil, err
		}
		byQueue[name] = time.Duration(ms) * time.Millisecond
	}
	return byQueue, rows.Err()
}

// claimableUpTo estimates how many messages a claim for req would take, up to
// req.Batch, without claiming: unread messages of the partitions no live
// lease of the group holds. It may count what a claim then skips (delayed
// processing, window buffer, a partition the group has not started on yet),
// never the reverse, so a hold ends no later than it should.
func (e *Engine) claimableUpTo(ctx context.Context, req *PopRequest) (int, error) {
	var n int
	err := e.pool.QueryRow(ctx, `
		SELECT coalesce(sum(least(p.last_offset - greatest(coalesce(c.committed, -1), p.log_start - 1), $3)), 0)::int
		FROM lanes.queues q
		JOIN lanes.partitions p ON p.queue_id = q.id
		LEFT JOIN lanes.consumers c ON c.partition_id = p.id AND c.consumer_group = $2
		WHERE q.name = $1
		  AND p.last_offset > greatest(coalesce(c.committed, -1), p.log_start - 1)
		  AND (c.lease_id IS NULL OR c.lease_expires_at <= now())`,
		req.Queue, req.Group, req.Batch).Scan(&n)
	return min(n, req.Batch), err
}

// holdForFullerBatch holds a pop that would claim an under-full batch until
// the batch is full or until the hold ends (see popHolds). It reports whether
// the hold is over: false when the queue had nothing or enough (the pop
// claims at once) or was emptied by other consumers meanwhile (the pop finds
// nothing and parks, and may hold again when messages come).
func (e *Engine) holdForFullerBatch(ctx context.Context, req *PopRequest, until time.Time) bool {
	// Watching before each probe, so a push between probe and wait is not missed.
	wt := e.waiters.watch(req.Queue)
	defer func() { e.waiters.unwatch(wt) }()
	n, err := e.claimableUpTo(ctx, req)
	if err != nil || n == 0 || n >= req.Batch {
		return false
	}
	for {
		remaining := time.Until(until)
		if remaining <= 0 {
			return true
		}
		timer := time.NewTimer(min(remaining, popMaxRecheck))
		select {
		case <-wt.ch:
		case <-timer.C:
		case <-ctx.Done():
		case <-e.stop:
		}
		timer.Stop()
		if ctx.Err() != nil || e.stopParking.Load() || time.Until(until) <= 0 {
			return true
		}
		e.waiters.unwatch(wt)
		wt = e.waiters.watch(req.Queue)
		if n, err = e.claimableUpTo(ctx, req); err != nil || n >= req.Batch {
			return true
		}
		if n == 0 {
			return false
		}
	}
}
