package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEveryShippedCaseLoads(t *testing.T) {
	cases, err := loadCases(filepath.Join("..", "..", "cases"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("no cases in conformance/cases")
	}
}

func TestACaseWithAMisspelledStepArgumentOrAnUnknownOpDoesNotLoad(t *testing.T) {
	for _, tc := range []struct{ name, step, want string }{
		{"misspelled knob", `pop: {queue: q, leaseSecond: 1}`, "pop: unknown argument leaseSecond"},
		{"unknown op", `popp: {queue: q}`, `unknown operation "popp"`},
		{"knob of another op", `push: {queue: q, items: [], batch: 2}`, "push: unknown argument batch"},
		{"a pause nothing can resume", `dlqAll: {queue: q, limit: 2, pauseAfter: 2}`, "dlqAll: pauseAfter needs save"},
	} {
		dir := t.TempDir()
		body := "cases:\n  - name: c\n    steps:\n      - " + tc.step + "\n"
		if err := os.WriteFile(filepath.Join(dir, "x.yaml"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := loadCases(dir)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: loadCases error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// The adapters read only the client options they know: a misspelled one would
// leave the SDK's default in place and the case would test something else.
func TestACaseWithAnUnknownClientOptionDoesNotLoad(t *testing.T) {
	for _, tc := range []struct{ name, client, want string }{
		{"known options", `{retryAttempts: 2, retryDelayMs: 10, env: {LANES_SDK_POP_AUTOPILOT: "off"}}`, ""},
		{"misspelled option", `{retryAttempt: 2}`, "client: unknown option retryAttempt"},
		{"an SDK's own casing", `{retry_delay: 1}`, "client: unknown option retry_delay"},
		{"urls with the case's broker", `{urls: ["http://127.0.0.1:2", "${url}"], healthRetryAfterMs: 0}`, ""},
		{"urls without the case's broker", `{urls: ["http://127.0.0.1:2"]}`, `exactly once`},
		{"urls with the case's broker twice", `{urls: ["${url}", "${url}"]}`, `exactly once`},
		{"urls not a list of strings", `{urls: "${url}"}`, `exactly once`},
	} {
		dir := t.TempDir()
		body := "cases:\n  - name: c\n    client: " + tc.client + "\n    steps:\n      - pop: {queue: q}\n"
		if err := os.WriteFile(filepath.Join(dir, "x.yaml"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := loadCases(dir)
		if tc.want == "" && err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: loadCases error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

func TestOnlyAPushStepRunsInTheBackground(t *testing.T) {
	for _, tc := range []struct{ name, step, want string }{
		{"a push", "push: {queue: q, items: [{data: 1}]}\n        background: {afterMs: 300}", ""},
		{"a pop", "pop: {queue: q}\n        background: {afterMs: 300}", "only a push step may run in the background"},
		{"no delay", "push: {queue: q, items: []}\n        background: true", "want {afterMs: N}"},
		{"a misspelled delay", "push: {queue: q, items: []}\n        background: {afterMS: 3}", "want {afterMs: N}"},
	} {
		dir := t.TempDir()
		body := "cases:\n  - name: c\n    steps:\n      - " + tc.step + "\n"
		if err := os.WriteFile(filepath.Join(dir, "x.yaml"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cases, err := loadCases(dir)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			} else if bg := cases[0].Steps[0].Background; bg == nil || bg.AfterMs != 300 {
				t.Errorf("%s: background %+v, want afterMs 300", tc.name, bg)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: loadCases error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// A scripted answer names the case's queues (a listing page keyed by queue name), so the run's
// names go into its body and headers too; the case's own rule keeps ${q} for the next run.
func TestAFaultRuleGetsTheRunsNamesInPathAndScriptedAnswers(t *testing.T) {
	rule := faultSpec{Method: "GET", Path: "/api/v1/consumer-groups/${q}-g", Responses: []map[string]any{
		{"status": 200, "headers": map[string]any{"X-Name": "${q}", "Retry-After": "${httpDate:+2s}"},
			"body": map[string]any{"${q}-a": map[string]any{"partitions": []any{map[string]any{"partition": "${run}"}}}}},
	}}
	got := rule.forRun(map[string]string{"q": "cf-go-1", "run": "cf-go-1"})
	if got.Path != "/api/v1/consumer-groups/cf-go-1-g" {
		t.Errorf("path %q", got.Path)
	}
	answer := got.Responses[0]
	if h := answer["headers"].(map[string]any); h["X-Name"] != "cf-go-1" || h["Retry-After"] != "${httpDate:+2s}" {
		t.Errorf("headers %v: want the run's name, and the broker's own template left alone", h)
	}
	body := answer["body"].(map[string]any)
	part := body["cf-go-1-a"].(map[string]any)["partitions"].([]any)[0].(map[string]any)
	if part["partition"] != "cf-go-1" {
		t.Errorf("body %v: want the run's names in keys and values", body)
	}
	if rule.Path != "/api/v1/consumer-groups/${q}-g" || rule.Responses[0]["headers"].(map[string]any)["X-Name"] != "${q}" {
		t.Errorf("the case's rule changed: %+v", rule)
	}

	byQuery := faultSpec{Method: "GET", Path: "/api/v1/dlq", Query: map[string]string{"queue": "${q}", "after": "*"}}
	got = byQuery.forRun(map[string]string{"q": "cf-go-1"})
	if got.Query["queue"] != "cf-go-1" || got.Query["after"] != "*" || byQuery.Query["queue"] != "${q}" {
		t.Errorf("query %v (the case's %v): want the run's name in the run's rule only", got.Query, byQuery.Query)
	}
}

// A request's params match its query's parameters in any order (Go's client writes
// minLagSeconds after limit, TypeScript's and Python's before it); query stays byte for byte.
func TestARequestsParamsMatchInAnyOrderAndItsQueryByteForByte(t *testing.T) {
	vars := map[string]string{"q": "cf-go-1"}
	byParams := requestSpec{Params: map[string]string{"limit": "10000", "after": "k", "group": "${q}"}}
	for query, want := range map[string]bool{
		"limit=10000&after=k&group=cf-go-1":          true,
		"group=cf-go-1&after=k&limit=10000":          true,
		"limit=10000&group=cf-go-1":                  false, // after missing
		"limit=10000&after=k&group=cf-go-1&offset=1": false,
		"limit=10000&after=k&after=k&group=cf-go-1":  false,
		"limit=10000&after=j&group=cf-go-1":          false,
	} {
		if got := byParams.queryProblem(query, vars) == ""; got != want {
			t.Errorf("params %v, query %q: match %v, want %v", byParams.Params, query, got, want)
		}
	}
	anyKey := requestSpec{Params: map[string]string{"limit": "2", "after": "*"}}
	for query, want := range map[string]bool{
		"limit=2&after=WyJhIl0": true, // an opaque key the case cannot write
		"after=&limit=2":        true,
		"limit=2":               false, // "*" still needs the parameter
	} {
		if got := anyKey.queryProblem(query, vars) == ""; got != want {
			t.Errorf("params %v, query %q: match %v, want %v", anyKey.Params, query, got, want)
		}
	}
	byQuery := requestSpec{Query: "limit=10000&after=k"}
	if byQuery.queryProblem("limit=10000&after=k", vars) != "" || byQuery.queryProblem("after=k&limit=10000", vars) == "" {
		t.Error("query must match byte for byte")
	}
}

// A "*" in a request's path stands for one segment (a partition id the case cannot know), and
// the rest of the path must match as written.
func TestARequestsPathStarStandsForOneSegment(t *testing.T) {
	vars := map[string]string{"q": "cf-go-1"}
	del := requestSpec{Method: "DELETE", Path: "/api/v1/messages/*/${q}-5"}
	for path, want := range map[string]bool{
		"/api/v1/messages/8e0c2a44-55b1-4f4e-9a43-1d6f0c9b7e21/cf-go-1-5": true,
		"/api/v1/messages/8e0c2a44-55b1-4f4e-9a43-1d6f0c9b7e21/cf-go-1-4": false,
		"/api/v1/messages/a/b/cf-go-1-5":                                  false, // two segments
		"/api/v1/messages/cf-go-1-5":                                      false,
	} {
		if got := del.matches("DELETE", path, vars); got != want {
			t.Errorf("path %q against %q: match %v, want %v", path, del.Path, got, want)
		}
	}
	if del.matches("GET", "/api/v1/messages/p/cf-go-1-5", vars) {
		t.Error("the method must match too")
	}
	plain := requestSpec{Method: "GET", Path: "/api/v1/messages"}
	if !plain.matches("GET", "/api/v1/messages", vars) || plain.matches("GET", "/api/v1/messages/x", vars) {
		t.Error("a path without a star must match exactly")
	}
}

func TestARequestsHeadersMatchByNameInAnyCaseAndValueAsAPath(t *testing.T) {
	vars := map[string]string{"q": "cf-go-001"}
	spec := requestSpec{Headers: map[string]string{"authorization": "Bearer ${q}", "User-Agent": "lanes-mq-*/*"}}
	h := http.Header{}
	h.Set("Authorization", "Bearer cf-go-001")
	h.Set("User-Agent", "lanes-mq-python/0.0.0")
	if p := spec.headerProblem(h, vars); p != "" {
		t.Fatalf("matching headers: %s", p)
	}
	h.Set("User-Agent", "Go-http-client/1.1")
	if spec.headerProblem(h, vars) == "" {
		t.Fatal("a User-Agent outside the pattern matched")
	}
	h.Del("Authorization")
	h.Set("User-Agent", "lanes-mq-go/0.0.0")
	if spec.headerProblem(h, vars) == "" {
		t.Fatal("a missing Authorization matched")
	}
}

func TestAHeaderSentTwiceFailsEvenWhenOneLineHoldsTheWantedValue(t *testing.T) {
	spec := requestSpec{Headers: map[string]string{"accept": "application/json"}}
	h := http.Header{}
	h.Add("Accept", "text/plain")
	h.Add("Accept", "application/json")
	if p := spec.headerProblem(h, nil); !strings.Contains(p, "sent 2 times") {
		t.Fatalf("two Accept lines: problem %q, want one naming them", p)
	}
	h.Del("Accept")
	h.Set("Accept", "application/json")
	if p := spec.headerProblem(h, nil); p != "" {
		t.Fatalf("one Accept line: %s", p)
	}
}

func TestHeadersInOrderMustBeNameValuePairs(t *testing.T) {
	for _, bad := range []any{[]any{}, []any{[]any{"X-A"}}, []any{[]any{"X-A", 1}}, "X-A: 1"} {
		if checkClientArgs(map[string]any{"headersInOrder": bad}) == nil {
			t.Errorf("headersInOrder %v loaded", bad)
		}
	}
	if err := checkClientArgs(map[string]any{"headersInOrder": []any{[]any{"X-A", "1"}, []any{"x-a", "2"}}}); err != nil {
		t.Fatal(err)
	}
}
