package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func sign(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// signWithHeader signs claims with HS256 and one more header field.
func signWithHeader(t *testing.T, secret []byte, claims jwt.MapClaims, name string, value any) string {
	t.Helper()
	token := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	token.Header[name] = value
	s, err := token.SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// unsignedWithAlg is a token whose header names alg, with an empty signature.
func unsignedWithAlg(t *testing.T, alg string, claims jwt.MapClaims) string {
	t.Helper()
	header, err := json.Marshal(map[string]string{"alg": alg, "typ": "JWT"})
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(header) + "." + base64.RawURLEncoding.EncodeToString(body) + "."
}

func pemOf(t *testing.T, pub any) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func TestVerifyHS256RS256EdDSAAndTheFixedMessages(t *testing.T) {
	secret := []byte("s3cret-s3cret-s3cret-s3cret-s3cret")
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	edPub, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Now()
	ok := jwt.MapClaims{"sub": "svc-1", "role": "write-only", "roles": []string{"read-only"}, "exp": now.Add(time.Hour).Unix(), "iss": "lanes-test"}

	hs, err := NewVerifier(Config{Secret: secret, Issuer: "lanes-test"})
	if err != nil {
		t.Fatal(err)
	}
	id, aerr := hs.Verify("Bearer " + sign(t, jwt.SigningMethodHS256, secret, ok))
	if aerr != nil || id.Subject != "svc-1" || len(id.Roles) != 2 {
		t.Fatalf("HS256: %+v %v", id, aerr)
	}
	if _, aerr := hs.Verify(sign(t, jwt.SigningMethodHS256, secret, ok)); aerr != nil {
		t.Fatalf("a bare token without Bearer is accepted: %v", aerr)
	}
	rs, err := NewVerifier(Config{PublicKey: pemOf(t, &rsaKey.PublicKey), Algorithm: "RS256"})
	if err != nil {
		t.Fatal(err)
	}
	if _, aerr := rs.Verify("Bearer " + sign(t, jwt.SigningMethodRS256, rsaKey, ok)); aerr != nil {
		t.Fatalf("RS256: %v", aerr)
	}
	ed, err := NewVerifier(Config{PublicKey: pemOf(t, edPub)})
	if err != nil {
		t.Fatal(err)
	}
	if _, aerr := ed.Verify("Bearer " + sign(t, jwt.SigningMethodEdDSA, edPriv, ok)); aerr != nil {
		t.Fatalf("EdDSA: %v", aerr)
	}

	with := func(k string, v any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for key, val := range ok {
			c[key] = val
		}
		c[k] = v
		return c
	}
	otherRSA, _ := rsa.GenerateKey(rand.Reader, 2048)
	cases := []struct {
		name, header string
		v            *Verifier
		want         string
	}{
		{"missing", "", hs, MsgAuthRequired},
		{"garbage", "Bearer not.a.jwt", hs, MsgBadHeader},
		{"wrong secret", "Bearer " + sign(t, jwt.SigningMethodHS256, []byte("other-secret-other-secret"), ok), hs, MsgBadSignature},
		{"expired", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, with("exp", now.Add(-time.Hour).Unix())), hs, MsgExpired},
		{"not yet valid", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, with("nbf", now.Add(time.Hour).Unix())), hs, MsgNotYetValid},
		{"issued in future", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, with("iat", now.Add(time.Hour).Unix())), hs, MsgIssuedInFuture},
		{"bad issuer", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, with("iss", "someone-else")), hs, MsgBadIssuer},
		{"alg not allowed", "Bearer " + sign(t, jwt.SigningMethodRS256, rsaKey, ok), hs, MsgUnsupportedAlg},
		{"HS256 against an RSA-only broker", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, ok), rs, MsgUnsupportedAlg},
		{"RSA signed by another key", "Bearer " + sign(t, jwt.SigningMethodRS256, otherRSA, ok), rs, MsgBadSignature},
		{"alg None", "Bearer " + unsignedWithAlg(t, "None", ok), hs, MsgUnsupportedAlg},
		{"alg unknown to the library", "Bearer " + unsignedWithAlg(t, "HS999", ok), hs, MsgUnsupportedAlg},
		{"crit naming an unknown extension", "Bearer " + signWithHeader(t, secret, ok, "crit", []string{"x-unknown"}), hs, MsgBadHeader},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, aerr := c.v.Verify(c.header)
			if aerr == nil || aerr.Message != c.want {
				t.Fatalf("want %q, got %v", c.want, aerr)
			}
		})
	}
	aud, _ := NewVerifier(Config{Secret: secret, Audience: "lanes"})
	if _, aerr := aud.Verify(sign(t, jwt.SigningMethodHS256, secret, with("aud", "elsewhere"))); aerr == nil || aerr.Message != MsgBadAudience {
		t.Fatalf("audience: %v", aerr)
	}
	without := func(k string) jwt.MapClaims {
		c := with("aud", "lanes")
		delete(c, k)
		return c
	}
	// A required iss or aud that is absent answers as a wrong one, not as a bad header.
	both, _ := NewVerifier(Config{Secret: secret, Issuer: "lanes-test", Audience: "lanes"})
	for _, c := range []struct {
		name   string
		claims jwt.MapClaims
		want   string
	}{
		{"no iss", without("iss"), MsgBadIssuer},
		{"empty iss", with("iss", ""), MsgBadIssuer},
		{"no aud", without("aud"), MsgBadAudience},
		{"empty aud list", with("aud", []string{}), MsgBadAudience},
		{"neither", func() jwt.MapClaims { c := without("iss"); delete(c, "aud"); return c }(), MsgBadIssuer},
	} {
		if _, aerr := both.Verify(sign(t, jwt.SigningMethodHS256, secret, c.claims)); aerr == nil || aerr.Message != c.want {
			t.Errorf("%s: want %q, got %v", c.name, c.want, aerr)
		}
	}
	if _, aerr := both.Verify(sign(t, jwt.SigningMethodHS256, secret, without("nothing"))); aerr != nil {
		t.Fatalf("iss and aud both right: %v", aerr)
	}
	// A token without exp would be valid for ever: refused unless allowed.
	noExp := with("exp", nil)
	delete(noExp, "exp")
	if _, aerr := hs.Verify(sign(t, jwt.SigningMethodHS256, secret, noExp)); aerr == nil || aerr.Message != MsgNoExpiry {
		t.Fatalf("no exp: want %q, got %v", MsgNoExpiry, aerr)
	}
	lenient, _ := NewVerifier(Config{Secret: secret, Issuer: "lanes-test", AllowNoExpiry: true})
	if _, aerr := lenient.Verify(sign(t, jwt.SigningMethodHS256, secret, noExp)); aerr != nil {
		t.Fatalf("no exp with AllowNoExpiry: %v", aerr)
	}
	if _, aerr := lenient.Verify(sign(t, jwt.SigningMethodHS256, secret, with("exp", now.Add(-time.Hour).Unix()))); aerr == nil || aerr.Message != MsgExpired {
		t.Fatalf("AllowNoExpiry still refuses an expired token: %v", aerr)
	}
	if _, err := NewVerifier(Config{}); err == nil {
		t.Fatal("a verifier without keys must not start")
	}
}

func TestRolesAreASetNotALadder(t *testing.T) {
	cases := []struct {
		method, path string
		level        Level
		allowed      []string
		denied       []string
	}{
		{"GET", "/health", Public, []string{}, nil},
		{"GET", "/metrics/prometheus", Public, []string{}, nil},
		{"POST", "/api/v1/push", WriteOnly, []string{RoleWriteOnly, RoleReadWrite, RoleAdmin}, []string{RoleReadOnly}},
		{"GET", "/api/v1/pop/queue/q", ReadWrite, []string{RoleReadWrite, RoleAdmin}, []string{RoleReadOnly, RoleWriteOnly}},
		{"GET", "/api/v1/pop", ReadWrite, []string{RoleReadWrite}, []string{RoleReadOnly}},
		{"POST", "/api/v1/ack", ReadWrite, []string{RoleReadWrite}, []string{RoleWriteOnly, RoleReadOnly}},
		{"POST", "/api/v1/transaction", ReadWrite, []string{RoleAdmin}, []string{RoleWriteOnly}},
		{"POST", "/api/v1/lease/abc/extend", ReadWrite, []string{RoleReadWrite}, []string{RoleReadOnly}},
		{"GET", "/api/v1/resources/queues", ReadOnly, []string{RoleReadOnly, RoleReadWrite, RoleAdmin}, []string{RoleWriteOnly}},
		{"GET", "/api/v1/status/buffers", ReadOnly, []string{RoleReadOnly}, []string{RoleWriteOnly}},
		{"DELETE", "/api/v1/resources/queues/q", Admin, []string{RoleAdmin}, []string{RoleReadWrite, RoleReadOnly, RoleWriteOnly}},
		{"DELETE", "/api/v1/consumer-groups/g", Admin, []string{RoleAdmin}, []string{RoleReadWrite}},
		{"DELETE", "/api/v1/consumer-groups/g/queues/q", Admin, []string{RoleAdmin}, []string{RoleReadWrite}},
		{"DELETE", "/api/v1/dlq", Admin, []string{RoleAdmin}, []string{RoleReadWrite}},
		{"DELETE", "/api/v1/messages/p/t", ReadWrite, []string{RoleReadWrite}, []string{RoleReadOnly}},
		{"POST", "/api/v1/system/maintenance", Admin, []string{RoleAdmin}, []string{RoleReadWrite}},
		{"GET", "/api/v1/system/maintenance", ReadOnly, []string{RoleReadOnly}, []string{RoleWriteOnly}},
		{"POST", "/api/v1/timers", WriteOnly, []string{RoleWriteOnly}, []string{RoleReadOnly}},
		{"GET", "/api/v1/somewhere-new", ReadWrite, []string{RoleReadWrite}, []string{RoleReadOnly}},
		{"GET", "/api/v1/popular", ReadWrite, []string{RoleReadWrite}, []string{RoleReadOnly}},
	}
	for _, c := range cases {
		got := RouteLevel(c.method, c.path)
		if got != c.level {
			t.Errorf("%s %s: level %v, want %v", c.method, c.path, got, c.level)
		}
		for _, r := range c.allowed {
			if !got.Allows([]string{r}) {
				t.Errorf("%s %s: %s must be allowed", c.method, c.path, r)
			}
		}
		for _, r := range c.denied {
			if got.Allows([]string{r}) {
				t.Errorf("%s %s: %s must be denied", c.method, c.path, r)
			}
		}
	}
	if !WriteOnly.Allows([]string{RoleReadOnly, RoleWriteOnly}) {
		t.Error("a token with both read-only and write-only may push")
	}
	if ReadWrite.Allows([]string{RoleReadOnly, RoleWriteOnly}) {
		t.Error("read-only plus write-only is not read-write: the levels are a set")
	}
}
