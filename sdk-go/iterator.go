package lanes

import (
	"context"
	"errors"
	"iter"
	"time"
)

// Messages returns a pull iterator over the builder's messages (docs/consuming.md §1): the pop,
// pacing and error handling of the consume loop with one worker, and you write the loop.
//
//	for m, err := range client.Queue("orders").Group("billing").Messages(ctx) {
//		if err != nil {
//			return err // terminal (403, 413, other 4xx, 501): the iteration has ended
//		}
//		handle(m)
//	}
//
// A message counts as handled when the loop asks for the next one; with AutoAck (the default)
// it is then acked `completed`, the acks of one pop going out in one call before the next pop.
// Leaving the loop (break, return, panic) releases the message in hand and the first unhandled
// message of each partition of the pop with `retry` (redelivered without spending the retry
// budget). With AutoAck(false) leaving releases nothing: every message handed over is yours to
// ack, and the rest of the pop redelivers when its lease expires (acking them `retry` yourself
// hands them back sooner, but a `retry` below a message you have not acked releases that one
// too). Canceling ctx ends the iteration quietly, after the same release; a pop in flight is
// half-closed, not canceled, so an answer the broker already wrote arrives and is released with
// `retry`, with AutoAck(false) too, since none of it was handed over (docs/consuming.md §5).
// Limit and IdleTimeout end it too. The lease of each pop is renewed while its messages are in
// hand, as in the consume loop (RenewLease; RenewLease(false, 0) turns it off). OnError (without it, a warning on the
// client's logger) receives transient errors: failed pops after the retry policy, which the
// iterator waits out as the loop does, failed acks (except 403, 413, other 4xx but 408, 409 and
// 429, and 501, which end it) and failed renewals. An ack call that fails for want of a broker
// (no answer, 5xx, 429) is resent as the loop resends it, while the pop's lease lasts and ctx is
// not canceled, before the next pop (docs/consuming.md §4); when the range ends (break, return,
// Limit, IdleTimeout) no resend starts later than 5 s after it, so leaving never waits out the
// lease (each failed call went to OnError; its messages redeliver after the lease). An error is
// yielded only when it ends the iteration. Under ServerAutoAck(true) each pop asks for no more
// than what is left of Limit, and leaving early reports the popped messages never handed over (a
// *AutoAckDroppedError: the broker committed them). Concurrency and SoftStopTimeout do not apply.
// Each range over the returned sequence runs its own pop loop.
func (q QueueBuilder) Messages(ctx context.Context) iter.Seq2[*Message, error] {
	return func(yield func(*Message, error) bool) {
		if q.queue == "" && q.namespace == "" && q.task == "" {
			yield(nil, errors.New("lanes: Messages needs a queue, or a namespace/task"))
			return
		}
		if err := q.checkPopNames(); err != nil {
			yield(nil, err)
			return
		}
		it := &msgIter{q: q, ctx: ctx, ackCtx: context.WithoutCancel(ctx)}
		defer it.leave(yield)
		it.run(ctx, yield)
	}
}

// msgIter is the state of one range over Messages.
type msgIter struct {
	q      QueueBuilder
	ctx    context.Context // the range's: canceling it abandons the resending of a failed ack
	ackCtx context.Context

	pop       *PopResult
	slices    [][]*Message // the pop's messages by partition, in broker order
	handled   []int        // per slice: messages handled (next one requested)
	inHand    int          // slice of the message in the loop body, -1 = none
	yielded   int64
	pending   []ackEntry   // completed acks not sent yet
	expiry    *leaseExpiry // of the pop the pending acks belong to
	lastMsg   time.Time
	stopRenew func() // ends the lease renewal of the current pop
}

func (it *msgIter) run(ctx context.Context, yield func(*Message, error) bool) {
	q := it.q
	opts := q.consume
	it.inHand = -1
	it.lastMsg = time.Now()
	p := poller{q: q}
	if !q.committedOnDelivery() {
		// The end of ctx half-closes a pop in flight (popCut) instead of canceling it, so an
		// answer the broker already wrote arrives and leave releases it.
		p.popCtx, p.cutOnStop = context.WithoutCancel(ctx), true
	}
	if it.q.committedOnDelivery() && opts.limit > 0 {
		p.reserve = func(_ context.Context, want int) (int, func(int)) {
			return min(want, int(opts.limit-it.yielded)), nil
		}
	}
	if opts.idle > 0 {
		p.idleDeadline = func() time.Time { return it.lastMsg.Add(opts.idle) }
	}
	for {
		if opts.limit > 0 && it.yielded >= opts.limit {
			return // leave sends the pending acks
		}
		if err := it.flush(it.ctx); err != nil {
			yield(nil, err)
			return
		}
		pr, err := p.next(ctx, nil)
		if err != nil {
			yield(nil, err)
			return
		}
		if pr == nil {
			return
		}
		it.lastMsg = time.Now()
		it.take(pr)
		for k, slice := range it.slices {
			for i, m := range slice {
				if ctx.Err() != nil || (opts.limit > 0 && it.yielded >= opts.limit) {
					return
				}
				it.inHand = k
				it.yielded++
				if !yield(m, nil) {
					return
				}
				it.inHand = -1
				it.handled[k] = i + 1
				if opts.autoAck && it.leased() {
					it.pending = append(it.pending, ackEntry{msg: m, status: AckCompleted})
				}
			}
		}
		it.lastMsg = time.Now()
		it.endPop()
	}
}

func (it *msgIter) take(pr *PopResult) {
	it.pop = pr
	it.slices = it.slices[:0]
	idx := map[string]int{}
	for _, m := range pr.Messages {
		k, ok := idx[m.PartitionID]
		if !ok {
			k = len(it.slices)
			idx[m.PartitionID] = k
			it.slices = append(it.slices, nil)
		}
		it.slices[k] = append(it.slices[k], m)
	}
	it.handled = make([]int, len(it.slices))
	it.expiry = newLeaseExpiry(popLeaseSeconds(pr, it.q.leaseSeconds))
	if it.leased() && it.q.consume.renew {
		it.stopRenew = renewLease(it.ackCtx, it.q, pr, it.expiry, nil)
	}
}

// endPop forgets the current pop once its messages are handled or released; its renewal stops
// first, so it cannot race the acks about to be sent.
func (it *msgIter) endPop() {
	if it.stopRenew != nil {
		it.stopRenew()
		it.stopRenew = nil
	}
	it.pop = nil
}

// nothingHandedOver: no message of the current pop reached the loop body.
func (it *msgIter) nothingHandedOver() bool {
	if it.inHand >= 0 {
		return false
	}
	for _, n := range it.handled {
		if n > 0 {
			return false
		}
	}
	return true
}

// leased: the current pop holds a lease to ack against.
func (it *msgIter) leased() bool {
	return it.pop != nil && !it.q.committedOnDelivery() && popLeaseID(it.pop) != ""
}

// leave runs when the range ends for any reason: ack what was handled and release the rest of
// the current pop with `retry` (with AutoAck(false) release nothing; under server auto-ack,
// report how many were dropped instead).
// A failed ack that ends the iteration is yielded when the loop body can still take it (the
// range ended on its own), else reported. A failed ack call is resent only within
// leaveAckBudget of leaving (or until ctx is canceled): leaving does not wait out the lease.
func (it *msgIter) leave(yield func(*Message, error) bool) {
	bodyLeft := it.inHand >= 0 // break, return or panic in the loop body
	if it.pop != nil {
		// A pop of which nothing was handed over (it answered after ctx ended) is released even
		// with AutoAck(false): the caller holds none of its messages.
		release := it.q.consume.autoAck || it.nothingHandedOver()
		dropped := 0
		for k, slice := range it.slices {
			first := it.handled[k] // the first message not handled: the one in hand, or the next
			next := first          // the first message not handed over
			if k == it.inHand {
				next++
			}
			dropped += len(slice) - next
			// Otherwise, with AutoAck(false) the caller may still hold unacked messages of this
			// partition, and a retry below one would release it too: nothing is released, the
			// rest redelivers when the lease expires.
			if release && it.leased() && first < len(slice) {
				it.pending = append(it.pending, ackEntry{msg: slice[first], status: AckRetry})
			}
		}
		if it.q.committedOnDelivery() && dropped > 0 {
			it.q.reportLoopError("server auto-ack", &AutoAckDroppedError{Count: dropped})
		}
	}
	it.endPop()
	stop, cancel := context.WithTimeout(it.ctx, leaveAckBudget)
	defer cancel()
	if err := it.flush(stop); err != nil {
		if bodyLeft {
			it.q.reportLoopError("ack", err)
			return
		}
		yield(nil, err)
	}
}

// flush sends the pending acks, resending a call that fails for want of a broker while the
// pop's lease lasts and stop is not done, as the consume loop does (ackUntilDone); leave's stop
// has a deadline, leaveAckBudget from leaving. A failure that ends the iteration
// (ackEndsLoop) is returned; any other goes to OnError (or the warning log) and the iteration
// goes on.
func (it *msgIter) flush(stop context.Context) error {
	if len(it.pending) == 0 {
		return nil
	}
	entries := it.pending
	it.pending = nil
	return ackUntilDone(it.ackCtx, stop, it.q, entries, it.expiry)
}
