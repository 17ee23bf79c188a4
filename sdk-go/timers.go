//nolint:bodyclose // every response is handed to Client.decode (via Client.result), which closes the body.
package lanes

import (
	"context"
	"time"

	"github.com/lanesmq/lanes/sdk-go/internal/gen"
)

// Timers addresses the timers of one queue. Like the queue builders it is an immutable value:
// Partition returns a copy, so a base Timers can be shared across goroutines.
type Timers struct {
	c             *Client
	queue         string
	partition     string
	transactionID string
}

// Partition returns a copy of t whose Schedule and Reschedule push into partition p when the
// timer fires (empty = the broker's default partition, "Default").
func (t Timers) Partition(p string) Timers {
	t.partition = p
	return t
}

// TransactionID returns a copy of t whose Schedule and Reschedule give the fired message this
// transaction id (empty = one minted by the SDK for each call, reused by its retries). A fixed id
// makes the firing idempotent across calls too: the push deduplicates like any other.
func (t Timers) TransactionID(id string) Timers {
	t.transactionID = id
	return t
}

// Timers returns helpers for the timers of queue.
func (c *Client) Timers(queue string) Timers { return Timers{c: c, queue: queue} }

// TimerSchedule builds a schedule op: after delay, payload (JSON bytes; nil = `{}`) is pushed to
// queue under the key. The fired message's transaction id (Txn) is minted here, once, so a resend
// after a lost answer carries the same id and the timer fires once; set Txn to choose it.
func TimerSchedule(queue, key string, delay time.Duration, payload []byte) TimerOperation {
	op := TimerOperation{Op: gen.TimerOperationOp("schedule"), Queue: queue, TimerKey: key,
		DelayMs: ptr(int(delay / time.Millisecond)), Txn: ptr(newUUIDv7())}
	if payload != nil {
		op.Payload = &payload
	}
	return op
}

// TimerReschedule builds a reschedule op: like TimerSchedule, and it also resets the timer's
// attempts. Set the op's Partition field to fire into a partition other than "Default".
func TimerReschedule(queue, key string, delay time.Duration, payload []byte) TimerOperation {
	op := TimerSchedule(queue, key, delay, payload)
	op.Op = gen.TimerOperationOp("reschedule")
	return op
}

// TimerCancel builds a cancel op.
func TimerCancel(queue, key string) TimerOperation {
	return TimerOperation{Op: gen.TimerOperationOp("cancel"), Queue: queue, TimerKey: key}
}

// Schedule schedules (or replaces) one timer: after delay, payload (JSON bytes) is pushed to
// the queue, into the partition set with Partition, under the id set with TransactionID.
func (t Timers) Schedule(ctx context.Context, key string, delay time.Duration, payload []byte) (*TimerResult, error) {
	return t.one(ctx, t.targeted(TimerSchedule(t.queue, key, delay, payload)))
}

// Reschedule replaces one timer (or creates it) and resets its attempts; Status is
// "rescheduled" when the timer existed.
func (t Timers) Reschedule(ctx context.Context, key string, delay time.Duration, payload []byte) (*TimerResult, error) {
	return t.one(ctx, t.targeted(TimerReschedule(t.queue, key, delay, payload)))
}

// targeted sets the fired message's partition and the transaction id chosen on t (else the op
// keeps the one TimerSchedule minted).
func (t Timers) targeted(op TimerOperation) TimerOperation {
	op.Partition = ptrUnlessZero(t.partition)
	if t.transactionID != "" {
		op.Txn = &t.transactionID
	}
	return op
}

// Batch runs timer operations (TimerSchedule, TimerReschedule, TimerCancel; any queue) in one
// request and returns their results in order, as TS's timers(q).batch and Python's
// timers(q).batch do.
func (t Timers) Batch(ctx context.Context, ops ...TimerOperation) ([]TimerResult, error) {
	out, err := call[gen.TimerBatchResult](t.c, ctx, func() (*httpResp, error) {
		return t.c.gen.ScheduleTimers(ctx, gen.TimerBatchRequest{Operations: ops})
	})
	if err != nil {
		return nil, err
	}
	if len(out.Results) != len(ops) {
		return nil, errResultCount("timers", len(out.Results), len(ops), "operations")
	}
	return out.Results, nil
}

func (t Timers) one(ctx context.Context, op TimerOperation) (*TimerResult, error) {
	res, err := t.Batch(ctx, op)
	if err != nil {
		return nil, err
	}
	return &res[0], nil
}

// Cancel cancels one timer.
func (t Timers) Cancel(ctx context.Context, key string) (*TimerResult, error) {
	return call[TimerResult](t.c, ctx, func() (*httpResp, error) {
		return t.c.gen.CancelTimer(ctx, t.queue, key, &gen.CancelTimerParams{})
	})
}

// Get reads one timer (Found false when absent).
func (t Timers) Get(ctx context.Context, key string) (*Timer, error) {
	return call[Timer](t.c, ctx, func() (*httpResp, error) { return t.c.gen.GetTimer(ctx, t.queue, key) })
}

// List lists the queue's timers in key order: limit per page (0 = the broker's default), after
// a key (a page's NextAfter; empty = from the start).
func (t Timers) List(ctx context.Context, limit int, after string) (*TimerList, error) {
	return t.ListPrefix(ctx, "", limit, after)
}

// ListPrefix lists the queue's timers whose key starts with prefix (empty = all), paged like List.
func (t Timers) ListPrefix(ctx context.Context, prefix string, limit int, after string) (*TimerList, error) {
	p := &gen.ListTimersParams{Prefix: ptrUnlessZero(prefix), Limit: ptrIfPositive(limit), After: ptrUnlessZero(after)}
	return call[TimerList](t.c, ctx, func() (*httpResp, error) { return t.c.gen.ListTimers(ctx, t.queue, p) })
}
