package api

// Test-only fault scripts (LANES_TEST_FAULTS / --test-faults, off by default): the conformance
// suite scripts the next responses of a route and reads how many attempts reached it, so SDK
// retry behavior is tested end to end. Never enable it in production.
//
// A script belongs to a run: only requests carrying the header X-Lanes-Test-Run: <run> are
// matched, counted or faulted, so runs never see each other's scripts.
//
//	PUT    /__test/faults/{run}   {"rules":[{"method":"POST","path":"/api/v1/push",
//	                                 "responses":[{"status":429,"headers":{"Retry-After":"1"},"times":2}]}]}
//	GET    /__test/faults/{run}   {"rules":[{"method","path","query","attempts","faulted","retryCounts":["0","1",…]}]}
//	DELETE /__test/faults/{run}
//
// A rule matches a method ("" = any), a path (exact, or a prefix when it ends in "*") and, with
// "query", parameters the request's query must carry (each exact, or a prefix when it ends in
// "*", so "*" alone is any value): {"query":{"after":"*"}} targets only the pages of a listing
// after the first.
// Its responses are served in order, each `times` times (default 1); {"pass":true} lets the
// request through (still counted). Once the script is used up the route behaves normally and
// every further request is still counted. The first matching rule counts a request.
// {"pass":true,"holdAnswerMs":N} also holds the answer up to N ms (less if the client leaves)
// after the request was served and before the answer is sent: on a pop, after its claim, the
// window where a client that leaves must get its claim given back; on a write, after its commit,
// the window where a client that times out cannot know whether it was applied.
// {"pass":true,"dropAnswer":true} serves the request and then closes the connection without an
// answer (the write was applied, the client hears nothing).
//
// A header value may hold ${httpDate} or ${httpDate:+2s} / ${httpDate:-30s} (a signed Go
// duration): the IMF-fixdate of the moment the fault is sent plus the offset, rounded up to the
// whole second, so a script can send a Retry-After date relative to its answer.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// FaultsRunHeader attributes a request to a fault-script run.
const FaultsRunHeader = "X-Lanes-Test-Run"

// FaultScriptedHeader marks an answer a fault script wrote rather than the broker, so the
// conformance proxy can tell what stands for a gateway in front of the broker (a Retry-After
// date) from what openapi.yaml describes.
const FaultScriptedHeader = "X-Lanes-Test-Fault"

// faultsPrefix is the control route, outside /api/v1.
const faultsPrefix = "/__test/faults/"

// FaultResponse is one scripted answer.
type FaultResponse struct {
	Status  int               `json:"status,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// Body is written verbatim; absent = {"error":…,"code":…} for statuses ≥ 400, nothing otherwise.
	Body    json.RawMessage `json:"body,omitempty"`
	Code    string          `json:"code,omitempty"`
	Times   int             `json:"times,omitempty"`
	Pass    bool            `json:"pass,omitempty"`
	DelayMs int             `json:"delayMs,omitempty"`
	// HoldAnswerMs, with Pass, holds the answer between serving the request and sending it.
	HoldAnswerMs int `json:"holdAnswerMs,omitempty"`
	// DropAnswer, with Pass, closes the connection after serving the request, without an answer.
	DropAnswer bool `json:"dropAnswer,omitempty"`
}

// FaultRule scripts one route of one run.
type FaultRule struct {
	Method string `json:"method,omitempty"`
	Path   string `json:"path"`
	// Query names parameters a request must carry to match, by value or value prefix.
	Query     map[string]string `json:"query,omitempty"`
	Responses []FaultResponse   `json:"responses,omitempty"`
}

// FaultCount is what GET reports per rule.
type FaultCount struct {
	Method      string            `json:"method,omitempty"`
	Path        string            `json:"path"`
	Query       map[string]string `json:"query,omitempty"`
	Attempts    int               `json:"attempts"`
	Faulted     int               `json:"faulted"`
	RetryCounts []string          `json:"retryCounts"`
}

type faultRuleState struct {
	FaultRule
	next    int // index into the expanded script
	script  []FaultResponse
	counted FaultCount
}

type faultInjector struct {
	mu   sync.Mutex
	runs map[string][]*faultRuleState
}

func newFaultInjector() *faultInjector {
	return &faultInjector{runs: map[string][]*faultRuleState{}}
}

func (r FaultRule) matches(req *http.Request) bool {
	if r.Method != "" && !strings.EqualFold(r.Method, req.Method) {
		return false
	}
	if !textMatches(r.Path, req.URL.Path) {
		return false
	}
	if len(r.Query) == 0 {
		return true
	}
	query := req.URL.Query()
	for name, want := range r.Query {
		if !slices.ContainsFunc(query[name], func(got string) bool { return textMatches(want, got) }) {
			return false
		}
	}
	return true
}

// textMatches compares a rule's path or parameter value with a request's: exactly, or by
// prefix when the rule's ends in "*".
func textMatches(rule, got string) bool {
	if prefix, ok := strings.CutSuffix(rule, "*"); ok {
		return strings.HasPrefix(got, prefix)
	}
	return got == rule
}

// wrap serves the control route and applies scripts in front of next.
func (f *faultInjector) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if run, ok := strings.CutPrefix(r.URL.Path, faultsPrefix); ok {
			f.control(w, r, run)
			return
		}
		run := r.Header.Get(FaultsRunHeader)
		if run == "" {
			next.ServeHTTP(w, r)
			return
		}
		resp, ok := f.take(run, r)
		if !ok {
			if resp.HoldAnswerMs > 0 || resp.DropAnswer {
				serveWithScriptedAnswer(next, w, r, resp)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if resp.DelayMs > 0 {
			select {
			case <-time.After(time.Duration(resp.DelayMs) * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		writeFault(w, resp)
	})
}

// take counts the request against the first matching rule and returns the scripted answer,
// if any is left; ok is false when the request goes through (a pass is then returned too).
func (f *faultInjector) take(run string, r *http.Request) (FaultResponse, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, st := range f.runs[run] {
		if !st.matches(r) {
			continue
		}
		st.counted.Attempts++
		st.counted.RetryCounts = append(st.counted.RetryCounts, r.Header.Get("X-Retry-Count"))
		if st.next >= len(st.script) {
			return FaultResponse{}, false
		}
		resp := st.script[st.next]
		st.next++
		if resp.Pass {
			return resp, false
		}
		st.counted.Faulted++
		return resp, true
	}
	return FaultResponse{}, false
}

// holdAnswerKey carries a pass's scriptedAnswer in the request context.
type holdAnswerKey struct{}

// scriptedAnswer is what a pass does to the answer of the request it lets through.
type scriptedAnswer struct {
	hold time.Duration
	drop bool
	// waited is set once the hold was waited out, by the pop (which must wait between its
	// claim and its send) or by the first write of the answer.
	waited bool
}

// serveWithScriptedAnswer serves r in full, then holds its answer or drops the connection.
func serveWithScriptedAnswer(next http.Handler, w http.ResponseWriter, r *http.Request, resp FaultResponse) {
	answer := &scriptedAnswer{hold: time.Duration(resp.HoldAnswerMs) * time.Millisecond, drop: resp.DropAnswer}
	r = r.WithContext(context.WithValue(r.Context(), holdAnswerKey{}, answer))
	next.ServeHTTP(&scriptedAnswerWriter{ResponseWriter: w, r: r, answer: answer}, r)
	if answer.drop {
		// Outside the recovery middleware: net/http closes the connection, nothing was sent.
		panic(http.ErrAbortHandler)
	}
}

// scriptedAnswerWriter holds the answer at its first write, or swallows it when it is dropped.
type scriptedAnswerWriter struct {
	http.ResponseWriter
	r      *http.Request
	answer *scriptedAnswer
}

func (w *scriptedAnswerWriter) WriteHeader(status int) {
	if w.answer.drop {
		return
	}
	holdAnswerForFaultScript(w.r)
	w.ResponseWriter.WriteHeader(status)
}

func (w *scriptedAnswerWriter) Write(b []byte) (int, error) {
	if w.answer.drop {
		return len(b), nil
	}
	holdAnswerForFaultScript(w.r)
	return w.ResponseWriter.Write(b)
}

func (w *scriptedAnswerWriter) Flush() {
	if w.answer.drop {
		return
	}
	holdAnswerForFaultScript(w.r)
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *scriptedAnswerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// holdAnswerForFaultScript waits out a fault script's holdAnswerMs once, or until
// the client leaves; without a script it returns at once.
func holdAnswerForFaultScript(r *http.Request) {
	answer, ok := r.Context().Value(holdAnswerKey{}).(*scriptedAnswer)
	if !ok || answer.waited || answer.hold <= 0 {
		return
	}
	answer.waited = true
	timer := time.NewTimer(answer.hold)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-r.Context().Done():
	}
}

// httpDateTemplate is a header value's date relative to the moment the fault is sent.
var httpDateTemplate = regexp.MustCompile(`\$\{httpDate([^}]*)\}`)

// expandHeader replaces every ${httpDate[:±offset]} of a header value with the IMF-fixdate of
// now plus the offset, rounded up to the whole second so the date is never nearer than asked.
func expandHeader(v string, now time.Time) (string, error) {
	var bad error
	out := httpDateTemplate.ReplaceAllStringFunc(v, func(m string) string {
		arg := httpDateTemplate.FindStringSubmatch(m)[1]
		var offset time.Duration
		if arg != "" {
			d, err := time.ParseDuration(strings.TrimPrefix(arg, ":"))
			if err != nil || (!strings.HasPrefix(arg, ":+") && !strings.HasPrefix(arg, ":-")) {
				bad = fmt.Errorf("%s: want ${httpDate} or ${httpDate:+2s} / ${httpDate:-30s}", m)
				return m
			}
			offset = d
		}
		at := now.Add(offset)
		if rounded := at.Truncate(time.Second); rounded.Before(at) {
			at = rounded.Add(time.Second)
		}
		return at.UTC().Format(http.TimeFormat)
	})
	return out, bad
}

func writeFault(w http.ResponseWriter, resp FaultResponse) {
	status := resp.Status
	if status == 0 {
		status = http.StatusServiceUnavailable
	}
	now := time.Now()
	w.Header().Set(FaultScriptedHeader, "scripted")
	for k, v := range resp.Headers {
		expanded, _ := expandHeader(v, now) // checked when the script was set
		w.Header().Set(k, expanded)
	}
	body := []byte(resp.Body)
	if len(body) == 0 && status >= 400 {
		code := resp.Code
		if code == "" {
			code = defaultFaultCode(status)
		}
		body, _ = json.Marshal(map[string]string{"error": "injected by a test fault script", "code": code})
	}
	if len(body) > 0 && w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	if len(body) > 0 && status != http.StatusNoContent && status != http.StatusNotModified {
		_, _ = w.Write(body)
	}
}

func defaultFaultCode(status int) string {
	switch status {
	case http.StatusBadRequest:
		return CodeBadRequest
	case http.StatusUnauthorized:
		return CodeUnauthorized
	case http.StatusForbidden:
		return CodeForbidden
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusRequestEntityTooLarge:
		return CodePayloadTooLarge
	case http.StatusTooManyRequests:
		return CodeRateLimited
	case http.StatusServiceUnavailable:
		return "unavailable" // a scripted fault's own code, not one the broker sends
	default:
		return "internal"
	}
}

func (f *faultInjector) control(w http.ResponseWriter, r *http.Request, run string) {
	if run == "" || strings.Contains(run, "/") {
		writeError(w, http.StatusNotFound, CodeNoSuchRoute, "use "+faultsPrefix+"{run}")
		return
	}
	switch r.Method {
	case http.MethodPut, http.MethodPost:
		var body struct {
			Rules []FaultRule `json:"rules"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeError(w, http.StatusBadRequest, CodeBadRequest, "fault script: "+err.Error())
			return
		}
		states := make([]*faultRuleState, 0, len(body.Rules))
		for _, rule := range body.Rules {
			if rule.Path == "" {
				writeError(w, http.StatusBadRequest, CodeBadRequest, "fault script: every rule needs a path")
				return
			}
			st := &faultRuleState{FaultRule: rule, counted: FaultCount{Method: rule.Method, Path: rule.Path, Query: rule.Query, RetryCounts: []string{}}}
			for _, resp := range rule.Responses {
				for k, v := range resp.Headers {
					if _, err := expandHeader(v, time.Now()); err != nil {
						writeError(w, http.StatusBadRequest, CodeBadRequest, "fault script: header "+k+": "+err.Error())
						return
					}
				}
				for range max(resp.Times, 1) {
					st.script = append(st.script, resp)
				}
			}
			states = append(states, st)
		}
		f.mu.Lock()
		f.runs[run] = states
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case http.MethodGet:
		f.mu.Lock()
		out := struct {
			Rules []FaultCount `json:"rules"`
		}{Rules: []FaultCount{}}
		for _, st := range f.runs[run] {
			c := st.counted
			c.RetryCounts = append([]string(nil), c.RetryCounts...)
			out.Rules = append(out.Rules, c)
		}
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	case http.MethodDelete:
		f.mu.Lock()
		delete(f.runs, run)
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, PUT, POST, DELETE")
		writeError(w, http.StatusMethodNotAllowed, CodeMethod, r.Method+" is not allowed on "+r.URL.Path)
	}
}
