package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestFaultScripts(t *testing.T) {
	served := 0
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served++
		w.WriteHeader(http.StatusCreated)
	})
	srv := httptest.NewServer(newFaultInjector().wrap(next))
	defer srv.Close()

	do := func(method, path, run, retry, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if run != "" {
			req.Header.Set(FaultsRunHeader, run)
		}
		if retry != "" {
			req.Header.Set("X-Retry-Count", retry)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	script := `{"rules":[
	  {"method":"POST","path":"/api/v1/push","responses":[{"status":429,"headers":{"Retry-After":"1"},"times":2}]},
	  {"method":"GET","path":"/api/v1/pop/*","responses":[{"pass":true},{"status":403}]}]}`
	if resp := do(http.MethodPut, "/__test/faults/r1", "", "", script); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT script: %d", resp.StatusCode)
	}

	// Another run and unmarked requests are untouched.
	if resp := do(http.MethodPost, "/api/v1/push", "r2", "0", "{}"); resp.StatusCode != http.StatusCreated {
		t.Fatalf("other run: %d", resp.StatusCode)
	}
	if resp := do(http.MethodPost, "/api/v1/push", "", "0", "{}"); resp.StatusCode != http.StatusCreated {
		t.Fatalf("no run: %d", resp.StatusCode)
	}

	for i, want := range []int{429, 429, 201, 201} {
		resp := do(http.MethodPost, "/api/v1/push", "r1", string(rune('0'+i)), "{}")
		if resp.StatusCode != want {
			t.Fatalf("push %d: status %d, want %d", i, resp.StatusCode, want)
		}
		if want == 429 {
			b, _ := io.ReadAll(resp.Body)
			var e struct{ Error, Code string }
			if err := json.Unmarshal(b, &e); err != nil || e.Code != "rate_limited" || resp.Header.Get("Retry-After") != "1" {
				t.Fatalf("429 answer: %s %v retry-after=%q", b, err, resp.Header.Get("Retry-After"))
			}
		}
		_ = resp.Body.Close()
	}
	for i, want := range []int{201, 403, 201} {
		if resp := do(http.MethodGet, "/api/v1/pop/queue/q", "r1", "0", ""); resp.StatusCode != want {
			t.Fatalf("pop %d: status %d, want %d", i, resp.StatusCode, want)
		}
	}
	if served != 2+2+2 {
		t.Fatalf("next served %d requests, want 6", served)
	}

	resp := do(http.MethodGet, "/__test/faults/r1", "", "", "")
	var counts struct{ Rules []FaultCount }
	if err := json.NewDecoder(resp.Body).Decode(&counts); err != nil {
		t.Fatal(err)
	}
	if len(counts.Rules) != 2 {
		t.Fatalf("rules: %+v", counts.Rules)
	}
	push, pop := counts.Rules[0], counts.Rules[1]
	if push.Attempts != 4 || push.Faulted != 2 || strings.Join(push.RetryCounts, ",") != "0,1,2,3" {
		t.Fatalf("push counts: %+v", push)
	}
	if pop.Attempts != 3 || pop.Faulted != 1 {
		t.Fatalf("pop counts: %+v", pop)
	}

	if resp := do(http.MethodDelete, "/__test/faults/r1", "", "", ""); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %d", resp.StatusCode)
	}
	if resp := do(http.MethodPost, "/api/v1/push", "r1", "0", "{}"); resp.StatusCode != http.StatusCreated {
		t.Fatalf("after delete: %d", resp.StatusCode)
	}
	if resp := do(http.MethodPut, "/__test/faults/r1", "", "", `{"rules":[{"method":"GET"}]}`); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("rule without path: %d", resp.StatusCode)
	}
}

// A rule with a query targets only the requests carrying those parameters, so a case can fail
// the pages of a listing after the first (they carry after) and let the first through.
func TestFaultScriptTargetsARequestByItsQuery(t *testing.T) {
	srv := httptest.NewServer(newFaultInjector().wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	})))
	defer srv.Close()
	send := func(method, pathAndQuery, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+pathAndQuery, strings.NewReader(body))
		req.Header.Set(FaultsRunHeader, "r1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp
	}
	script := `{"rules":[
	  {"method":"GET","path":"/api/v1/dlq","query":{"after":"*","queue":"cf-*"},"responses":[{"status":500}]},
	  {"method":"GET","path":"/api/v1/dlq"}]}`
	if resp := send(http.MethodPut, "/__test/faults/r1", script); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT script: %d", resp.StatusCode)
	}
	for _, c := range []struct {
		query string
		want  int
	}{
		{"queue=cf-1&limit=2", http.StatusOK},           // the first page: no after
		{"queue=other&limit=2&after=k1", http.StatusOK}, // another queue: the prefix does not match
		{"queue=cf-1&limit=2&after=k1", http.StatusInternalServerError},
		{"after=k2&queue=cf-1", http.StatusOK}, // the script is used up: counted, served
		{"queue=cf-1&after=", http.StatusOK},   // "*" matches an empty value too
	} {
		if resp := send(http.MethodGet, "/api/v1/dlq?"+c.query, ""); resp.StatusCode != c.want {
			t.Fatalf("GET ?%s: %d, want %d", c.query, resp.StatusCode, c.want)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/__test/faults/r1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var counts struct{ Rules []FaultCount }
	if err := json.NewDecoder(resp.Body).Decode(&counts); err != nil || len(counts.Rules) != 2 {
		t.Fatalf("counts: %+v %v", counts, err)
	}
	byQuery, rest := counts.Rules[0], counts.Rules[1]
	if byQuery.Attempts != 3 || byQuery.Faulted != 1 || byQuery.Query["after"] != "*" {
		t.Fatalf("the rule with a query: %+v, want 3 attempts, 1 faulted, its query reported", byQuery)
	}
	if rest.Attempts != 2 || rest.Faulted != 0 {
		t.Fatalf("the rule without one: %+v, want the other 2 attempts", rest)
	}
}

// A scripted header may carry an HTTP-date relative to the moment the fault is sent, so a case
// can answer a 429 with a Retry-After date; a malformed template refuses the script.
func TestFaultScriptHTTPDateHeader(t *testing.T) {
	srv := httptest.NewServer(newFaultInjector().wrap(http.NotFoundHandler()))
	defer srv.Close()
	put := func(script string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/__test/faults/r1", strings.NewReader(script))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, bad := range []string{"${httpDate:2s}", "${httpDate:+soon}", "${httpDate:}", "${httpDate+2s}"} {
		if code := put(`{"rules":[{"path":"/p","responses":[{"status":429,"headers":{"Retry-After":"` + bad + `"}}]}]}`); code != http.StatusBadRequest {
			t.Fatalf("template %s: PUT answered %d, want 400", bad, code)
		}
	}
	script := `{"rules":[{"path":"/p","responses":[
	  {"status":429,"headers":{"Retry-After":"${httpDate:+2s}"}},
	  {"status":429,"headers":{"Retry-After":"${httpDate:-30s}"}},
	  {"status":429,"headers":{"Retry-After":"${httpDate}","X-Note":"at ${httpDate:+1h} or later"}}]}]}`
	if code := put(script); code != http.StatusNoContent {
		t.Fatalf("PUT script: %d", code)
	}
	for _, want := range []time.Duration{2 * time.Second, -30 * time.Second, 0} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/p", nil)
		req.Header.Set(FaultsRunHeader, "r1")
		before := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		after := time.Now()
		at, err := time.Parse(http.TimeFormat, resp.Header.Get("Retry-After"))
		if err != nil {
			t.Fatalf("Retry-After %q: %v", resp.Header.Get("Retry-After"), err)
		}
		// Rounded up to the whole second: never nearer than asked, less than a second later.
		if at.Before(before.Add(want).Truncate(time.Second)) || !at.Before(after.Add(want).Add(time.Second)) {
			t.Fatalf("offset %v: Retry-After %v, sent between %v and %v", want, at, before, after)
		}
		if note := resp.Header.Get("X-Note"); want == 0 && (strings.Contains(note, "${") || !strings.HasSuffix(note, " GMT or later")) {
			t.Fatalf("X-Note %q: the template inside a longer value is not expanded", note)
		}
	}
}

// The fault mode is off unless the option asks for it: the control route is then an unknown route.
func TestFaultScriptsOffByDefault(t *testing.T) {
	b := newTestBroker(t)
	resp, err := http.Get(b.URL + "/__test/faults/r1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /__test/faults without the option: %d, want 404", resp.StatusCode)
	}
}

// A pass may hold a write's answer after the write was served (the client that times out
// cannot know it was applied) or drop the connection without an answer.
func TestFaultScriptHoldsOrDropsAnAnswerAfterServing(t *testing.T) {
	served := 0
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served++
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"applied":true}`))
	})
	srv := httptest.NewServer(newFaultInjector().wrap(next))
	defer srv.Close()
	script := `{"rules":[{"method":"POST","path":"/api/v1/kv","responses":[
	  {"pass":true,"holdAnswerMs":400},{"pass":true,"dropAnswer":true}]}]}`
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/__test/faults/r1", strings.NewReader(script))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT script: %v %v", resp, err)
	}
	kv := func() (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/kv", strings.NewReader("{}"))
		req.Header.Set(FaultsRunHeader, "r1")
		return http.DefaultClient.Do(req)
	}

	start := time.Now()
	resp, err := kv()
	if err != nil || resp.StatusCode != http.StatusOK || time.Since(start) < 400*time.Millisecond {
		t.Fatalf("held answer: %v %v after %v", resp, err, time.Since(start))
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != `{"applied":true}` {
		t.Fatalf("held answer body: %s", b)
	}
	if served != 1 {
		t.Fatalf("served %d before the drop, want 1", served)
	}

	if resp, err := kv(); err == nil {
		t.Fatalf("dropped answer arrived: %d", resp.StatusCode)
	}
	if served != 2 {
		t.Fatalf("the dropped request was served %d times in all, want 2 (served, then dropped)", served-1)
	}
}
