package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/lanesmq/lanes/server/internal/auth"
)

// hangingJWKS is a key set endpoint that, once hung, answers no fetch until
// the fetch gives up, or answers each failed after a delay.
type hangingJWKS struct {
	*httptest.Server
	keys    []map[string]any
	hung    atomic.Bool
	failing atomic.Bool
	fetches atomic.Int32
}

func newHangingJWKS(t *testing.T, keys ...map[string]any) *hangingJWKS {
	s := &hangingJWKS{keys: keys}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		switch {
		case s.hung.Load():
			<-r.Context().Done()
			return
		case s.failing.Load():
			time.Sleep(200 * time.Millisecond)
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": s.keys})
	}))
	t.Cleanup(s.Close)
	return s
}

// timedAnswer is one request's status and how long it took.
type timedAnswer struct {
	status int
	took   time.Duration
	err    error
}

// jwksWaitClient keeps a connection per request of a burst, so that the
// goroutines counted before the burst are those it runs on.
var jwksWaitClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 200}}

func getQueuesAs(brokerURL, token string) timedAnswer {
	req, err := http.NewRequest(http.MethodGet, brokerURL+"/api/v1/resources/queues", nil)
	if err != nil {
		return timedAnswer{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	start := time.Now()
	resp, err := jwksWaitClient.Do(req)
	if err != nil {
		return timedAnswer{err: err}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return timedAnswer{status: resp.StatusCode, took: time.Since(start)}
}

// Review of the unknown-kid wait: behind a key set endpoint that hangs, a
// burst of tokens with made-up kids (an attacker's) waits at most the fetch
// timeout, sets off one fetch, and leaves no goroutine behind; once that
// fetch is over, made-up kids answer 401 at once until the unknown-kid
// interval passes, and a token whose kid is held never waits. A fetch that
// fails ends its waiters' wait as one that succeeds does, and lets the next
// interval's fetch start.
func TestJWKSUnknownKIDWaitsAreBoundedByTheFetch(t *testing.T) {
	const fetchTimeout, unknownKIDEvery, burst = 500 * time.Millisecond, 2 * time.Second, 100
	key := newRSAKey(t)
	provider := newHangingJWKS(t, rsaJWK("k-1", "RS256", &key.PublicKey))
	v := newJWKSVerifier(t, auth.Config{JWKSURLs: []string{provider.URL}, JWKSRefresh: time.Hour,
		JWKSUnknownKIDRefresh: unknownKIDEvery, JWKSTimeout: fetchTimeout})
	b := newBrokerWith(t, testDSN, Options{Auth: v}, "")
	known := signKID(t, jwt.SigningMethodRS256, key, "k-1", adminClaims())
	wantAnswer(t, b, known, 200, "")
	madeUp := func(i int) string {
		return signKID(t, jwt.SigningMethodRS256, key, fmt.Sprintf("made-up-%d-%d", time.Now().UnixNano(), i), adminClaims())
	}
	tokens := make([]string, burst)
	for i := range tokens {
		tokens[i] = madeUp(i)
	}
	// Connections of the burst are opened (and their goroutines counted) before it.
	t.Cleanup(jwksWaitClient.CloseIdleConnections)
	var warm sync.WaitGroup
	for range burst {
		warm.Go(func() { _ = getQueuesAs(b.URL, known) })
	}
	warm.Wait()
	time.Sleep(100 * time.Millisecond)
	baseline := runtime.NumGoroutine()

	provider.hung.Store(true)
	fetchesBefore := provider.fetches.Load()
	answers := make([]timedAnswer, burst)
	var peak atomic.Int64
	stopSampling := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			peak.Store(max(peak.Load(), int64(runtime.NumGoroutine())))
			select {
			case <-stopSampling:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	var wg sync.WaitGroup
	for i := range burst {
		wg.Go(func() { answers[i] = getQueuesAs(b.URL, tokens[i]) })
	}
	// A held kid does not wait for the fetch under way.
	time.Sleep(100 * time.Millisecond)
	if a := getQueuesAs(b.URL, known); a.err != nil || a.status != 200 || a.took > 200*time.Millisecond {
		t.Errorf("token with a held kid during a fetch: %d after %s (%v); want 200 at once", a.status, a.took, a.err)
	}
	wg.Wait()
	close(stopSampling)
	sampler.Wait()
	var slowest time.Duration
	for i, a := range answers {
		slowest = max(slowest, a.took)
		if a.err != nil || a.status != http.StatusUnauthorized || a.took > fetchTimeout+500*time.Millisecond {
			t.Errorf("made-up kid %d during a hung fetch: %d after %s (%v); want 401 within the %s fetch timeout", i, a.status, a.took, a.err, fetchTimeout)
		}
	}
	if got := provider.fetches.Load() - fetchesBefore; got != 1 {
		t.Errorf("%d made-up kids fetched the set %d times; want once per unknown-kid interval", burst, got)
	}
	t.Logf("%d made-up kids behind a hung fetch: slowest answer %s; goroutines %d before, peak %d", burst, slowest, baseline, peak.Load())
	waitFor(t, 3*time.Second, "the goroutines of the burst to end", func() bool { return runtime.NumGoroutine() <= baseline+5 })

	// Until the interval passes, made-up kids start no fetch and wait for none.
	for i := range 20 {
		if a := getQueuesAs(b.URL, madeUp(i)); a.err != nil || a.status != http.StatusUnauthorized || a.took > 200*time.Millisecond {
			t.Fatalf("made-up kid with no fetch under way: %d after %s (%v); want 401 at once", a.status, a.took, a.err)
		}
	}
	if got := provider.fetches.Load() - fetchesBefore; got != 1 {
		t.Fatalf("made-up kids within the interval fetched the set again: %d fetches", got)
	}

	// A fetch that fails ends the wait too, and the next interval fetches again.
	provider.hung.Store(false)
	provider.failing.Store(true)
	for round := range 2 {
		time.Sleep(unknownKIDEvery + 100*time.Millisecond)
		before := provider.fetches.Load()
		var failing sync.WaitGroup
		for i := range 10 {
			failing.Go(func() {
				if a := getQueuesAs(b.URL, madeUp(i)); a.err != nil || a.status != http.StatusUnauthorized || a.took > fetchTimeout+500*time.Millisecond {
					t.Errorf("round %d: made-up kid during a failing fetch: %d after %s (%v); want 401 once the fetch failed", round, a.status, a.took, a.err)
				}
			})
		}
		failing.Wait()
		if got := provider.fetches.Load() - before; got != 1 {
			t.Fatalf("round %d: %d fetches for an interval's made-up kids; want 1 (a failed fetch must not stay marked as under way)", round, got)
		}
	}
}
