package api

import (
	"encoding/base64"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/lanesmq/lanes/server/internal/admission"
	"github.com/lanesmq/lanes/server/internal/api/gen"
)

// A body with a byte that is not UTF-8 was stored verbatim (a push payload,
// which then made pop answers invalid JSON) or silently changed to U+FFFD (a
// name, a KV value); every body route refuses it, and writes nothing.
func TestBodyWithInvalidUTF8Is400AndWritesNothing(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	badTimerPayload := base64.StdEncoding.EncodeToString([]byte("{\"s\":\"x\xfey\"}"))
	cases := []struct {
		name, method, path, body, code string
	}{
		{"push payload", "POST", "/api/v1/push", `{"items":[{"queue":"` + q + `","payload":{"s":"x` + "\xfe" + `y"}}]}`, CodeBadRequest},
		{"push queue name", "POST", "/api/v1/push", `{"items":[{"queue":"` + q + "\xff" + `","payload":1}]}`, CodeBadRequest},
		{"ack", "POST", "/api/v1/ack", `{"transactionId":"t` + "\xff" + `","partitionId":"00000000-0000-0000-0000-000000000000","status":"completed"}`, CodeBadRequest},
		{"transaction", "POST", "/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"` + q + `","payload":"` + "\xfe" + `"}]}]}`, CodeBadRequest},
		{"configure", "POST", "/api/v1/configure", `{"queue":"` + q + "\xff" + `"}`, CodeBadRequest},
		{"kv put", "PUT", "/api/v1/kv/" + q + "/k", `{"value":"a` + "\xff" + `","forever":true}`, "kv_bad_request"},
		{"kv batch", "POST", "/api/v1/kv", `{"operations":[{"op":"put","ns":"` + q + `","key":"k","value":"` + "\xff" + `","forever":true}]}`, "kv_bad_request"},
		{"timer payload decoding to invalid UTF-8", "POST", "/api/v1/timers", `{"operations":[{"op":"schedule","queue":"` + q + `","timerKey":"k","delayMs":0,"payload":"` + badTimerPayload + `"}]}`, "timers_bad_request"},
		{"timer payload in a transaction", "POST", "/api/v1/transaction", `{"operations":[],"timers":[{"op":"schedule","queue":"` + q + `","timerKey":"k","delayMs":0,"payload":"` + badTimerPayload + `"}]}`, "timers_bad_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e errorBody
			status, _ := b.call(t, c.method, c.path, c.body, &e)
			if status != http.StatusBadRequest || e.Code != c.code || !strings.Contains(e.Error, "UTF-8") {
				t.Fatalf("want 400 %s about UTF-8, got %d %+v", c.code, status, e)
			}
		})
	}
	if n := b.writtenUnder(t, q); n != 0 {
		t.Fatalf("refused requests wrote %d rows", n)
	}
}

// Data after the JSON value was ignored on the schema-validated routes:
// {"enabled":true}{"enabled":false} switched pop maintenance on.
func TestBodyWithDataAfterItsJSONValueIs400AndChangesNothing(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	t.Cleanup(func() { b.call(t, "POST", "/api/v1/system/maintenance/pop", map[string]any{"enabled": false}, nil) })
	cases := []struct {
		name, method, path, body, code string
	}{
		{"pop maintenance", "POST", "/api/v1/system/maintenance/pop", `{"enabled":true}{"enabled":false}`, CodeInvalidJSON},
		{"push maintenance", "POST", "/api/v1/system/maintenance", `{"enabled":true}x`, CodeInvalidJSON},
		{"configure", "POST", "/api/v1/configure", `{"queue":"` + q + `"}}x`, CodeInvalidJSON},
		{"transaction", "POST", "/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"` + q + `","payload":1}]}]} []`, CodeInvalidJSON},
		{"subscription", "POST", "/api/v1/consumer-groups/g-" + q + "/subscription", `{"subscriptionTimestamp":"2026-01-01T00:00:00Z"}1`, CodeInvalidJSON},
		{"seek", "POST", "/api/v1/consumer-groups/g-" + q + "/queues/" + q + "/seek", `{"toEnd":true}{}`, CodeInvalidJSON},
		{"kv put", "PUT", "/api/v1/kv/" + q + "/k", `{"value":1,"forever":true}garbage`, "kv_bad_request"},
		{"kv batch", "POST", "/api/v1/kv", `{"operations":[{"op":"put","ns":"` + q + `","key":"k","value":1,"forever":true}]}{}`, "kv_bad_request"},
		{"timers", "POST", "/api/v1/timers", `{"operations":[{"op":"schedule","queue":"` + q + `","timerKey":"k","delayMs":0}]}x`, "timers_bad_request"},
		{"push", "POST", "/api/v1/push", `{"items":[{"queue":"` + q + `","payload":1}]}x`, CodeInvalidJSON},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e errorBody
			status, _ := b.call(t, c.method, c.path, c.body, &e)
			if status != http.StatusBadRequest || e.Code != c.code || !strings.Contains(e.Error, "after") {
				t.Fatalf("want 400 %s about data after the value, got %d %+v", c.code, status, e)
			}
		})
	}
	var m struct {
		Enabled bool `json:"enabled"`
	}
	for _, path := range []string{"/api/v1/system/maintenance/pop", "/api/v1/system/maintenance"} {
		if status, _ := b.call(t, "GET", path, nil, &m); status != http.StatusOK || m.Enabled {
			t.Fatalf("%s after refused switches: %d %+v", path, status, m)
		}
	}
	if n := b.writtenUnder(t, q); n != 0 {
		t.Fatalf("refused requests wrote %d rows", n)
	}
	if n := b.countRows(t, `SELECT count(*) FROM lanes.consumer_groups WHERE starts_with(consumer_group, $1)`, "g-"+q); n != 0 {
		t.Fatalf("refused requests created %d consumer groups", n)
	}
}

// KV and timers answer every 400 with their family's code, as the spec says;
// a number past int64, a NUL in the path and invalid UTF-8 in the query
// answered validation_failed or bad_request.
func TestKVAndTimerFaultsAnswerTheFamilyCode(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	cases := []struct {
		name, method, path, body, code string
	}{
		{"kv delta past int64", "POST", "/api/v1/kv", `{"operations":[{"op":"incr","ns":"` + q + `","key":"c","delta":99999999999999999999,"forever":true}]}`, "kv_bad_request"},
		{"timer delayMs past int64", "POST", "/api/v1/timers", `{"operations":[{"op":"schedule","queue":"` + q + `","timerKey":"k","delayMs":100000000000000000000}]}`, "timers_bad_request"},
		{"timer payload not a string", "POST", "/api/v1/timers", `{"operations":[{"op":"schedule","queue":"` + q + `","timerKey":"k","delayMs":1000,"payload":5}]}`, "timers_bad_request"},
		{"transaction kv delta past int64", "POST", "/api/v1/transaction", `{"operations":[],"kv":[{"op":"incr","ns":"` + q + `","key":"c","delta":99999999999999999999,"forever":true}]}`, "kv_bad_request"},
		{"transaction timer delayMs past int64", "POST", "/api/v1/transaction", `{"operations":[],"timers":[{"op":"schedule","queue":"` + q + `","timerKey":"k","delayMs":100000000000000000000}]}`, "timers_bad_request"},
		{"NUL in a kv path", "GET", "/api/v1/kv/" + q + "/a%00b", "", "kv_bad_request"},
		{"invalid UTF-8 in a timers query", "GET", "/api/v1/timers/" + q + "?prefix=%FF", "", "timers_bad_request"},
		{"dot segment in a kv path", "GET", "/api/v1/kv/" + q + "/..", "", "kv_bad_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { b.wantBadRequest(t, c.method, c.path, c.body, c.code, "") })
	}
	if n := b.writtenUnder(t, q); n != 0 {
		t.Fatalf("refused requests wrote %d rows", n)
	}
}

// LANES_MAX_BODY_BYTES accepts up to 9223372036854775807, a cap that is no
// cap; reading one byte past it overflowed, so every body sent without a
// Content-Length was read as empty and answered 400 invalid_json.
func TestABodyWithoutALengthIsReadWholeUnderTheLargestCap(t *testing.T) {
	for name, budget := range map[string]*admission.ByteBudget{
		"no body budget":          nil,
		"the largest body budget": admission.NewByteBudget(math.MaxInt64, time.Second).LimitPerClient(math.MaxInt64),
	} {
		b := newBrokerWith(t, testDSN, Options{MaxBodyBytes: math.MaxInt64, BodyBudget: budget, BodyReadTimeout: time.Minute}, "")
		q := uniqueQueue(t)
		for _, chunked := range []bool{false, true} {
			if resp, e := mustPostPush(t, b.URL, pushOfSize(q, 1000), chunked); resp.StatusCode != http.StatusCreated {
				t.Errorf("%s: push (chunked %v) under the largest cap: %d %+v; want 201", name, chunked, resp.StatusCode, e)
			}
		}
	}
}

// The hot routes (push, ack, ack batch) skip the route match that tells a
// request's body apart, and must get the answer the match gives.
func TestHotPathBodiesAreTheOperationsDeclared(t *testing.T) {
	spec, err := gen.GetSpec()
	if err != nil {
		t.Fatal(err)
	}
	router := mux.NewRouter()
	router.UseEncodedPath()
	gen.HandlerWithOptions(nil, gen.GorillaServerOptions{BaseRouter: router})
	bodyOf := operationBodies(spec, router)
	for _, path := range []string{"/api/v1/push", "/api/v1/ack", "/api/v1/ack/batch"} {
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader("{}"))
		if !isHotPathBody(r) {
			t.Fatalf("%s is not a hot path", path)
		}
		var match mux.RouteMatch
		if !router.Match(r, &match) || match.Route == nil {
			t.Fatalf("no route for POST %s", path)
		}
		template, err := match.Route.GetPathTemplate()
		if err != nil || spec.Paths.Find(template) == nil || spec.Paths.Find(template).Post == nil || spec.Paths.Find(template).Post.RequestBody == nil {
			t.Fatalf("POST %s (%s, %v) declares no request body in the spec", path, template, err)
		}
		if bodyOf(r) != routeWithBody {
			t.Fatalf("POST %s: %v, want routeWithBody", path, bodyOf(r))
		}
	}
}
