package main

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestBrokerStartsWithTheJWKSEndpointDown starts the real binary with its JWKS
// endpoint down and the role claim, a role name and the skip paths set by
// environment: it starts and serves, answers 401 Unknown key ID until the
// endpoint answers, then takes roles from the configured claim under the
// configured name only.
func TestBrokerStartsWithTheJWKSEndpointDown(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	jwksAddr := l.Addr().String()
	_ = l.Close()

	b := startBroker(t, newDatabase(t), freePort(t), t.TempDir(),
		"LANES_JWT_ENABLED=true", "LANES_JWT_JWKS_URL=http://"+jwksAddr+"/jwks",
		"LANES_JWT_JWKS_UNKNOWN_KID_REFRESH_MS=1000", "LANES_JWT_ROLE_CLAIMS=groups",
		"LANES_JWT_ROLE_READ_ONLY=viewers", "LANES_JWT_SKIP_PATHS=/,/docs/")
	b.waitHealth(t, http.StatusOK, 20*time.Second)
	for _, logged := range []string{"JWKS fetch failed", `LANES_JWT_SKIP_PATHS: every path under this entry needs no token" prefix=/docs/`} {
		if !strings.Contains(b.logs.String(), logged) {
			t.Errorf("the log lacks %q:\n%s", logged, b.logs.String())
		}
	}

	sign := func(claims jwt.MapClaims) string {
		claims["sub"], claims["exp"] = "svc", time.Now().Add(time.Hour).Unix()
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	viewer := sign(jwt.MapClaims{"groups": []string{"viewers"}})
	if status, msg := readQueuesAs(t, b, viewer); status != http.StatusUnauthorized || msg != "Unknown key ID" {
		t.Fatalf("with the JWKS endpoint down: %d %q, want 401 Unknown key ID", status, msg)
	}

	b64 := base64.RawURLEncoding.EncodeToString
	jwks := map[string]any{"keys": []map[string]any{{"kty": "RSA", "kid": "k1", "alg": "RS256",
		"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes())}}}
	idp := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jwks)
	}))
	_ = idp.Listener.Close()
	if idp.Listener, err = net.Listen("tcp", jwksAddr); err != nil {
		t.Skipf("cannot listen on %s again: %v", jwksAddr, err)
	}
	idp.Start()
	t.Cleanup(idp.Close)
	deadline := time.Now().Add(5 * time.Second)
	for {
		status, msg := readQueuesAs(t, b, viewer)
		if status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("once the endpoint answers: %d %q, want 200", status, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for name, token := range map[string]string{
		"the default role claim":          sign(jwt.MapClaims{"role": "read-only"}),
		"the default name of a read role": sign(jwt.MapClaims{"groups": "read-only"}),
	} {
		if status, msg := readQueuesAs(t, b, token); status != http.StatusForbidden {
			t.Errorf("%s: %d %q, want 403", name, status, msg)
		}
	}
	for path, want := range map[string]int{"/": http.StatusNotFound, "/docs/x": http.StatusNotFound, "/docs": http.StatusUnauthorized} {
		if status, _ := b.do(http.MethodGet, path, nil, nil); status != want {
			t.Errorf("GET %s without a token: %d, want %d", path, status, want)
		}
	}
}

// TestBrokerVerifiesTokensOfTwoKeySets starts the real binary with two key
// sets in LANES_JWT_JWKS_URL (a comma and a space between them) and a third
// whose endpoint is down: it starts, verifies the tokens of both sets that
// answer, and /health answers 200 saying which set is unreachable.
func TestBrokerVerifiesTokensOfTwoKeySets(t *testing.T) {
	oldKey, newKey := newRSA(t), newRSA(t)
	oldIdP, newIdP := serveJWKS(t, "old-1", oldKey), serveJWKS(t, "new-1", newKey)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String() + "/jwks"
	_ = l.Close()
	b := startBroker(t, newDatabase(t), freePort(t), t.TempDir(), "LANES_JWT_ENABLED=true",
		"LANES_JWT_JWKS_URL="+oldIdP.URL+", "+newIdP.URL+"\n"+down, "LANES_JWT_ROLE_CLAIMS=groups")
	b.waitHealth(t, http.StatusOK, 20*time.Second)
	sign := func(key *rsa.PrivateKey, kid string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": "svc", "groups": "read-only", "exp": time.Now().Add(time.Hour).Unix()})
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for name, c := range map[string]struct {
		token string
		want  int
	}{
		"a token of the first set":          {sign(oldKey, "old-1"), http.StatusOK},
		"a token of the second set":         {sign(newKey, "new-1"), http.StatusOK},
		"a kid of one set, the other's key": {sign(newKey, "old-1"), http.StatusUnauthorized},
	} {
		if status, _ := readQueuesAs(t, b, c.token); status != c.want {
			t.Errorf("%s: %d, want %d", name, status, c.want)
		}
	}
	var health struct {
		Status string
		JWKS   []struct {
			URL       string
			Reachable bool
			Keys      int
			LastError *string
		}
	}
	if status, err := b.do(http.MethodGet, "/health", nil, &health); err != nil || status != http.StatusOK {
		t.Fatalf("/health: %d %v", status, err)
	}
	if len(health.JWKS) != 3 || health.Status != "healthy" {
		t.Fatalf("/health: %+v", health)
	}
	for i, want := range []struct {
		url       string
		reachable bool
		keys      int
	}{{oldIdP.URL, true, 1}, {newIdP.URL, true, 1}, {down, false, 0}} {
		if got := health.JWKS[i]; got.URL != want.url || got.Reachable != want.reachable || got.Keys != want.keys || (got.LastError == nil) == !want.reachable {
			t.Errorf("key set %d: %+v, want %+v", i, got, want)
		}
	}
}

func newRSA(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// serveJWKS is an identity provider's key set holding key under kid.
func serveJWKS(t *testing.T, kid string, key *rsa.PrivateKey) *httptest.Server {
	t.Helper()
	b64 := base64.RawURLEncoding.EncodeToString
	jwks := map[string]any{"keys": []map[string]any{{"kty": "RSA", "kid": kid, "alg": "RS256",
		"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes())}}}
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jwks)
	}))
	t.Cleanup(idp.Close)
	return idp
}
