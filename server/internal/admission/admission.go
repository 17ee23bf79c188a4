// Package admission bounds the database work the broker queues. Each class of
// work (push, pop, ack) has a budget of concurrent slots and a bounded line of
// waiters; a request that finds the line full, or waits past the limit,
// is rejected so the caller can answer 429 instead of letting latency grow.
// The same holds for the bytes of request bodies held at once (ByteBudget,
// each body's room a BodyRoom taken as it arrives) and for each client's rate
// (ClientLimiter's token buckets).
package admission

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Rejection reasons, also the `code` of the 429 body.
const (
	ReasonOverloaded  = "overloaded"
	ReasonRateLimited = "rate_limited"
)

// RejectedError says why a request was not admitted and when to come back.
type RejectedError struct {
	Class      string
	Reason     string
	RetryAfter time.Duration
}

func (e *RejectedError) Error() string {
	if e.Reason == ReasonRateLimited {
		return "rate limit exceeded; retry later"
	}
	if e.Class == BodyClass {
		return "broker overloaded (request bodies in flight fill LANES_MAX_INFLIGHT_BODY_BYTES); retry later"
	}
	return "broker overloaded (" + e.Class + " admission queue full); retry later"
}

// IsRejected reports whether err is an admission rejection and returns it.
func IsRejected(err error) (*RejectedError, bool) {
	var r *RejectedError
	ok := errors.As(err, &r)
	return r, ok
}

// Limits sizes one class.
type Limits struct {
	// InFlight is the number of requests of the class doing database work at once.
	InFlight int
	// Waiting is how many more may queue for a slot; past it the request is rejected at once.
	Waiting int
	// MaxWait is the longest a request queues for a slot before it is rejected.
	MaxWait time.Duration
}

// Class is one budget: a counting semaphore with a bounded waiting line.
type Class struct {
	name     string
	limits   Limits
	slots    chan struct{}
	waiting  atomic.Int64
	rejected atomic.Int64
	admitted atomic.Int64
}

// NewClass builds a budget; non-positive limits take small safe defaults.
func NewClass(name string, l Limits) *Class {
	if l.InFlight <= 0 {
		l.InFlight = 1
	}
	if l.Waiting < 0 {
		l.Waiting = 0
	}
	if l.MaxWait <= 0 {
		l.MaxWait = time.Second
	}
	return &Class{name: name, limits: l, slots: make(chan struct{}, l.InFlight)}
}

// Acquire takes a slot, queueing at most MaxWait. The returned release must be
// called exactly once when the database work is done.
func (c *Class) Acquire(ctx context.Context) (release func(), err error) {
	select {
	case c.slots <- struct{}{}:
		c.admitted.Add(1)
		return c.releaser(), nil
	default:
	}
	if c.waiting.Add(1) > int64(c.limits.Waiting) {
		c.waiting.Add(-1)
		return nil, c.reject()
	}
	defer c.waiting.Add(-1)
	timer := time.NewTimer(c.limits.MaxWait)
	defer timer.Stop()
	select {
	case c.slots <- struct{}{}:
		c.admitted.Add(1)
		return c.releaser(), nil
	case <-timer.C:
		return nil, c.reject()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TryAcquire takes a slot only if one is free now: it never queues, so it
// never lengthens the waiting line that bounds the requests in front of it,
// and a miss is not a rejection. A request queued in Acquire gets a freed slot
// before any TryAcquire does (a buffered channel hands it to the blocked
// sender). Parked pops re-check through it, so they are never the reason a
// request is turned away.
func (c *Class) TryAcquire() (release func(), ok bool) {
	select {
	case c.slots <- struct{}{}:
		c.admitted.Add(1)
		return c.releaser(), true
	default:
		return nil, false
	}
}

func (c *Class) releaser() func() {
	var once sync.Once
	return func() { once.Do(func() { <-c.slots }) }
}

func (c *Class) reject() error {
	c.rejected.Add(1)
	// A full line drains in about MaxWait; one second is the smallest Retry-After.
	retry := max(c.limits.MaxWait, time.Second)
	return &RejectedError{Class: c.name, Reason: ReasonOverloaded, RetryAfter: retry}
}

// Stats is a snapshot of one class for metrics.
type Stats struct {
	Class    string `json:"class"`
	Budget   int    `json:"budget"`
	InFlight int    `json:"inFlight"`
	Waiting  int    `json:"waiting"`
	MaxQueue int    `json:"maxWaiting"`
	Admitted int64  `json:"admitted"`
	Rejected int64  `json:"rejected"`
}

// Stats reports the class's current use.
func (c *Class) Stats() Stats {
	return Stats{
		Class:    c.name,
		Budget:   c.limits.InFlight,
		InFlight: len(c.slots),
		Waiting:  int(c.waiting.Load()),
		MaxQueue: c.limits.Waiting,
		Admitted: c.admitted.Load(),
		Rejected: c.rejected.Load(),
	}
}

// Name is the class label.
func (c *Class) Name() string { return c.name }
