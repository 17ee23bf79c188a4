package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/lanesmq/lanes/server/internal/admission"
	"github.com/lanesmq/lanes/server/internal/api/gen"
)

var (
	specRouterOnce sync.Once
	specRouter     routers.Router
	specRouterErr  error
)

// specAnswer sends a request and checks the answer against openapi.yaml, as a
// client generated from it reads it: the status must be declared and the body
// must match its schema, with no key the schema does not declare. It returns
// the status and the raw body.
func (b *testBroker) specAnswer(t testing.TB, method, path, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return checkSpecAnswer(t, method, path, resp)
}

// checkSpecAnswer reads resp, the answer to method and path, and checks it
// against openapi.yaml as specAnswer does.
func checkSpecAnswer(t testing.TB, method, path string, resp *http.Response) (int, []byte) {
	t.Helper()
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	specRouterOnce.Do(func() {
		var spec *openapi3.T
		if spec, specRouterErr = gen.GetSpec(); specRouterErr != nil {
			return
		}
		spec.Servers = openapi3.Servers{{URL: "/"}}
		closeDeclaredObjects(spec)
		specRouter, specRouterErr = gorillamux.NewRouter(spec)
	})
	if specRouterErr != nil {
		t.Fatal(specRouterErr)
	}
	specReq, err := http.NewRequest(method, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	route, params, err := specRouter.FindRoute(specReq)
	if err != nil {
		t.Fatalf("%s %s: no operation in the spec: %v", method, path, err)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: specReq, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}},
		Status: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(raw)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s %s: %d %s does not match the spec: %v", method, path, resp.StatusCode, raw, err)
	}
	if zoned := zonedTimes(raw); len(zoned) > 0 {
		t.Errorf("%s %s: times not in UTC (the wire gives every time with Z): %q in %s", method, path, zoned, raw)
	}
	return resp.StatusCode, raw
}

// zonedOffset is an RFC 3339 time that ends in a numeric offset, not Z.
var zonedOffset = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?[+-]\d\d:\d\d$`)

// zonedTimes lists the times in a JSON answer written with an offset. The api
// tests run with a non-UTC local zone (TestMain), so a time scanned from
// PostgreSQL (pgx gives local times) and not converted shows here.
func zonedTimes(raw []byte) []string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return nil
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			if zonedOffset.MatchString(v) {
				out = append(out, v)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

// TestAnswersMatchTheSpec reads the management and status answers as a client
// generated from openapi.yaml does: every field the spec marks required must be
// there (a queue that never had a write, a partition without messages and a
// group without a lease included), with the types the spec gives.
func TestAnswersMatchTheSpec(t *testing.T) {
	b := newTestBroker(t)
	q, idle, group := uniqueQueue(t), uniqueQueue(t), "spec-g"
	if status, _ := b.specAnswer(t, "POST", "/api/v1/configure", `{"queue":"`+idle+`"}`); status != http.StatusOK {
		t.Fatalf("configure %s: %d", idle, status)
	}
	popped := b.deadLetter(t, q, "p0", "m0")
	pid := popped.Messages[0].PartitionID
	b.push(t, q, "p1", "m1")
	b.push(t, q, "p1", "m2")
	b.pop(t, "/api/v1/pop/queue/"+q+"/partition/p1?consumerGroup="+group+"&subscriptionMode=all&batch=1")
	var dlq dlqList
	b.call(t, "GET", "/api/v1/dlq?queue="+q, nil, &dlq)
	if len(dlq.Messages) != 1 {
		t.Fatalf("fixture: %+v", dlq)
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/api/v1/configure", `{"queue":"` + q + `","options":{"retryLimit":2}}`},
		{"GET", "/api/v1/resources/queues", ""},
		{"GET", "/api/v1/resources/queues/" + q, ""},
		{"GET", "/api/v1/resources/queues/" + idle, ""},
		{"GET", "/api/v1/resources/overview", ""},
		{"GET", "/api/v1/resources/namespaces", ""},
		{"GET", "/api/v1/resources/tasks", ""},
		{"GET", "/api/v1/messages?queue=" + q, ""},
		{"GET", "/api/v1/messages/" + pid + "/m0", ""},
		{"GET", "/api/v1/dlq?queue=" + q, ""},
		{"GET", "/api/v1/consumer-groups", ""},
		{"GET", "/api/v1/consumer-groups/" + group, ""},
		{"GET", "/api/v1/consumer-groups/lagging?minLagSeconds=0", ""},
		{"POST", "/api/v1/consumer-groups/" + group + "/subscription", `{"subscriptionTimestamp":"2020-01-01T00:00:00Z"}`},
		{"GET", "/api/v1/status", ""},
		{"GET", "/api/v1/status/queues", ""},
		{"GET", "/api/v1/status/queues/" + q + "?includePartitions=true", ""},
		{"GET", "/api/v1/status/queues/" + idle + "?includePartitions=true", ""},
		{"GET", "/health", ""},
		{"GET", "/status", ""},
		{"GET", "/metrics", ""},
		{"POST", "/api/v1/consumer-groups/" + group + "/queues/" + q + "/partitions/p1/seek", `{"toEnd":true}`},
		{"POST", "/api/v1/consumer-groups/" + group + "/queues/" + q + "/seek", `{"timestamp":"2020-01-01T00:00:00Z"}`},
		// The edges of the years an answer can echo (outside them: 400, groups_test.go).
		{"POST", "/api/v1/consumer-groups/" + group + "/queues/" + q + "/seek", `{"timestamp":"0001-01-01T00:00:00Z"}`},
		{"POST", "/api/v1/consumer-groups/" + group + "/queues/" + q + "/partitions/p1/seek", `{"timestamp":"9999-12-31T23:59:59.999999999Z"}`},
		{"POST", "/api/v1/consumer-groups/" + group + "/subscription", `{"subscriptionTimestamp":"9999-12-31T23:59:59.999999999Z"}`},
		{"GET", "/api/v1/consumer-groups", ""},
		{"POST", "/api/v1/dlq/" + dlq.Messages[0].ID + "/replay", ""},
		{"DELETE", "/api/v1/consumer-groups/" + group + "/queues/" + q, ""},
		{"DELETE", "/api/v1/consumer-groups/" + group, ""},
	} {
		if status, raw := b.specAnswer(t, c.method, c.path, c.body); status != http.StatusOK {
			t.Errorf("%s %s: %d %s", c.method, c.path, status, raw)
		}
	}
}

// closeDeclaredObjects makes every schema that lists properties, and says
// nothing of others, refuse undeclared keys: an answer key the spec lacks is
// then a failed check rather than a field generated clients never see. Schemas
// combined with allOf stay open, since each part lacks the others' keys.
func closeDeclaredObjects(spec *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var visit func(ref *openapi3.SchemaRef, combined bool)
	visit = func(ref *openapi3.SchemaRef, combined bool) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if !combined && len(s.AllOf) == 0 && len(s.Properties) > 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			s.AdditionalProperties.Has = openapi3.Ptr(false)
		}
		for _, p := range s.Properties {
			visit(p, false)
		}
		for _, part := range s.AllOf {
			visit(part, true)
		}
		for _, parts := range [][]*openapi3.SchemaRef{s.OneOf, s.AnyOf} {
			for _, part := range parts {
				visit(part, false)
			}
		}
		visit(s.Items, false)
		visit(s.AdditionalProperties.Schema, false)
	}
	for _, ref := range spec.Components.Schemas {
		if ref.Value != nil && len(ref.Value.AllOf) > 0 {
			for _, part := range ref.Value.AllOf {
				visit(part, true)
			}
		}
	}
	for _, ref := range spec.Components.Schemas {
		visit(ref, false)
	}
}

// specOperation is one method and path of openapi.yaml, its path parameters
// filled in with a plain name.
type specOperation struct {
	id, method, path string
	op               *openapi3.Operation
}

var pathParameter = regexp.MustCompile(`\{[^}]+\}`)

// loadSpec is openapi.yaml as the broker embeds it, decoded afresh.
func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	spec, err := gen.GetSpec()
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

func specOperations(t *testing.T) []specOperation {
	t.Helper()
	spec := loadSpec(t)
	var ops []specOperation
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			ops = append(ops, specOperation{id: op.OperationID, method: method, path: pathParameter.ReplaceAllString(path, "x"), op: op})
		}
	}
	slices.SortFunc(ops, func(a, b specOperation) int { return strings.Compare(a.id, b.id) })
	return ops
}

// Every route refuses a query that is not valid UTF-8 with 400 before its
// handler runs, so a generated client must find 400 declared on each.
func TestEveryOperationDeclaresItsNonUTF8Query400(t *testing.T) {
	b := newTestBroker(t)
	for _, o := range specOperations(t) {
		if status, raw := b.specAnswer(t, o.method, o.path+"?bad=%ff", ""); status != http.StatusBadRequest {
			t.Errorf("%s %s?bad=%%ff: %d %s; want 400", o.method, o.path, status, raw)
		}
	}
}

// Every operation, one that declares no request body included, refuses a
// body over its cap with 413 before its handler runs (ignoredBodyLimit when
// it declares none), so a generated client must find 413 declared on each.
func TestEveryOperationDeclaresItsOversizedBody413(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{MaxBodyBytes: ignoredBodyLimit}, "")
	oversized := `"` + strings.Repeat("x", ignoredBodyLimit) + `"`
	for _, o := range specOperations(t) {
		if status, raw := b.specAnswer(t, o.method, o.path, oversized); status != http.StatusRequestEntityTooLarge {
			t.Errorf("%s %s with a %d-byte body: %d %s; want 413", o.method, o.path, len(oversized), status, raw)
		}
	}
}

// Every operation reads a body sent with it, one it declares or not, under
// the body read deadline, so a stalled body answers 408 on each.
func TestEveryOperationDeclaresItsStalledBody408(t *testing.T) {
	const deadline = 300 * time.Millisecond
	b := newBrokerWith(t, testDSN, Options{BodyReadTimeout: deadline}, "")
	ops := specOperations(t)
	stalled := make([]net.Conn, len(ops))
	for i, o := range ops { // all at once: they wait out the deadline together
		stalled[i] = stallRequestBody(t, b.URL, o.method, o.path, "{}", 1)
	}
	for i, o := range ops {
		_ = stalled[i].SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(stalled[i]), nil)
		if err != nil {
			t.Errorf("%s %s with a stalled body: no answer: %v", o.method, o.path, err)
			continue
		}
		if status, raw := checkSpecAnswer(t, o.method, o.path, resp); status != http.StatusRequestTimeout {
			t.Errorf("%s %s with a stalled body: %d %s; want 408", o.method, o.path, status, raw)
		}
	}
}

// Every request sent with a body, to an operation that declares one or not,
// can find the body budget full and answer 429 overloaded, so every
// operation must declare 429.
func TestEveryOperationDeclaresTheBodyBudget429(t *testing.T) {
	const maxBody = 1 << 20
	budget := admission.NewByteBudget(maxBody, 20*time.Millisecond)
	b := newBrokerWith(t, testDSN, Options{MaxBodyBytes: maxBody, BodyBudget: budget, BodyReadTimeout: time.Minute}, "")
	stallBodyAfter(t, b.URL, "/api/v1/push", pushOfSize(uniqueQueue(t), maxBody), maxBody-bodyReserveStep/2)
	waitForHeld(t, budget, maxBody)
	for _, o := range specOperations(t) {
		if status, raw := b.specAnswer(t, o.method, o.path, "{}"); status != http.StatusTooManyRequests {
			t.Errorf("%s %s with the body budget full: %d %s; want 429", o.method, o.path, status, raw)
		}
	}
}

// The broker answers 500 internal_error on every route when a handler
// panics (recoverPanics), so every operation must declare 500.
func TestEveryOperationDeclaresThePanic500(t *testing.T) {
	for _, o := range specOperations(t) {
		if o.op.Responses.Status(http.StatusInternalServerError) == nil {
			t.Errorf("%s %s (%s) declares no 500", o.method, o.path, o.id)
		}
	}
}

// /metrics with every optional section a broker may send (admission, body
// budget, spool, a lag refresh and a retention pass) matches the spec.
func TestMetricsWithEverySectionMatchTheSpec(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{Admission: twoSlotBudget(), BodyBudget: admission.NewByteBudget(1<<20, time.Second)}, t.TempDir())
	q := uniqueQueue(t)
	b.push(t, q, "p", "m1")
	b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=metrics-g&subscriptionMode=all")
	if err := b.Server.RefreshLag(t.Context(), 1000); err != nil {
		t.Fatal(err)
	}
	b.Server.metrics.ObserveRetention(true, 1, 2, 3, time.Millisecond, false)
	status, raw := b.specAnswer(t, "GET", "/metrics", "")
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", status, raw)
	}
	for _, section := range []string{"admission", "bodyBytes", "spool", "database"} {
		if m[section] == nil {
			t.Errorf("GET /metrics lacks %s: %s", section, raw)
		}
	}
	if lag := m["lag"].(map[string]any); lag["refreshedAt"] == nil || len(lag["top"].([]any)) == 0 {
		t.Errorf("lag after a refresh with a backlog: %+v", lag)
	}
	if m["retention"].(map[string]any)["lastPassAt"] == nil {
		t.Errorf("retention after a pass: %+v", m["retention"])
	}
}

// TestTimerKVAndLeaseAnswersMatchTheSpec covers the answers that carry times
// scanned from PostgreSQL outside the message plane: timers, KV rows and a
// queue-mode lease in the message listing, every one in UTC.
func TestTimerKVAndLeaseAnswersMatchTheSpec(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	ns := "spec-" + q
	b.push(t, q, "p", "m0")
	b.pop(t, "/api/v1/pop/queue/"+q+"/partition/p?batch=1")
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/api/v1/timers", `{"operations":[{"op":"schedule","queue":"` + q + `","timerKey":"t","partition":"p","delayMs":600000,"payload":"MQ=="}]}`},
		{"GET", "/api/v1/timers/" + q + "/t", ""},
		{"GET", "/api/v1/timers/" + q, ""},
		{"PUT", "/api/v1/kv/" + ns + "/k", `{"value":1,"ttlSeconds":600}`},
		{"POST", "/api/v1/kv", `{"operations":[{"op":"get","ns":"` + ns + `","key":"k"},{"op":"getPrefix","ns":"` + ns + `","prefix":"k"},{"op":"incr","ns":"` + ns + `","key":"n","delta":1,"ttlSeconds":600}]}`},
		{"POST", "/api/v1/resources/kv/list", `{"namespace":"` + ns + `"}`},
		{"GET", "/api/v1/messages?queue=" + q, ""},
	} {
		if status, raw := b.specAnswer(t, c.method, c.path, c.body); status != http.StatusOK && status != http.StatusCreated {
			t.Errorf("%s %s: %d %s", c.method, c.path, status, raw)
		}
	}
	// the message's own page carries the lease too
	var listed struct {
		Messages []struct {
			PartitionID   string `json:"partitionId"`
			TransactionID string `json:"transactionId"`
		} `json:"messages"`
	}
	b.call(t, "GET", "/api/v1/messages?queue="+q, nil, &listed)
	if len(listed.Messages) != 1 {
		t.Fatalf("messages: %+v", listed)
	}
	m := listed.Messages[0]
	if status, raw := b.specAnswer(t, "GET", "/api/v1/messages/"+m.PartitionID+"/"+m.TransactionID, ""); status != http.StatusOK {
		t.Errorf("message: %d %s", status, raw)
	}
}
