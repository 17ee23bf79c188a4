//nolint:bodyclose // every response is handed to Client.decode (via Client.result), which closes the body.
package lanes

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/lanesmq/lanes/sdk-go/internal/gen"
)

// DefaultURL is used when neither WithURL nor LANES_URL is set.
const DefaultURL = "http://localhost:6632"

// userAgent names the SDK in every request, as the TS and Python SDKs name themselves, so a
// broker's or proxy's logs tell the three apart; WithHeader("User-Agent", …) replaces it.
const userAgent = "lanes-mq-go/0.0.0"

// Option configures a Client (see New).
type Option func(*config)

type config struct {
	urls        []string
	token       secret
	tokenFunc   func(context.Context) (string, error)
	timeout     time.Duration
	policy      retryPolicy
	logger      *slog.Logger
	httpClient  *http.Client
	headers     http.Header
	autopilot   *bool
	healthRetry time.Duration
	now         func() time.Time
	rand        func() float64
	sleep       func(context.Context, time.Duration) error // test hook; nil = retryablehttp's own timer
}

// WithURL sets one or several broker base URLs; with several, failed requests fail over to the
// next healthy one (docs/retries.md §4). A single string may also hold comma-separated URLs.
func WithURL(urls ...string) Option {
	return func(c *config) {
		for _, u := range urls {
			for _, p := range strings.Split(u, ",") {
				if p = strings.TrimSpace(p); p != "" {
					c.urls = append(c.urls, p)
				}
			}
		}
	}
}

// WithBearerToken sends Authorization: Bearer <token> on every request. Printing the Client
// (fmt's %v, %+v or %#v, a log line) never shows the token.
func WithBearerToken(token string) Option {
	return func(c *config) { c.token, c.tokenFunc = newSecret(token), nil }
}

// WithBearerTokenFunc sends Authorization: Bearer <token> with the token f returns, asked
// before every attempt, so a client outlives its tokens (the broker refuses one past its exp):
// return a cached token and fetch a new one before it expires. An error from f fails the call
// with it, without sending anything. It replaces WithBearerToken (the last of the two wins).
func WithBearerTokenFunc(f func(ctx context.Context) (string, error)) Option {
	return func(c *config) { c.token, c.tokenFunc = nil, f }
}

// secret is a credential that printing must not show. fmt prints an unexported field by
// reflection, where it cannot call the field's methods, and shows a func found there only as its
// address (under every verb), never what the func captured; so a printed Client or config shows
// no token. Printed directly, a secret redacts itself.
type secret func() string

func newSecret(value string) secret { return func() string { return value } }

const redacted = "[redacted]"

// String redacts the secret.
func (secret) String() string { return redacted }

// GoString redacts the secret.
func (secret) GoString() string { return redacted }

// Format redacts the secret under every verb.
func (secret) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, redacted) }

// reveal is the secret's value, "" for none.
func (s secret) reveal() string {
	if s == nil {
		return ""
	}
	return s()
}

// WithTimeout sets the per-attempt HTTP timeout (default 30 s); 0 sets none, leaving the
// context's deadline and cancellation. Long-poll pops use their own pop timeout plus 5 s.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithRetryAttempts sets the retries after the first attempt for network failures, 408 and 5xx
// (default 2; 0 disables).
func WithRetryAttempts(n int) Option {
	return func(c *config) { c.policy.RetryAttempts = max(n, 0) }
}

// WithRetryDelay sets the base of the computed exponential backoff (default 500 ms).
func WithRetryDelay(d time.Duration) Option { return func(c *config) { c.policy.BaseDelay = d } }

// WithMaxRetryDelay caps the computed backoff (default 8 s).
func WithMaxRetryDelay(d time.Duration) Option { return func(c *config) { c.policy.MaxDelay = d } }

// WithMax429Attempts bounds 429 retries outside long-poll pops (default 10; 0 = none).
// Long-poll pops retry 429 without a bound.
func WithMax429Attempts(n int) Option { return func(c *config) { c.policy.Max429 = max(n, 0) } }

// WithMaxRetryAfter caps the server hint the client sleeps (default 60 s); a larger hint
// surfaces as an *APIError matching ErrRateLimited with RetryAfter set.
func WithMaxRetryAfter(d time.Duration) Option {
	return func(c *config) { c.policy.MaxRetryAfter = d }
}

// WithHealthRetryAfter sets how long a broker URL is skipped after a network failure, a 408 or a
// 5xx on it, when WithURL gave several (default 5 s; 0 never skips). While skipped, requests go to
// the other URLs; when all are skipped they are tried in order anyway (docs/retries.md §4).
// New refuses a negative d.
func WithHealthRetryAfter(d time.Duration) Option { return func(c *config) { c.healthRetry = d } }

// WithLogger routes the client's logs (retry decisions at debug) to l. Default: discarded,
// except warnings that must not be silent, which go to slog.Default(): items a push buffer
// drops, and consume loop and iterator errors when no OnError is set (pass a discarding logger
// to silence them too).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithHTTPClient replaces the underlying *http.Client (transport, TLS, proxies). The retry
// policy still wraps it: its Transport, Jar and CheckRedirect are used for each attempt. Prefer
// leaving its Timeout at 0: the SDK sets per-attempt timeouts.
func WithHTTPClient(h *http.Client) Option { return func(c *config) { c.httpClient = h } }

// WithHeader sets a header on every request. Names compare in any letter case and each goes
// out once: a later WithHeader of the same name replaces the earlier value (as the last spelling
// in TS's and Python's headers does), and the caller's value replaces the SDK's Accept,
// Content-Type and User-Agent. WithBearerToken's Authorization and X-Retry-Count stay the SDK's.
func WithHeader(key, value string) Option {
	return func(c *config) { c.headers.Set(key, value) }
}

// WithPopAutopilot sets the client-wide pop autopilot default, overriding the
// LANES_SDK_POP_AUTOPILOT environment variable. A builder's Autopilot call still wins.
func WithPopAutopilot(on bool) Option { return func(c *config) { c.autopilot = &on } }

// withClock is a test hook: a frozen clock, a fixed random source, and a sleep that replaces the
// wait between attempts (the retry loop then waits 0).
func withClock(now func() time.Time, rnd func() float64, sleep func(context.Context, time.Duration) error) Option {
	return func(c *config) { c.now, c.rand, c.sleep = now, rnd, sleep }
}

// Client talks to one Lanes deployment. It is safe for concurrent use; create one per process
// and Close it on shutdown to flush client-side buffers.
type Client struct {
	cfg       config
	bases     []*url.URL
	gen       pathGuard
	log       *slog.Logger
	warnLog   *slog.Logger // the user's logger, else slog.Default: dropped items and loop errors are never silent
	hc        *http.Client // one attempt: the user's transport under the per-attempt timeout
	rlog      retryablehttp.LeveledLogger
	autopilot bool

	// loopPopHC is hc for the pops of consume loops and iterators, which a stop half-closes
	// (popCut). When the SDK built the transport, its transport is loopPopTransport, an
	// HTTP/1.1-only clone: over HTTP/2 (an https broker negotiates it) the cut would have to
	// cancel, a half-close ending the connection's other calls. With WithHTTPClient it is hc and
	// loopPopTransport is nil: the caller chose the transport.
	loopPopHC        *http.Client
	loopPopTransport *http.Transport

	mu        sync.Mutex
	unhealthy map[int]time.Time
	buffers   map[string]*Buffer
	closed    bool
}

// New builds a Client. Without WithURL it reads LANES_URL, else uses DefaultURL. The
// environment variable LANES_SDK_POP_AUTOPILOT (off/false/0/no/disabled) is read here, once.
func New(opts ...Option) (*Client, error) {
	cfg := config{
		timeout:     30 * time.Second,
		policy:      defaultRetryPolicy(),
		headers:     http.Header{},
		healthRetry: 5 * time.Second,
		now:         time.Now,
		rand:        rand.Float64,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if len(cfg.urls) == 0 {
		WithURL(os.Getenv("LANES_URL"))(&cfg)
	}
	if len(cfg.urls) == 0 {
		cfg.urls = []string{DefaultURL}
	}
	if cfg.timeout < 0 {
		return nil, fmt.Errorf("lanes: WithTimeout must not be negative, got %v", cfg.timeout)
	}
	if cfg.healthRetry < 0 {
		return nil, fmt.Errorf("lanes: WithHealthRetryAfter must not be negative, got %v", cfg.healthRetry)
	}
	warnLog := cfg.logger
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
		warnLog = slog.Default()
	}
	var loopPopTransport *http.Transport
	if cfg.httpClient == nil {
		own := http.DefaultTransport.(*http.Transport).Clone()
		// A client talks to one broker (or a few): net/http keeps 2 idle connections per
		// host by default, so consumers that pop and ack in turn closed and dialed one
		// for most calls. Every idle place may go to the broker.
		own.MaxIdleConnsPerHost = own.MaxIdleConns
		cfg.httpClient = &http.Client{Transport: own}
		loopPopTransport = http1Only(own)
	}
	c := &Client{cfg: cfg, log: cfg.logger, warnLog: warnLog, unhealthy: map[int]time.Time{}, buffers: map[string]*Buffer{}}
	c.hc = attemptClient(cfg.httpClient, cfg.timeout)
	c.loopPopHC, c.loopPopTransport = c.hc, loopPopTransport
	if loopPopTransport != nil {
		c.loopPopHC = attemptClient(&http.Client{Transport: loopPopTransport}, cfg.timeout)
	}
	c.rlog = slogLeveled{cfg.logger}
	for _, raw := range cfg.urls {
		u, err := url.Parse(strings.TrimRight(raw, "/"))
		// Any other scheme would build a client whose every call fails.
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("lanes: bad broker URL %q (want http:// or https://)", raw)
		}
		c.bases = append(c.bases, u)
	}
	c.autopilot = autopilotFromEnv(os.Getenv("LANES_SDK_POP_AUTOPILOT"))
	if cfg.autopilot != nil {
		c.autopilot = *cfg.autopilot
	}
	g, err := gen.NewClient(c.bases[0].String(), gen.WithHTTPClient(&transport{c: c}))
	if err != nil {
		return nil, err
	}
	c.gen = pathGuard{g}
	return c, nil
}

// autopilotFromEnv is true unless v is one of off/false/0/no/disabled (case-insensitive, trimmed).
func autopilotFromEnv(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "off", "false", "0", "no", "disabled":
		return false
	}
	return true
}

// Close marks the client closed, flushes every client-side buffer (bounded by ctx), ends
// their background flushers and closes the idle connections of its transport. From then on buffer pushes answer ErrClientClosed; direct calls
// (Push, Pop, Ack, Admin) keep working, since Close releases nothing they use. When ctx ends
// first it returns *UnsentError; the items stay buffered and Close may be called again.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	c.closed = true
	bufs := make([]*Buffer, 0, len(c.buffers))
	for _, b := range c.buffers {
		bufs = append(bufs, b)
	}
	c.mu.Unlock()
	// The flushers stop first (a send they had in flight is kept and sent again, deduplicated
	// by its transaction ids), so the flush below runs under ctx alone.
	for _, b := range bufs {
		b.refuse()
		b.shutdown()
	}
	err := c.FlushAll(ctx)
	c.closeIdleConnections()
	return err
}

// closeIdleConnections ends the idle keep-alive connections of the client's transport (and of
// the one of the loops' pops), and with them their goroutines; a later call dials anew. A
// WithHTTPClient client without a Transport uses http.DefaultTransport, which the process
// shares, so it is left alone.
func (c *Client) closeIdleConnections() {
	if idle, ok := c.cfg.httpClient.Transport.(interface{ CloseIdleConnections() }); ok {
		idle.CloseIdleConnections()
	}
	if c.loopPopTransport != nil {
		c.loopPopTransport.CloseIdleConnections()
	}
}

// http1Only is a clone of t that speaks HTTP/1.1 alone, over TLS too: ALPN offers no h2, and
// a server that picks it anyway gets no HTTP/2 client. The clone carries what Clone already set
// up for h2 on t, so each part is turned off.
func http1Only(t *http.Transport) *http.Transport {
	h1 := t.Clone()
	h1.Protocols = new(http.Protocols)
	h1.Protocols.SetHTTP1(true)
	h1.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	if h1.TLSClientConfig != nil {
		h1.TLSClientConfig.NextProtos = slices.DeleteFunc(slices.Clone(h1.TLSClientConfig.NextProtos),
			func(proto string) bool { return proto == "h2" })
	}
	return h1
}

// Health calls GET /health and returns the broker's body.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var out Health
	_, err := c.result(ctx, &out)(c.gen.GetHealth(ctx))
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// ---------------------------------------------------------------------------------------------
// response handling

// result returns a function that turns a generated call's (*http.Response, error) into a
// status and an error, decoding a 2xx JSON body into out (when out is non-nil). A 204 is never
// read. Non-2xx becomes *APIError.
func (c *Client) result(ctx context.Context, out any) func(*http.Response, error) (int, error) {
	return func(resp *http.Response, err error) (int, error) { return c.decode(ctx, out, resp, err) }
}

// decode is result without the closure: it always closes resp.Body.
func (c *Client) decode(ctx context.Context, out any, resp *http.Response, err error) (int, error) {
	{
		if err != nil {
			if ctx.Err() != nil {
				return 0, context.Cause(ctx)
			}
			var ce *ConnectionError
			var unknown *OutcomeUnknownError
			var tokenErr *tokenError
			var nameErr *InvalidNameError
			switch {
			case errors.As(err, &unknown):
				return 0, unknown
			case errors.As(err, &ce):
				return 0, ce
			case errors.As(err, &tokenErr):
				return 0, tokenErr
			case errors.As(err, &nameErr): // refused by pathGuard, unsent
				return 0, nameErr
			}
			return 0, &ConnectionError{URL: c.bases[0].String(), Err: err, Attempts: 1}
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode == http.StatusNoContent {
			return resp.StatusCode, nil
		}
		b, rerr := answerBytes(resp.Body)
		if resp.StatusCode >= 400 {
			e := newAPIError(resp.StatusCode, resp.Header, b, c.cfg.now())
			e.Attempts = attemptsOf(resp)
			return resp.StatusCode, e
		}
		if rerr != nil {
			return resp.StatusCode, &ConnectionError{URL: resp.Request.URL.String(), Err: rerr, Attempts: attemptsOf(resp)}
		}
		if out != nil && len(b) > 0 {
			if err := jsonUnmarshal(b, out); err != nil {
				return resp.StatusCode, &UnexpectedAnswerError{Status: resp.StatusCode, Body: b, Err: err,
					Message: fmt.Sprintf("%s %s: cannot decode the answer", resp.Request.Method, resp.Request.URL.Path)}
			}
		}
		return resp.StatusCode, nil
	}
}

// attemptsOf is how many attempts a call made: the last one's X-Retry-Count (the retries
// before it, set by prepareRetry) plus itself.
func attemptsOf(resp *http.Response) int {
	if resp.Request == nil {
		return 1
	}
	n, _ := strconv.Atoi(resp.Request.Header.Get("X-Retry-Count"))
	return n + 1
}

const contentJSON = "application/json"
