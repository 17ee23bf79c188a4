package api

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/lanesmq/lanes/server/internal/auth"
)

// jwksServer is an identity provider's key set endpoint: the test changes its
// keys and takes it down, and counts what the broker fetches.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	keys    []map[string]any
	down    bool
	delay   time.Duration
	fetches atomic.Int32
}

func (s *jwksServer) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	s.fetches.Add(1)
	s.mu.Lock()
	delay := s.delay
	s.mu.Unlock()
	time.Sleep(delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"keys": s.keys})
}

func (s *jwksServer) setKeys(keys ...map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = keys
}

// setDelay makes each answer wait d, as a slow provider's does.
func (s *jwksServer) setDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

func (s *jwksServer) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

func newJWKSServer(t *testing.T, keys ...map[string]any) *jwksServer {
	s := &jwksServer{keys: keys}
	s.Server = httptest.NewServer(s)
	t.Cleanup(s.Close)
	return s
}

func b64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func rsaJWK(kid, alg string, pub *rsa.PublicKey) map[string]any {
	return map[string]any{"kty": "RSA", "kid": kid, "alg": alg, "use": "sig",
		"n": b64url(pub.N.Bytes()), "e": b64url(big.NewInt(int64(pub.E)).Bytes())}
}

// edJWK names no alg: the broker must infer from the key type that only EdDSA fits.
func edJWK(kid string, pub ed25519.PublicKey) map[string]any {
	return map[string]any{"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": b64url(pub)}
}

func ecJWK(t *testing.T, kid string, pub *ecdsa.PublicKey) map[string]any {
	point, err := pub.Bytes() // 0x04 || X || Y, 32 bytes each on P-256
	if err != nil {
		t.Fatal(err)
	}
	return map[string]any{"kty": "EC", "crv": "P-256", "kid": kid, "x": b64url(point[1:33]), "y": b64url(point[33:])}
}

func octJWK(kid string, secret []byte) map[string]any {
	return map[string]any{"kty": "oct", "kid": kid, "k": b64url(secret)}
}

func newRSAKey(t *testing.T) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newEdKey(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

// adminClaims are valid for an hour and grant admin.
func adminClaims() jwt.MapClaims {
	return jwt.MapClaims{"sub": "jwks", "role": auth.RoleAdmin, "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
}

// signKID signs claims with method and key under header kid (none when kid is "").
// wantBurstServed sends token 8 times at once, all but the first 50 ms
// after it (while the fetch the first one triggers runs), and wants every
// one answered 200.
func wantBurstServed(t *testing.T, b *testBroker, token string) {
	t.Helper()
	const burst = 8
	statuses := make([]int, burst)
	var wg sync.WaitGroup
	for i := range burst {
		wg.Go(func() {
			if i > 0 {
				time.Sleep(50 * time.Millisecond)
			}
			statuses[i], _, _ = b.callAs(t, token, "GET", "/api/v1/resources/queues", "")
		})
	}
	wg.Wait()
	for i, status := range statuses {
		if status != 200 {
			t.Errorf("token %d of the burst answered %d, want 200: %v", i, status, statuses)
		}
	}
}

func signKID(t *testing.T, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newJWKSVerifier(t *testing.T, cfg auth.Config) *auth.Verifier {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	v, err := auth.NewVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}

// wantAnswer checks a listing read with token answers status (200, or a JSON
// 401/403 with message and its code).
func wantAnswer(t *testing.T, b *resilientBroker, token string, status int, message string) {
	t.Helper()
	got, e, hdr := b.callAs(t, token, "GET", "/api/v1/resources/queues", "")
	switch {
	case got != status:
		t.Fatalf("%d %+v, want %d %q", got, e, status, message)
	case status == http.StatusOK:
	case e.Error != message:
		t.Fatalf("%d %q, want %q", got, e.Error, message)
	case status == http.StatusUnauthorized && e.Code != "unauthorized", status == http.StatusForbidden && e.Code != "forbidden":
		t.Fatalf("%d with code %q", got, e.Code)
	case hdr.Values("WWW-Authenticate") == nil || hdr.Values("WWW-Authenticate")[0] != wantChallenge(status, message) || len(hdr.Values("WWW-Authenticate")) != 1:
		t.Fatalf("%d %q with WWW-Authenticate %q, want %q", got, message, hdr.Values("WWW-Authenticate"), wantChallenge(status, message))
	}
}

// wantChallenge is the WWW-Authenticate of a refusal (RFC 6750 §3): a bare
// challenge without a token, invalid_token with the message for a bad one,
// insufficient_scope for a missing role.
func wantChallenge(status int, message string) string {
	switch {
	case status == http.StatusForbidden:
		return `Bearer error="insufficient_scope", error_description="Insufficient permissions"`
	case message == "Authentication required":
		return "Bearer"
	}
	return `Bearer error="invalid_token", error_description="` + message + `"`
}

// TestJWKSVerifiesTokensByKidAndFollowsKeyRotation: RSA and Ed25519 tokens
// verify with the key their kid names; a kid the set lacks answers 401 Unknown
// key ID after one fetch, and made-up kids fetch no more than once per
// interval; a key the issuer adds is accepted after that refresh, and a key it
// drops stops verifying at the next periodic one.
func TestJWKSVerifiesTokensByKidAndFollowsKeyRotation(t *testing.T) {
	rsa1, rsa2 := newRSAKey(t), newRSAKey(t)
	edPub, edPriv := newEdKey(t)
	idp := newJWKSServer(t, rsaJWK("rsa-1", "RS256", &rsa1.PublicKey), edJWK("ed-1", edPub))
	const unknownKIDEvery = 400 * time.Millisecond
	v := newJWKSVerifier(t, auth.Config{JWKSURLs: []string{idp.URL}, JWKSRefresh: time.Hour, JWKSUnknownKIDRefresh: unknownKIDEvery, JWKSTimeout: 2 * time.Second})
	b := newBrokerWith(t, testDSN, Options{Auth: v}, "")
	if n := idp.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches at startup, want 1", n)
	}

	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, rsa1, "rsa-1", adminClaims()), 200, "")
	wantAnswer(t, b, signKID(t, jwt.SigningMethodEdDSA, edPriv, "ed-1", adminClaims()), 200, "")
	if n := idp.fetches.Load(); n != 1 {
		t.Fatalf("known kids fetched the set again: %d fetches", n)
	}

	rotated := signKID(t, jwt.SigningMethodRS256, rsa2, "rsa-2", adminClaims())
	wantAnswer(t, b, rotated, 401, auth.MsgUnknownKeyID)
	if n := idp.fetches.Load(); n != 2 {
		t.Fatalf("an unknown kid made %d fetches in all, want 2 (startup and one refresh)", n)
	}
	for i := range 20 {
		wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, rsa2, "made-up-"+string(rune('a'+i)), adminClaims()), 401, auth.MsgUnknownKeyID)
	}
	// A token no key of its kid verifies fetches the set by the same rule: not again within the interval.
	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, rsa2, "rsa-1", adminClaims()), 401, auth.MsgBadSignature)
	if n := idp.fetches.Load(); n != 2 {
		t.Fatalf("20 made-up kids and a bad signature within the interval made %d fetches in all, want still 2", n)
	}

	// The issuer rotates: rsa-2 appears. Within the interval the broker does not know it yet; after it, it does.
	idp.setKeys(rsaJWK("rsa-1", "RS256", &rsa1.PublicKey), rsaJWK("rsa-2", "RS256", &rsa2.PublicKey), edJWK("ed-1", edPub))
	time.Sleep(unknownKIDEvery + 100*time.Millisecond)
	wantAnswer(t, b, rotated, 200, "")
	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, rsa1, "rsa-1", adminClaims()), 200, "")

	// A set fetched again every 200 ms drops a revoked key within a few periods.
	rev := newJWKSServer(t, rsaJWK("rsa-1", "RS256", &rsa1.PublicKey))
	rb := newBrokerWith(t, testDSN, Options{Auth: newJWKSVerifier(t, auth.Config{JWKSURLs: []string{rev.URL}, JWKSRefresh: 200 * time.Millisecond, JWKSUnknownKIDRefresh: time.Hour})}, "")
	old := signKID(t, jwt.SigningMethodRS256, rsa1, "rsa-1", adminClaims())
	wantAnswer(t, rb, old, 200, "")
	rev.setKeys(rsaJWK("rsa-2", "RS256", &rsa2.PublicKey))
	waitFor(t, 3*time.Second, "the revoked key to stop verifying", func() bool {
		status, _, _ := rb.callAs(t, old, "GET", "/api/v1/resources/queues", "")
		return status == http.StatusUnauthorized
	})
	wantAnswer(t, rb, old, 401, auth.MsgUnknownKeyID)
	wantAnswer(t, rb, signKID(t, jwt.SigningMethodRS256, rsa2, "rsa-2", adminClaims()), 200, "")
}

// TestJWKSKeysOnlyVerifyTheirOwnAlgorithm: a token's alg must fit the type of
// the key its kid names (and the JWK's alg when it names one), so no RSA key
// or shared JWKS key is ever used as an HMAC secret, and an encryption key
// verifies nothing.
func TestJWKSKeysOnlyVerifyTheirOwnAlgorithm(t *testing.T) {
	rsaKey := newRSAKey(t)
	edPub, edPriv := newEdKey(t)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	shared := []byte("a-shared-key-published-in-the-set!")
	encKey := rsaJWK("enc-1", "", &rsaKey.PublicKey)
	encKey["use"] = "enc"
	delete(encKey, "alg")
	idp := newJWKSServer(t,
		rsaJWK("rsa-1", "RS256", &rsaKey.PublicKey),
		edJWK("ed-1", edPub),
		ecJWK(t, "ec-1", &ecKey.PublicKey),
		octJWK("oct-1", shared),
		encKey,
	)
	jwksOnly := newBrokerWith(t, testDSN, Options{Auth: newJWKSVerifier(t, auth.Config{JWKSURLs: []string{idp.URL}})}, "")
	withSecret := newBrokerWith(t, testDSN, Options{Auth: newJWKSVerifier(t, auth.Config{JWKSURLs: []string{idp.URL}, Secret: []byte(testSecret)})}, "")
	rsaModulus := rsaKey.N.Bytes()

	cases := []struct {
		name    string
		broker  *resilientBroker
		token   string
		status  int
		message string
	}{
		{"RS256 with its kid", jwksOnly, signKID(t, jwt.SigningMethodRS256, rsaKey, "rsa-1", adminClaims()), 200, ""},
		{"PS256 under an RSA key whose JWK says RS256", jwksOnly, signKID(t, jwt.SigningMethodPS256, rsaKey, "rsa-1", adminClaims()), 401, auth.MsgUnsupportedAlg},
		{"RS512 under an RSA key whose JWK says RS256", jwksOnly, signKID(t, jwt.SigningMethodRS512, rsaKey, "rsa-1", adminClaims()), 401, auth.MsgUnsupportedAlg},
		{"EdDSA with its kid", jwksOnly, signKID(t, jwt.SigningMethodEdDSA, edPriv, "ed-1", adminClaims()), 200, ""},
		{"ES256 with its kid", jwksOnly, signKID(t, jwt.SigningMethodES256, ecKey, "ec-1", adminClaims()), 200, ""},
		{"EdDSA naming the RSA key", jwksOnly, signKID(t, jwt.SigningMethodEdDSA, edPriv, "rsa-1", adminClaims()), 401, auth.MsgUnsupportedAlg},
		{"RS256 naming the Ed25519 key", jwksOnly, signKID(t, jwt.SigningMethodRS256, rsaKey, "ed-1", adminClaims()), 401, auth.MsgUnsupportedAlg},
		{"ES384 naming the P-256 key", jwksOnly, signKID(t, jwt.SigningMethodES384, p384, "ec-1", adminClaims()), 401, auth.MsgUnsupportedAlg},
		{"HS256 keyed with the RSA modulus, naming the RSA key", jwksOnly, signKID(t, jwt.SigningMethodHS256, rsaModulus, "rsa-1", adminClaims()), 401, auth.MsgUnsupportedAlg},
		{"HS256 keyed with the shared JWK, naming it", jwksOnly, signKID(t, jwt.SigningMethodHS256, shared, "oct-1", adminClaims()), 401, auth.MsgUnsupportedAlg},
		{"HS256 keyed with the shared JWK, broker with a secret", withSecret, signKID(t, jwt.SigningMethodHS256, shared, "oct-1", adminClaims()), 401, auth.MsgBadSignature},
		{"HS256 with the secret and a kid, broker with a secret", withSecret, signKID(t, jwt.SigningMethodHS256, []byte(testSecret), "any", adminClaims()), 200, ""},
		{"RS256 naming the encryption key", jwksOnly, signKID(t, jwt.SigningMethodRS256, rsaKey, "enc-1", adminClaims()), 401, auth.MsgUnknownKeyID},
		{"RS256 without a kid: every fitting key is tried", jwksOnly, signKID(t, jwt.SigningMethodRS256, rsaKey, "", adminClaims()), 200, ""},
		{"EdDSA without a kid", jwksOnly, signKID(t, jwt.SigningMethodEdDSA, edPriv, "", adminClaims()), 200, ""},
		{"RS256 without a kid by another key", jwksOnly, signKID(t, jwt.SigningMethodRS256, newRSAKey(t), "", adminClaims()), 401, auth.MsgBadSignature},
		{"kid not a string", jwksOnly, signWithKID(t, rsaKey, 7), 401, auth.MsgBadHeader},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { wantAnswer(t, c.broker, c.token, c.status, c.message) })
	}
}

func signWithKID(t *testing.T, key *rsa.PrivateKey, kid any) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, adminClaims())
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestJWKSEndpointDown: a broker whose key set endpoint is down at startup
// starts at once and serves; tokens answer 401 Unknown key ID until the
// endpoint answers, then verify. Once the set is cached, the endpoint going
// down changes nothing for the kids it holds, and an unknown kid still answers
// 401 Unknown key ID at once.
func TestJWKSEndpointDown(t *testing.T) {
	key := newRSAKey(t)
	token := signKID(t, jwt.SigningMethodRS256, key, "k1", adminClaims())

	// Down at startup: nothing listens on the port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	started := time.Now()
	v := newJWKSVerifier(t, auth.Config{JWKSURLs: []string{"http://" + addr + "/jwks"}, JWKSRefresh: time.Hour,
		JWKSUnknownKIDRefresh: 300 * time.Millisecond, JWKSTimeout: 3 * time.Second})
	if took := time.Since(started); took > time.Second {
		t.Fatalf("the verifier took %v to start with the endpoint refusing connections", took)
	}
	b := newBrokerWith(t, testDSN, Options{Auth: v}, "")
	if status, _ := b.call(t, "GET", "/health", nil, nil); status != http.StatusOK {
		t.Fatalf("/health answered %d with the JWKS endpoint down", status)
	}
	wantAnswer(t, b, token, 401, auth.MsgUnknownKeyID)

	idp := &jwksServer{keys: []map[string]any{rsaJWK("k1", "RS256", &key.PublicKey)}}
	idp.Server = httptest.NewUnstartedServer(idp)
	_ = idp.Listener.Close()
	if idp.Listener, err = net.Listen("tcp", addr); err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	idp.Start()
	t.Cleanup(idp.Close)
	waitFor(t, 3*time.Second, "the token to verify once the endpoint answers", func() bool {
		status, _, _ := b.callAs(t, token, "GET", "/api/v1/resources/queues", "")
		return status == http.StatusOK
	})

	// Down later: the endpoint answers 503 to the periodic fetches.
	later := newJWKSServer(t, rsaJWK("k1", "RS256", &key.PublicKey))
	lb := newBrokerWith(t, testDSN, Options{Auth: newJWKSVerifier(t, auth.Config{JWKSURLs: []string{later.URL},
		JWKSRefresh: 100 * time.Millisecond, JWKSUnknownKIDRefresh: time.Hour})}, "")
	wantAnswer(t, lb, token, 200, "")
	later.setDown(true)
	before := later.fetches.Load()
	waitFor(t, 3*time.Second, "three failed periodic fetches", func() bool { return later.fetches.Load() >= before+3 })
	wantAnswer(t, lb, token, 200, "")
	started = time.Now()
	wantAnswer(t, lb, signKID(t, jwt.SigningMethodRS256, key, "k2", adminClaims()), 401, auth.MsgUnknownKeyID)
	if took := time.Since(started); took > time.Second {
		t.Fatalf("an unknown kid took %v to answer with the endpoint down", took)
	}

	// A set past 1 MiB is refused whole: a broken or hostile endpoint cannot fill the broker's memory.
	huge := newJWKSServer(t, rsaJWK("k1", "RS256", &key.PublicKey), map[string]any{"kty": "oct", "kid": "pad", "k": strings.Repeat("A", 2<<20)})
	hb := newBrokerWith(t, testDSN, Options{Auth: newJWKSVerifier(t, auth.Config{JWKSURLs: []string{huge.URL}})}, "")
	wantAnswer(t, hb, token, 401, auth.MsgUnknownKeyID)

	// An endpoint that accepts the connection and never answers holds the startup for the timeout only.
	silent := silentListener(t)
	started = time.Now()
	newJWKSVerifier(t, auth.Config{JWKSURLs: []string{"http://" + silent + "/jwks"}, JWKSTimeout: 500 * time.Millisecond})
	if took := time.Since(started); took < 400*time.Millisecond || took > 2*time.Second {
		t.Fatalf("startup against a silent endpoint took %v, want about the 500 ms timeout", took)
	}
}

// TestJWTAnswersEveryReferenceMessage sends one broker (secret, JWKS, issuer
// and audience) a request for each 401 case http-api-v1.md lists and checks
// the answer is that case's fixed message, code unauthorized, and that its
// WWW-Authenticate names the error (RFC 6750 §3.1); then a token without the
// role, whose 403 names insufficient_scope.
func TestJWTAnswersEveryReferenceMessage(t *testing.T) {
	key := newRSAKey(t)
	idp := newJWKSServer(t, rsaJWK("k1", "RS256", &key.PublicKey))
	v := newJWKSVerifier(t, auth.Config{Secret: []byte(testSecret), JWKSURLs: []string{idp.URL}, Issuer: "lanes-iss", Audience: "lanes-aud",
		Leeway: 5 * time.Second, JWKSUnknownKIDRefresh: time.Hour})
	b := newBrokerWith(t, testDSN, Options{Auth: v}, "")
	now := time.Now()
	claims := func(extra jwt.MapClaims) jwt.MapClaims {
		c := jwt.MapClaims{"sub": "ref", "role": auth.RoleAdmin, "iss": "lanes-iss", "aud": "lanes-aud",
			"exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
		for k, v := range extra {
			c[k] = v
		}
		return c
	}
	hs := func(extra jwt.MapClaims) string {
		return signKID(t, jwt.SigningMethodHS256, []byte(testSecret), "", claims(extra))
	}
	cases := []struct {
		message string
		token   string
	}{
		{auth.MsgAuthRequired, ""},
		{auth.MsgBadHeader, "not.a.jwt"},
		{auth.MsgBadSignature, signKID(t, jwt.SigningMethodHS256, []byte("another-secret-another-secret-xx"), "", claims(nil))},
		{auth.MsgExpired, hs(jwt.MapClaims{"exp": now.Add(-time.Minute).Unix()})},
		{auth.MsgNotYetValid, hs(jwt.MapClaims{"nbf": now.Add(time.Minute).Unix()})},
		{auth.MsgIssuedInFuture, hs(jwt.MapClaims{"iat": now.Add(time.Minute).Unix()})},
		{auth.MsgBadIssuer, hs(jwt.MapClaims{"iss": "someone-else"})},
		{auth.MsgBadAudience, hs(jwt.MapClaims{"aud": "someone-else"})},
		{auth.MsgUnsupportedAlg, unsigned(t, "none", claims(nil))},
		{auth.MsgUnknownKeyID, signKID(t, jwt.SigningMethodRS256, key, "k9", claims(nil))},
	}
	for _, c := range cases {
		t.Run(c.message, func(t *testing.T) { wantAnswer(t, b, c.token, 401, c.message) })
	}
	wantAnswer(t, b, hs(nil), 200, "")
	wantAnswer(t, b, signKID(t, jwt.SigningMethodRS256, key, "k1", claims(nil)), 200, "")
	wantAnswer(t, b, hs(jwt.MapClaims{"role": "nobody"}), 403, auth.MsgForbidden)
}

// TestJWTRoleClaimsAndNamesAreConfigurable: roles come from the configured
// claims only, under the configured names; the default claims and names then
// grant nothing.
func TestJWTRoleClaimsAndNamesAreConfigurable(t *testing.T) {
	v := newJWKSVerifier(t, auth.Config{Secret: []byte(testSecret), RoleClaims: []string{"groups", "https://lanes.example/roles"},
		RoleNames: map[string]string{auth.RoleAdmin: "lanes-admins", auth.RoleReadOnly: "viewers"}})
	b := newBrokerWith(t, testDSN, Options{Auth: v}, "")
	token := func(c jwt.MapClaims) string {
		c["sub"], c["exp"] = "roles", time.Now().Add(time.Hour).Unix()
		return signKID(t, jwt.SigningMethodHS256, []byte(testSecret), "", c)
	}
	// Switching push maintenance off (it is off) is an admin call that changes nothing.
	const adminRoute, readRoute = "POST /api/v1/system/maintenance", "GET /api/v1/resources/queues"
	cases := []struct {
		name   string
		claims jwt.MapClaims
		route  string
		status int
	}{
		{"renamed admin in an array claim", jwt.MapClaims{"groups": []string{"staff", "lanes-admins"}}, adminRoute, 200},
		{"renamed read-only as one string", jwt.MapClaims{"groups": "viewers"}, readRoute, 200},
		{"renamed read-only is not admin", jwt.MapClaims{"groups": "viewers"}, adminRoute, 403},
		{"a claim name with dots and slashes", jwt.MapClaims{"https://lanes.example/roles": []string{"lanes-admins"}}, adminRoute, 200},
		{"a role left unnamed keeps its name", jwt.MapClaims{"groups": "read-write"}, readRoute, 200},
		{"the default claim is not read", jwt.MapClaims{"role": "lanes-admins", "roles": []string{"lanes-admins"}}, adminRoute, 403},
		{"the default name of a renamed role grants nothing", jwt.MapClaims{"groups": "admin"}, adminRoute, 403},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method, path, _ := strings.Cut(c.route, " ")
			body := ""
			if method == http.MethodPost {
				body = `{"enabled":false}`
			}
			if status, e, _ := b.callAs(t, token(c.claims), method, path, body); status != c.status {
				t.Fatalf("%d %+v, want %d", status, e, c.status)
			}
		})
	}
	for _, bad := range []auth.Config{
		{Secret: []byte(testSecret), RoleNames: map[string]string{auth.RoleAdmin: "ops", auth.RoleReadWrite: "ops"}},
		{Secret: []byte(testSecret), RoleNames: map[string]string{auth.RoleAdmin: ""}},
		{Secret: []byte(testSecret), RoleNames: map[string]string{"superuser": "root"}},
		{Secret: []byte(testSecret), SkipPaths: []string{"health"}},
	} {
		if _, err := auth.NewVerifier(bad); err == nil {
			t.Errorf("NewVerifier(%+v) accepted it", bad)
		}
	}
}

// TestJWTRoleClaimPointers: a role claim starting with "/" is a JSON Pointer
// (RFC 6901) into the claims, as Keycloak nests roles (realm_access.roles,
// resource_access.<client>.roles); any other entry is one top-level claim
// named exactly so, as Auth0's namespaced claims (https://example.com/roles).
// A pointer reaching a string or an array gives its strings, anything else
// nothing; a malformed pointer is refused.
func TestJWTRoleClaimPointers(t *testing.T) {
	keycloak := newBrokerWith(t, testDSN, Options{Auth: newJWKSVerifier(t, auth.Config{Secret: []byte(testSecret),
		RoleClaims: []string{"/realm_access/roles", "/resource_access/lanes/roles"}})}, "")
	auth0 := newBrokerWith(t, testDSN, Options{Auth: newJWKSVerifier(t, auth.Config{Secret: []byte(testSecret),
		RoleClaims: []string{"https://example.com/roles", "/~1tenant~1roles", "/a~0b/roles", "/groups/1", "realm_access.roles", "/x~01"}})}, "")
	token := func(c jwt.MapClaims) string {
		c["sub"], c["exp"] = "pointer", time.Now().Add(time.Hour).Unix()
		return signKID(t, jwt.SigningMethodHS256, []byte(testSecret), "", c)
	}
	realm := func(roles any) jwt.MapClaims { return jwt.MapClaims{"realm_access": map[string]any{"roles": roles}} }
	type claims = map[string]any
	cases := []struct {
		name   string
		b      *resilientBroker
		claims jwt.MapClaims
		admin  bool
	}{
		{"keycloak realm roles", keycloak, realm([]any{"offline_access", "uma_authorization", "admin"}), true},
		{"keycloak realm role as one string", keycloak, realm("admin"), true},
		{"keycloak client roles", keycloak, jwt.MapClaims{"resource_access": claims{"account": claims{"roles": []any{"manage-account"}}, "lanes": claims{"roles": []any{"admin"}}}}, true},
		{"another client's roles", keycloak, jwt.MapClaims{"resource_access": claims{"other": claims{"roles": []any{"admin"}}}}, false},
		{"an array of non-strings", keycloak, realm([]any{1, true, nil, claims{"name": "admin"}, []any{"admin"}}), false},
		{"non-strings beside a string", keycloak, realm([]any{7, "admin"}), true},
		{"the pointer reaches an object", keycloak, realm(claims{"admin": true}), false},
		{"the pointer runs into a string", keycloak, jwt.MapClaims{"realm_access": "admin"}, false},
		{"the pointer runs into an array", keycloak, jwt.MapClaims{"realm_access": []any{claims{"roles": []any{"admin"}}}}, false},
		{"a top-level claim named as the pointer", keycloak, jwt.MapClaims{"/realm_access/roles": []any{"admin"}}, false},
		{"a dotted top-level claim is not the pointer", keycloak, jwt.MapClaims{"realm_access.roles": []any{"admin"}}, false},
		{"the default claims are not read", keycloak, jwt.MapClaims{"role": "admin", "roles": []any{"admin"}}, false},

		{"auth0 namespaced claim", auth0, jwt.MapClaims{"https://example.com/roles": []any{"admin"}}, true},
		{"a top-level claim whose name starts with /", auth0, jwt.MapClaims{"/tenant/roles": []any{"admin"}}, true},
		{"~1 is one claim name, not a path", auth0, jwt.MapClaims{"tenant": claims{"roles": []any{"admin"}}}, false},
		{"~0 is a tilde", auth0, jwt.MapClaims{"a~b": claims{"roles": "admin"}}, true},
		{"~01 is ~1 (RFC 6901 §4)", auth0, jwt.MapClaims{"x~1": "admin"}, true},
		{"~01 is not /", auth0, jwt.MapClaims{"x/": "admin"}, false},
		{"an array index", auth0, jwt.MapClaims{"groups": []any{"staff", "admin"}}, true},
		{"another array index", auth0, jwt.MapClaims{"groups": []any{"admin", "staff"}}, false},
		{"an index past the end", auth0, jwt.MapClaims{"groups": []any{"admin"}}, false},
		{"an index into an object is a member name", auth0, jwt.MapClaims{"groups": claims{"1": "admin"}}, true},
		{"a dotted entry is a top-level claim name", auth0, jwt.MapClaims{"realm_access.roles": []any{"admin"}}, true},
		{"a dotted entry is not a path", auth0, realm([]any{"admin"}), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := http.StatusForbidden
			if c.admin {
				want = http.StatusOK
			}
			// Switching push maintenance off (it is off) is an admin call that changes nothing.
			if status, e, _ := c.b.callAs(t, token(c.claims), http.MethodPost, "/api/v1/system/maintenance", `{"enabled":false}`); status != want {
				t.Fatalf("%d %+v, want %d", status, e, want)
			}
		})
	}
	for _, bad := range []string{"/", "//roles", "/realm_access//roles", "/realm_access/roles/", "/a~2b", "/a~", "/~"} {
		if _, err := auth.NewVerifier(auth.Config{Secret: []byte(testSecret), RoleClaims: []string{"roles", bad}}); err == nil || !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("role claim %q: %v, want an error naming it", bad, err)
		}
	}
}

// TestJWTSkipPaths: an entry is an exact path, or every path under an entry
// ending in "/"; "/" is exact, so it never opens the API, and a ".." out of a
// skipped prefix is refused before any handler.
func TestJWTSkipPaths(t *testing.T) {
	v := newJWKSVerifier(t, auth.Config{Secret: []byte(testSecret), SkipPaths: []string{"/health", "/metrics/prometheus", "/metrics", "/", "/docs/", "/readme"}})
	b := newBrokerWith(t, testDSN, Options{Auth: v}, "")
	get := func(path string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, b.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Opaque = path // sent as written, with its dots
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	cases := []struct {
		path      string
		needToken bool
	}{
		{"/health", false},
		{"/metrics", false},
		{"/metrics/prometheus", false},
		{"/", false},
		{"/readme", false},
		{"/docs/", false},
		{"/docs/a/b", false},
		{"/api/v1/resources/queues", true},
		{"/readme/x", true},
		{"/docs", true},
		{"/docsx", true},
		{"/healthz", true},
	}
	for _, c := range cases {
		status := get(c.path)
		if (status == http.StatusUnauthorized) != c.needToken {
			t.Errorf("GET %s without a token answered %d; need a token: %v", c.path, status, c.needToken)
		}
	}
	for _, path := range []string{"/docs/../api/v1/resources/queues", "/docs/%2e%2e/api/v1/resources/queues", "/docs/..%2Fapi%2Fv1%2Fresources%2Fqueues"} {
		if status := get(path); status == http.StatusOK || !strings.HasPrefix(fmt.Sprint(status), "4") {
			t.Errorf("GET %s without a token answered %d, want a refusal", path, status)
		}
	}
}
