package main

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestProxyChecksAScriptedRetryAfterDateAsSeconds: only a date a fault script wrote is read as the
// seconds it stands for; the broker's own answers are checked as they are.
func TestProxyChecksAScriptedRetryAfterDateAsSeconds(t *testing.T) {
	ahead := time.Now().Add(5 * time.Second).UTC().Format(http.TimeFormat)
	past := time.Now().Add(-time.Minute).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		name, retryAfter string
		scripted         bool
		want             func(string) bool
	}{
		{"scripted date ahead", ahead, true, func(v string) bool { n, err := strconv.Atoi(v); return err == nil && n >= 4 && n <= 6 }},
		{"scripted date past", past, true, func(v string) bool { return v == "0" }},
		{"scripted seconds", "7", true, func(v string) bool { return v == "7" }},
		{"broker's own date", ahead, false, func(v string) bool { return v == ahead }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{"Retry-After": {tc.retryAfter}}
			if tc.scripted {
				h.Set(faultHeader, "scripted")
			}
			got := headerAsTheBrokerSends(h).Get("Retry-After")
			if !tc.want(got) {
				t.Fatalf("Retry-After %q checked as %q", tc.retryAfter, got)
			}
			if h.Get("Retry-After") != tc.retryAfter {
				t.Fatalf("the answer's own header changed to %q", h.Get("Retry-After"))
			}
		})
	}
}
