package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// Defaults of the JWKS timings when Config leaves them zero.
const (
	defaultJWKSRefresh           = time.Hour
	defaultJWKSUnknownKIDRefresh = 10 * time.Second
	defaultJWKSTimeout           = 5 * time.Second
)

// maxJWKSBytes bounds a fetched key set: a real one is a few KiB, and the
// broker must not hold whatever a compromised or broken endpoint sends.
const maxJWKSBytes = 1 << 20

var errUnknownKID = errors.New("unknown key ID")

// keySet is a JSON Web Key Set fetched over HTTP and cached per kid. It is
// fetched again every refresh interval, and when a token names a kid it lacks,
// at most once per unknown-kid interval: a flood of made-up kids costs the
// endpoint one fetch per interval, and answers at once in between.
type keySet struct {
	// fetched is the set as last fetched; reading it never fetches.
	fetched jwkset.Storage
	// refetching reads a kid from fetched, and fetches the set again when it lacks it.
	refetching jwkset.Storage
	unknownKID *rate.Limiter
	timeout    time.Duration
	transport  *http.Transport
	stop       context.CancelFunc
}

// newKeySet fetches the set once, waiting at most cfg.JWKSTimeout: an endpoint
// that is down leaves the set empty and the broker starts anyway.
func newKeySet(cfg Config) (*keySet, error) {
	u, err := url.Parse(cfg.JWKSURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("jwks url %q: not an absolute http or https URL", cfg.JWKSURL)
	}
	refresh := orDefault(cfg.JWKSRefresh, defaultJWKSRefresh)
	timeout := orDefault(cfg.JWKSTimeout, defaultJWKSTimeout)
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	redacted := u.Redacted()
	ctx, stop := context.WithCancel(context.Background())
	transport := http.DefaultTransport.(*http.Transport).Clone()
	s := &keySet{
		unknownKID: rate.NewLimiter(rate.Every(orDefault(cfg.JWKSUnknownKIDRefresh, defaultJWKSUnknownKIDRefresh)), 1),
		timeout:    timeout,
		transport:  transport,
		stop:       stop,
	}
	s.fetched, err = jwkset.NewStorageFromHTTP(cfg.JWKSURL, jwkset.HTTPClientStorageOptions{
		Client:                    &http.Client{Transport: cappedBodies{transport}, Timeout: timeout},
		Ctx:                       ctx,
		HTTPTimeout:               timeout,
		NoErrorReturnFirstHTTPReq: true,
		RefreshInterval:           refresh,
		RefreshErrorHandler: func(_ context.Context, err error) {
			log.Warn("JWKS fetch failed: the keys fetched before stay in use, tokens naming another kid answer 401 Unknown key ID",
				"url", redacted, "error", err)
		},
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("jwks url: %w", err)
	}
	// The limiter here never holds a fetch back: s.unknownKID decides, without waiting, whether one may run.
	s.refetching, err = jwkset.NewHTTPClient(jwkset.HTTPClientOptions{
		HTTPURLs:          map[string]jwkset.Storage{cfg.JWKSURL: s.fetched},
		RefreshUnknownKID: rate.NewLimiter(rate.Inf, 1),
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("jwks url: %w", err)
	}
	return s, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func (s *keySet) close() {
	s.stop()
	s.transport.CloseIdleConnections()
}

// key is the key named kid, for a token signed with alg.
func (s *keySet) key(kid, alg string) (any, error) {
	jwk, err := s.fetched.KeyRead(context.Background(), kid)
	if errors.Is(err, jwkset.ErrKeyNotFound) && s.unknownKID.Allow() {
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		defer cancel()
		jwk, err = s.refetching.KeyRead(ctx, kid)
	}
	if err != nil {
		return nil, errUnknownKID
	}
	if use := jwk.Marshal().USE; use != "" && use != jwkset.UseSig {
		// An encryption key verifies no signature.
		return nil, errUnknownKID
	}
	key, ok := publicKeyFor(jwk, alg)
	if !ok {
		return nil, errUnsupportedAlg
	}
	return key, nil
}

// keysFor are the cached keys that can verify a token signed with alg that
// names no kid; the token is valid if one of them verifies it.
func (s *keySet) keysFor(alg string) []jwt.VerificationKey {
	all, err := s.fetched.KeyReadAll(context.Background())
	if err != nil {
		return nil
	}
	var keys []jwt.VerificationKey
	for _, jwk := range all {
		if use := jwk.Marshal().USE; use != "" && use != jwkset.UseSig {
			continue
		}
		if key, ok := publicKeyFor(jwk, alg); ok {
			keys = append(keys, key)
		}
	}
	return keys
}

// publicKeyFor is jwk's public key if alg may be verified with it: the JWK's
// own alg, when it names one, must be alg, and the key's type must be alg's,
// so no token gets an RSA or shared key read as another kind.
func publicKeyFor(jwk jwkset.JWK, alg string) (any, bool) {
	if named := jwk.Marshal().ALG.String(); named != "" && named != alg {
		return nil, false
	}
	key := jwk.Key()
	if private, ok := key.(interface{ Public() crypto.PublicKey }); ok {
		key = private.Public()
	}
	return key, algFits(alg, key)
}

// algFits reports whether alg is an asymmetric algorithm of key's type (and,
// for ECDSA, of its curve).
func algFits(alg string, key any) bool {
	switch k := key.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case *ecdsa.PublicKey:
		bits := map[string]int{"ES256": 256, "ES384": 384, "ES512": 521}[alg]
		return bits != 0 && k.Curve.Params().BitSize == bits
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

// cappedBodies fails a response body past maxJWKSBytes.
type cappedBodies struct{ next http.RoundTripper }

func (c cappedBodies) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &cappedBody{ReadCloser: resp.Body, left: maxJWKSBytes}
	return resp, nil
}

type cappedBody struct {
	io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("JWKS larger than %d bytes", maxJWKSBytes)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}
