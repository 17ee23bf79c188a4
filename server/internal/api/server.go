// Package api serves the HTTP API described by openapi.yaml: request
// validation from the spec, the generated strict handlers, and the mapping
// between wire types and the engine.
package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/gorilla/mux"
	middleware "github.com/oapi-codegen/nethttp-middleware"

	"github.com/lanesmq/lanes/server/internal/admission"
	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/auth"
	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/metrics"
	"github.com/lanesmq/lanes/server/internal/spool"
)

// Options configures the HTTP layer.
type Options struct {
	Version      string
	MaxBodyBytes int64
	Logger       *slog.Logger
	// Admission bounds message-plane database work (nil: unbounded).
	Admission *admission.Controller
	// Spool takes pushes while PostgreSQL is unreachable (nil: no spool, pushes fail).
	Spool *spool.Spool
	// Auth verifies bearer tokens (nil: auth off).
	Auth *auth.Verifier
	// Metrics is the registry requests are counted in (nil: a private one).
	Metrics *metrics.Metrics
	// PushTimeout bounds a push's database work before it falls back to the spool (default 10s).
	PushTimeout time.Duration
	// TestFaults serves /__test/faults (test-only fault scripts, see faults.go). Off by default;
	// Handler refuses it together with Auth, since the scripts sit outside authentication.
	TestFaults bool
	// Limits caps items per request (see limits.go); zero fields take the defaults.
	Limits Limits
	// DBTimeout bounds a request's database work (a waiting pop gets its timeout on top; 0 = none).
	DBTimeout time.Duration
	// BodyReadTimeout bounds how long a request body may take to arrive; past
	// it the request answers 408 and its connection closes (0 = none).
	BodyReadTimeout time.Duration
	// SchemaReady reports that the schema is applied (nil: always). Until then
	// /health answers 503 and pushes go to the spool.
	SchemaReady func() bool
}

// Server implements gen.StrictServerInterface: every operation of the spec has
// a method, and a new operation in openapi.yaml fails the build until it does.
type Server struct {
	engine      *engine.Engine
	opts        Options
	log         *slog.Logger
	metrics     *metrics.Metrics
	maintenance *maintenance
}

var _ gen.StrictServerInterface = (*Server)(nil)

// NewServer wires handlers to the engine.
func NewServer(e *engine.Engine, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 64 << 20
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	if opts.PushTimeout <= 0 {
		opts.PushTimeout = 10 * time.Second
	}
	s := &Server{engine: e, opts: opts, log: opts.Logger, metrics: opts.Metrics, maintenance: &maintenance{engine: e}}
	e.PausePopsWhen(s.maintenance.popEnabled)
	s.registerGauges()
	return s
}

// Handler returns the complete HTTP handler: recovery, body limit, spec
// validation, routing and the strict handlers.
func (s *Server) Handler() (http.Handler, error) {
	if s.opts.TestFaults && s.opts.Auth != nil {
		// The injector wraps everything, authentication included.
		return nil, errors.New("test fault scripts cannot run with JWT authentication: they bypass it")
	}
	spec, err := gen.GetSpec()
	if err != nil {
		return nil, fmt.Errorf("load embedded spec: %w", err)
	}
	spec.Servers = nil
	responder := errorResponder{log: s.log}
	strict := gen.NewStrictHandlerWithOptions(s, []gen.StrictMiddlewareFunc{s.strictMiddleware, refuseKVPathQueryString}, gen.StrictHTTPServerOptions{
		RequestErrorHandlerFunc:  responder.requestError,
		ResponseErrorHandlerFunc: s.responseError(responder.responseError),
	})
	router := mux.NewRouter()
	// A path parameter may hold an escaped '/' (a KV key, a queue name):
	// match the escaped path, then decodePathParams decodes the parameters.
	router.UseEncodedPath()
	router.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, CodeNoSuchRoute, "Not Found")
	})
	router.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, CodeMethod, r.Method+" is not allowed on "+r.URL.Path)
	})
	validator := middleware.OapiRequestValidatorWithOptions(spec, &middleware.Options{
		SilenceServersWarning: true,
		DoNotValidateServers:  true,
		Options: openapi3filter.Options{
			// Authentication is the auth middleware's job, not the validator's.
			AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
			MultiError:         false,
		},
		ErrorHandlerWithOpts: validationError,
		Skipper:              isHotPathBody,
	})
	badParam := func(w http.ResponseWriter, r *http.Request, err error) {
		writeError(w, http.StatusBadRequest, CodeValidation, err.Error())
	}
	// Gorilla matches in registration order, and the generated order would let
	// /consumer-groups/{group} swallow the static /consumer-groups/lagging.
	lagging := gen.ServerInterfaceWrapper{Handler: strict, ErrorHandlerFunc: badParam}
	router.HandleFunc("/api/v1/consumer-groups/lagging", lagging.ListLaggingConsumerGroups).Methods(http.MethodGet)
	gen.HandlerWithOptions(strict, gen.GorillaServerOptions{BaseRouter: router, ErrorHandlerFunc: badParam})
	router.Use(recordRoute, decodePathParams)
	var h http.Handler = router
	h = validator(h)
	h = normaliseBoolQuery(boolQueryRoutes(spec), h)
	h = leaseExtendBody(h)
	h = headAsGet(h)
	h = rejectUnstorableURL(h)
	h = s.admit(h)
	h = s.limitBody(h)
	h = s.authenticate(h)
	h = s.observe(h, router)
	h = s.recoverPanics(h)
	if s.opts.TestFaults {
		h = newFaultInjector().wrap(h)
	}
	return h, nil
}

// isHotPathBody exempts the push and ack bodies from schema validation (and so
// from rawBody, which limitBody fills for the validator and handlers): walking
// every item against the schema cost a third of the broker's CPU on push and a
// fifth on ack. Their handlers enforce the same rules (required fields checked
// in push.go and ack.go; field types by the JSON decoder, which answers 400).
// Both routes take no parameters the validator would otherwise check.
func isHotPathBody(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	switch r.URL.Path {
	case "/api/v1/push", "/api/v1/ack", "/api/v1/ack/batch":
		return true
	}
	return false
}

func validationError(ctx context.Context, err error, w http.ResponseWriter, r *http.Request, opts middleware.ErrorHandlerOpts) {
	if opts.MatchedRoute == nil {
		if strings.Contains(err.Error(), "no matching operation") {
			writeError(w, http.StatusNotFound, CodeNoSuchRoute, "Not Found")
			return
		}
		if strings.Contains(err.Error(), "method not allowed") {
			writeError(w, http.StatusMethodNotAllowed, CodeMethod, r.Method+" is not allowed on "+r.URL.Path)
			return
		}
	}
	if isDlqPurgeWithoutQueue(err, opts) {
		writeError(w, http.StatusBadRequest, CodeQueueRequired, "queue is required")
		return
	}
	status := opts.StatusCode
	if status < 400 {
		status = http.StatusBadRequest
	}
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		status = http.StatusBadRequest
	}
	var reqErr *openapi3filter.RequestError
	msg := err.Error()
	if errors.As(err, &reqErr) {
		msg = describeRequestError(reqErr)
	}
	writeError(w, status, validationCode(r.URL.Path, status, err), msg)
}

// validationCode is the code of a request the spec refuses. The KV and timers
// routes answer every bad request with their family's code, as the reference
// does (http-api-v1.md §1.14, §1.15), whether the spec or the handler found
// it, and so do a transaction's kv and timers parts; the rest answers
// validation_failed.
func validationCode(path string, status int, err error) string {
	if status != http.StatusBadRequest {
		return CodeValidation
	}
	if family := routeFamilyCode(path); family != "" {
		return family
	}
	if code := bodyFaultCode(err); code != "" {
		return code
	}
	var schemaErr *openapi3.SchemaError
	if errors.As(err, &schemaErr) {
		if field := schemaErr.JSONPointer(); len(field) > 0 {
			if code := riderCode(path, field[0]); code != "" {
				return code
			}
		}
	}
	return CodeValidation
}

// riderCode is the family code of a fault in a transaction's kv or timers
// part, named by the first element of the faulty field's path, or "".
func riderCode(path, topField string) string {
	if path != "/api/v1/transaction" {
		return ""
	}
	switch topField {
	case "kv":
		return CodeKVBadRequest
	case "timers":
		return CodeTimersBadRequest
	}
	return ""
}

// routeFamilyCode is the code every 400 of the KV and timers routes carries
// (kv_bad_request, timers_bad_request), or "" on other routes.
func routeFamilyCode(path string) string {
	switch {
	case path == "/api/v1/kv" || strings.HasPrefix(path, "/api/v1/kv/"):
		return CodeKVBadRequest
	case path == "/api/v1/timers" || strings.HasPrefix(path, "/api/v1/timers/"):
		return CodeTimersBadRequest
	}
	return ""
}

// badRequestCode is the code of a 400 that is no specific code's: the
// route's family code, else bad_request.
func badRequestCode(path string) string {
	if family := routeFamilyCode(path); family != "" {
		return family
	}
	return CodeBadRequest
}

// isDlqPurgeWithoutQueue reports a DELETE /api/v1/dlq without queue, which
// answers the same queue_required as an empty queue: one condition, one code.
// (The embedded spec spells operation ids capitalized.)
func isDlqPurgeWithoutQueue(err error, opts middleware.ErrorHandlerOpts) bool {
	var reqErr *openapi3filter.RequestError
	return opts.MatchedRoute != nil && opts.MatchedRoute.Route != nil && opts.MatchedRoute.Route.Operation != nil &&
		strings.EqualFold(opts.MatchedRoute.Route.Operation.OperationID, "purgeDlq") &&
		errors.As(err, &reqErr) && reqErr.Parameter != nil && reqErr.Parameter.Name == "queue" &&
		errors.Is(reqErr.Err, openapi3filter.ErrInvalidRequired)
}

// describeRequestError turns a validator error into one readable sentence.
func describeRequestError(e *openapi3filter.RequestError) string {
	var schemaErr *openapi3.SchemaError
	where := "request body"
	if e.Parameter != nil {
		where = "query parameter " + e.Parameter.Name
		if e.Parameter.In == "path" {
			where = "path parameter " + e.Parameter.Name
		}
	}
	var parseErr *openapi3filter.ParseError
	if e.Parameter == nil && errors.As(e.Err, &parseErr) && parseErr.Cause != nil {
		// decodeValidatedBody's finding: say what is wrong with the JSON.
		return "bad body: " + parseErr.Cause.Error()
	}
	if errors.As(e.Err, &schemaErr) {
		path := strings.Join(schemaErr.JSONPointer(), ".")
		if path != "" {
			where += " field " + path
		}
		return where + ": " + schemaErr.Reason
	}
	if e.Reason != "" {
		return where + ": " + e.Reason
	}
	return where + ": " + e.Err.Error()
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
		// Only an escape (or a raw non-ASCII byte) can decode to either; most
		// query strings, a pop's included, skip the parse.
		if raw := r.URL.RawQuery; strings.IndexByte(raw, '%') >= 0 || !utf8.ValidString(raw) {
			query, _ := url.ParseQuery(raw) // a malformed query is the validator's to answer
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

// limitBody reads every request body whole, under the body read deadline
// and the size cap, before admission and the handlers see it: a client that
// stalls part-way through its body then holds a goroutine and the bytes it
// sent, never an admission slot or a database connection. A body over the cap
// answers 413, one that does not arrive in time 408.
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > s.opts.MaxBodyBytes {
			writeError(w, http.StatusRequestEntityTooLarge, CodePayloadTooLarge,
				fmt.Sprintf("request body is %d bytes; the limit is %d (LANES_MAX_BODY_BYTES)", r.ContentLength, s.opts.MaxBodyBytes))
			return
		}
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		// Push and ack bodies are read into a pooled buffer: neither the
		// validator nor the handler keeps them (the decoder copies what it
		// keeps), and a fresh buffer per body was 9% of the broker's
		// allocations under pop + ack. Other bodies stay in the request
		// context for rawBody, so they get their own buffer.
		hot := isHotPathBody(r)
		buf := new(bytes.Buffer)
		if hot {
			buf = takeBuffer()
			defer giveBuffer(buf)
		}
		if !s.receiveBody(w, r, buf) {
			return
		}
		body := buf.Bytes()
		setJSONContentType(r)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if hot {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), rawBodyKey{}, body)))
	})
}

// bodyPrealloc bounds the buffer reserved from a declared Content-Length
// before the bytes arrive, so a client that declares a large body and stalls
// pins no more than what it sent; larger bodies grow the buffer as they come.
const bodyPrealloc = 64 << 10

// receiveBody reads r's body into buf, up to one byte past the cap, and
// reports whether it did; if not, it has answered. The connection's read
// deadline is BodyReadTimeout from now while it reads, and is left passed
// after a timeout, so the connection closes once the 408 is written.
func (s *Server) receiveBody(w http.ResponseWriter, r *http.Request, buf *bytes.Buffer) bool {
	deadlines := http.NewResponseController(w)
	if s.opts.BodyReadTimeout > 0 {
		// Writers that cannot set deadlines (test recorders) read without one.
		_ = deadlines.SetReadDeadline(time.Now().Add(s.opts.BodyReadTimeout))
	}
	if r.ContentLength > 0 {
		buf.Grow(int(min(r.ContentLength, bodyPrealloc)) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(io.LimitReader(r.Body, s.opts.MaxBodyBytes+1))
	var netErr net.Error
	switch {
	case errors.As(err, &netErr) && netErr.Timeout():
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestTimeout, CodeRequestTimeout,
			fmt.Sprintf("request body not received within %s (LANES_BODY_READ_TIMEOUT_MS)", s.opts.BodyReadTimeout))
		return false
	case err != nil:
		writeError(w, http.StatusBadRequest, CodeBadRequest, "reading body: "+err.Error())
		return false
	}
	if s.opts.BodyReadTimeout > 0 {
		_ = deadlines.SetReadDeadline(time.Time{})
	}
	if int64(buf.Len()) > s.opts.MaxBodyBytes {
		writeBodyTooLarge(w, s.opts.MaxBodyBytes)
		return false
	}
	return true
}

// writeBodyTooLarge answers a body found past the cap while it was read. Like
// the 400s of the other caps, it names the setting to raise.
func writeBodyTooLarge(w http.ResponseWriter, limit int64) {
	writeError(w, http.StatusRequestEntityTooLarge, CodePayloadTooLarge,
		fmt.Sprintf("request body exceeds the limit of %d bytes (LANES_MAX_BODY_BYTES)", limit))
}

// setJSONContentType has the body parsed as JSON whatever the Content-Type
// says (set only when it differs: Set allocates, on every request).
func setJSONContentType(r *http.Request) {
	if r.Header.Get("Content-Type") != "application/json" {
		r.Header.Set("Content-Type", "application/json")
	}
}

type rawBodyKey struct{}

// rawBody returns the request body bytes for handlers that need more than the
// generated types keep (absent versus null in configure).
func rawBody(ctx context.Context) []byte {
	b, _ := ctx.Value(rawBodyKey{}).([]byte)
	return b
}

func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(v)
				}
				s.log.Error("panic serving request", "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
				writeErrorFor(w, r, http.StatusInternalServerError, CodeInternal, "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}
