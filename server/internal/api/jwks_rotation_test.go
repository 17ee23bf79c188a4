package api

import (
	"fmt"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/lanesmq/lanes/server/internal/auth"
)

// TestJWKSRotationInAnyKeySetIsPickedUpAtOnce: a key the second or third
// provider adds verifies on its first token, as one the first provider adds
// does, without waiting for the refresh interval. Tokens that arrive while
// that fetch runs wait for it instead of answering 401 Unknown key ID, and
// each set is still fetched once per unknown-kid interval.
func TestJWKSRotationInAnyKeySetIsPickedUpAtOnce(t *testing.T) {
	keyA, keyB, keyC, rotatedB, rotatedC, laterB := newRSAKey(t), newRSAKey(t), newRSAKey(t), newRSAKey(t), newRSAKey(t), newRSAKey(t)
	setA := newJWKSServer(t, rsaJWK("a-1", "RS256", &keyA.PublicKey))
	setB := newJWKSServer(t, rsaJWK("b-1", "RS256", &keyB.PublicKey))
	setC := newJWKSServer(t, rsaJWK("c-1", "RS256", &keyC.PublicKey))
	const unknownKIDEvery = 300 * time.Millisecond
	v := newJWKSVerifier(t, auth.Config{JWKSURLs: []string{setA.URL, setB.URL, setC.URL}, JWKSRefresh: time.Hour,
		JWKSUnknownKIDRefresh: unknownKIDEvery, JWKSTimeout: 3 * time.Second})
	b := newBrokerWith(t, testDSN, Options{Auth: v}, "")
	fetches := func() string { return fmt.Sprint(setA.fetches.Load(), setB.fetches.Load(), setC.fetches.Load()) }

	setB.setKeys(rsaJWK("b-1", "RS256", &keyB.PublicKey), rsaJWK("b-2", "RS256", &rotatedB.PublicKey))
	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, rotatedB, "b-2", adminClaims()), 200, "")
	if got := fetches(); got != "2 2 2" {
		t.Fatalf("fetches after the second set's new kid: %s, want each set fetched once more", got)
	}

	time.Sleep(unknownKIDEvery + 100*time.Millisecond)
	setC.setKeys(rsaJWK("c-2", "RS256", &rotatedC.PublicKey))
	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, rotatedC, "c-2", adminClaims()), 200, "")
	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, keyC, "c-1", adminClaims()), 401, auth.MsgUnknownKeyID)

	// A burst of tokens naming a kid the slow second provider just added.
	time.Sleep(unknownKIDEvery + 100*time.Millisecond)
	before := [3]int32{setA.fetches.Load(), setB.fetches.Load(), setC.fetches.Load()}
	setB.setDelay(300 * time.Millisecond)
	setB.setKeys(rsaJWK("b-3", "RS256", &laterB.PublicKey))
	token := signKID(t, jwt.SigningMethodRS256, laterB, "b-3", adminClaims())
	wantBurstServed(t, b.testBroker, token)
	after := [3]int32{setA.fetches.Load(), setB.fetches.Load(), setC.fetches.Load()}
	for i := range after {
		if after[i]-before[i] != 1 {
			t.Errorf("set %d fetched %d times for the burst, want once", i, after[i]-before[i])
		}
	}
}
