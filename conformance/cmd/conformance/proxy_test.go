package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProxyChecksAScriptedRetryAfterDateAsSeconds: only a date a fault script wrote is read as the
// seconds it stands for; the broker's own answers are checked as they are.
func TestProxyChecksAScriptedRetryAfterDateAsSeconds(t *testing.T) {
	ahead := time.Now().Add(5 * time.Second).UTC().Format(http.TimeFormat)
	past := time.Now().Add(-time.Minute).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		name, retryAfter string
		scripted         bool
		want             func(string) bool
	}{
		{"scripted date ahead", ahead, true, func(v string) bool { n, err := strconv.Atoi(v); return err == nil && n >= 4 && n <= 6 }},
		{"scripted date past", past, true, func(v string) bool { return v == "0" }},
		{"scripted seconds", "7", true, func(v string) bool { return v == "7" }},
		{"broker's own date", ahead, false, func(v string) bool { return v == ahead }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{"Retry-After": {tc.retryAfter}}
			if tc.scripted {
				h.Set(faultHeader, "scripted")
			}
			got := headerAsTheBrokerSends(h).Get("Retry-After")
			if !tc.want(got) {
				t.Fatalf("Retry-After %q checked as %q", tc.retryAfter, got)
			}
			if h.Get("Retry-After") != tc.retryAfter {
				t.Fatalf("the answer's own header changed to %q", h.Get("Retry-After"))
			}
		})
	}
}

// TestProxyAcceptsAPoppedNumberNoFloat64Holds: a payload pushed as a bare
// 1e400 is stored and popped verbatim, which openapi.yaml allows (data accepts
// any JSON value), but kin-openapi converts a number to float64 before it
// checks a schema, so the proxy used to flag the broker's correct answer. A
// field the spec constrains is still checked.
func TestProxyAcceptsAPoppedNumberNoFloat64Holds(t *testing.T) {
	broker, proxy := proxyOfTestBroker(t)
	queue := fmt.Sprintf("conformance-proxy-1e400-%d", time.Now().UnixNano())
	send := func(method, url, body, run string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(runHeader, run)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	push := `{"items":[{"queue":"` + queue + `","partition":"p","payload":1e400},{"queue":"` + queue + `","partition":"p","payload":{"deep":[-1E-400,1e400]}}]}`
	if status, body := send("POST", broker+"/api/v1/push", push, "push"); status != http.StatusCreated {
		t.Fatalf("push: %d %s", status, body)
	}
	status, body := send("GET", proxy.URL+"/api/v1/pop/queue/"+queue+"?batch=2&subscriptionMode=all", "", "pop")
	if status != http.StatusOK || !strings.Contains(body, `"data":1e400`) || !strings.Contains(body, `[-1E-400,1e400]`) {
		t.Fatalf("pop through the proxy: %d %s", status, body)
	}
	if _, violations := proxy.take("pop"); len(violations) > 0 {
		t.Fatalf("the proxy flagged the broker's answer: %q", violations)
	}
	// Every other field is still checked: the same answer with a partition
	// name that is a number is flagged.
	popURL, _ := url.Parse(proxy.URL + "/api/v1/pop/queue/" + queue + "?batch=2&subscriptionMode=all")
	broken := strings.Replace(body, `"partition":"p"`, `"partition":5`, 1)
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body:    io.NopCloser(strings.NewReader(broken)),
		Request: &http.Request{Method: http.MethodGet, URL: popURL, Header: http.Header{runHeader: {"broken"}}}}
	if err := proxy.check(resp); err != nil {
		t.Fatal(err)
	}
	if _, violations := proxy.take("broken"); len(violations) != 1 || !strings.Contains(violations[0], "partition") {
		t.Fatalf("a partition name that is a number: want one violation about it, got %q", violations)
	}
}

// A connection the broker closes without an answer (a fault script's dropAnswer) reaches the
// client closed too, not as a 502 it could tell apart, and the request is still recorded.
func TestProxyPassesOnAConnectionDroppedWithoutAnswer(t *testing.T) {
	broker, proxy := proxyOfTestBroker(t)
	run := fmt.Sprintf("conformance-proxy-drop-%d", time.Now().UnixNano())
	script := `{"rules":[{"method":"POST","path":"/api/v1/kv","responses":[{"pass":true,"dropAnswer":true}]}]}`
	req, _ := http.NewRequest(http.MethodPut, broker+"/__test/faults/"+run, strings.NewReader(script))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT fault script: %v %v", resp, err)
	}
	t.Cleanup(func() {
		req, _ := http.NewRequest(http.MethodDelete, broker+"/__test/faults/"+run, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
		}
	})

	body := `{"operations":[{"op":"incr","ns":"` + run + `","key":"hits","delta":1,"forever":true}]}`
	req, _ = http.NewRequest(http.MethodPost, proxy.URL+"/api/v1/kv", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(runHeader, run)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("dropped answer reached the client as %d %s", resp.StatusCode, b)
	}
	requests, violations := proxy.take(run)
	if len(violations) != 0 {
		t.Fatalf("violations: %v", violations)
	}
	if len(requests) != 1 || requests[0].Op != "kvBatch" || requests[0].Status != 0 {
		t.Fatalf("recorded %+v, want one kvBatch without an answer", requests)
	}
}

// proxyOfTestBroker starts a validating proxy of openapi.yaml in front of the
// test broker (LANES_TEST_URL) and returns both.
func proxyOfTestBroker(t *testing.T) (broker string, proxy *validatingProxy) {
	t.Helper()
	broker = os.Getenv("LANES_TEST_URL")
	if broker == "" {
		t.Fatal("LANES_TEST_URL is not set: start a broker from the repository root (scripts/test-broker.sh start) and export LANES_TEST_URL=$(scripts/test-broker.sh url), or run `make test`")
	}
	proxy, err := newValidatingProxy(filepath.Join("..", "..", "..", "openapi.yaml"), broker, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	return broker, proxy
}

// A scripted 502 or 504 stands for a gateway in front of the broker: the spec, which describes
// the broker, declares neither, so only such a scripted answer goes unchecked; the same status
// from the broker itself, or a scripted status the spec does not declare, is still a violation.
func TestProxyLeavesOnlyAScriptedGatewayAnswerUnchecked(t *testing.T) {
	proxy, err := newValidatingProxy(filepath.Join("..", "..", "..", "openapi.yaml"), "http://127.0.0.1:2", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	for _, tc := range []struct {
		name      string
		status    int
		scripted  bool
		violation bool
	}{
		{"scripted 502", http.StatusBadGateway, true, false},
		{"scripted 504", http.StatusGatewayTimeout, true, false},
		{"the broker's own 502", http.StatusBadGateway, false, true},
		{"scripted 418", http.StatusTeapot, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := fmt.Sprintf("conformance-proxy-gateway-%d", time.Now().UnixNano())
			req, _ := http.NewRequest(http.MethodPost, proxy.URL+"/api/v1/kv", strings.NewReader(`{"operations":[]}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(runHeader, run)
			resp := &http.Response{StatusCode: tc.status, Request: req, Header: http.Header{"Content-Type": {"application/json"}},
				Body: io.NopCloser(strings.NewReader(`{"error":"x","code":"x"}`))}
			if tc.scripted {
				resp.Header.Set(faultHeader, "scripted")
			}
			if err := proxy.check(resp); err != nil {
				t.Fatal(err)
			}
			_, violations := proxy.take(run)
			if got := len(violations) > 0; got != tc.violation {
				t.Fatalf("violations %v, want a violation: %v", violations, tc.violation)
			}
		})
	}
}
