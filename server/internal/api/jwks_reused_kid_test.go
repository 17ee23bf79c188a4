package api

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/lanesmq/lanes/server/internal/auth"
)

// TestJWKSNewKeyUnderAKidAnotherSetHolds: providers that number their keys
// "1", "2" collide. A key the second set rotates in under a kid the first set
// already holds verifies on its first token, as a new kid does, instead of
// answering 401 until the periodic refresh; so does a key of another type
// under that kid, and a set's new key under a kid it held itself. A token no
// key of its kid verifies still answers 401 Invalid token signature, and a
// flood of them fetches each set at most once per unknown-kid interval.
func TestJWKSNewKeyUnderAKidAnotherSetHolds(t *testing.T) {
	keyA, keyB, rotatedB, laterB, stranger := newRSAKey(t), newRSAKey(t), newRSAKey(t), newRSAKey(t), newRSAKey(t)
	edPub, edPriv := newEdKey(t)
	setA := newJWKSServer(t, rsaJWK("1", "RS256", &keyA.PublicKey))
	setB := newJWKSServer(t, rsaJWK("2", "RS256", &keyB.PublicKey))
	const unknownKIDEvery = 400 * time.Millisecond
	v := newJWKSVerifier(t, auth.Config{JWKSURLs: []string{setA.URL, setB.URL}, JWKSRefresh: time.Hour,
		JWKSUnknownKIDRefresh: unknownKIDEvery, JWKSTimeout: 3 * time.Second})
	b := newBrokerWith(t, testDSN, Options{Auth: v}, "")
	fetches := func() string { return fmt.Sprint(setA.fetches.Load(), setB.fetches.Load()) }
	nextInterval := func() { time.Sleep(unknownKIDEvery + 100*time.Millisecond) }

	// Set B rotates in a key named "1", which set A holds for its own key.
	setB.setKeys(rsaJWK("2", "RS256", &keyB.PublicKey), rsaJWK("1", "RS256", &rotatedB.PublicKey))
	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, rotatedB, "1", adminClaims()), 200, "")
	if got := fetches(); got != "2 2" {
		t.Fatalf("fetches after set B's new key under set A's kid: %s, want each set fetched once more", got)
	}
	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, keyA, "1", adminClaims()), 200, "")
	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, rotatedB, "1", adminClaims()), 200, "")
	if got := fetches(); got != "2 2" {
		t.Fatalf("tokens that a held key verifies fetched a set again: %s", got)
	}

	// Forged tokens under a held kid: 401 as before, no fetch within the interval.
	forged := signKID(t, jwt.SigningMethodRS256, stranger, "1", adminClaims())
	for range 20 {
		wantAnswer(t, b, forged, 401, auth.MsgBadSignature)
	}
	if got := fetches(); got != "2 2" {
		t.Fatalf("20 forged tokens within the interval made %s fetches, want still 2 2", got)
	}
	// Once it has passed, a concurrent flood of them fetches each set once.
	nextInterval()
	answers := make([]string, 20)
	var flood sync.WaitGroup
	for i := range answers {
		flood.Go(func() {
			status, e, _ := b.callAs(t, forged, "GET", "/api/v1/resources/queues", "")
			answers[i] = fmt.Sprint(status, " ", e.Error)
		})
	}
	flood.Wait()
	for i, answer := range answers {
		if want := "401 " + auth.MsgBadSignature; answer != want {
			t.Errorf("forged token %d of the flood answered %q, want %q", i, answer, want)
		}
	}
	if got := fetches(); got != "3 3" {
		t.Fatalf("20 forged tokens after the interval made %s fetches, want one more of each set: 3 3", got)
	}

	// A key of another type under the held kid: A's RSA "1" does not hide B's Ed25519 "1".
	nextInterval()
	setB.setKeys(rsaJWK("2", "RS256", &keyB.PublicKey), edJWK("1", edPub))
	wantAnswer(t, b, signKID(t, jwt.SigningMethodEdDSA, edPriv, "1", adminClaims()), 200, "")
	// An EdDSA token that no key named "1" verifies still says so.
	wantAnswer(t, b, signKID(t, jwt.SigningMethodEdDSA, edPriv, "2", adminClaims()), 401, auth.MsgUnsupportedAlg)

	// A set's new key under a kid it held itself; tokens arriving while the
	// slow fetch runs wait for it, and each set is fetched once.
	nextInterval()
	before := [2]int32{setA.fetches.Load(), setB.fetches.Load()}
	setB.setDelay(300 * time.Millisecond)
	setB.setKeys(rsaJWK("2", "RS256", &laterB.PublicKey))
	token := signKID(t, jwt.SigningMethodRS256, laterB, "2", adminClaims())
	wantBurstServed(t, b.testBroker, token)
	after := [2]int32{setA.fetches.Load(), setB.fetches.Load()}
	for i := range after {
		if after[i]-before[i] != 1 {
			t.Errorf("set %d fetched %d times for the burst, want once", i, after[i]-before[i])
		}
	}
	// B dropped its "1": A's still verifies, B's former ones no longer do.
	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, keyA, "1", adminClaims()), 200, "")
	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, rotatedB, "1", adminClaims()), 401, auth.MsgBadSignature)
	wantAnswer(t, b, signKID(t, jwt.SigningMethodEdDSA, edPriv, "1", adminClaims()), 401, auth.MsgUnsupportedAlg)
}
