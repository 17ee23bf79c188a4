package lanes

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// poller is the pop loop shared by Consume and Messages (docs/consuming.md §3 and §4): it waits
// out failed pops (reported, then backed off) and empty answers (paced unless the pop parks),
// and hands back only a pop with messages or the error that ends the loop.
type poller struct {
	q         QueueBuilder
	errStreak int  // consecutive failed pops, 429s aside (loopErrorDelay)
	fastEmpty int  // consecutive long polls answered empty well before their timeout
	lastWait  *int // waitMs of the last autopilot echo
	// reserve, when set, caps each pop's batch: it gets the batch the pop would take and returns
	// the batch to send (0 or less: do not pop, next returns (nil, nil)) and, when not nil, a
	// function told how many messages the pop brought (0 when it failed). Under server auto-ack
	// it keeps a consume loop's or iterator's pops within what is left of Limit.
	reserve func(ctx context.Context, want int) (batch int, settle func(got int))
	// popCtx, when set, carries the pops instead of next's ctx, which then only stops the loop
	// between pops: under server auto-ack a pop cut short may lose messages the broker committed.
	popCtx context.Context
	// cutOnStop, with popCtx, ends a pop in flight when next's ctx ends by half-closing its
	// connection (popCut), so an answer the broker already wrote is not lost: a consume loop's
	// soft stop.
	cutOnStop bool
	// idleDeadline, when set, is when the idle time of an iterator or consume loop runs out:
	// next returns (nil, nil) once it has passed, before a pop, after an empty answer or a failed
	// pop, cuts each pop's long poll and the error backoff at it, so pops that keep failing
	// count as idle and a long poll does not outlast it (docs/consuming.md §3).
	idleDeadline func() time.Time
}

// next pops until an answer holds messages and returns it. It returns (nil, nil) once ctx ends,
// when stopOnEmpty (may be nil) is true after an empty answer, once idleDeadline has passed, or
// when reserve leaves nothing, and (nil, err) for an error that ends the loop (endsLoop).
func (p *poller) next(ctx context.Context, stopOnEmpty func() bool) (*PopResult, error) {
	for ctx.Err() == nil {
		q := p.q
		settle := func(int) {}
		if p.reserve != nil {
			batch, settled := p.reserve(ctx, q.popBatch())
			if batch <= 0 {
				return nil, nil
			}
			q.batch = batch
			if settled != nil {
				settle = settled
			}
		}
		if left, ok := p.idleLeft(); ok {
			if left <= 0 {
				settle(0)
				return nil, nil // idle already: a pop now would only wait past the deadline
			}
			q.timeout = cutLongPoll(q, left)
		}
		popCtx := ctx
		if p.popCtx != nil {
			popCtx = p.popCtx
		}
		started := time.Now()
		pr, err := p.pop(ctx, popCtx, q)
		if err != nil {
			settle(0)
			if ctx.Err() != nil {
				return nil, nil //nolint:nilerr // a pop cut short by the end of ctx ends the loop quietly
			}
			if endsLoop(err) {
				return nil, err
			}
			p.q.reportLoopError("pop", err)
			delay := loopErrorDelay(err, p.errStreak)
			if !rateLimited(err) {
				p.errStreak++
			}
			if left, ok := p.idleLeft(); ok {
				if left <= 0 {
					return nil, nil
				}
				delay = min(delay, left)
			}
			_ = sleepCtx(ctx, delay)
			if p.idleOver() {
				return nil, nil
			}
			continue
		}
		settle(len(pr.Messages))
		p.errStreak = 0
		if pr.Autopilot != nil {
			p.lastWait = pr.Autopilot.WaitMs
		}
		if len(pr.Messages) > 0 {
			p.fastEmpty = 0
			return pr, nil
		}
		if (stopOnEmpty != nil && stopOnEmpty()) || p.idleOver() {
			return nil, nil
		}
		_ = sleepCtx(ctx, p.emptyPause(time.Since(started), q.timeout))
	}
	return nil, nil
}

// pop sends one pop on popCtx; with cutOnStop the end of stop cuts it (popCut).
func (p *poller) pop(stop, popCtx context.Context, q QueueBuilder) (*PopResult, error) {
	if !p.cutOnStop {
		return q.PopResult(popCtx)
	}
	cut := newPopCut(popCtx)
	defer cut.done()
	unwatch := context.AfterFunc(stop, cut.fire)
	defer unwatch()
	return q.PopResult(cut.ctx)
}

// idleLeft is the time left before the idle deadline, and false when there is none.
func (p *poller) idleLeft() (time.Duration, bool) {
	if p.idleDeadline == nil {
		return 0, false
	}
	return time.Until(p.idleDeadline()), true
}

// idleOver reports whether the idle deadline has passed.
func (p *poller) idleOver() bool {
	left, ok := p.idleLeft()
	return ok && left <= 0
}

// cutLongPoll is the long-poll timeout of a pop sent with idle time left: the builder's Timeout,
// cut to that time rounded up to whole milliseconds (the wire's unit, so never 0, which would not
// wait at all), so an idle timeout shorter than the long poll ends the loop at its deadline, not
// when the long poll runs out (docs/consuming.md §3). A pop that does not park is left as it is.
func cutLongPoll(q QueueBuilder, idleLeft time.Duration) time.Duration {
	if !q.parks() {
		return q.timeout
	}
	return min(q.timeout, (idleLeft + time.Millisecond - 1).Truncate(time.Millisecond))
}

// emptyPause is the pause after an empty answer that took elapsed, to a pop that asked for
// timeout: none after a long poll that waited (the broker paced it); after a non-waiting pop,
// the broker's waitMs advice from the last echo, else 100 ms; after a long poll answered in
// under a tenth of its timeout (a proxy or a broker that does not park), 100 ms doubling on each
// such answer in a row, up to 2 s, so an idle consumer does not spin.
func (p *poller) emptyPause(elapsed, timeout time.Duration) time.Duration {
	if !p.q.parks() {
		if p.lastWait != nil && *p.lastWait > 0 {
			return time.Duration(*p.lastWait) * time.Millisecond
		}
		return 100 * time.Millisecond
	}
	if elapsed >= timeout/10 {
		p.fastEmpty = 0
		return 0
	}
	pause := min(100*time.Millisecond<<min(p.fastEmpty, 5), 2*time.Second)
	p.fastEmpty++
	return pause
}

// endsLoop reports whether a failed pop ends the consume loop or iterator (docs/consuming.md
// §4): 403, 413, other 4xx except 429, and 501 (a proxy, or a broker build without the route:
// it will not fix itself).
func endsLoop(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && (ae.Terminal() || ae.Status == http.StatusNotImplemented)
}

// ackEndsLoop is endsLoop for a failed ack, except 408 and 409, which concern that ack alone
// (it timed out, or its lease is gone): they go to OnError and the loop goes on.
func ackEndsLoop(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) && (ae.Status == http.StatusRequestTimeout || ae.Status == http.StatusConflict) {
		return false
	}
	return endsLoop(err)
}

// leaveAckBudget is how long an iterator that is left (break, return, Limit, IdleTimeout) goes
// on resending a failed ack: leaving should not block for the rest of the lease. The first call
// always runs to its end under the client's retry policy; no resend starts after the budget.
const leaveAckBudget = 5 * time.Second

// ackResendMargin is how long before the lease's expiry a consume loop or iterator stops
// resending a failed ack: its last attempt still has time to land.
const ackResendMargin = time.Second

// ackResendable reports whether a failed ack call failed for want of a broker (no answer, 5xx,
// 429), so the loop or iterator resends it; not a 4xx (408 and 409 concern that ack alone), an
// answer the SDK cannot use (UnexpectedAnswerError: a proxy's page), nor per-item failures
// (AckError).
func ackResendable(err error) bool {
	if brokerUnavailable(err) {
		return true
	}
	var ae *APIError
	return errors.As(err, &ae) && ae.Status >= 500
}

// brokerUnavailable reports whether err is, or wraps, the SDK's own error for want of a broker:
// no answer after the retries (a *ConnectionError: refused, reset, timeout, DNS), a 502, 503 or
// 504, or a 429 the retries gave up on. A handler failing with it has its message released with
// `retry`, which spends no retry (docs/consuming.md §3 step 5): an outage must not dead-letter a
// sound message. Not a 500 nor another 4xx: a message can cause those.
func brokerUnavailable(err error) bool {
	var ce *ConnectionError
	if errors.As(err, &ce) {
		return true
	}
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Status {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusTooManyRequests:
		return true
	}
	return false
}

// ackUntilDone sends a pop's acks for a consume loop or iterator. A call that fails as a broker
// or network failure does (5xx, 429, no answer) is reported and resent after the loop's error
// backoff until it lands, the pop's lease is about to expire, or stop is done (a hard stop, an
// iterator's canceled context) (docs/consuming.md §4). A lost ack would hold the partition
// until the lease expires and redeliver the whole pop; a resend is safe, since every item names
// the pop's lease: a `completed` the broker already applied answers `noop`, and a nack it
// applied released the lease, so its resend is refused, changing nothing. A deadline on stop
// (an iterator's leave) ends the resending too: no attempt is made after it. A failure that
// ends the loop (ackEndsLoop) is returned unreported, for the caller to end with.
func ackUntilDone(ackCtx, stop context.Context, q QueueBuilder, entries []ackEntry, expiry *leaseExpiry) error {
	entries = loopAcks(entries)
	streak := 0 // failed calls so far, 429s aside (as the pop's backoff counts them)
	for {
		ctx, cancel := context.WithTimeout(ackCtx, 30*time.Second)
		_, err := q.c.ackEntries(ctx, entries, AckOpts{})
		cancel()
		if err == nil {
			return nil
		}
		if ackEndsLoop(err) {
			return err
		}
		q.reportLoopError("ack", err)
		if !ackResendable(err) {
			return nil
		}
		wait := loopErrorDelay(err, streak)
		if !rateLimited(err) {
			streak++
		}
		if time.Until(expiry.get()) < wait+ackResendMargin {
			return nil // the lease ends first: the pop redelivers
		}
		if deadline, ok := stop.Deadline(); ok && time.Until(deadline) < wait {
			return nil // the leave's budget ends first: the pop redelivers after its lease
		}
		select {
		case <-stop.Done():
			return nil // a stop abandons the ack
		case <-time.After(wait):
		}
	}
}

// loopErrorDelay is how long a consume loop or iterator waits after a failed pop it goes on
// from: the server hint (or 1 s) after a 429 that outlived the retry policy; else
// min(1 s × 2^streak, 30 s). A 429 is not counted in the streak (docs/consuming.md §4): the
// broker answered and said how long to wait, so it says nothing of a broker that fails.
func loopErrorDelay(err error, streak int) time.Duration {
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests {
		if ae.RetryAfter > 0 {
			return ae.RetryAfter
		}
		return time.Second
	}
	return errorBackoff(streak)
}

// errorBackoff is the loop's wait after streak failures in a row: min(1 s × 2^streak, 30 s).
func errorBackoff(streak int) time.Duration {
	return min(time.Second<<min(streak, 5), 30*time.Second)
}

// rateLimited reports whether err is a 429 (a RateLimitError), which the loop waits out by its
// hint and leaves out of its error streak.
func rateLimited(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests
}

// reportLoopError hands an error of a consume loop or iterator to OnError, else logs it at
// warning level on the client's logger (slog.Default() without WithLogger), so no loop error is
// silent. op names what failed: pop, ack, renew, handler, server auto-ack.
func (q QueueBuilder) reportLoopError(op string, err error) {
	if err == nil {
		return
	}
	if q.consume.onError != nil {
		q.consume.onError(err)
		return
	}
	q.c.warnLog.Warn("lanes: consume error", "op", op, "queue", q.queue, "err", err)
}
