package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/lanesmq/lanes/server/anyjson"
)

// runHeader attributes a request to a case run (the broker's fault scripts use it too).
const runHeader = "X-Lanes-Test-Run"

// recorded is one request an SDK sent, as the proxy saw it; Op is the operationId of
// openapi.yaml it matched ("" when it matched none).
type recorded struct {
	Method, Path, Query, Op string
	Status                  int
	// Header is what the SDK sent, for a case that names headers a request must carry.
	Header http.Header
}

// validatingProxy sits between the adapters and the broker. It validates every response
// against openapi.yaml (kin-openapi, undeclared statuses included) and records, per run, the
// requests and any response that broke the spec.
type validatingProxy struct {
	router routers.Router
	// operations are every operationId of openapi.yaml, sorted.
	operations []string
	target     *url.URL
	srv        *http.Server
	URL        string

	mu         sync.Mutex
	requests   map[string][]recorded
	violations map[string][]string
	unowned    []string // violations of requests without a run header
}

func newValidatingProxy(specPath, brokerURL string, port int) (*validatingProxy, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(specPath)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", specPath, err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("%s is not a valid OpenAPI document: %w", specPath, err)
	}
	doc.Servers = nil
	anyjson.LeaveUnreadInResponses(doc)
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	target, err := url.Parse(brokerURL)
	if err != nil {
		return nil, err
	}
	p := &validatingProxy{router: router, operations: operationIDs(doc), target: target, requests: map[string][]recorded{}, violations: map[string][]string{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		FlushInterval:  -1,
		ModifyResponse: p.check,
		// A long poll the SDK abandons (a stop, a timeout) is not a proxy failure worth logging.
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			_, route, _, routeErr := p.findRoute(r)
			p.record(r, operationOf(route, routeErr), 0)
			if r.Context().Err() != nil {
				return
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
				// The broker closed the connection without an answer (a fault script's
				// dropAnswer): the SDK must see that, not a 502 it could tell apart.
				panic(http.ErrAbortHandler)
			}
			p.violation(r.Header.Get(runHeader), fmt.Sprintf("%s %s: broker unreachable through the proxy: %v", r.Method, r.URL.Path, err))
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, err
	}
	p.URL = "http://" + ln.Addr().String()
	p.srv = &http.Server{Handler: rp}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *validatingProxy) Close() { _ = p.srv.Close() }

// check validates one response; the body is buffered and handed on unchanged.
func (p *validatingProxy) check(resp *http.Response) error {
	req := resp.Request
	run := req.Header.Get(runHeader)
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	rreq, route, params, routeErr := p.findRoute(req)
	op := operationOf(route, routeErr)
	p.record(req, op, resp.StatusCode)
	if err != nil {
		p.violation(run, fmt.Sprintf("%s %s: reading the response: %v", req.Method, req.URL.Path, err))
		return nil
	}
	if routeErr != nil {
		p.violation(run, fmt.Sprintf("%s %s: not a route of openapi.yaml (%v)", req.Method, req.URL.Path, routeErr))
		return nil
	}
	if scriptedGatewayAnswer(resp) {
		return nil
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: rreq, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status:  resp.StatusCode,
		Header:  headerAsTheBrokerSends(resp.Header),
		Body:    io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		p.violation(run, fmt.Sprintf("%s %s → %d does not match openapi.yaml: %v (body %s)",
			req.Method, req.URL.Path, resp.StatusCode, err, truncate(string(body), 300)))
	}
	return nil
}

// faultHeader marks an answer the broker's test fault script wrote (api.FaultScriptedHeader).
const faultHeader = "X-Lanes-Test-Fault"

// scriptedGatewayAnswer is a scripted 502 or 504: it stands for a gateway in front of the
// broker that forwarded the request and lost the answer, a status the broker never sends and
// openapi.yaml, which describes the broker, does not declare; so it is not checked.
func scriptedGatewayAnswer(resp *http.Response) bool {
	return resp.Header.Get(faultHeader) != "" &&
		(resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusGatewayTimeout)
}

// headerAsTheBrokerSends checks a scripted Retry-After HTTP-date as the delay-seconds it
// stands for: such a date models a gateway in front of the broker, which RFC 9110 lets send
// either form, while openapi.yaml describes the broker, which always sends seconds. Every
// other header, and every answer the broker wrote itself, is checked as it is.
func headerAsTheBrokerSends(h http.Header) http.Header {
	if h.Get(faultHeader) == "" {
		return h
	}
	at, err := http.ParseTime(h.Get("Retry-After"))
	if err != nil {
		return h
	}
	seconds := max(0, int64(math.Ceil(time.Until(at).Seconds())))
	h = h.Clone()
	h.Set("Retry-After", strconv.FormatInt(seconds, 10))
	return h
}

// findRoute matches the route of openapi.yaml on the path the broker saw, without the proxy's host.
func (p *validatingProxy) findRoute(req *http.Request) (*http.Request, *routers.Route, map[string]string, error) {
	u := *req.URL
	u.Scheme, u.Host = "", ""
	rreq := req.Clone(context.Background())
	rreq.URL = &u
	rreq.Host = ""
	route, params, err := p.router.FindRoute(rreq)
	return rreq, route, params, err
}

func operationOf(route *routers.Route, routeErr error) string {
	if routeErr != nil || route.Operation == nil {
		return ""
	}
	return route.Operation.OperationID
}

// record notes a request of a run; status 0 is one that got no answer.
func (p *validatingProxy) record(req *http.Request, op string, status int) {
	run := req.Header.Get(runHeader)
	if run == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests[run] = append(p.requests[run], recorded{Method: req.Method, Path: req.URL.Path, Query: req.URL.RawQuery, Op: op, Status: status,
		Header: req.Header.Clone()})
}

func (p *validatingProxy) violation(run, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if run == "" {
		p.unowned = append(p.unowned, msg)
		return
	}
	p.violations[run] = append(p.violations[run], msg)
}

// take returns and forgets what was recorded for a run.
func (p *validatingProxy) take(run string) ([]recorded, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, v := p.requests[run], p.violations[run]
	delete(p.requests, run)
	delete(p.violations, run)
	return r, v
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
