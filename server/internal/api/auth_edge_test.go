package api

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/lanesmq/lanes/server/internal/auth"
)

// answer is one reply of the broker to a request with the given Authorization headers.
type answer struct {
	status int
	body   errorBody
	header http.Header
}

func sendWithAuthorization(t *testing.T, b *resilientBroker, authorization ...string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.URL+"/api/v1/resources/queues", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range authorization {
		req.Header.Add("Authorization", a)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a answer
	a.status, a.header = resp.StatusCode, resp.Header
	if resp.StatusCode >= 400 {
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("a %d answered %q, want a JSON error", resp.StatusCode, ct)
			return a
		}
		decodeJSON(t, resp, &a.body)
	}
	return a
}

// unsigned is a token whose header names alg and whose signature is empty.
func unsigned(t *testing.T, alg string, claims jwt.MapClaims) string {
	t.Helper()
	header, _ := json.Marshal(map[string]string{"alg": alg, "typ": "JWT"})
	body, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(header) + "." + base64.RawURLEncoding.EncodeToString(body) + "."
}

// TestJWTTokenEdgeCasesOnABroker sends a broker with auth on (5 s leeway, as
// LANES_JWT_LEEWAY_SECONDS defaults to) the tokens and headers an attacker or a
// misconfigured issuer would: each refusal is a JSON 401 or 403 with its code.
func TestJWTTokenEdgeCasesOnABroker(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	publicPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	verifier := func(cfg auth.Config) *resilientBroker {
		cfg.Leeway = 5 * time.Second
		v, err := auth.NewVerifier(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return newBrokerWith(t, testDSN, Options{Auth: v}, "")
	}
	hs := verifier(auth.Config{Secret: []byte(testSecret)})
	rs := verifier(auth.Config{PublicKey: publicPEM})
	both := verifier(auth.Config{Secret: []byte(testSecret), PublicKey: publicPEM})

	now := time.Now()
	claims := func(extra jwt.MapClaims) jwt.MapClaims {
		c := jwt.MapClaims{"sub": "edge", "role": auth.RoleAdmin, "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
		for k, v := range extra {
			if v == nil {
				delete(c, k)
			} else {
				c[k] = v
			}
		}
		return c
	}
	signHS := func(secret []byte, c jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := signHS([]byte(testSecret), claims(nil))
	rsSigned, err := jwt.NewWithClaims(jwt.SigningMethodRS256, claims(nil)).SignedString(rsaKey)
	if err != nil {
		t.Fatal(err)
	}
	huge := signHS([]byte(testSecret), claims(jwt.MapClaims{"pad": strings.Repeat("x", 600<<10)}))

	const ok = 0
	cases := []struct {
		name          string
		broker        *resilientBroker
		authorization []string
		status        int
		message       string
	}{
		{"valid", hs, []string{"Bearer " + good}, ok, ""},
		{"bare token", hs, []string{good}, ok, ""},
		{"lower-case scheme", hs, []string{"bearer " + good}, ok, ""},
		{"upper-case scheme", hs, []string{"BEARER " + good}, ok, ""},
		{"spaces after the scheme", hs, []string{"Bearer    " + good}, ok, ""},
		{"no header", hs, nil, 401, auth.MsgAuthRequired},
		{"empty header", hs, []string{""}, 401, auth.MsgAuthRequired},
		{"scheme without a token", hs, []string{"Bearer"}, 401, auth.MsgBadHeader},
		{"basic credentials", hs, []string{"Basic dXNlcjpwYXNz"}, 401, auth.MsgBadHeader},
		{"alg none", hs, []string{"Bearer " + unsigned(t, "none", claims(nil))}, 401, auth.MsgUnsupportedAlg},
		{"alg NONE", hs, []string{"Bearer " + unsigned(t, "NONE", claims(nil))}, 401, auth.MsgUnsupportedAlg},
		{"alg none on an RSA broker", rs, []string{"Bearer " + unsigned(t, "none", claims(nil))}, 401, auth.MsgUnsupportedAlg},
		{"wrong secret", hs, []string{"Bearer " + signHS([]byte("not-the-secret-not-the-secret-xx"), claims(nil))}, 401, auth.MsgBadSignature},
		{"HS256 keyed with the RSA public key, RSA broker", rs, []string{"Bearer " + signHS([]byte(publicPEM), claims(nil))}, 401, auth.MsgUnsupportedAlg},
		{"HS256 keyed with the RSA public key, broker with both", both, []string{"Bearer " + signHS([]byte(publicPEM), claims(nil))}, 401, auth.MsgBadSignature},
		{"RS256 on an HMAC broker", hs, []string{"Bearer " + rsSigned}, 401, auth.MsgUnsupportedAlg},
		{"RS256 on an RSA broker", rs, []string{"Bearer " + rsSigned}, ok, ""},
		{"RS256 on a broker with both", both, []string{"Bearer " + rsSigned}, ok, ""},
		{"expired a minute ago", hs, []string{"Bearer " + signHS([]byte(testSecret), claims(jwt.MapClaims{"exp": now.Add(-time.Minute).Unix()}))}, 401, auth.MsgExpired},
		{"expired within the leeway", hs, []string{"Bearer " + signHS([]byte(testSecret), claims(jwt.MapClaims{"exp": now.Add(-2 * time.Second).Unix()}))}, ok, ""},
		{"nbf in a minute", hs, []string{"Bearer " + signHS([]byte(testSecret), claims(jwt.MapClaims{"nbf": now.Add(time.Minute).Unix()}))}, 401, auth.MsgNotYetValid},
		{"nbf within the leeway", hs, []string{"Bearer " + signHS([]byte(testSecret), claims(jwt.MapClaims{"nbf": now.Add(2 * time.Second).Unix()}))}, ok, ""},
		{"iat in a minute", hs, []string{"Bearer " + signHS([]byte(testSecret), claims(jwt.MapClaims{"iat": now.Add(time.Minute).Unix()}))}, 401, auth.MsgIssuedInFuture},
		{"iat within the leeway", hs, []string{"Bearer " + signHS([]byte(testSecret), claims(jwt.MapClaims{"iat": now.Add(2 * time.Second).Unix()}))}, ok, ""},
		{"exp not a number", hs, []string{"Bearer " + signHS([]byte(testSecret), claims(jwt.MapClaims{"exp": "tomorrow"}))}, 401, auth.MsgBadHeader},
		{"no role claim", hs, []string{"Bearer " + signHS([]byte(testSecret), claims(jwt.MapClaims{"role": nil}))}, 403, auth.MsgForbidden},
		{"unknown role", hs, []string{"Bearer " + signHS([]byte(testSecret), claims(jwt.MapClaims{"role": "superuser"}))}, 403, auth.MsgForbidden},
		{"role of another case", hs, []string{"Bearer " + signHS([]byte(testSecret), claims(jwt.MapClaims{"role": "Admin"}))}, 403, auth.MsgForbidden},
		{"roles as an array", hs, []string{"Bearer " + signHS([]byte(testSecret), claims(jwt.MapClaims{"role": nil, "roles": []string{"read-only"}}))}, ok, ""},
		{"roles as one string", hs, []string{"Bearer " + signHS([]byte(testSecret), claims(jwt.MapClaims{"role": nil, "roles": "read-only"}))}, ok, ""},
		{"role as an array", hs, []string{"Bearer " + signHS([]byte(testSecret), claims(jwt.MapClaims{"role": []string{"read-only"}}))}, ok, ""},
		{"role not a string", hs, []string{"Bearer " + signHS([]byte(testSecret), claims(jwt.MapClaims{"role": 7}))}, 403, auth.MsgForbidden},
		{"two Authorization headers, valid first", hs, []string{"Bearer " + good, "Bearer junk"}, 401, auth.MsgBadHeader},
		{"two Authorization headers, valid second", hs, []string{"Bearer junk", "Bearer " + good}, 401, auth.MsgBadHeader},
		{"two identical valid Authorization headers", hs, []string{"Bearer " + good, "Bearer " + good}, 401, auth.MsgBadHeader},
		{"a 600 KiB token", hs, []string{"Bearer " + huge}, ok, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := sendWithAuthorization(t, c.broker, c.authorization...)
			switch {
			case c.status == ok:
				if a.status != http.StatusOK {
					t.Fatalf("%d %+v, want 200", a.status, a.body)
				}
			case a.status != c.status || a.body.Error != c.message:
				t.Fatalf("%d %+v, want %d %q", a.status, a.body, c.status, c.message)
			case c.status == 401 && a.body.Code != "unauthorized", c.status == 403 && a.body.Code != "forbidden":
				t.Fatalf("%d with code %q", a.status, a.body.Code)
			case a.header.Get("WWW-Authenticate") != wantChallenge(c.status, c.message):
				t.Fatalf("%d with WWW-Authenticate %q, want %q", a.status, a.header.Get("WWW-Authenticate"), wantChallenge(c.status, c.message))
			}
		})
	}
}
