package admission

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// maxClientBuckets bounds the buckets kept at once (a few MB): without it,
// half a million distinct addresses between two sweeps grew the heap by 64 MB.
const maxClientBuckets = 1 << 16

// evictionProbes is how many buckets a new client looks at for a refilled
// one to replace when the limiter is full.
const evictionProbes = 8

// ClientLimiter is a token bucket per client key (token subject or remote
// address). Rate <= 0 disables it.
type ClientLimiter struct {
	rate       float64 // tokens per second
	burst      float64
	now        func() time.Time
	mu         sync.Mutex
	buckets    map[string]*bucket
	maxBuckets int
	lastGC     time.Time
	rejected   atomic.Int64
}

type bucket struct {
	tokens float64
	last   time.Time
}

// NewClientLimiter allows rate requests per second per client with bursts up to burst.
func NewClientLimiter(rate float64, burst int) *ClientLimiter {
	if burst <= 0 {
		burst = int(math.Max(1, math.Ceil(rate)))
	}
	return &ClientLimiter{rate: rate, burst: float64(burst), now: time.Now, buckets: map[string]*bucket{}, maxBuckets: maxClientBuckets}
}

// Enabled reports whether the limiter does anything.
func (l *ClientLimiter) Enabled() bool { return l != nil && l.rate > 0 }

// Allow takes one token for client, or returns a rate_limited rejection with
// the time until the next token.
func (l *ClientLimiter) Allow(client string) error {
	if !l.Enabled() {
		return nil
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgetIdle(now)
	b := l.buckets[client]
	if b == nil {
		if len(l.buckets) >= l.maxBuckets {
			l.evictOne(now)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[client] = b
	}
	b.tokens = math.Min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return nil
	}
	l.rejected.Add(1)
	wait := time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	return &RejectedError{Class: "client", Reason: ReasonRateLimited, RetryAfter: wait}
}

// forgetIdle drops buckets that have refilled, so the map does not grow with
// every client ever seen. Called with mu held.
func (l *ClientLimiter) forgetIdle(now time.Time) {
	if now.Sub(l.lastGC) < time.Minute {
		return
	}
	l.lastGC = now
	full := l.refillTime()
	for k, b := range l.buckets {
		if now.Sub(b.last) > full {
			delete(l.buckets, k)
		}
	}
}

// evictOne makes room for a new client in a full limiter: of a few buckets
// (map order is random) it drops the one with the most tokens, the cheapest
// to forget, since a dropped client starts again with a full bucket; a
// client being limited has few and stays limited. Called with mu held.
func (l *ClientLimiter) evictOne(now time.Time) {
	victim, most, probes := "", -1.0, 0
	for k, b := range l.buckets {
		if tokens := b.tokens + now.Sub(b.last).Seconds()*l.rate; tokens > most {
			victim, most = k, tokens
		}
		if probes++; probes == evictionProbes || most >= l.burst {
			break
		}
	}
	delete(l.buckets, victim)
}

// refillTime is how long an untouched bucket takes to fill up.
func (l *ClientLimiter) refillTime() time.Duration {
	return time.Duration(l.burst / l.rate * float64(time.Second))
}

// Rejected counts requests refused by the limiter.
func (l *ClientLimiter) Rejected() int64 {
	if l == nil {
		return 0
	}
	return l.rejected.Load()
}

// Controller is the broker's admission policy: one budget per class of
// message-plane work plus the optional per-client bucket.
type Controller struct {
	Push    *Class
	Pop     *Class
	Ack     *Class
	Clients *ClientLimiter
}

// Classes lists the budgets in a stable order.
func (c *Controller) Classes() []*Class {
	if c == nil {
		return nil
	}
	return []*Class{c.Push, c.Pop, c.Ack}
}

// RetryAfterSeconds rounds a wait up to whole seconds, at least 1, for the Retry-After header.
func RetryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
