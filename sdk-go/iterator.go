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
// budget; with AutoAck(false) the message in hand is yours to ack and is not released).
// Canceling ctx ends the iteration quietly, after the same release. Limit and IdleTimeout end it
// too; OnError receives transient errors (failed pops after the retry policy, failed acks), which
// the iterator waits out as the loop does. An error is yielded only when it ends the iteration.
// Concurrency, RenewLease and SoftStopTimeout do not apply.
// Each range over the returned sequence runs its own pop loop.
func (q QueueBuilder) Messages(ctx context.Context) iter.Seq2[*Message, error] {
	return func(yield func(*Message, error) bool) {
		if q.queue == "" && q.namespace == "" && q.task == "" {
			yield(nil, errors.New("lanes: Messages needs a queue, or a namespace/task"))
			return
		}
		it := &msgIter{q: q, ackCtx: context.WithoutCancel(ctx)}
		defer it.leave()
		it.run(ctx, yield)
	}
}

// msgIter is the state of one range over Messages.
type msgIter struct {
	q      QueueBuilder
	ackCtx context.Context

	pop     *PopResult
	slices  [][]*Message // the pop's messages by partition, in broker order
	handled []int        // per slice: messages handled (next one requested)
	inHand  int          // slice of the message in the loop body, -1 = none
	yielded int64
	pending []ackEntry // completed acks not sent yet
	lastMsg time.Time
}

func (it *msgIter) run(ctx context.Context, yield func(*Message, error) bool) {
	q := it.q
	opts := q.consume
	it.inHand = -1
	it.lastMsg = time.Now()
	p := poller{q: q, onError: it.report}
	idle := func() bool { return opts.idle > 0 && time.Since(it.lastMsg) >= opts.idle }
	for {
		it.flush()
		if opts.limit > 0 && it.yielded >= opts.limit {
			return
		}
		pr, err := p.next(ctx, idle)
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
		it.pop = nil
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
}

// leased: the current pop holds a lease to ack against (not the at-most-once server autoAck).
func (it *msgIter) leased() bool {
	pr := it.pop
	if pr == nil || (it.q.serverAutoAck != nil && *it.q.serverAutoAck) {
		return false
	}
	return pr.LeaseID != "" || (len(pr.Messages) > 0 && pr.Messages[0].LeaseID != "")
}

// leave runs when the range ends for any reason: ack what was handled and release the rest of
// the current pop with `retry`.
func (it *msgIter) leave() {
	if it.pop != nil && it.leased() {
		for k, slice := range it.slices {
			first := it.handled[k]
			if k == it.inHand && !it.q.consume.autoAck {
				first++ // the message in hand is the caller's to ack
			}
			if first < len(slice) {
				it.pending = append(it.pending, ackEntry{msg: slice[first], status: AckRetry})
			}
		}
	}
	it.pop = nil
	it.flush()
}

func (it *msgIter) flush() {
	if len(it.pending) == 0 {
		return
	}
	entries := it.pending
	it.pending = nil
	ctx, cancel := context.WithTimeout(it.ackCtx, 30*time.Second)
	defer cancel()
	if _, err := it.q.c.ackEntries(ctx, entries, AckOpts{}); err != nil {
		it.report(err)
	}
}

func (it *msgIter) report(err error) {
	if it.q.consume.onError != nil {
		it.q.consume.onError(err)
	}
}
