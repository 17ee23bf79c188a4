package api

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/auth"
)

// health reads /health, which needs no token.
func health(t *testing.T, b *resilientBroker) (int, gen.Health) {
	t.Helper()
	var h gen.Health
	status, _ := b.call(t, http.MethodGet, "/health", nil, &h)
	return status, h
}

// keySetHealth is the /health item of the key set at url.
func keySetHealth(t *testing.T, h gen.Health, url string) gen.JWKSHealth {
	t.Helper()
	if h.Jwks == nil {
		t.Fatalf("/health has no jwks: %+v", h)
	}
	for _, set := range *h.Jwks {
		if set.Url == url {
			return set
		}
	}
	t.Fatalf("/health names no key set %s: %+v", url, *h.Jwks)
	return gen.JWKSHealth{}
}

// closedPort is an address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// TestJWKSFromTwoKeySets: during a key-provider migration tokens are signed
// by keys of two sets. A kid is looked up in both; an unknown kid fetches each
// set again once per interval of its own; a kid both sets name for different
// keys verifies a token signed by either key and no other.
func TestJWKSFromTwoKeySets(t *testing.T) {
	oldKey, newKey, sharedOld, sharedNew := newRSAKey(t), newRSAKey(t), newRSAKey(t), newRSAKey(t)
	edPub, edPriv := newEdKey(t)
	oldIdP := newJWKSServer(t, rsaJWK("old-1", "RS256", &oldKey.PublicKey), rsaJWK("shared", "RS256", &sharedOld.PublicKey))
	newIdP := newJWKSServer(t, edJWK("new-ed", edPub), rsaJWK("shared", "RS256", &sharedNew.PublicKey))
	const unknownKIDEvery = 400 * time.Millisecond
	v := newJWKSVerifier(t, auth.Config{JWKSURLs: []string{oldIdP.URL, newIdP.URL}, JWKSRefresh: time.Hour, JWKSUnknownKIDRefresh: unknownKIDEvery})
	b := newBrokerWith(t, testDSN, Options{Auth: v}, "")
	fetches := func() string { return fmt.Sprint(oldIdP.fetches.Load(), newIdP.fetches.Load()) }
	if got := fetches(); got != "1 1" {
		t.Fatalf("fetches at startup %s, want one of each set", got)
	}

	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, oldKey, "old-1", adminClaims()), 200, "")
	wantAnswer(t, b, signKID(t, jwt.SigningMethodEdDSA, edPriv, "new-ed", adminClaims()), 200, "")
	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, sharedOld, "shared", adminClaims()), 200, "")
	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, sharedNew, "shared", adminClaims()), 200, "")
	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, oldKey, "", adminClaims()), 200, "")
	wantAnswer(t, b, signKID(t, jwt.SigningMethodEdDSA, edPriv, "", adminClaims()), 200, "")
	if got := fetches(); got != "1 1" {
		t.Fatalf("known kids fetched a set again: %s", got)
	}

	rotated := signKID(t, jwt.SigningMethodRS256, newKey, "new-rsa", adminClaims())
	wantAnswer(t, b, rotated, 401, auth.MsgUnknownKeyID)
	if got := fetches(); got != "2 2" {
		t.Fatalf("an unknown kid made %s fetches, want each set fetched once more", got)
	}
	for i := range 20 {
		wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, newKey, fmt.Sprint("made-up-", i), adminClaims()), 401, auth.MsgUnknownKeyID)
	}
	// Tokens no key of their kid verifies fetch the sets by the same rule: not again within the interval.
	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, newKey, "shared", adminClaims()), 401, auth.MsgBadSignature)
	wantAnswer(t, b, signKID(t, jwt.SigningMethodEdDSA, edPriv, "shared", adminClaims()), 401, auth.MsgUnsupportedAlg)
	if got := fetches(); got != "2 2" {
		t.Fatalf("20 made-up kids and 2 tokens no key verifies within the interval made %s fetches, want still 2 2", got)
	}

	// The new provider adds a key: accepted once its set may be fetched again.
	newIdP.setKeys(edJWK("new-ed", edPub), rsaJWK("shared", "RS256", &sharedNew.PublicKey), rsaJWK("new-rsa", "RS256", &newKey.PublicKey))
	time.Sleep(unknownKIDEvery + 100*time.Millisecond)
	wantAnswer(t, b, rotated, 200, "")
	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, oldKey, "old-1", adminClaims()), 200, "")

	// Each set keeps its own interval: a set fetched for a kid just now is not
	// fetched again for the next unknown kid, while one that was not, is.
	only := newJWKSServer(t, rsaJWK("old-1", "RS256", &oldKey.PublicKey))
	other := newJWKSServer(t, rsaJWK("other-1", "RS256", &newKey.PublicKey))
	ob := newBrokerWith(t, testDSN, Options{Auth: newJWKSVerifier(t, auth.Config{JWKSURLs: []string{only.URL, other.URL}, JWKSUnknownKIDRefresh: time.Hour})}, "")
	wantAnswer(t, ob, signKID(t, jwt.SigningMethodRS256, newKey, "nowhere", adminClaims()), 401, auth.MsgUnknownKeyID)
	if n, m := only.fetches.Load(), other.fetches.Load(); n != 2 || m != 2 {
		t.Fatalf("fetches %d %d after one unknown kid, want 2 2", n, m)
	}
	wantAnswer(t, ob, signKID(t, jwt.SigningMethodRS256, newKey, "nowhere-else", adminClaims()), 401, auth.MsgUnknownKeyID)
	if n, m := only.fetches.Load(), other.fetches.Load(); n != 2 || m != 2 {
		t.Fatalf("fetches %d %d after a second unknown kid within the interval, want 2 2", n, m)
	}
}

// TestJWKSOneOfTwoKeySetsDown: a broker whose first key set is down at
// startup starts at once and verifies the second set's tokens; /health stays
// 200 and says which set is unreachable and why. A set that goes down later
// keeps verifying the kids it holds; /health and the metrics say it is failing.
func TestJWKSOneOfTwoKeySetsDown(t *testing.T) {
	downKey, upKey := newRSAKey(t), newRSAKey(t)
	down := "http://" + closedPort(t) + "/jwks"
	up := newJWKSServer(t, rsaJWK("up-1", "RS256", &upKey.PublicKey))
	started := time.Now()
	v := newJWKSVerifier(t, auth.Config{JWKSURLs: []string{down, up.URL + "/keys?tenant=secret-tenant"}, JWKSRefresh: time.Hour,
		JWKSUnknownKIDRefresh: 300 * time.Millisecond, JWKSTimeout: 3 * time.Second})
	if took := time.Since(started); took > time.Second {
		t.Fatalf("the verifier took %v to start with one endpoint refusing connections", took)
	}
	b := newBrokerWith(t, testDSN, Options{Auth: v}, "")
	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, upKey, "up-1", adminClaims()), 200, "")
	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, downKey, "down-1", adminClaims()), 401, auth.MsgUnknownKeyID)

	status, h := health(t, b)
	if status != http.StatusOK || h.Status != "healthy" || h.Jwks == nil || len(*h.Jwks) != 2 {
		t.Fatalf("/health with one key set down: %d %+v", status, h)
	}
	downHealth, upHealth := (*h.Jwks)[0], (*h.Jwks)[1]
	if downHealth.Url != down || downHealth.Reachable || downHealth.Keys != 0 || downHealth.LastRefreshAt != nil ||
		downHealth.LastError == nil || !strings.Contains(*downHealth.LastError, "connection refused") || downHealth.LastErrorAt == nil || downHealth.RefreshFailures < 1 {
		t.Errorf("the set that is down: %+v", downHealth)
	}
	if upHealth.Url != up.URL+"/keys" || !upHealth.Reachable || upHealth.Keys != 1 || upHealth.LastRefreshAt == nil || upHealth.LastError != nil || upHealth.RefreshFailures != 0 {
		t.Errorf("the set that is up (shown without its query): %+v", upHealth)
	}
	if since := time.Since(*upHealth.LastRefreshAt); since < 0 || since > time.Minute {
		t.Errorf("lastRefreshAt %v is not the startup fetch", upHealth.LastRefreshAt)
	}
	if raw := rawHealth(t, b); strings.Contains(raw, "secret-tenant") {
		t.Errorf("/health shows a key set's query: %s", raw)
	}

	// Down later: the periodic fetches fail, the cached key keeps verifying.
	later := newJWKSServer(t, rsaJWK("k1", "RS256", &upKey.PublicKey))
	lb := newBrokerWith(t, testDSN, Options{Auth: newJWKSVerifier(t, auth.Config{JWKSURLs: []string{later.URL},
		JWKSRefresh: 100 * time.Millisecond, JWKSUnknownKIDRefresh: time.Hour})}, "")
	token := signKID(t, jwt.SigningMethodRS256, upKey, "k1", adminClaims())
	wantAnswer(t, lb, token, 200, "")
	_, h = health(t, lb)
	lastGood := keySetHealth(t, h, later.URL).LastRefreshAt
	if lastGood == nil {
		t.Fatalf("no lastRefreshAt while the set answers: %+v", *h.Jwks)
	}
	later.setDown(true)
	waitFor(t, 3*time.Second, "three failed periodic fetches", func() bool {
		_, h := health(t, lb)
		return keySetHealth(t, h, later.URL).RefreshFailures >= 3
	})
	wantAnswer(t, lb, token, 200, "")
	status, h = health(t, lb)
	set := keySetHealth(t, h, later.URL)
	if status != http.StatusOK || h.Status != "healthy" {
		t.Fatalf("/health during a JWKS outage with cached keys: %d %+v", status, h)
	}
	if set.Reachable || set.Keys != 1 || set.LastRefreshAt == nil || set.LastError == nil || !strings.Contains(*set.LastError, "503") ||
		set.LastErrorAt == nil || !set.LastErrorAt.After(*set.LastRefreshAt) {
		t.Errorf("the set during its outage: %+v", set)
	}
	metrics := scrape(t, lb.URL)
	label := fmt.Sprintf(`{url=%q}`, later.URL)
	if metrics["lanes_jwks_keys"+label] != 1 || metrics["lanes_jwks_refresh_failures_total"+label] < 3 ||
		metrics["lanes_jwks_last_refresh_timestamp_seconds"+label] < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("metrics during the outage: keys %v, failures %v, last refresh %v", metrics["lanes_jwks_keys"+label],
			metrics["lanes_jwks_refresh_failures_total"+label], metrics["lanes_jwks_last_refresh_timestamp_seconds"+label])
	}

	// Back up: the next fetch makes it reachable again.
	later.setDown(false)
	waitFor(t, 3*time.Second, "the set to be reachable again", func() bool {
		_, h := health(t, lb)
		return keySetHealth(t, h, later.URL).Reachable
	})

	// Without key sets /health has no jwks.
	if _, h := health(t, newBrokerWith(t, testDSN, Options{Auth: newJWKSVerifier(t, auth.Config{Secret: []byte(testSecret)})}, "")); h.Jwks != nil {
		t.Errorf("/health of a broker without key sets: %+v", *h.Jwks)
	}

	// Two silent endpoints hold the startup for one timeout, not one each.
	started = time.Now()
	newJWKSVerifier(t, auth.Config{JWKSURLs: []string{"http://" + silentListener(t) + "/jwks", "http://" + silentListener(t) + "/jwks"}, JWKSTimeout: 500 * time.Millisecond})
	if took := time.Since(started); took < 400*time.Millisecond || took > 900*time.Millisecond {
		t.Fatalf("startup against two silent endpoints took %v, want about one 500 ms timeout", took)
	}
}

// rawHealth is the body of b's /health.
func rawHealth(t *testing.T, b *resilientBroker) string { return getText(t, b.URL+"/health") }

// TestJWKSURLsThatCannotWork: the same set twice, or two sets shown alike,
// are refused.
func TestJWKSURLsThatCannotWork(t *testing.T) {
	idp := newJWKSServer(t)
	for _, urls := range [][]string{
		{idp.URL, idp.URL},
		{idp.URL + "?a=1", idp.URL + "?a=2"},
		{idp.URL, "ftp://example.com/jwks"},
	} {
		if _, err := auth.NewVerifier(auth.Config{JWKSURLs: urls}); err == nil {
			t.Errorf("%q accepted", urls)
		}
	}
}
