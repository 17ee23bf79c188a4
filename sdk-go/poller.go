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
	onError   func(error) // hears of every failed pop that is waited out
	errStreak int         // consecutive failed pops
	lastWait  *int        // waitMs of the last autopilot echo
}

// next pops until an answer holds messages and returns it. It returns (nil, nil) once ctx ends,
// or when stopOnEmpty (may be nil) is true after an empty answer, and (nil, err) for an error
// that ends the loop (loopErrorDelay).
func (p *poller) next(ctx context.Context, stopOnEmpty func() bool) (*PopResult, error) {
	for ctx.Err() == nil {
		pr, err := p.q.PopResult(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil //nolint:nilerr // a pop cut short by the end of ctx ends the loop quietly
			}
			d, terminal := loopErrorDelay(err, p.errStreak)
			if terminal {
				return nil, err
			}
			p.onError(err)
			p.errStreak++
			_ = sleepCtx(ctx, d)
			continue
		}
		p.errStreak = 0
		if pr.Autopilot != nil {
			p.lastWait = pr.Autopilot.WaitMs
		}
		if len(pr.Messages) > 0 {
			return pr, nil
		}
		if stopOnEmpty != nil && stopOnEmpty() {
			return nil, nil
		}
		if !p.q.parks() {
			_ = sleepCtx(ctx, emptyPollPause(p.lastWait))
		}
	}
	return nil, nil
}

// loopErrorDelay is how a consume loop or iterator reacts to a failed pop (docs/consuming.md §4):
// terminal for 403, 413, other 4xx and 501 (a proxy, or a broker build without the route: it
// will not fix itself); the server hint (or 1 s) after a 429 that outlived the retry policy; else
// min(1 s × 2^streak, 30 s).
func loopErrorDelay(err error, streak int) (time.Duration, bool) {
	var ae *APIError
	if errors.As(err, &ae) {
		if ae.Terminal() || ae.Status == http.StatusNotImplemented {
			return 0, true
		}
		if ae.Status == 429 {
			if ae.RetryAfter > 0 {
				return ae.RetryAfter, false
			}
			return time.Second, false
		}
	}
	return min(time.Second<<min(streak, 5), 30*time.Second), false
}

// emptyPollPause is the pause after an empty non-waiting pop: the broker's waitMs advice from the
// last echo, else 100 ms.
func emptyPollPause(waitMs *int) time.Duration {
	if waitMs != nil && *waitMs > 0 {
		return time.Duration(*waitMs) * time.Millisecond
	}
	return 100 * time.Millisecond
}
