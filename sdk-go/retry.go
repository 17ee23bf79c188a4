package lanes

import (
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// retryPolicy holds the knobs of docs/retries.md. It is copied into every decision so the
// decision stays a pure function.
type retryPolicy struct {
	RetryAttempts int           // retries after the first attempt for network/408/5xx
	Max429        int           // retries of 429 outside long-poll pops
	BaseDelay     time.Duration // computed backoff base
	MaxDelay      time.Duration // computed backoff cap
	MaxRetryAfter time.Duration // largest server hint the SDK sleeps
}

func defaultRetryPolicy() retryPolicy {
	return retryPolicy{
		RetryAttempts: 2,
		Max429:        10,
		BaseDelay:     500 * time.Millisecond,
		MaxDelay:      8 * time.Second,
		MaxRetryAfter: 60 * time.Second,
	}
}

// retryKind says which budget a retry spends.
type retryKind int

const (
	retryNone retryKind = iota
	retryTransient
	retryRateLimited
)

// retryInput is everything the retry decision looks at: the outcome of one attempt, the
// counters so far, a clock reading and a random number in [0, 1).
type retryInput struct {
	Status     int         // 0 when no response arrived
	Header     http.Header // response headers (nil without a response)
	NetworkErr bool        // the attempt failed without a response
	NotSent    bool        // with NetworkErr: it failed before the request was sent (dial)
	// NotIdempotent marks a write that a repeat could apply twice (KV incr, putIfAbsent, a
	// conditional write, a transaction holding one and no push): see writeIsIdempotent.
	NotIdempotent bool
	LongPoll      bool // the request is a pop with wait=true
	Transient     int  // transient retries already made in this call
	RateLimited   int  // 429 retries already made in this call
	Now           time.Time
	Rand          float64
	Policy        retryPolicy
}

// retryDecision is the verdict of decideRetry.
type retryDecision struct {
	Retry    bool
	Kind     retryKind
	Delay    time.Duration
	Failover bool   // move to the next broker URL
	Reason   string // for the debug log
	// RetryAfter is the server hint when one was present and valid (even when not retried).
	RetryAfter time.Duration
	// OutcomeUnknown is set when a write that is not idempotent failed after it was sent: it is
	// not retried, and the caller cannot know whether the broker applied it.
	OutcomeUnknown bool
}

// decideRetry is the one retry policy of docs/retries.md §2–§3 as a pure function of its input.
func decideRetry(in retryInput) retryDecision {
	hint, hasHint := parseRetryHint(in.Header, in.Now)
	d := retryDecision{}
	if hasHint {
		d.RetryAfter = hint
	}
	if in.NetworkErr {
		if in.NotIdempotent && !in.NotSent {
			return outcomeUnknown(d, "network error after the request was sent")
		}
		return transientDecision(in, d, hint, hasHint, "network error")
	}
	switch in.Status {
	case http.StatusForbidden, http.StatusRequestEntityTooLarge:
		d.Reason = "terminal status " + strconv.Itoa(in.Status)
		return d
	}
	switch strings.ToLower(strings.TrimSpace(in.Header.Get("x-should-retry"))) {
	case "false":
		d.Reason = "x-should-retry: false"
		return d
	case "true":
		// Row 4 comes before row 5: a 429 carrying it is retried as a 5xx too (as in TS and Python).
		return transientDecision(in, d, hint, hasHint, "x-should-retry: true")
	}
	switch in.Status {
	case http.StatusTooManyRequests:
		if !in.LongPoll && in.RateLimited >= in.Policy.Max429 {
			d.Reason = "429 budget spent"
			return d
		}
		if hasHint {
			if hint > in.Policy.MaxRetryAfter {
				d.Reason = "429 Retry-After above cap"
				return d
			}
			d.Delay = hint
		} else {
			d.Delay = backoff(in.Policy, in.RateLimited, in.Rand)
		}
		d.Retry, d.Kind, d.Reason = true, retryRateLimited, "429"
		return d
	case http.StatusRequestTimeout, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		if in.NotIdempotent {
			return outcomeUnknown(d, "status "+strconv.Itoa(in.Status))
		}
		return transientDecision(in, d, hint, hasHint, "status "+strconv.Itoa(in.Status))
	}
	d.Reason = "status " + strconv.Itoa(in.Status) + " not retried"
	return d
}

func transientDecision(in retryInput, d retryDecision, hint time.Duration, hasHint bool, reason string) retryDecision {
	if in.Transient >= in.Policy.RetryAttempts {
		d.Reason = reason + ", retry budget spent"
		return d
	}
	if hasHint && hint <= in.Policy.MaxRetryAfter {
		d.Delay = hint
	} else {
		d.Delay = backoff(in.Policy, in.Transient, in.Rand)
	}
	d.Retry, d.Kind, d.Failover, d.Reason = true, retryTransient, true, reason
	return d
}

// outcomeUnknown stops a write that is not idempotent after a failure that may have followed its
// commit; only 429, x-should-retry: true and a failed dial prove the broker did not apply it.
func outcomeUnknown(d retryDecision, reason string) retryDecision {
	d.OutcomeUnknown, d.Reason = true, reason+", outcome unknown, not idempotent"
	return d
}

// backoff is min(base × 2^n, max) with subtractive jitter of up to 25 %.
func backoff(p retryPolicy, n int, rnd float64) time.Duration {
	if n > 30 {
		n = 30
	}
	d := float64(p.BaseDelay) * math.Pow(2, float64(n))
	if d > float64(p.MaxDelay) {
		d = float64(p.MaxDelay)
	}
	if rnd < 0 || rnd >= 1 || math.IsNaN(rnd) {
		rnd = 0
	}
	return time.Duration(d * (1 - 0.25*rnd))
}

// parseRetryHint reads retry-after-ms, then Retry-After as seconds, then as an HTTP-date, with
// the grammar every SDK shares (docs/retries.md §3). Zero, negative, out of range or invalid
// values, and dates now or in the past, count as absent: a hint of 0 would retry at once,
// hammering a broker that answered 429/503.
func parseRetryHint(h http.Header, now time.Time) (time.Duration, bool) {
	if h == nil {
		return 0, false
	}
	if v := strings.TrimSpace(h.Get("retry-after-ms")); decimalNumber.MatchString(v) {
		if f, err := strconv.ParseFloat(v, 64); err == nil && validSeconds(f/1000) {
			return time.Duration(f * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if decimalNumber.MatchString(v) {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !validSeconds(f) {
			return 0, false
		}
		return time.Duration(f * float64(time.Second)), true
	}
	if t, ok := parseHTTPDate(v); ok {
		if d := t.Sub(now); validSeconds(d.Seconds()) {
			return d, true
		}
	}
	return 0, false
}

// decimalNumber is the seconds (or milliseconds) form of a hint: digits with an optional
// fraction. strconv.ParseFloat alone would also take "1e3", "0x1p4", "1_0", "Inf" and "NaN".
var decimalNumber = regexp.MustCompile(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)$`)

// The three HTTP-date forms of RFC 9110 §5.6.7, case-sensitive, always GMT. http.ParseTime
// would also read a zone other than GMT in the RFC 850 form, in the machine's local time.
var (
	imfFixdate  = regexp.MustCompile(`^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), ([0-9]{2}) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) ([0-9]{4}) ([0-9]{2}):([0-9]{2}):([0-9]{2}) GMT$`)
	rfc850Date  = regexp.MustCompile(`^(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), ([0-9]{2})-(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)-([0-9]{2}) ([0-9]{2}):([0-9]{2}):([0-9]{2}) GMT$`)
	asctimeDate = regexp.MustCompile(`^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) ([0-9]{2}| [0-9]) ([0-9]{2}):([0-9]{2}):([0-9]{2}) ([0-9]{4})$`)
)

// parseHTTPDate reads an HTTP-date. The weekday is not checked against the date (it is
// redundant); a two-digit RFC 850 year below 69 is 20yy, else 19yy.
func parseHTTPDate(v string) (time.Time, bool) {
	var day, month, year, hh, mm, ss string
	if m := imfFixdate.FindStringSubmatch(v); m != nil {
		day, month, year, hh, mm, ss = m[1], m[2], m[3], m[4], m[5], m[6]
	} else if m := rfc850Date.FindStringSubmatch(v); m != nil {
		day, month, year, hh, mm, ss = m[1], m[2], m[3], m[4], m[5], m[6]
		if year < "69" {
			year = "20" + year
		} else {
			year = "19" + year
		}
	} else if m := asctimeDate.FindStringSubmatch(v); m != nil {
		month, day, hh, mm, ss, year = m[1], strings.TrimSpace(m[2]), m[3], m[4], m[5], m[6]
	} else {
		return time.Time{}, false
	}
	t, err := time.Parse("2 Jan 2006 15:04:05", day+" "+month+" "+year+" "+hh+":"+mm+":"+ss)
	return t, err == nil // Parse rejects a day, hour, minute or second out of range
}

// validSeconds bounds a hint: above 0 and below 10^9 s (about 31 years, still a time.Duration).
func validSeconds(f float64) bool {
	return !math.IsNaN(f) && !math.IsInf(f, 0) && f > 0 && f < 1e9
}

// kvOpsIdempotent reports whether KV ops end in the same state however often they land, so a
// request holding them may be resent after a lost answer: reads, and puts and deletes without
// expect. An incr, a putIfAbsent or a conditional (expect) write may apply twice, or answer
// "exists" / "version" for its own first landing (docs/retries.md §5).
func kvOpsIdempotent(ops []KVOperation) bool {
	for _, op := range ops {
		if op.Op == "incr" || op.Op == "putIfAbsent" || op.Expect != nil {
			return false
		}
	}
	return true
}
