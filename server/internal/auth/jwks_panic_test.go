package auth

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/lanesmq/lanes/server/internal/testlog"
)

// panickingFetches makes the key sets created after it panic inside the JWKS
// library's fetch while the returned switch is on, as a library bug would:
// their HTTP clients are clones of http.DefaultTransport, whose Proxy func
// runs in the fetching goroutine.
func panickingFetches(t *testing.T) *atomic.Bool {
	on := new(atomic.Bool)
	saved := http.DefaultTransport
	transport := saved.(*http.Transport).Clone()
	transport.Proxy = func(*http.Request) (*url.URL, error) {
		if on.Load() {
			panic("JWKS library bug")
		}
		return nil, nil
	}
	http.DefaultTransport = transport
	t.Cleanup(func() { http.DefaultTransport = saved })
	return on
}

// jwksProvider is an identity provider serving one RSA key, "k-1", and the
// tokens it signs.
type jwksProvider struct {
	url   string
	key   *rsa.PrivateKey
	token func(kid string) string
}

func newJWKSProvider(t *testing.T) jwksProvider {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	jwk := map[string]any{"kty": "RSA", "kid": "k-1", "alg": "RS256", "use": "sig",
		"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes())}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []any{jwk}})
	}))
	t.Cleanup(server.Close)
	token := func(kid string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": "s", "exp": time.Now().Add(time.Hour).Unix()})
		tok.Header["kid"] = kid
		signed, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return signed
	}
	return jwksProvider{url: server.URL, key: key, token: token}
}

func waitForKeySet(t *testing.T, v *Verifier, what string, done func(KeySetStatus) bool) KeySetStatus {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		status := v.KeySets()[0]
		if done(status) {
			return status
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 5 s for %s; the key set is %+v", what, status)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// c9d667f had a fetch for an unknown kid end its wait even if the JWKS
// library panics, but the fetch runs in a goroutine of its own: the panic
// ended the broker, whatever the fetch's defer did. It is now raised again
// in the request's goroutine (where the broker answers a panic 500 and
// serves on), and the set's next unknown kid is fetched, not left waiting.
func TestAPanicInAnUnknownKIDFetchReachesTheRequest(t *testing.T) {
	panics := panickingFetches(t)
	provider := newJWKSProvider(t)
	v, err := NewVerifier(Config{JWKSURLs: []string{provider.url}, JWKSRefresh: time.Hour,
		JWKSUnknownKIDRefresh: time.Millisecond, JWKSTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)

	panics.Store(true)
	func() {
		defer func() {
			if p := recover(); p != "JWKS library bug" {
				t.Fatalf("recovered in the request's goroutine: %v; want the library's panic", p)
			}
		}()
		_, _ = v.Verify("Bearer " + provider.token("unknown-1"))
	}()
	if status := v.KeySets()[0]; status.Failures != 1 || status.Keys != 1 {
		t.Fatalf("after the panic the key set is %+v; want 1 failure and its key still held", status)
	}

	panics.Store(false)
	time.Sleep(10 * time.Millisecond) // past the unknown-kid interval
	answered := make(chan *Error, 1)
	go func() {
		_, e := v.Verify("Bearer " + provider.token("unknown-2"))
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
	if _, e := v.Verify("Bearer " + provider.token("k-1")); e != nil {
		t.Fatalf("a held kid after the panic: %v", e)
	}
}

// The periodic refresh ran in the JWKS library's own goroutine, where a
// panic (a key set the parser trips on) ended the broker. It is now our
// loop: the panic is logged at error level with the set's URL, counted as a
// failed fetch, the keys held stay in use, and the next interval fetches.
func TestAPanicInAPeriodicJWKSFetchIsAFailedFetch(t *testing.T) {
	panics := panickingFetches(t)
	provider := newJWKSProvider(t)
	var logged testlog.Buffer
	v, err := NewVerifier(Config{JWKSURLs: []string{provider.url + "/jwks"}, JWKSRefresh: 20 * time.Millisecond,
		JWKSTimeout: time.Second, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	waitForKeySet(t, v, "the startup fetch", func(s KeySetStatus) bool { return s.Reachable })

	panics.Store(true)
	failed := waitForKeySet(t, v, "a failed refresh", func(s KeySetStatus) bool { return s.Failures > 0 })
	if failed.Reachable || failed.LastError != errFetchPanicked.Error() || failed.Keys != 1 {
		t.Fatalf("after a refresh that panicked the key set is %+v; want unreachable, %q, its key held",
			failed, errFetchPanicked)
	}
	if _, e := v.Verify("Bearer " + provider.token("k-1")); e != nil {
		t.Fatalf("the held key after the panic: %v", e)
	}
	// The failure is counted inside the fetch, the panic logged as it
	// leaves: the line may come a moment after the count.
	line := ""
	for deadline := time.Now().Add(5 * time.Second); line == "" && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, l := range strings.Split(logged.String(), "\n") {
			if strings.Contains(l, "JWKS fetch panicked") {
				line = l
				break
			}
		}
	}
	if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "url="+provider.url+"/jwks") ||
		!strings.Contains(line, "JWKS library bug") {
		t.Fatalf("the panic's log line: %q; want level ERROR, the set's URL and the panic", line)
	}

	panics.Store(false)
	waitForKeySet(t, v, "the next refresh", func(s KeySetStatus) bool { return s.Reachable })
}

// The startup fetch ran inside the library's constructor, in a goroutine of
// newKeySets: a panic there ended the broker before it served. It is now a
// failed fetch; the broker starts with the set empty and fetches it later.
func TestAPanicInTheStartupJWKSFetchIsAFailedFetch(t *testing.T) {
	panics := panickingFetches(t)
	panics.Store(true)
	provider := newJWKSProvider(t)
	v, err := NewVerifier(Config{JWKSURLs: []string{provider.url}, JWKSRefresh: 20 * time.Millisecond,
		JWKSTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	if status := v.KeySets()[0]; status.Failures == 0 || status.Reachable || status.LastError != errFetchPanicked.Error() {
		t.Fatalf("after a startup fetch that panicked the key set is %+v; want a failed fetch", status)
	}

	panics.Store(false)
	waitForKeySet(t, v, "the next refresh", func(s KeySetStatus) bool { return s.Reachable && s.Keys == 1 })
	if _, e := v.Verify("Bearer " + provider.token("k-1")); e != nil {
		t.Fatalf("a key fetched after the panic: %v", e)
	}
}
