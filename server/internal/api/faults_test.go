package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
