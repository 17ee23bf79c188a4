package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/routers"
	"github.com/gorilla/mux"

	"github.com/lanesmq/lanes/server/internal/admission"
	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/auth"
	"github.com/lanesmq/lanes/server/internal/engine"
)

// statusRecorder remembers the status a handler wrote, and the first write
// that failed (the client stopped taking the answer).
type statusRecorder struct {
	http.ResponseWriter
	status   int
	route    string // the matched route's template, set by recordRoute
	writeErr error
}

// routeRecorder is what recordRoute finds when no middleware between observe
// and the router wrapped the writer.
type routeRecorder interface{ setRoute(string) }

func (r *statusRecorder) setRoute(template string) { r.route = template }

// headAsGet answers HEAD on every GET route but the pops as that GET would,
// without the body (net/http drops it for HEAD): load balancers and uptime
// checks probe with HEAD. A pop is left out because a GET pop claims messages.
func headAsGet(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead && headServedAsGet(r.URL.Path) {
			r = r.Clone(r.Context())
			r.Method = http.MethodGet
		}
		next.ServeHTTP(w, r)
	})
}

func headServedAsGet(path string) bool {
	return path != "/api/v1/pop" && !strings.HasPrefix(path, "/api/v1/pop/")
}

// methodNotAllowed answers 405 with the Allow header RFC 9110 requires: the
// methods the spec serves on the request's path, found by the validator's own
// router (so /consumer-groups/lagging, which the spec's concrete path wins,
// advertises no DELETE), HEAD beside GET where headAsGet serves it.
func methodNotAllowed(spec routers.Router) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var allowed []string
		for _, method := range allowCandidates {
			probe := r.Clone(r.Context())
			probe.Method = method
			if _, _, err := spec.FindRoute(probe); err != nil {
				continue
			}
			allowed = append(allowed, method)
			if method == http.MethodGet && headServedAsGet(r.URL.Path) {
				allowed = append(allowed, http.MethodHead)
			}
		}
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, http.StatusMethodNotAllowed, CodeMethod, r.Method+" is not allowed on "+r.URL.Path)
	})
}

// allowCandidates are the methods the spec's operations use.
var allowCandidates = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete}

// decodePathParams runs inside the router once a route matched and decodes
// its path parameters. The router matches the escaped path (UseEncodedPath),
// so that a name may hold an escaped '/' and still be one segment, and the
// generated binders take the parameters as already decoded: without this a
// client that escapes "sp ace" would address a queue named "sp%20ace".
func decodePathParams(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vars := mux.Vars(r)
		if len(vars) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		decoded := make(map[string]string, len(vars))
		for name, raw := range vars {
			v, err := url.PathUnescape(raw)
			if err != nil {
				writeError(w, http.StatusBadRequest, CodeBadRequest, "bad escape in path parameter "+name+": "+strconv.Quote(raw))
				return
			}
			decoded[name] = v
		}
		next.ServeHTTP(w, mux.SetURLVars(r, decoded))
	})
}

// recordRoute runs inside the router once a route matched and hands its
// template to observe, which would otherwise match the request a second time.
func recordRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rec, ok := w.(routeRecorder); ok {
			if route := mux.CurrentRoute(r); route != nil {
				if tpl, err := route.GetPathTemplate(); err == nil {
					rec.setRoute(tpl)
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	if err != nil && r.writeErr == nil {
		r.writeErr = err
	}
	return n, err
}

// startedAnswer is the recorder under w when its answer's status has gone
// out, else nil: a failure then cannot be answered with a second status.
func startedAnswer(w http.ResponseWriter) *statusRecorder {
	for {
		if rec, ok := w.(*statusRecorder); ok {
			if rec.status == 0 {
				return nil
			}
			return rec
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
}

// Unwrap lets http.ResponseController reach the connection (limitBody sets
// the body read deadline through it).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Flush keeps streaming working through the recorder.
func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// observe counts every request by route template and status, an answer
// aborted by a panic (recoverPanics) included.
func (s *Server) observe(next http.Handler, router *mux.Router) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		defer s.observed(r, rec, router, start)
		next.ServeHTTP(rec, r)
	})
}

func (s *Server) observed(r *http.Request, rec *statusRecorder, router *mux.Router, start time.Time) {
	route := rec.route
	if route == "" {
		// Not routed (404, 405, refused before routing) or the writer was wrapped.
		route = "unmatched"
		var match mux.RouteMatch
		if router.Match(r, &match) && match.Route != nil {
			if tpl, err := match.Route.GetPathTemplate(); err == nil {
				route = tpl
			}
		}
	}
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	s.metrics.ObserveRequest(route, metricMethod(r.Method), status, time.Since(start))
}

// metricMethod is the method label of the request metrics: a standard method
// as sent, any other "OTHER". Net/http accepts any token as a method, and every
// label value is a series kept until restart, so an anonymous client making
// methods up would otherwise grow the broker's memory and every scrape.
func metricMethod(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
		http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return method
	}
	return "OTHER"
}

// authenticate enforces bearer tokens and role levels when auth is on, and puts
// the identity in the request context (producerSub comes from it).
func (s *Server) authenticate(next http.Handler) http.Handler {
	if s.opts.Auth == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		level := auth.RouteLevel(r.Method, r.URL.Path)
		if level == auth.Public || s.opts.Auth.Skips(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		id, authErr := s.opts.Auth.Verify(r.Header.Values("Authorization")...)
		if authErr != nil {
			s.boundUnreadBody(w, r)
			w.Header().Set("WWW-Authenticate", authErr.Challenge())
			writeError(w, http.StatusUnauthorized, CodeUnauthorized, authErr.Message)
			return
		}
		if !level.Allows(id.Roles) {
			s.boundUnreadBody(w, r)
			w.Header().Set("WWW-Authenticate", auth.ForbiddenChallenge)
			writeError(w, http.StatusForbidden, CodeForbidden, auth.MsgForbidden)
			return
		}
		next.ServeHTTP(w, r.WithContext(auth.WithIdentity(r.Context(), id)))
	})
}

// admissionClass names the budget a message-plane request draws on; pops draw
// per database check inside the engine, so they take none here.
func (s *Server) admissionClass(r *http.Request) *admission.Class {
	a := s.opts.Admission
	switch {
	case a == nil:
		return nil
	case isPushLike(r):
		return a.Push
	case isAckLike(r):
		return a.Ack
	}
	return nil
}

// isPushLike reports the writes that draw on the push budget: pushes, timer
// schedules (a timer of delay 0 is a push a moment later, so leaving it out
// let a rate-limited client keep pushing) and KV writes.
func isPushLike(r *http.Request) bool {
	p := r.URL.Path
	switch r.Method {
	case http.MethodPost:
		return p == "/api/v1/push" || p == "/api/v1/timers" || p == "/api/v1/kv"
	case http.MethodPut, http.MethodDelete:
		return strings.HasPrefix(p, "/api/v1/kv/")
	}
	return false
}

// isAckLike reports the requests that draw on the ack budget.
func isAckLike(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	p := r.URL.Path
	return p == "/api/v1/ack" || p == "/api/v1/ack/batch" || p == "/api/v1/transaction" ||
		strings.HasPrefix(p, "/api/v1/lease/")
}

func isPopRequest(r *http.Request) bool {
	return r.Method == http.MethodGet && (r.URL.Path == "/api/v1/pop" || strings.HasPrefix(r.URL.Path, "/api/v1/pop/"))
}

// popWaits reports whether a pop asks to long poll; a wait value that does
// not parse counts as waiting so the handler answers it 400.
func popWaits(r *http.Request) bool {
	raw, present := r.URL.Query()["wait"]
	if !present || len(raw) == 0 {
		return false
	}
	wait, err := strconv.ParseBool(raw[0])
	return err != nil || wait
}

// isMessagePlane reports the requests the per-client token bucket counts.
func isMessagePlane(r *http.Request) bool {
	return isPopRequest(r) || isPushLike(r) || isAckLike(r)
}

// admitClient applies pop maintenance and the per-client token bucket to
// message-plane requests, before their bodies are read: a client over its
// rate is refused without taking any room in the body budget.
func (s *Server) admitClient(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isMessagePlane(r) {
			next.ServeHTTP(w, r)
			return
		}
		// A long poll under pop maintenance parks: the engine keeps its checks
		// empty until its timeout, so idle consumers wait instead of spinning.
		if isPopRequest(r) && s.maintenance.popEnabled() && !popWaits(r) {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if a := s.opts.Admission; a != nil && a.Clients.Enabled() {
			if err := a.Clients.Allow(clientKey(r)); err != nil {
				s.boundUnreadBody(w, r)
				writeRejected(w, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// admitClass takes a slot of the request's class budget once its body is in,
// so a body still arriving holds no slot.
func (s *Server) admitClass(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if class := s.admissionClass(r); class != nil {
			release, err := class.Acquire(r.Context())
			if err != nil {
				writeRejected(w, err)
				return
			}
			defer release()
		}
		next.ServeHTTP(w, r)
	})
}

// clientKey identifies a client for its token bucket and body share: the
// token subject, else the remote address, an IPv6 one by its /64 (one host
// commonly holds a whole /64, and would otherwise be as many clients as it
// likes).
func clientKey(r *http.Request) string {
	if id := auth.FromContext(r.Context()); id != nil && id.Subject != "" {
		return "sub:" + id.Subject
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if addr, err := netip.ParseAddr(host); err == nil && addr.Is6() && !addr.Is4In6() {
		prefix, _ := addr.WithZone("").Prefix(64)
		return "addr:" + prefix.String()
	}
	return "addr:" + host
}

// writeRejected answers 429 with Retry-After in whole seconds; a client that
// went away gets nothing.
func writeRejected(w http.ResponseWriter, err error) {
	rej, ok := admission.IsRejected(err)
	if !ok {
		w.WriteHeader(499)
		return
	}
	w.Header().Set("Retry-After", strconv.Itoa(admission.RetryAfterSeconds(rej.RetryAfter)))
	writeError(w, http.StatusTooManyRequests, rej.Reason, rej.Error())
}

// responseError maps admission rejections from inside the engine (a pop check)
// to 429 and leaves the rest to the shared responder.
func (s *Server) responseError(fallback func(http.ResponseWriter, *http.Request, error)) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		if rec := startedAnswer(w); rec != nil {
			s.answerCutShort(r, rec, err)
			return
		}
		if _, ok := admission.IsRejected(err); ok {
			writeRejected(w, err)
			return
		}
		var limit *limitError
		if errors.As(err, &limit) {
			writeError(w, http.StatusBadRequest, CodeLimitExceeded, limit.msg)
			return
		}
		if r.Context().Err() == nil && isDatabaseTimeout(err) {
			s.deadlineFailures.Failed(err, "path", r.URL.Path)
			writeErrorFor(w, r, http.StatusInternalServerError, CodeDatabaseTimeout, "database timeout: "+err.Error())
			return
		}
		fallback(w, r, err)
	}
}

// answerCutShort logs an answer that failed after its status went out (the
// generated handlers hand a failed send to the error responder as they do a
// handler's error). A failed write is the client hanging up or not reading,
// nothing the operator can act on (and no database failure); any other error
// cut the answer short on the server's side.
func (s *Server) answerCutShort(r *http.Request, rec *statusRecorder, err error) {
	if rec.writeErr != nil || r.Context().Err() != nil {
		s.log.Debug("client left before the answer was sent", "path", r.URL.Path, "status", rec.status, "err", err)
		return
	}
	s.requestFailures.Failed(err, "path", r.URL.Path, "status", rec.status, "note", "the answer was cut short after its status was sent")
}

// requestDeadline is how long an operation's database work may take: none for
// push (it has its own deadline, past which it spools), the long-poll timeout
// on top of the budget for a waiting pop. A pop's claim that has started runs
// past it to its end (engine.claimOnce): cut short, it may commit for nobody.
func (s *Server) requestDeadline(request any) time.Duration {
	budget := s.opts.DBTimeout
	if budget <= 0 {
		return 0
	}
	if _, isPush := request.(gen.PushRequestObject); isPush {
		return 0
	}
	park, _ := popParkTimeOf(request)
	return budget + park
}

// popParkTimeOf is popParkTime of a pop operation's request; isPop is false
// for any other operation.
func popParkTimeOf(request any) (park time.Duration, isPop bool) {
	switch req := request.(type) {
	case gen.PopQueueRequestObject:
		return popParkTime(req.Params.Wait, req.Params.Timeout), true
	case gen.PopPartitionRequestObject:
		return popParkTime(req.Params.Wait, req.Params.Timeout), true
	case gen.PopDiscoverRequestObject:
		return popParkTime(req.Params.Wait, req.Params.Timeout), true
	}
	return 0, false
}

// strictMiddleware runs around every generated operation: it enforces the
// caps, puts a deadline on the database work, counts acknowledged messages,
// and hands a pop's answer to deliverPop (which counts it), or gives the claim
// back at once when its client already left. A waiting pop runs after the
// chain has returned (popsLater), with the deadline it would have had here.
func (s *Server) strictMiddleware(f gen.StrictHandlerFunc, operationID string) gen.StrictHandlerFunc {
	limits := s.opts.Limits.withDefaults()
	return func(ctx context.Context, w http.ResponseWriter, r *http.Request, request any) (any, error) {
		if err := limits.check(request); err != nil {
			return nil, err
		}
		d := s.requestDeadline(request)
		later := popLaterOf(ctx)
		if park, _ := popParkTimeOf(request); later != nil && park > 0 {
			later.arm(ctx, w, r, d)
		} else if d > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		resp, err := f(ctx, w, r, request)
		if later != nil && later.taken {
			return answeredLater{}, nil
		}
		if err != nil {
			return resp, err
		}
		if pop := popResponse(resp); pop != nil {
			if err := s.givenBackIfLeft(r, pop); err != nil {
				return nil, err
			}
			return popDelivery{s: s, r: r, pop: pop}, nil
		}
		s.countAcks(resp)
		return resp, nil
	}
}

// givenBackIfLeft gives a pop's batch back when its client left while the
// pop ran, and returns why; nil while the client is there.
func (s *Server) givenBackIfLeft(r *http.Request, pop *gen.PopResponse) error {
	if err := r.Context().Err(); err != nil {
		s.giveBack(pop)
		return err
	}
	return nil
}

func (s *Server) countAcks(resp any) {
	acked, dlq := 0, 0
	add := func(success, dead bool) {
		if success {
			acked++
		}
		if dead {
			dlq++
		}
	}
	switch v := resp.(type) {
	case gen.Ack200JSONResponse:
		for _, r := range v {
			add(r.Success, r.Dlq)
		}
	case ackBatchAnswer:
		for _, r := range v {
			add(r.Success, r.Dlq)
		}
	case gen.Transaction200JSONResponse:
		if !v.Success {
			return
		}
		for _, r := range v.Results {
			if r.Type == "ack" {
				add(r.Success, r.Dlq != nil && *r.Dlq)
			}
		}
	default:
		return
	}
	s.metrics.CountAcks(acked, dlq)
}

// isDatabaseTimeout reports a deadline or statement_timeout on database work.
func isDatabaseTimeout(err error) bool {
	if engine.HasSQLState(err) {
		return engine.IsStatementTimeout(err)
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// rejectUnstorableURL answers 400 for a path or query string that decodes to
// a NUL byte or invalid UTF-8: every name and filter in a URL ends up as a
// text parameter of a statement, and PostgreSQL refuses such text with an
// error (a 500). Bodies are left to the handlers: payloads may hold \u0000.
// It also answers 400 for a "." or ".." path segment, which the router would
// otherwise clean away and answer with a redirect to another resource.
func rejectUnstorableURL(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := badRequestCode(r.URL.Path)
		if err := engine.CheckStoredText("path", r.URL.Path, 0); err != nil {
			writeError(w, http.StatusBadRequest, code, err.Error())
			return
		}
		if seg := dotSegment(r.URL.EscapedPath()); seg != "" {
			writeError(w, http.StatusBadRequest, code, "path segment "+strconv.Quote(seg)+
				` is not allowed: "." and ".." are never names, and URL clients drop them`)
			return
		}
		// Only an escape (or a raw non-ASCII byte) can decode to either, and only
		// an escape or a ';' can fail to parse; most query strings, a pop's
		// included, skip the parse.
		if raw := r.URL.RawQuery; strings.ContainsAny(raw, "%;") || !utf8.ValidString(raw) {
			// r.URL.Query(), which the validator and handlers read, silently drops
			// a pair that does not parse: its filter would vanish (a DLQ purge of
			// one group would purge them all).
			query, err := url.ParseQuery(raw)
			if err != nil {
				writeError(w, http.StatusBadRequest, code, "query string cannot be parsed: "+err.Error())
				return
			}
			for name, values := range query {
				if err := engine.CheckStoredText("query parameter name", name, 0); err != nil {
					writeError(w, http.StatusBadRequest, code, err.Error())
					return
				}
				for _, v := range values {
					if err := engine.CheckStoredText("query parameter "+name, v, 0); err != nil {
						writeError(w, http.StatusBadRequest, code, err.Error())
						return
					}
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// dotSegment returns the first segment of an escaped path that is "." or ".."
// once unescaped ("%2E" included, as URL clients read it), or "".
func dotSegment(escapedPath string) string {
	for seg := range strings.SplitSeq(escapedPath, "/") {
		if len(seg) == 0 || len(seg) > len("%2E%2E") || seg[0] != '.' && seg[0] != '%' {
			continue
		}
		if name, err := url.PathUnescape(seg); err == nil && (name == "." || name == "..") {
			return seg
		}
	}
	return ""
}

// observeAndRecover is the outer end of the chain: panic recovery inside
// observe, so it sees observe's statusRecorder (and knows whether the status
// went out) and observe counts the 500 it answers.
func (s *Server) observeAndRecover(next http.Handler, router *mux.Router) http.Handler {
	return s.observe(s.recoverPanics(next), router)
}

// recoverPanics answers a handler's panic with a JSON 500, or, once the
// answer's status is out, logs it and aborts the connection: a second status
// would be dropped by net/http ("superfluous WriteHeader"), and the client
// must not take the answer cut short for a whole one.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(v)
			}
			if rec := startedAnswer(w); rec != nil {
				s.log.Error("panic serving request after its status was sent; the connection is closed", "path", r.URL.Path,
					"status", rec.status, "panic", v, "stack", string(debug.Stack()))
				panic(http.ErrAbortHandler)
			}
			s.log.Error("panic serving request", "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			writeErrorFor(w, r, http.StatusInternalServerError, CodeInternal, "internal error")
		}()
		next.ServeHTTP(w, r)
	})
}
