package lanes

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDecideRetry(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pol := defaultRetryPolicy()
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	cases := []struct {
		name       string
		in         retryInput
		retry      bool
		kind       retryKind
		delay      time.Duration
		retryAfter time.Duration
		unknown    bool
	}{
		{name: "429 Retry-After 1", in: retryInput{Status: 429, Header: h("Retry-After", "1")}, retry: true, kind: retryRateLimited, delay: time.Second, retryAfter: time.Second},
		{name: "429 retry-after-ms wins", in: retryInput{Status: 429, Header: h("retry-after-ms", "250", "Retry-After", "9")}, retry: true, kind: retryRateLimited, delay: 250 * time.Millisecond, retryAfter: 250 * time.Millisecond},
		{name: "429 float seconds", in: retryInput{Status: 429, Header: h("Retry-After", "1.5")}, retry: true, kind: retryRateLimited, delay: 1500 * time.Millisecond, retryAfter: 1500 * time.Millisecond},
		{name: "429 RFC1123 date", in: retryInput{Status: 429, Header: h("Retry-After", now.Add(3*time.Second).Format(http.TimeFormat))}, retry: true, kind: retryRateLimited, delay: 3 * time.Second, retryAfter: 3 * time.Second},
		{name: "429 RFC850 date", in: retryInput{Status: 429, Header: h("Retry-After", now.Add(3*time.Second).Format("Monday, 02-Jan-06 15:04:05 GMT"))}, retry: true, kind: retryRateLimited, delay: 3 * time.Second, retryAfter: 3 * time.Second},
		{name: "429 negative → backoff", in: retryInput{Status: 429, Header: h("Retry-After", "-1")}, retry: true, kind: retryRateLimited, delay: 500 * time.Millisecond},
		{name: "429 zero → backoff", in: retryInput{Status: 429, Header: h("Retry-After", "0")}, retry: true, kind: retryRateLimited, delay: 500 * time.Millisecond},
		{name: "429 retry-after-ms zero → backoff", in: retryInput{Status: 429, Header: h("retry-after-ms", "0")}, retry: true, kind: retryRateLimited, delay: 500 * time.Millisecond},
		{name: "429 date now → backoff", in: retryInput{Status: 429, Header: h("Retry-After", now.Format(http.TimeFormat))}, retry: true, kind: retryRateLimited, delay: 500 * time.Millisecond},
		{name: "503 zero → backoff n=1", in: retryInput{Status: 503, Header: h("Retry-After", "0"), Transient: 1}, retry: true, kind: retryTransient, delay: time.Second},
		{name: "429 NaN → backoff", in: retryInput{Status: 429, Header: h("Retry-After", "NaN")}, retry: true, kind: retryRateLimited, delay: 500 * time.Millisecond},
		{name: "429 garbage → backoff n=2", in: retryInput{Status: 429, Header: h("Retry-After", "soon"), RateLimited: 2}, retry: true, kind: retryRateLimited, delay: 2 * time.Second},
		{name: "429 above cap → no retry", in: retryInput{Status: 429, Header: h("Retry-After", "3600")}, retry: false, retryAfter: time.Hour},
		{name: "429 budget spent", in: retryInput{Status: 429, Header: h("Retry-After", "1"), RateLimited: 10}, retry: false, retryAfter: time.Second},
		{name: "429 long poll unbounded", in: retryInput{Status: 429, Header: h("Retry-After", "1"), RateLimited: 1000, LongPoll: true}, retry: true, kind: retryRateLimited, delay: time.Second, retryAfter: time.Second},
		{name: "503 first retry", in: retryInput{Status: 503}, retry: true, kind: retryTransient, delay: 500 * time.Millisecond},
		{name: "503 second retry", in: retryInput{Status: 503, Transient: 1}, retry: true, kind: retryTransient, delay: time.Second},
		{name: "503 budget spent", in: retryInput{Status: 503, Transient: 2}, retry: false},
		{name: "503 x-should-retry false", in: retryInput{Status: 503, Header: h("x-should-retry", "false")}, retry: false},
		{name: "500 with hint", in: retryInput{Status: 500, Header: h("Retry-After", "2")}, retry: true, kind: retryTransient, delay: 2 * time.Second, retryAfter: 2 * time.Second},
		{name: "502", in: retryInput{Status: 502}, retry: true, kind: retryTransient, delay: 500 * time.Millisecond},
		{name: "504", in: retryInput{Status: 504}, retry: true, kind: retryTransient, delay: 500 * time.Millisecond},
		{name: "408", in: retryInput{Status: 408}, retry: true, kind: retryTransient, delay: 500 * time.Millisecond},
		{name: "network", in: retryInput{NetworkErr: true}, retry: true, kind: retryTransient, delay: 500 * time.Millisecond},
		{name: "network budget spent", in: retryInput{NetworkErr: true, Transient: 2}, retry: false},
		{name: "409 plain", in: retryInput{Status: 409}, retry: false},
		{name: "429 x-should-retry true → as a 5xx (row 4 before row 5)", in: retryInput{Status: 429, Header: h("x-should-retry", "true", "Retry-After", "0"), RateLimited: 0, Transient: 2}, retry: false},
		{name: "429 x-should-retry true retried on the 5xx budget", in: retryInput{Status: 429, Header: h("x-should-retry", "true"), LongPoll: true}, retry: true, kind: retryTransient, delay: 500 * time.Millisecond},
		{name: "409 x-should-retry true", in: retryInput{Status: 409, Header: h("x-should-retry", "true")}, retry: true, kind: retryTransient, delay: 500 * time.Millisecond},
		{name: "400", in: retryInput{Status: 400}, retry: false},
		{name: "404", in: retryInput{Status: 404}, retry: false},
		{name: "501", in: retryInput{Status: 501}, retry: false},
		{name: "403 terminal", in: retryInput{Status: 403, Header: h("x-should-retry", "true")}, retry: false},
		{name: "413 terminal", in: retryInput{Status: 413, Header: h("x-should-retry", "true")}, retry: false},
		{name: "backoff cap", in: retryInput{Status: 429, RateLimited: 9}, retry: true, kind: retryRateLimited, delay: 8 * time.Second},
		{name: "jitter", in: retryInput{Status: 503, Transient: 1, Rand: 0.5}, retry: true, kind: retryTransient, delay: 875 * time.Millisecond},
		{name: "429 asctime date is GMT", in: retryInput{Status: 429, Header: h("Retry-After", now.Add(3*time.Second).Format(time.ANSIC))}, retry: true, kind: retryRateLimited, delay: 3 * time.Second, retryAfter: 3 * time.Second},
		{name: "429 date in the past → no hint, backoff", in: retryInput{Status: 429, Header: h("Retry-After", now.Add(-time.Minute).Format(http.TimeFormat))}, retry: true, kind: retryRateLimited, delay: 500 * time.Millisecond},
		{name: "not idempotent: network after send → outcome unknown", in: retryInput{NetworkErr: true, NotIdempotent: true}, retry: false, unknown: true},
		{name: "not idempotent: failed dial retried", in: retryInput{NetworkErr: true, NotSent: true, NotIdempotent: true}, retry: true, kind: retryTransient, delay: 500 * time.Millisecond},
		{name: "not idempotent: 503 → outcome unknown", in: retryInput{Status: 503, NotIdempotent: true}, retry: false, unknown: true},
		{name: "not idempotent: 500 → outcome unknown", in: retryInput{Status: 500, NotIdempotent: true}, retry: false, unknown: true},
		{name: "not idempotent: 408 → outcome unknown", in: retryInput{Status: 408, NotIdempotent: true}, retry: false, unknown: true},
		{name: "not idempotent: 429 retried in place", in: retryInput{Status: 429, Header: h("Retry-After", "1"), NotIdempotent: true}, retry: true, kind: retryRateLimited, delay: time.Second, retryAfter: time.Second},
		{name: "not idempotent: x-should-retry true retried", in: retryInput{Status: 503, Header: h("x-should-retry", "true"), NotIdempotent: true}, retry: true, kind: retryTransient, delay: 500 * time.Millisecond},
		{name: "not idempotent: 400 is a plain error", in: retryInput{Status: 400, NotIdempotent: true}, retry: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := tc.in
			in.Now, in.Policy = now, pol
			d := decideRetry(in)
			require.Equal(t, tc.retry, d.Retry, d.Reason)
			if tc.retry {
				require.Equal(t, tc.kind, d.Kind)
				require.Equal(t, tc.delay, d.Delay)
			}
			require.Equal(t, tc.retryAfter, d.RetryAfter)
			require.Equal(t, tc.unknown, d.OutcomeUnknown, d.Reason)
		})
	}
}

func TestKVOpsIdempotent(t *testing.T) {
	t.Parallel()
	require.True(t, kvOpsIdempotent([]KVOperation{KVGet("n", "k"), KVPut("n", "k", 1, Forever), KVDelete("n", "k")}))
	for _, op := range []KVOperation{KVIncr("n", "k", 1, Forever, KVIncrOpts{}), KVPutIfAbsent("n", "k", 1, Forever, false), KVPutExpect("n", "k", 1, Forever, 3)} {
		require.False(t, kvOpsIdempotent([]KVOperation{KVGet("n", "a"), op}), op.Op)
	}
	del := KVDelete("n", "k")
	del.Expect = ptr(2)
	require.False(t, kvOpsIdempotent([]KVOperation{del}))
}

func TestBackoffJitterBounds(t *testing.T) {
	t.Parallel()
	p := defaultRetryPolicy()
	require.Equal(t, 4*time.Second, backoff(p, 3, 0))
	require.InDelta(t, float64(3*time.Second), float64(backoff(p, 3, 0.999999)), float64(time.Millisecond))
	require.Equal(t, 8*time.Second, backoff(p, 100, 0))
}

// TestParseRetryHint is the hint grammar of docs/retries.md §3; sdk-js (test/unit/retry.test.ts)
// and sdk-python (tests/test_retry_policy.py) run the same table.
func TestParseRetryHint(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 4, 23, 59, 0, 0, time.UTC) // a Friday
	const none = time.Duration(-1)
	cases := []struct {
		retryAfter, retryAfterMs string
		want                     time.Duration
	}{
		{"1.5", "", 1500 * time.Millisecond},
		{" 2 ", "", 2 * time.Second},
		{"+5", "", 5 * time.Second},
		{".5", "", 500 * time.Millisecond},
		{"1.", "", time.Second},
		{"999999999", "", 999999999 * time.Second},
		{"0", "", none},
		{"-1", "", none},
		{"1000000000", "", none},
		{"NaN", "", none},
		{"Infinity", "", none},
		{"inf", "", none},
		{"1e3", "", none},
		{"0x1p4", "", none},
		{"1_0", "", none},
		{"30 seconds", "", none},
		{"soon", "", none},
		{"", "", none},
		{"5", "250", 250 * time.Millisecond},
		{"5", "0", 5 * time.Second},
		{"5", "1e3", 5 * time.Second},
		{"", "2.5", 2500 * time.Microsecond},
		// The three HTTP-date forms, GMT; the weekday is not checked.
		{"Sat, 05 Dec 2026 00:00:00 GMT", "", time.Minute},
		{"Saturday, 05-Dec-26 00:00:00 GMT", "", time.Minute},
		{"Sat Dec  5 00:00:00 2026", "", time.Minute},
		{"Sat Dec 05 00:00:00 2026", "", time.Minute},
		{"Sun, 05 Dec 2026 00:00:00 GMT", "", time.Minute},
		{"Monday, 05-Dec-50 00:00:00 GMT", "", 757382460 * time.Second}, // 50 is 2050
		{"Fri, 04 Dec 2026 23:59:00 GMT", "", none},                     // now
		{"Fri, 04 Dec 2026 23:58:00 GMT", "", none},                     // past
		{"Thursday, 01-Jan-70 00:00:00 GMT", "", none},                  // 70 is 1970
		// Anything else is no hint.
		{"Sat, 05 Dec 2026 00:00:00 UTC", "", none},
		{"Sat, 05 Dec 2026 00:00:00 +0000", "", none},
		{"Saturday, 05-Dec-26 00:00:00 EST", "", none},
		{"Sat, 05 Dec 2026 00:00:00", "", none},
		{"05 Dec 2026 00:00:00 GMT", "", none},
		{"sat, 05 dec 2026 00:00:00 gmt", "", none},
		{"Sat, 5 Dec 2026 00:00:00 GMT", "", none},
		{"Sat Dec 5 00:00:00 2026", "", none},
		{"Sat, 31 Feb 2027 00:00:00 GMT", "", none},
		{"Sat, 05 Dec 2026 24:00:00 GMT", "", none},
		{"Sat, 05 Dec 2026 00:00:60 GMT", "", none},
		{"2026-12-05T00:00:00Z", "", none},
		{"2026-12-05", "", none},
		{"Dec 2026", "", none},
	}
	for _, tc := range cases {
		h := http.Header{}
		if tc.retryAfter != "" {
			h.Set("Retry-After", tc.retryAfter)
		}
		if tc.retryAfterMs != "" {
			h.Set("retry-after-ms", tc.retryAfterMs)
		}
		got, ok := parseRetryHint(h, now)
		if !ok {
			got = none
		}
		require.Equal(t, tc.want, got, "Retry-After %q, retry-after-ms %q", tc.retryAfter, tc.retryAfterMs)
	}
}
