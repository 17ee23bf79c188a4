package main

import (
	"net/http"
	"sync/atomic"
	"time"
)

// inFlight counts the requests the HTTP server is running, so shutdown can
// wait for the ones it cut off (see afterShutdownTimeout).
type inFlight struct{ n atomic.Int64 }

func (f *inFlight) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.n.Add(1)
		defer f.n.Add(-1)
		next.ServeHTTP(w, r)
	})
}

// waitIdle waits until no request runs, or timeout passes; it reports whether
// none runs.
func (f *inFlight) waitIdle(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for f.n.Load() > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// giveBackGrace bounds how long a stopping broker waits, once its shutdown
// timeout passed and it cut the remaining connections, for those requests to
// end: a pop whose claim was in flight gives the claim back then (one round
// trip) instead of leaving it leased until expiry.
const giveBackGrace = 5 * time.Second
