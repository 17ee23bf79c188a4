// Package api serves the HTTP API described by openapi.yaml: request
// validation from the spec, the generated strict handlers, and the mapping
// between wire types and the engine.
package api

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/gorilla/mux"
	middleware "github.com/oapi-codegen/nethttp-middleware"

	"github.com/lanesmq/lanes/server/anyjson"
	"github.com/lanesmq/lanes/server/internal/admission"
	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/auth"
	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/failurelog"
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
	// BodyBudget bounds the request body bytes held at once, from when a body
	// starts to arrive until its request ends (nil: unbounded). It must hold
	// at least MaxBodyBytes.
	BodyBudget *admission.ByteBudget
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
	// SchemaState is what the database last said of its schema, read by the
	// boot and the minimum broker version's check, for /health; false before
	// the first read (nil: never read).
	SchemaState func() (engine.SchemaState, bool)
}

// Server implements gen.StrictServerInterface: every operation of the spec has
// a method, and a new operation in openapi.yaml fails the build until it does.
type Server struct {
	engine      *engine.Engine
	opts        Options
	log         *slog.Logger
	metrics     *metrics.Metrics
	maintenance *maintenance
	// spoolWriteFailures logs pushes the spool refused (full, disk errors),
	// deadlineFailures requests answered database_timeout, databaseErrors and
	// requestFailures the other failed requests, spoolFallbacks pushes spooled
	// for want of the database, spoolTimeouts pushes spooled past their
	// deadline (PushTimeout), autoAckLosses autoAck pops whose client left and
	// giveBackFailures claims a leaving client's pop could not give back: each
	// once a minute with the count, not once per request.
	spoolWriteFailures, deadlineFailures, databaseErrors, requestFailures *failurelog.Reporter
	spoolFallbacks, spoolTimeouts, autoAckLosses, giveBackFailures        *failurelog.Reporter
	// answerError answers an operation's error, as the generated handlers do
	// (popsLater's pops too).
	answerError func(http.ResponseWriter, *http.Request, error)
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
	s := &Server{engine: e, opts: opts, log: opts.Logger, metrics: opts.Metrics, maintenance: newMaintenance(e, opts.Logger),
		spoolWriteFailures: failurelog.New(opts.Logger, slog.LevelError, "spool write failed; push answered failed", ""),
		deadlineFailures:   failurelog.New(opts.Logger, slog.LevelError, "database work passed its deadline", ""),
		databaseErrors:     failurelog.New(opts.Logger, slog.LevelError, "database error", ""),
		requestFailures:    failurelog.New(opts.Logger, slog.LevelError, "request failed", ""),
		spoolFallbacks:     failurelog.New(opts.Logger, slog.LevelWarn, "database unreachable; pushes go to the disk spool", ""),
		spoolTimeouts: failurelog.New(opts.Logger, slog.LevelWarn,
			"push passed its deadline (LANES_PUSH_TIMEOUT_MS): the database is slow, locked or unreachable; pushes go to the disk spool", ""),
		autoAckLosses: failurelog.New(opts.Logger, slog.LevelWarn,
			"client left during an autoAck pop; its messages were committed for the group and are not delivered again (at-most-once)", ""),
		giveBackFailures: failurelog.New(opts.Logger, slog.LevelWarn, "client left during a pop; the claim could not be given back (it frees at lease expiry)", "")}
	e.PausePopsWhen(s.maintenance.popEnabled)
	e.PausePushesWhen(s.maintenance.pushEnabled)
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
	anyjson.LeaveUnreadInRequests(spec)
	responder := errorResponder{unavailable: s.maintenance.requestFailures, databaseErrors: s.databaseErrors, otherErrors: s.requestFailures}
	s.answerError = s.responseError(responder.responseError)
	strict := gen.NewStrictHandlerWithOptions(s, []gen.StrictMiddlewareFunc{s.strictMiddleware, refuseKVPathQueryString}, gen.StrictHTTPServerOptions{
		RequestErrorHandlerFunc:  responder.requestError,
		ResponseErrorHandlerFunc: s.answerError,
	})
	router := mux.NewRouter()
	// A path parameter may hold an escaped '/' (a KV key, a queue name):
	// match the escaped path, then decodePathParams decodes the parameters.
	router.UseEncodedPath()
	router.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, CodeNoSuchRoute, "Not Found")
	})
	specRouter, err := gorillamux.NewRouter(spec)
	if err != nil {
		return nil, fmt.Errorf("route the embedded spec: %w", err)
	}
	notAllowed := methodNotAllowed(specRouter)
	router.MethodNotAllowedHandler = notAllowed
	validator := middleware.OapiRequestValidatorWithOptions(spec, &middleware.Options{
		SilenceServersWarning: true,
		DoNotValidateServers:  true,
		Options: openapi3filter.Options{
			// Authentication is the auth middleware's job, not the validator's.
			AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
			MultiError:         false,
		},
		ErrorHandlerWithOpts: validationError(notAllowed, listAfterParameter(spec)),
		Skipper:              isHotPathBody,
		// Handlers decode the body's bytes, not the validator's decoded
		// value: binding that re-encoded every payload and KV value, which
		// sorted keys, dropped duplicates and turned "\ud800" into U+FFFD.
		DiscardValidatedValue: true,
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
	h = s.admitClass(h)
	h = s.limitBody(h, operationBodies(spec, router))
	h = s.admitClient(h)
	h = s.authenticate(h)
	h = s.popsLater(h)
	h = s.observeAndRecover(h, router)
	if s.opts.TestFaults {
		h = newFaultInjector().wrap(h)
	}
	return h, nil
}

func (s *Server) schemaReady() bool {
	return s.opts.SchemaReady == nil || s.opts.SchemaReady()
}

// routeBody is what the spec says of a request's body.
type routeBody int

const (
	routeWithBody    routeBody = iota // an operation that declares a request body
	routeWithoutBody                  // an operation that declares none
	noRoute                           // no operation: the router answers 404 or 405
)

// operationBodies returns, for a request, whether its operation declares a
// request body in the spec, or that it names no operation at all.
func operationBodies(spec *openapi3.T, router *mux.Router) func(*http.Request) routeBody {
	withBody := map[string]bool{}
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			if op.RequestBody != nil {
				withBody[method+" "+path] = true
			}
		}
	}
	return func(r *http.Request) routeBody {
		if isHotPathBody(r) {
			// Push and ack declare their bodies: matching the route here as
			// well as in the router cost them five allocations a request.
			return routeWithBody
		}
		var match mux.RouteMatch
		if !router.Match(r, &match) || match.Route == nil {
			return noRoute
		}
		if template, err := match.Route.GetPathTemplate(); err == nil && withBody[r.Method+" "+template] {
			return routeWithBody
		}
		return routeWithoutBody
	}
}
