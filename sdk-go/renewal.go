package lanes

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// defaultRenewEvery is the longest renewal interval, and the one used when a renewal answer
// names no expiry: well inside the queues' default leases (300 s, 60 s for push-created queues).
const defaultRenewEvery = 10 * time.Second

// renewUnknownLeaseAfter is when a pop whose lease length the consumer does not know is first
// renewed: early enough for short leases (a queue's leaseTime may be 1 s). The broker never
// shortens a lease, so the answer's expiry is the pop's own lease when that is longer.
const renewUnknownLeaseAfter = time.Second

// minRenewEvery bounds how often a learned lease is renewed.
const minRenewEvery = 500 * time.Millisecond

// renewEvery is how often a running pop's lease is extended: the RenewLease interval if one was
// given, else a third of the builder's LeaseSeconds (at most defaultRenewEvery), else 0: the
// lease is unknown, and renewEveryForExpiry learns it from the first renewal.
func renewEvery(every time.Duration, leaseSeconds int) time.Duration {
	if every > 0 {
		return every
	}
	if leaseSeconds > 0 {
		return min(time.Duration(leaseSeconds)*time.Second/3, defaultRenewEvery)
	}
	return 0
}

// renewEveryForExpiry is the renewal interval for a lease that expires at expiresAt and was
// taken at poppedAt (when the pop's answer arrived, so the length is never overestimated): a
// third of it, within [minRenewEvery, defaultRenewEvery]; defaultRenewEvery without an expiry.
func renewEveryForExpiry(poppedAt time.Time, expiresAt *time.Time) time.Duration {
	if expiresAt == nil {
		return defaultRenewEvery
	}
	return min(max(expiresAt.Sub(poppedAt)/3, minRenewEvery), defaultRenewEvery)
}

// fallbackLease is the lease a consume loop or iterator assumes for a pop of an older broker,
// whose answer names no lease, when LeaseSeconds does not either: the shortest default lease
// (push-created queues).
const fallbackLease = 60 * time.Second

// popLeaseSeconds is the lease length a consume loop or iterator counts with for pr: the one
// the broker's answer names, else the builder's LeaseSeconds (0: unknown). The length, not the
// answer's LeaseExpiresAt: that is on the database's clock, which may run ahead of this one.
func popLeaseSeconds(pr *PopResult, leaseSeconds int) int {
	if pr.LeaseSeconds > 0 {
		return pr.LeaseSeconds
	}
	return leaseSeconds
}

// leaseExpiry is the latest expiry a consume loop or iterator knows for a pop's lease: the
// pop's lease length (popLeaseSeconds, else fallbackLease) from when the answer arrived, moved
// by each applied renewal to when it was sent plus the seconds it asked for (never to the
// answer's NewExpiresAt, on the database's clock). A failed ack is resent until shortly before
// it (ackUntilDone).
type leaseExpiry struct {
	mu sync.Mutex
	at time.Time
}

func newLeaseExpiry(leaseSeconds int) *leaseExpiry {
	lease := fallbackLease
	if leaseSeconds > 0 {
		lease = time.Duration(leaseSeconds) * time.Second
	}
	return &leaseExpiry{at: time.Now().Add(lease)}
}

func (e *leaseExpiry) extend(to time.Time) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if to.After(e.at) {
		e.at = to
	}
}

func (e *leaseExpiry) get() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.at
}

// renewSeconds is how far one renewal extends the lease: max(2 × interval, 1 s), in seconds.
func renewSeconds(every time.Duration) int {
	return max(int((2*every+time.Second-1)/time.Second), 1)
}

// popLeaseID is the lease a pop's messages are held under ("" under server auto-ack, which
// commits on delivery and holds none).
func popLeaseID(pr *PopResult) string {
	if pr.LeaseID != "" {
		return pr.LeaseID
	}
	if len(pr.Messages) > 0 {
		return pr.Messages[0].LeaseID
	}
	return ""
}

// renewLease extends the lease of a pop while its messages are being handled (the consume loop
// and the iterator alike): first after the RenewLease interval, else a third of the lease
// (popLeaseSeconds), else renewUnknownLeaseAfter, then every third of the lease the broker's answer shows. Failures
// go to reportLoopError; a lease the broker says is gone ends the renewal. The returned function
// stops it and waits for a renewal in flight. onGoroutine, when set, runs first on the renewal's
// goroutine and the function it returns when that goroutine ends.
func renewLease(ackCtx context.Context, q QueueBuilder, pr *PopResult, expiry *leaseExpiry, onGoroutine func() func()) (stop func()) {
	poppedAt := time.Now()
	lease := popLeaseID(pr)
	every := renewEvery(q.consume.renewEvery, popLeaseSeconds(pr, q.leaseSeconds))
	next := every
	if every == 0 {
		next = renewUnknownLeaseAfter
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if onGoroutine != nil {
			defer onGoroutine()()
		}
		t := time.NewTimer(next)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(ackCtx, 10*time.Second)
			seconds, sentAt := renewSeconds(next), time.Now()
			res, err := q.c.Renew(ctx, seconds, lease)
			cancel()
			if err == nil && len(res) == 1 && res[0].Success {
				// The broker extends to at least its now + seconds, and its now is after sentAt.
				expiry.extend(sentAt.Add(time.Duration(seconds) * time.Second))
			}
			switch {
			case err != nil:
				q.reportLoopError("renew", err)
			case len(res) == 1 && !res[0].Success:
				q.reportLoopError("renew", fmt.Errorf("lanes: lease %s could not be renewed (expired or released)", lease))
				return
			case every == 0 && len(res) == 1:
				every = renewEveryForExpiry(poppedAt, res[0].NewExpiresAt)
				next = every
			}
			t.Reset(next)
		}
	}()
	return func() { close(done); wg.Wait() }
}
