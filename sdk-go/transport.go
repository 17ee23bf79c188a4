package lanes

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// The HTTP transport: hashicorp/go-retryablehttp drives the attempts of every call, and its hooks
// defer to decideRetry (retry.go), the single source of the policy of docs/retries.md.
//
//   - CheckRetry feeds each attempt's outcome and this call's counters to decideRetry; the 429
//     budget and the 5xx/408/network budget are counted apart, so RetryMax is only a backstop.
//   - Backoff returns the delay decideRetry chose (hint or backoff+jitter, 0 on a failover to an
//     untried broker); retryablehttp waits it in a select on the request context.
//   - PrepareRetry moves the request to the next broker URL (failover) and bumps X-Retry-Count.
//   - ErrorHandler turns a give-up without a response into *ConnectionError (or the context's
//     cause); a give-up with a response returns that response, which decode makes an *APIError.
//
// Per-call state (attempt counters, long-poll flag, deadline, current URL) lives in a callState
// carried in the request context; one retryablehttp.Client is assembled per call around it,
// because retryablehttp's Backoff receives no request (its response is nil after a network
// error) and so could not find the state otherwise. The *http.Client underneath, with its
// connection pool, is shared by all calls.

// ---------------------------------------------------------------------------------------------
// request context flags (set by the builders)

type reqFlagsKey struct{}

type reqFlags struct {
	longPoll      bool
	notIdempotent bool // retried only when the broker certainly did not apply it
	timeout       time.Duration
	attempts      *int // out: attempts made
}

func withFlags(ctx context.Context, f reqFlags) context.Context {
	return context.WithValue(ctx, reqFlagsKey{}, f)
}

// ---------------------------------------------------------------------------------------------
// per-call retry state

type callStateKey struct{}

type callState struct {
	c        *Client
	ctx      context.Context // the caller's context, carrying this state
	method   string
	path     string
	flags    reqFlags
	timeout  time.Duration // per attempt
	deadline time.Time
	hasDL    bool

	idx, next   int          // broker URL of the current attempt / of the next one
	tried       map[int]bool // URLs tried in this call
	attempt     int          // 0-based index of the current attempt
	transient   int          // 5xx/408/network retries made
	rateLimited int          // 429 retries made
	delay       time.Duration
	sleepErr    error // from the test sleep hook
	tokenErr    error // from WithBearerTokenFunc before a retry
	unknown     bool  // a write that is not idempotent failed after it was sent
	lastErr     error // the transport error of the last attempt
}

// errOutcomeUnknown makes retryablehttp hand a response it would return to errorHandler, which
// wraps it in *OutcomeUnknownError.
var errOutcomeUnknown = errors.New("lanes: outcome unknown")

func callStateOf(ctx context.Context) *callState {
	st, _ := ctx.Value(callStateKey{}).(*callState)
	return st
}

// transport is the gen.HttpRequestDoer of the generated client: one Do is one logical call.
type transport struct{ c *Client }

func (t *transport) Do(req *http.Request) (*http.Response, error) {
	c := t.c
	flags, _ := req.Context().Value(reqFlagsKey{}).(reqFlags)
	st := &callState{c: c, flags: flags, timeout: c.cfg.timeout, tried: map[int]bool{},
		method: req.Method, path: req.URL.Path}
	if flags.timeout > 0 {
		st.timeout = flags.timeout
	}
	st.deadline, st.hasDL = req.Context().Deadline()
	st.ctx = context.WithValue(req.Context(), callStateKey{}, st)
	st.idx = c.pickURL(-1, st.tried)
	st.next = st.idx

	// Bodies are byte buffers, so every attempt (and every broker) gets the same bytes.
	var body []byte
	if bb, ok := req.Body.(bytesBody); ok {
		body = bb.bytes
	} else if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	r := req.Clone(st.ctx)
	r.Body, r.GetBody, r.ContentLength = nil, nil, 0
	c.rebase(r.URL, 0, st.idx)
	r.Host = ""
	for k, vs := range c.cfg.headers {
		r.Header[k] = append([]string(nil), vs...)
	}
	if r.Header.Get("User-Agent") == "" { // WithHeader may name another
		r.Header.Set("User-Agent", userAgent)
	}
	if err := c.authorize(st.ctx, r.Header); err != nil {
		return nil, err
	}
	r.Header.Set("X-Retry-Count", "0")
	rr, err := retryablehttp.FromRequest(r)
	if err != nil {
		return nil, err
	}
	if len(body) > 0 {
		if err := rr.SetBody(body); err != nil {
			return nil, err
		}
	}
	hc := c.hc
	if popCutOf(req.Context()) != nil {
		hc = c.loopPopHC
	}
	rc := &retryablehttp.Client{
		HTTPClient:   hc,
		Logger:       c.rlog,
		RetryMax:     math.MaxInt32, // the budgets are decideRetry's
		CheckRetry:   st.checkRetry,
		Backoff:      st.backoff,
		PrepareRetry: st.prepareRetry,
		ErrorHandler: st.errorHandler,
	}
	return rc.Do(rr)
}

// bytesBody is a request body whose bytes Do sends on every attempt as they are, without
// reading them into a copy first. The bytes must not change until the call returns.
type bytesBody struct {
	*bytes.Reader
	bytes []byte
}

func newBytesBody(b []byte) bytesBody { return bytesBody{Reader: bytes.NewReader(b), bytes: b} }

// Close implements io.Closer, so the request keeps the bytesBody as its Body.
func (bytesBody) Close() error { return nil }

// checkRetry is retryablehttp's CheckRetry: decideRetry on this attempt's outcome.
func (st *callState) checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	c := st.c
	st.tried[st.idx] = true
	if st.flags.attempts != nil {
		*st.flags.attempts = st.attempt + 1
	}
	if err == nil && resp.StatusCode < 400 {
		return false, nil // a success leaves a skip running: it may have been in flight before the failure
	}
	if ctx.Err() != nil {
		return false, context.Cause(ctx)
	}
	if cut := popCutOf(ctx); cut != nil && cut.hasFired() {
		return false, nil // a pop a stop cut makes no new attempt
	}
	st.lastErr = err
	if err != nil || resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode >= 500 {
		c.markUnhealthy(st.idx) // skipped for WithHealthRetryAfter, retried or not (docs/retries.md §4)
	}
	in := retryInput{NetworkErr: err != nil, NotSent: failedBeforeSend(err), NotIdempotent: st.flags.notIdempotent,
		LongPoll: st.flags.longPoll, Transient: st.transient, RateLimited: st.rateLimited,
		Now: c.cfg.now(), Rand: c.cfg.rand(), Policy: c.cfg.policy}
	if err == nil {
		in.Status, in.Header = resp.StatusCode, resp.Header
	}
	d := decideRetry(in)
	if d.OutcomeUnknown {
		st.unknown = true
		c.log.Debug("lanes: not retrying", "reason", d.Reason, "method", st.method, "path", st.path)
		return false, errOutcomeUnknown
	}
	if !d.Retry {
		return false, nil
	}
	next, delay := st.idx, d.Delay
	if d.Kind == retryTransient {
		st.transient++
		next = c.pickURL(st.idx, st.tried)
		if next != st.idx && !st.tried[next] {
			delay = 0 // failover to a broker not yet tried in this call: a hint is the failed broker's
		}
	} else {
		st.rateLimited++
	}
	if st.hasDL && c.cfg.now().Add(delay).After(st.deadline) {
		c.log.Debug("lanes: not retrying, deadline before the retry", "reason", d.Reason, "delay", delay)
		return false, nil
	}
	st.next, st.delay = next, delay
	c.log.Debug("lanes: retrying", "reason", d.Reason, "attempt", st.attempt+1, "delay", delay,
		"url", c.bases[st.idx].String(), "next", c.bases[next].String(), "method", st.method, "path", st.path)
	return true, nil
}

// backoff is retryablehttp's Backoff: the delay checkRetry decided. With the test sleep hook
// the hook waits (and records) instead, and retryablehttp waits 0.
func (st *callState) backoff(_, _ time.Duration, _ int, _ *http.Response) time.Duration {
	if st.c.cfg.sleep != nil {
		st.sleepErr = st.c.cfg.sleep(st.ctx, st.delay)
		return 0
	}
	return st.delay
}

// prepareRetry is retryablehttp's PrepareRetry: fail over and count the attempt.
func (st *callState) prepareRetry(req *http.Request) error {
	if st.sleepErr != nil {
		return st.sleepErr
	}
	if st.ctx.Err() != nil {
		return context.Cause(st.ctx)
	}
	st.attempt++
	u := *req.URL
	st.c.rebase(&u, st.idx, st.next)
	req.URL = &u
	req.Host = ""
	req.Header = req.Header.Clone()
	req.Header.Set("X-Retry-Count", strconv.Itoa(st.attempt))
	st.idx = st.next
	st.tokenErr = st.c.authorize(st.ctx, req.Header)
	return st.tokenErr
}

// tokenError is a WithBearerTokenFunc failure: the call ends with it, unsent, and it is not a
// *ConnectionError (the broker was never asked), as in TS and Python.
type tokenError struct{ err error }

func (e *tokenError) Error() string { return "lanes: bearer token: " + e.err.Error() }
func (e *tokenError) Unwrap() error { return e.err }

// authorize sets the attempt's Authorization header from the configured token.
func (c *Client) authorize(ctx context.Context, h http.Header) error {
	token := c.cfg.token.reveal()
	if f := c.cfg.tokenFunc; f != nil {
		var err error
		if token, err = f(ctx); err != nil {
			return &tokenError{err: err}
		}
	}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return nil
}

// errorHandler is retryablehttp's ErrorHandler, called when it gives up on an error (a give-up on
// a response status returns that response instead).
func (st *callState) errorHandler(resp *http.Response, err error, _ int) (*http.Response, error) {
	if st.unknown {
		return nil, st.outcomeUnknownError(resp)
	}
	if resp != nil && resp.Body != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		_ = resp.Body.Close()
	}
	if st.ctx.Err() != nil {
		return nil, context.Cause(st.ctx)
	}
	if st.sleepErr != nil {
		return nil, st.sleepErr
	}
	if st.tokenErr != nil {
		return nil, st.tokenErr
	}
	return nil, &ConnectionError{URL: st.c.bases[st.idx].String(), Err: err, Attempts: st.attempt + 1}
}

// outcomeUnknownError wraps the failure of the last attempt, the answer's *APIError or the
// transport's *ConnectionError, in *OutcomeUnknownError.
func (st *callState) outcomeUnknownError(resp *http.Response) error {
	var cause error = &ConnectionError{URL: st.c.bases[st.idx].String(), Err: st.lastErr, Attempts: st.attempt + 1}
	if resp != nil {
		b, _ := answerBytes(resp.Body)
		_ = resp.Body.Close()
		e := newAPIError(resp.StatusCode, resp.Header, b, st.c.cfg.now())
		e.Attempts = st.attempt + 1
		cause = e
	}
	return &OutcomeUnknownError{Attempts: st.attempt + 1, Err: cause}
}

// failedBeforeSend reports a transport error that proves the request never left: the connection
// could not be made (refused, DNS, unreachable, or the attempt's timeout ended the dial).
func failedBeforeSend(err error) bool {
	var op *net.OpError
	var notSent *notSentError
	return errors.As(err, &notSent) || (errors.As(err, &op) && op.Op == "dial")
}

// ---------------------------------------------------------------------------------------------
// one attempt: the user's transport under the per-attempt timeout

// attemptClient is the *http.Client retryablehttp calls once per attempt: the user's (or the
// default) transport, jar and redirect policy, with the per-attempt timeout of the call applied
// by attemptTransport. attemptTransport does not forward CloseIdleConnections, so retryablehttp's
// give-up path (which closes idle connections) leaves the shared pool alone.
func attemptClient(user *http.Client, timeout time.Duration) *http.Client {
	rt := user.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	return &http.Client{
		Transport:     &attemptTransport{base: rt, timeout: timeout, plainHTTP1: plainHTTP1Only(rt)},
		CheckRedirect: user.CheckRedirect,
		Jar:           user.Jar,
		Timeout:       user.Timeout,
	}
}

type attemptTransport struct {
	base    http.RoundTripper
	timeout time.Duration
	// plainHTTP1: base's plain TCP connections carry one call at a time, so a pop's may be
	// half-closed (popCut).
	plainHTTP1 bool
}

// plainHTTP1Only reports an *http.Transport that speaks only HTTP/1.1 over plain TCP. Any other
// RoundTripper (a caller's wrapper, x/net/http2's) may speak HTTP/2 over plain TCP, where one
// connection carries several calls and nothing on it says so.
func plainHTTP1Only(rt http.RoundTripper) bool {
	t, ok := rt.(*http.Transport)
	return ok && (t.Protocols == nil || !t.Protocols.UnencryptedHTTP2())
}

func (t *attemptTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	timeout := t.timeout
	if st := callStateOf(req.Context()); st != nil {
		timeout = st.timeout
	}
	// A failure while the attempt was getting its connection proves the request never left,
	// also when the attempt's timeout ends the dial: net/http then returns the bare context
	// error. Both hooks are needed: a transport that does not report them proves nothing.
	var gettingConn, connected atomic.Bool
	trace := &httptrace.ClientTrace{
		GetConn: func(string) { gettingConn.Store(true) },
		GotConn: func(httptrace.GotConnInfo) { connected.Store(true) },
	}
	if cut := popCutOf(req.Context()); cut != nil {
		trace.GotConn = func(info httptrace.GotConnInfo) {
			connected.Store(true)
			cut.attach(halfClosable(info.Conn, t.plainHTTP1))
		}
		trace.GotFirstResponseByte = cut.answerBegun
		defer cut.attemptEnded()
	}
	ctx := httptrace.WithClientTrace(req.Context(), trace)
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if err != nil && gettingConn.Load() && !connected.Load() {
		err = &notSentError{err}
	}
	return readWhole(resp, err)
}

// notSentError is a transport error that came while the attempt was getting its connection.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// readWhole reads the answer's body inside the attempt, so a body that stalls past the attempt's
// timeout or breaks off fails the attempt like a lost answer and goes through the retry policy
// (a push is resent with its ids and answers duplicate), as in the TS and Python SDKs.
func readWhole(resp *http.Response, err error) (*http.Response, error) {
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if n := resp.ContentLength; n > 0 && n <= maxAnnouncedPrealloc {
		buf.Grow(int(n) + bytes.MinRead) // MinRead: room for the read that finds EOF
	}
	_, err = buf.ReadFrom(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = newBytesBody(buf.Bytes())
	return resp, nil
}

// maxAnnouncedPrealloc bounds what readWhole allocates on a Content-Length alone, before a byte
// has arrived.
const maxAnnouncedPrealloc = 8 << 20

// answerBytes reads the rest of an answer's body; what readWhole read is returned without a copy.
func answerBytes(body io.Reader) ([]byte, error) {
	if bb, ok := body.(bytesBody); ok {
		return bb.bytes[len(bb.bytes)-bb.Len():], nil
	}
	return io.ReadAll(body)
}

// slogLeveled adapts the client's *slog.Logger to retryablehttp.LeveledLogger. retryablehttp's
// own messages ("performing request", "request failed", "retrying request") all go to debug:
// the SDK's retry decisions are logged by checkRetry, and an error that surfaces to the caller is
// not also logged at a higher level (docs/retries.md §6).
type slogLeveled struct{ l *slog.Logger }

func (s slogLeveled) Error(msg string, kv ...any) { s.l.Debug("lanes: retryablehttp: "+msg, kv...) }
func (s slogLeveled) Warn(msg string, kv ...any)  { s.l.Debug("lanes: retryablehttp: "+msg, kv...) }
func (s slogLeveled) Info(msg string, kv ...any)  { s.l.Debug("lanes: retryablehttp: "+msg, kv...) }
func (s slogLeveled) Debug(msg string, kv ...any) { s.l.Debug("lanes: retryablehttp: "+msg, kv...) }

// ---------------------------------------------------------------------------------------------
// broker URLs and health (docs/retries.md §4)

// rebase moves u from broker URL `from` to broker URL `to` (scheme, host, user, path prefix).
func (c *Client) rebase(u *url.URL, from, to int) {
	if from == to {
		return
	}
	bf, bt := c.bases[from], c.bases[to]
	u.Scheme, u.Host, u.User = bt.Scheme, bt.Host, bt.User
	u.Path = bt.Path + strings.TrimPrefix(u.Path, bf.Path)
	u.RawPath = ""
}

// pickURL returns the first healthy URL after `after` (in order, wrapping), preferring ones not
// yet tried in this call; when all are unhealthy, the next one in order.
func (c *Client) pickURL(after int, tried map[int]bool) int {
	n := len(c.bases)
	if n == 1 {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.now()
	start := after + 1
	for pass := 0; pass < 2; pass++ {
		for i := 0; i < n; i++ {
			j := (start + i) % n
			if pass == 0 && tried[j] {
				continue
			}
			if until, bad := c.unhealthy[j]; !bad || !now.Before(until) {
				return j
			}
		}
	}
	return (after + 1 + n) % n
}

func (c *Client) markUnhealthy(i int) {
	if len(c.bases) == 1 {
		return
	}
	c.mu.Lock()
	c.unhealthy[i] = c.cfg.now().Add(c.cfg.healthRetry)
	c.mu.Unlock()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
