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
	"runtime/debug"
	"slices"
	"strings"
	"sync"
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
// fetched again every refresh interval, and when a token names a kid it lacks
// or one whose keys failed the token, at most once per unknown-kid interval:
// a flood of made-up kids or forged tokens costs the endpoint one fetch per
// interval. A token that comes while that fetch runs
// waits for it (fetchForKID); one that comes in between answers at once.
type keySet struct {
	// fetched is the set as last fetched; reading it never fetches.
	fetched jwkset.Storage
	// fetchOptions have the library fetch rawURL once into fetched (fetch).
	// Its own refresh loop is not used: a panic in its goroutine would end
	// the broker; refreshEvery is ours.
	rawURL       string
	fetchOptions jwkset.HTTPClientStorageOptions
	redactedURL  string // for the log
	log          *slog.Logger
	ctx          context.Context // ends with the set (stop): its loop and any fetch under way
	unknownKID   *rate.Limiter
	transport    *http.Transport
	stop         context.CancelFunc

	// kidFetch is closed when the fetch for an unknown kid under way ends
	// (nil: none runs); tokens that arrive meanwhile wait for it.
	kidFetchMu sync.Mutex
	kidFetch   chan struct{}

	mu     sync.Mutex
	status KeySetStatus
}

// KeySetStatus is what a key set's fetches left: the keys held, the last
// success and the last failure.
type KeySetStatus struct {
	// URL is the set's URL without credentials or query: /health and the metrics need no token.
	URL string
	// Keys is how many keys the last successful fetch gave (0 before one).
	Keys int
	// Reachable reports that the last fetch succeeded.
	Reachable bool
	// LastRefresh is the time of the last successful fetch (zero: none yet).
	LastRefresh time.Time
	// LastError says why the last failed fetch failed; LastErrorAt is when (zero: none yet).
	LastError   string
	LastErrorAt time.Time
	// Failures counts the failed fetches since startup.
	Failures int64
}

// newKeySet fetches the set at rawURL once, waiting at most cfg.JWKSTimeout,
// then every cfg.JWKSRefresh: an endpoint that is down leaves the set empty
// and the broker starts anyway.
func newKeySet(cfg Config, rawURL string) (*keySet, error) {
	u, err := parseJWKSURL(rawURL)
	if err != nil {
		return nil, err
	}
	refresh := orDefault(cfg.JWKSRefresh, defaultJWKSRefresh)
	timeout := orDefault(cfg.JWKSTimeout, defaultJWKSTimeout)
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ctx, stop := context.WithCancel(context.Background())
	transport := http.DefaultTransport.(*http.Transport).Clone()
	s := &keySet{
		rawURL:      rawURL,
		redactedURL: RedactedJWKSURL(rawURL),
		log:         log,
		ctx:         ctx,
		status:      KeySetStatus{URL: shownURL(u)},
		unknownKID:  rate.NewLimiter(rate.Every(orDefault(cfg.JWKSUnknownKIDRefresh, defaultJWKSUnknownKIDRefresh)), 1),
		transport:   transport,
		stop:        stop,
	}
	s.fetched = &recordedFetches{Storage: jwkset.NewMemoryStorage(), set: s}
	s.fetchOptions = jwkset.HTTPClientStorageOptions{
		Client:      &http.Client{Transport: cappedBodies{transport}, Timeout: timeout},
		HTTPTimeout: timeout,
		Storage:     s.fetched,
	}
	s.fetchSurvivingPanics()
	go s.refreshEvery(refresh)
	return s, nil
}

// refreshEvery fetches the set every interval until the set is closed.
func (s *keySet) refreshEvery(interval time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-ticker.C:
			s.fetchSurvivingPanics()
		}
	}
}

// errFetchPanicked is what /health shows of a fetch that panicked; the panic
// itself, which may quote the set, goes to the log only.
var errFetchPanicked = errors.New("the fetch panicked (see the broker's log)")

// fetchSurvivingPanics fetches the set, and counts a panic in the JWKS library
// as a failed fetch that keeps the keys held: a malformed set must not end
// the broker, at startup or at a refresh.
func (s *keySet) fetchSurvivingPanics() {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("JWKS fetch panicked: counted as a failed fetch, the keys fetched before stay in use",
				"url", s.redactedURL, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	s.fetch()
}

// fetch fetches the set once, within the set's timeout, and records how it went:
// recordedFetches a success, fetchFailed a failure or a panic (raised again).
func (s *keySet) fetch() {
	defer func() {
		if p := recover(); p != nil {
			s.fetchFailed(errFetchPanicked)
			panic(p)
		}
	}()
	options := s.fetchOptions
	options.Ctx = s.ctx
	// Without a RefreshInterval the library fetches once and starts no goroutine.
	if _, err := jwkset.NewStorageFromHTTP(s.rawURL, options); err != nil {
		s.fetchFailed(err)
		s.log.Warn("JWKS fetch failed: the keys fetched before stay in use, tokens naming another kid answer 401 Unknown key ID",
			"url", s.redactedURL, "error", fetchErrorText(err))
	}
}

// recordedFetches is a set's storage; the library replaces its keys only
// after a fetch that succeeded, which is how the set learns of one.
type recordedFetches struct {
	jwkset.Storage
	set *keySet
}

func (r *recordedFetches) KeyReplaceAll(ctx context.Context, keys []jwkset.JWK) error {
	if err := r.Storage.KeyReplaceAll(ctx, keys); err != nil {
		return err
	}
	r.set.mu.Lock()
	defer r.set.mu.Unlock()
	r.set.status.Keys, r.set.status.Reachable, r.set.status.LastRefresh = len(keys), true, time.Now()
	return nil
}

func (s *keySet) fetchFailed(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status.Reachable = false
	s.status.LastError, s.status.LastErrorAt = fetchErrorText(err), time.Now()
	s.status.Failures++
}

func (s *keySet) snapshot() KeySetStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// fetchErrorText is err without the URL Go's HTTP client writes into it,
// which may carry a query secret: /health shows the text to anyone.
func fetchErrorText(err error) string {
	var requestErr *url.Error
	if errors.As(err, &requestErr) {
		return "request failed: " + requestErr.Err.Error()
	}
	return err.Error()
}

// parseJWKSURL takes an absolute http or https URL.
func parseJWKSURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		if shown, ok := redactJWKSURL(rawURL); ok {
			return nil, fmt.Errorf("jwks url %q: not an absolute http or https URL", shown)
		}
		return nil, errors.New("jwks url (not shown: it cannot be read as a URL, so where its credentials end is unknown): not an absolute http or https URL")
	}
	return u, nil
}

// maskedValue replaces what a log must not show, as the configuration line masks a password.
const maskedValue = "xxxxx"

// RedactedJWKSURL is a JWKS URL as the log shows it: without userinfo or
// fragment, each query value masked and its key kept (an access key often
// rides in the query); maskedValue when the text cannot be read as a URL.
func RedactedJWKSURL(rawURL string) string {
	if shown, ok := redactJWKSURL(rawURL); ok {
		return shown
	}
	return maskedValue
}

// redactJWKSURL is RedactedJWKSURL; ok is false when rawURL has no scheme and
// host, or an '@' net/url did not take as the end of the userinfo (a password
// holding '#', '?' or '/' moves the host into it): nothing of it is then safe to show.
func redactJWKSURL(rawURL string) (shown string, ok bool) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Opaque != "" || u.Scheme == "" || u.Host == "" ||
		u.User == nil && strings.Contains(rawURL, "@") ||
		strings.Contains(u.Host+u.Path+u.RawQuery+u.Fragment, "@") {
		return "", false
	}
	u.User, u.Fragment, u.RawFragment = nil, "", ""
	if u.RawQuery != "" {
		pairs := strings.Split(u.RawQuery, "&")
		for i, pair := range pairs {
			if key, _, hasValue := strings.Cut(pair, "="); hasValue {
				pairs[i] = key + "=" + maskedValue
			} else if pair != "" {
				pairs[i] = maskedValue // a value without a key
			}
		}
		u.RawQuery = strings.Join(pairs, "&")
	}
	return u.String(), true
}

// shownURL is u without its credentials, query or fragment.
func shownURL(u *url.URL) string {
	shown := *u
	shown.User, shown.RawQuery, shown.ForceQuery, shown.Fragment, shown.RawFragment = nil, "", false, "", ""
	return shown.String()
}

// CheckJWKSURLs reports whether urls can be the key sets of one broker: each
// an absolute http or https URL, and no two shown alike (the same URL twice
// is a typo; two differing only in credentials or query could not be told
// apart in /health and the metrics).
func CheckJWKSURLs(urls []string) error {
	shownAs := map[string]string{}
	for i, raw := range urls {
		u, err := parseJWKSURL(raw)
		if err != nil && len(urls) > 1 {
			return fmt.Errorf("entry %d of %d: %w", i+1, len(urls), err)
		}
		if err != nil {
			return err
		}
		shown := shownURL(u)
		if other, taken := shownAs[shown]; taken {
			if other == raw {
				return fmt.Errorf("jwks url %s is listed twice", shown)
			}
			return fmt.Errorf("jwks urls %s are listed twice, differing only in credentials or query, which /health and the metrics leave out; list each key set once", shown)
		}
		shownAs[shown] = raw
	}
	return nil
}

// keySets are every configured key set, in the configured order.
type keySets []*keySet

// newKeySets fetches every set at once, so sets that are down hold the
// startup for one timeout, not one each.
func newKeySets(cfg Config) (keySets, error) {
	if err := CheckJWKSURLs(cfg.JWKSURLs); err != nil {
		return nil, err
	}
	sets := make(keySets, len(cfg.JWKSURLs))
	errs := make([]error, len(cfg.JWKSURLs))
	var wg sync.WaitGroup
	for i, raw := range cfg.JWKSURLs {
		wg.Go(func() { sets[i], errs[i] = newKeySet(cfg, raw) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		sets.close()
		return nil, err
	}
	return sets, nil
}

func (sets keySets) close() {
	for _, s := range sets {
		if s != nil {
			s.stop()
			s.transport.CloseIdleConnections()
		}
	}
}

func (sets keySets) statuses() []KeySetStatus {
	out := make([]KeySetStatus, len(sets))
	for i, s := range sets {
		out[i] = s.snapshot()
	}
	return out
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// key is the key named kid, for a token signed with alg. The kid is looked up
// in every set; when none holds a key of it that fits alg, each set whose
// unknown-kid interval has passed is fetched again, and each set being
// fetched is waited for (all at once, so the slowest bounds the wait). A kid
// that two sets name for different keys gives both keys, and the token
// verifies if one of them does: each set is trusted whole, so this grants
// nothing a set does not, and one provider's choice of kid cannot lock out
// the other's tokens.
func (sets keySets) key(kid, alg string) (any, error) {
	key, err := verificationKey(sets.cached(kid), alg)
	if err != nil {
		// A set may have added a key of that kid, or one that fits alg, since.
		found, _ := sets.refetch(kid)
		key, err = verificationKey(found, alg)
	}
	return key, err
}

// errNoNewKeys says that fetching again for a token that no key of its kid
// verified ran no fetch: its keys are those that already failed it.
var errNoNewKeys = errors.New("no key set fetched again")

// keyFetchedAgain is key for a token that no key named kid verified, once the
// sets are fetched again by the unknown-kid rule: another set, or the same
// one, may have rotated in a key under a kid already held.
func (sets keySets) keyFetchedAgain(kid, alg string) (any, error) {
	found, fetched := sets.refetch(kid)
	if !fetched {
		return nil, errNoNewKeys
	}
	return verificationKey(found, alg)
}

// verificationKey is the key, or the keys, of found that may verify a token
// signed with alg.
func verificationKey(found []jwkset.JWK, alg string) (any, error) {
	var keys []jwt.VerificationKey
	unsupported := false
	for _, jwk := range found {
		if use := jwk.Marshal().USE; use != "" && use != jwkset.UseSig {
			// An encryption key verifies no signature.
			continue
		}
		key, ok := publicKeyFor(jwk, alg)
		if !ok {
			unsupported = true
			continue
		}
		keys = append(keys, key)
	}
	switch {
	case len(keys) == 1:
		return keys[0], nil
	case len(keys) > 1:
		return jwt.VerificationKeySet{Keys: keys}, nil
	case unsupported:
		return nil, errUnsupportedAlg
	default:
		return nil, errUnknownKID
	}
}

// cached are the keys named kid the sets hold now, without a fetch.
func (sets keySets) cached(kid string) []jwkset.JWK {
	var found []jwkset.JWK
	for _, s := range sets {
		if jwk, err := s.fetched.KeyRead(context.Background(), kid); err == nil {
			found = append(found, jwk)
		}
	}
	return found
}

// refetch fetches again, at once, every set whose unknown-kid interval has
// passed, waits for the fetches already under way, and returns the keys named
// kid the sets then hold, and whether any set was fetched or waited for.
func (sets keySets) refetch(kid string) ([]jwkset.JWK, bool) {
	results := make([]*jwkset.JWK, len(sets))
	ranFetch := make([]bool, len(sets))
	panics := make([]any, len(sets))
	var wg sync.WaitGroup
	for i, s := range sets {
		wg.Go(func() {
			// A panic left in this goroutine would end the broker; raised again
			// in the request's, it is answered 500 as any handler's is.
			defer func() { panics[i] = recover() }()
			ranFetch[i] = s.fetchForKID()
			if jwk, err := s.fetched.KeyRead(context.Background(), kid); err == nil {
				results[i] = &jwk
			}
		})
	}
	wg.Wait()
	for _, p := range panics {
		if p != nil {
			panic(p)
		}
	}
	var found []jwkset.JWK
	for _, jwk := range results {
		if jwk != nil {
			found = append(found, *jwk)
		}
	}
	return found, slices.Contains(ranFetch, true)
}

// fetchForKID fetches the set again for a kid it lacks, or whose key failed a
// token: by this call when its unknown-kid interval has passed, or by the
// fetch under way, which it waits for; it reports whether either ran. A token
// that arrives while a rotated key is fetched thus verifies instead of
// answering 401, and the set still sees one fetch at a time, at most one per
// interval. The caller reads the set again even without a fetch: one may
// have ended since it was last read.
func (s *keySet) fetchForKID() bool {
	s.kidFetchMu.Lock()
	underWay := s.kidFetch
	if underWay == nil && s.unknownKID.Allow() {
		done := make(chan struct{})
		s.kidFetch = done
		s.kidFetchMu.Unlock()
		s.fetchUnknownKID(done)
		return true
	}
	s.kidFetchMu.Unlock()
	if underWay != nil {
		<-underWay
		return true
	}
	return false
}

// fetchUnknownKID fetches the set for fetchForKID, then ends the fetch under
// way, done, even if the library panics (refetch hands the panic to the
// request), so later tokens do not wait for ever.
func (s *keySet) fetchUnknownKID(done chan struct{}) {
	defer func() {
		s.kidFetchMu.Lock()
		s.kidFetch = nil
		s.kidFetchMu.Unlock()
		close(done)
	}()
	s.fetch()
}

// keysFor are the cached keys of every set that can verify a token signed
// with alg that names no kid; the token is valid if one of them verifies it.
func (sets keySets) keysFor(alg string) []jwt.VerificationKey {
	var keys []jwt.VerificationKey
	for _, s := range sets {
		all, err := s.fetched.KeyReadAll(context.Background())
		if err != nil {
			continue
		}
		for _, jwk := range all {
			if use := jwk.Marshal().USE; use != "" && use != jwkset.UseSig {
				continue
			}
			if key, ok := publicKeyFor(jwk, alg); ok {
				keys = append(keys, key)
			}
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
