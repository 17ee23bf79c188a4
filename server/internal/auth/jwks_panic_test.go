package auth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// panickingFetch stands in for a JWKS library whose fetch for an unknown kid panics.
type panickingFetch struct{ jwkset.Storage }

func (panickingFetch) KeyRead(context.Context, string) (jwkset.JWK, error) {
	panic("JWKS library bug")
}

// c9d667f had a fetch for an unknown kid end its wait even if the JWKS
// library panics, but the fetch runs in a goroutine of its own: the panic
// ended the broker, whatever the fetch's defer did. It is now raised again
// in the request's goroutine (where the broker answers a panic 500 and
// serves on), and the set's next unknown kid is fetched, not left waiting.
func TestAPanicInAnUnknownKIDFetchReachesTheRequest(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	jwk := map[string]any{"kty": "RSA", "kid": "k-1", "alg": "RS256", "use": "sig",
		"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes())}
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []any{jwk}})
	}))
	t.Cleanup(provider.Close)
	v, err := NewVerifier(Config{JWKSURLs: []string{provider.URL}, JWKSRefresh: time.Hour,
		JWKSUnknownKIDRefresh: time.Millisecond, JWKSTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	token := func(kid string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": "s", "exp": time.Now().Add(time.Hour).Unix()})
		tok.Header["kid"] = kid
		signed, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return signed
	}

	set := v.jwks[0]
	library := set.refetching
	set.refetching = panickingFetch{}
	func() {
		defer func() {
			if p := recover(); p != "JWKS library bug" {
				t.Fatalf("recovered in the request's goroutine: %v; want the library's panic", p)
			}
		}()
		_, _ = v.Verify("Bearer " + token("unknown-1"))
	}()

	set.refetching = library
	time.Sleep(10 * time.Millisecond) // past the unknown-kid interval
	answered := make(chan *Error, 1)
	go func() {
		_, e := v.Verify("Bearer " + token("unknown-2"))
		answered <- e
	}()
	select {
	case e := <-answered:
		if e == nil || e.Message != MsgUnknownKeyID {
			t.Fatalf("the next unknown kid: %v; want %q", e, MsgUnknownKeyID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the next unknown kid still waits for the fetch that panicked")
	}
	if _, e := v.Verify("Bearer " + token("k-1")); e != nil {
		t.Fatalf("a held kid after the panic: %v", e)
	}
}
