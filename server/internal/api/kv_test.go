package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

func TestKVRoutesOverHTTP(t *testing.T) {
	b := newTestBroker(t)
	ns := uniqueQueue(t)
	var batch struct {
		Success *bool            `json:"success"`
		Results []map[string]any `json:"results"`
	}
	status, _ := b.call(t, "POST", "/api/v1/kv", map[string]any{"operations": []map[string]any{
		{"op": "put", "ns": ns, "key": "cfg/a", "value": map[string]any{"x": 1}, "forever": true},
		{"op": "incr", "ns": ns, "key": "hits", "delta": 2, "ttlSeconds": 60},
		{"op": "putIfAbsent", "ns": ns, "key": "cfg/a", "value": 2, "forever": true},
		{"op": "getMany", "ns": ns, "keys": []string{"cfg/a", "nope"}},
		{"op": "getPrefix", "ns": ns, "prefix": "cfg/"},
	}}, &batch)
	r := batch.Results
	if status != http.StatusOK || len(r) != 5 || r[0]["applied"] != true || r[0]["version"] != float64(1) ||
		r[1]["value"] != float64(2) || r[2]["applied"] != false || r[2]["reason"] != "exists" || r[2]["index"] != float64(2) {
		t.Fatalf("batch: %d %+v", status, r)
	}
	if rows, _ := r[4]["rows"].([]any); len(rows) != 1 || r[4]["truncated"] != false {
		t.Fatalf("getPrefix: %+v", r[4])
	}
	if batch.Success == nil || !*batch.Success {
		t.Fatalf("a committed call answers success:true, got %v", batch.Success)
	}

	var got map[string]any
	status, hdr := b.call(t, "GET", "/api/v1/kv/"+ns+"/cfg%2Fa", nil, &got)
	if status != http.StatusOK || got["found"] != true || hdr.Get("ETag") != `"1"` || got["key"] != "cfg/a" {
		t.Fatalf("get: %d %v %+v", status, hdr.Get("ETag"), got)
	}
	var put map[string]any
	b.call(t, "PUT", "/api/v1/kv/"+ns+"/cfg%2Fa", map[string]any{"value": "v2", "forever": true, "expect": 1}, &put)
	if put["applied"] != true || put["version"] != float64(2) {
		t.Fatalf("put: %+v", put)
	}
	b.call(t, "PUT", "/api/v1/kv/"+ns+"/cfg%2Fa", map[string]any{"value": "v3", "forever": true, "expect": 1}, &put)
	if put["applied"] != false || put["reason"] != "version" || put["value"] != "v2" {
		t.Fatalf("stale put: %+v", put)
	}
	_, hdr = b.call(t, "GET", "/api/v1/kv/"+ns+"/cfg%2Fa", nil, nil)
	if hdr.Get("ETag") != `"2"` {
		t.Fatalf("etag after put: %q", hdr.Get("ETag"))
	}

	var nss struct {
		Namespaces []struct {
			Namespace string `json:"namespace"`
			Keys      int    `json:"keys"`
		} `json:"namespaces"`
	}
	b.call(t, "GET", "/api/v1/resources/kv/namespaces", nil, &nss)
	found := false
	for _, n := range nss.Namespaces {
		found = found || (n.Namespace == ns && n.Keys == 2)
	}
	if !found {
		t.Fatalf("namespaces: %+v", nss)
	}
	var list struct {
		Rows []struct {
			Key     string `json:"key"`
			Expired bool   `json:"expired"`
		} `json:"rows"`
		Truncated bool    `json:"truncated"`
		NextAfter *string `json:"nextAfter"`
	}
	b.call(t, "POST", "/api/v1/resources/kv/list", map[string]any{"namespace": ns, "limit": 1}, &list)
	if len(list.Rows) != 1 || list.Rows[0].Key != "cfg/a" || !list.Truncated || list.NextAfter == nil {
		t.Fatalf("list: %+v", list)
	}

	var del map[string]any
	b.call(t, "DELETE", "/api/v1/kv/"+ns+"/cfg%2Fa", nil, &del)
	if del["applied"] != true {
		t.Fatalf("delete: %+v", del)
	}
	b.call(t, "DELETE", "/api/v1/kv/"+ns+"/cfg%2Fa", nil, &del)
	if del["applied"] != false || del["reason"] != "absent" {
		t.Fatalf("delete of a missing key: %+v", del)
	}
	status, hdr = b.call(t, "GET", "/api/v1/kv/"+ns+"/cfg%2Fa", nil, &got)
	if status != http.StatusOK || got["found"] != false || hdr.Get("ETag") != "" {
		t.Fatalf("miss: %d %+v", status, got)
	}
}

func TestKVBadInputOverHTTP(t *testing.T) {
	b := newTestBroker(t)
	ns := uniqueQueue(t)
	cases := []struct {
		name, method, path, body, code string
	}{
		{"no expiry", "POST", "/api/v1/kv", `{"operations":[{"op":"put","ns":"` + ns + `","key":"k","value":1}]}`, "kv_expiry_not_specified"},
		{"empty prefix", "POST", "/api/v1/kv", `{"operations":[{"op":"getPrefix","ns":"` + ns + `","prefix":""}]}`, "kv_prefix_required"},
		{"missing key", "POST", "/api/v1/kv", `{"operations":[{"op":"get","ns":"` + ns + `"}]}`, "kv_bad_request"},
		// Refused by the spec: the route's family code all the same (reference §1.14).
		{"unknown op", "POST", "/api/v1/kv", `{"operations":[{"op":"scan","ns":"` + ns + `"}]}`, "kv_bad_request"},
		{"no operations", "POST", "/api/v1/kv", `{}`, "kv_bad_request"},
		{"operations not a list", "POST", "/api/v1/kv", `{"operations":{}}`, "kv_bad_request"},
		{"not JSON", "POST", "/api/v1/kv", `{"operations":`, "kv_bad_request"},
		{"expect not a number", "PUT", "/api/v1/kv/" + ns + "/k", `{"value":1,"forever":true,"expect":"x"}`, "kv_bad_request"},
		{"key in a path body", "PUT", "/api/v1/kv/" + ns + "/k", `{"value":1,"forever":true,"key":"other"}`, "kv_bad_request"},
		{"path put without expiry", "PUT", "/api/v1/kv/" + ns + "/k", `{"value":1}`, "kv_expiry_not_specified"},
	}
	for _, c := range cases {
		var e errorBody
		status, _ := b.call(t, c.method, c.path, c.body, &e)
		if status != http.StatusBadRequest || e.Code != c.code {
			t.Fatalf("%s: %d %+v, want 400 %s", c.name, status, e, c.code)
		}
	}
	var got map[string]any
	b.call(t, "GET", "/api/v1/kv/"+ns+"/k", nil, &got)
	if got["found"] != false {
		t.Fatalf("a rejected request stored the key: %+v", got)
	}
}

// A ttlSeconds of 0 or below (Go's zero time.Duration, a computed ttl that ran out) is no expiry:
// the reference answers kv_expiry_not_specified when a write does not carry exactly one of
// ttlSeconds (> 0) or forever:true (http-api-v1.md §1.14), as Lanes does for one that sends
// neither. The answer names forever:true, the only way to write a key without expiry.
func TestKVZeroTTLAnswerNamesForever(t *testing.T) {
	b := newTestBroker(t)
	ns := uniqueQueue(t)
	for _, c := range []struct{ name, method, path, body string }{
		{"batch", "POST", "/api/v1/kv", `{"operations":[{"op":"incr","ns":"` + ns + `","key":"k","delta":1,"ttlSeconds":0}]}`},
		{"batch put with forever", "POST", "/api/v1/kv", `{"operations":[{"op":"put","ns":"` + ns + `","key":"k","value":1,"ttlSeconds":0,"forever":true}]}`},
		{"path put", "PUT", "/api/v1/kv/" + ns + "/k", `{"value":1,"ttlSeconds":0}`},
		{"transaction rider", "POST", "/api/v1/transaction", `{"operations":[],"kv":[{"op":"put","ns":"` + ns + `","key":"k","value":1,"ttlSeconds":-3}]}`},
	} {
		var e errorBody
		status, _ := b.call(t, c.method, c.path, c.body, &e)
		if status != http.StatusBadRequest || e.Code != "kv_expiry_not_specified" || !strings.Contains(e.Error, "forever:true") {
			t.Fatalf("%s: %d %+v, want 400 kv_expiry_not_specified naming forever:true", c.name, status, e)
		}
	}
	var got map[string]any
	b.call(t, "GET", "/api/v1/kv/"+ns+"/k", nil, &got)
	if got["found"] != false {
		t.Fatalf("a refused request stored the key: %+v", got)
	}
}

// The path routes take no query string: ignoring ?expect=5 would have made a
// conditional delete unconditional. A refused request changes nothing.
func TestKVPathRoutesRefuseQueryStrings(t *testing.T) {
	b := newTestBroker(t)
	ns := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/kv", map[string]any{"operations": []map[string]any{
		{"op": "put", "ns": ns, "key": "k1", "value": map[string]any{"a": 1}, "forever": true}}}, nil)
	for _, c := range []struct {
		method, query string
		body          any
	}{
		{"GET", "?x=1", nil},
		{"DELETE", "?expect=5", nil},
		{"PUT", "?expect=5", map[string]any{"value": 2, "forever": true}},
	} {
		var e errorBody
		if status, _ := b.call(t, c.method, "/api/v1/kv/"+ns+"/k1"+c.query, c.body, &e); status != http.StatusBadRequest || e.Code != "kv_bad_request" {
			t.Fatalf("%s %s: %d %+v", c.method, c.query, status, e)
		}
	}
	var got map[string]any
	if status, _ := b.call(t, "GET", "/api/v1/kv/"+ns+"/k1", nil, &got); status != http.StatusOK || got["found"] != true || got["version"] != float64(1) {
		t.Fatalf("the key must be untouched: %d %+v", status, got)
	}
}

// Every bad request on the timers routes answers timers_bad_request, whether
// the spec or the handler refused it (reference §1.15); other routes keep
// validation_failed.
func TestTimersBadInputAnswersTheFamilyCode(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	op := func(extra string) string {
		return `{"operations":[{"op":"schedule","queue":"` + q + `","timerKey":"k","delayMs":1000,"txn":"t"` + extra + `}]}`
	}
	for _, c := range []struct {
		name, method, path, body, code string
	}{
		{"payload not base64", "POST", "/api/v1/timers", op(`,"payload":"not base64!!"`), "timers_bad_request"},
		{"delayMs not a number", "POST", "/api/v1/timers", `{"operations":[{"op":"schedule","queue":"` + q + `","timerKey":"k","delayMs":"soon"}]}`, "timers_bad_request"},
		{"unknown op", "POST", "/api/v1/timers", `{"operations":[{"op":"fire","queue":"` + q + `","timerKey":"k"}]}`, "timers_bad_request"},
		{"no operations", "POST", "/api/v1/timers", `{}`, "timers_bad_request"},
		{"not JSON", "POST", "/api/v1/timers", `{"operations":[`, "timers_bad_request"},
		{"server-owned field", "POST", "/api/v1/timers", op(`,"producerSub":"me"`), "timers_bad_request"},
		// GET and DELETE /timers/{queue}/{timerKey} could never address such a timer.
		{"timer key ..", "POST", "/api/v1/timers", `{"operations":[{"op":"schedule","queue":"` + q + `","timerKey":"..","delayMs":1000}]}`, "timers_bad_request"},
		{"timer key . in a transaction", "POST", "/api/v1/transaction", `{"operations":[],"timers":[{"op":"schedule","queue":"` + q + `","timerKey":".","delayMs":1000}]}`, "timers_bad_request"},
		{"list limit not a number", "GET", "/api/v1/timers/" + q + "?limit=abc", "", "timers_bad_request"},
		{"list limit zero", "GET", "/api/v1/timers/" + q + "?limit=0", "", "timers_bad_request"},
		{"list mode unknown", "GET", "/api/v1/timers/" + q + "?mode=sum", "", "timers_bad_request"},
		{"another family keeps its code", "GET", "/api/v1/dlq?limit=abc", "", "validation_failed"},
	} {
		var e errorBody
		if status, _ := b.call(t, c.method, c.path, c.body, &e); status != http.StatusBadRequest || e.Code != c.code {
			t.Fatalf("%s: %d %+v, want 400 %s", c.name, status, e, c.code)
		}
	}
	var list struct {
		Rows []any `json:"rows"`
	}
	if status, _ := b.call(t, "GET", "/api/v1/timers/"+q, nil, &list); status != http.StatusOK || len(list.Rows) != 0 {
		t.Fatalf("a refused request scheduled a timer: %d %+v", status, list)
	}
}

// Values past what a time sum holds are refused, not wrapped into the past:
// a ttlSeconds of 10^10 used to answer applied:true with an expiry in 1759
// (the key dead at once), and a delayMs of 10^13 fired a timer at once
// instead of answering the horizon. Inside a transaction, the kv and timers
// parts answer their family's code whether the spec or the handler refuses.
func TestHugeDurationsAreRefusedNotWrapped(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	for _, c := range []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"kv ttlSeconds past 100 years", "/api/v1/kv",
			`{"operations":[{"op":"put","ns":"` + q + `","key":"k","value":1,"ttlSeconds":10000000000}]}`, 400, "kv_bad_request"},
		{"kv incr ttlSeconds in a transaction", "/api/v1/transaction",
			`{"operations":[],"kv":[{"op":"incr","ns":"` + q + `","key":"n","delta":1,"ttlSeconds":9300000000}]}`, 400, "kv_bad_request"},
		{"timer delayMs of 317 years", "/api/v1/timers",
			`{"operations":[{"op":"schedule","queue":"` + q + `","timerKey":"t","delayMs":10000000000000}]}`, 403, "timer_horizon_exceeded"},
		{"kv part missing ns in a transaction", "/api/v1/transaction",
			`{"operations":[],"kv":[{"op":"put","key":"k","value":1,"forever":true}]}`, 400, "kv_bad_request"},
		{"timers part missing queue in a transaction", "/api/v1/transaction",
			`{"operations":[],"timers":[{"op":"schedule","timerKey":"x"}]}`, 400, "timers_bad_request"},
		{"an operation keeps validation_failed", "/api/v1/transaction",
			`{"operations":[{"queue":"` + q + `"}]}`, 400, "validation_failed"},
	} {
		var e errorBody
		if status, _ := b.call(t, "POST", c.path, c.body, &e); status != c.status || e.Code != c.code {
			t.Fatalf("%s: %d %+v, want %d %s", c.name, status, e, c.status, c.code)
		}
	}
	// The horizon's 403 is no bearer challenge: the WWW-Authenticate the spec
	// declares on every 403 is left off it, not sent empty.
	resp, err := http.Post(b.URL+"/api/v1/timers", "application/json", strings.NewReader(
		`{"operations":[{"op":"schedule","queue":"`+q+`","timerKey":"t","delayMs":10000000000000}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if v := resp.Header.Values("WWW-Authenticate"); resp.StatusCode != http.StatusForbidden || v != nil {
		t.Fatalf("timer horizon: %d with WWW-Authenticate %q, want 403 without one", resp.StatusCode, v)
	}
	var got struct {
		Found bool `json:"found"`
	}
	if status, _ := b.call(t, "GET", "/api/v1/kv/"+q+"/k", nil, &got); status != http.StatusOK || got.Found {
		t.Fatalf("a refused put wrote the key: %d %+v", status, got)
	}
	// The timer, had it been scheduled with a wrapped delay, would be due now.
	var pop struct {
		Messages []any `json:"messages"`
	}
	if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?wait=false", nil, &pop); status == http.StatusOK && len(pop.Messages) > 0 {
		t.Fatalf("a refused timer fired: %+v", pop)
	}
}

// POST /api/v1/kv stored keys named "." or "..", which the key routes can
// never address (URL clients drop such segments). Every write that stores a
// key now refuses them; a key stored before can still be read and deleted
// through the batch route.
func TestKVWritesRefuseDotNamesAndOlderDotKeysStayReachable(t *testing.T) {
	b := newTestBroker(t)
	ns := uniqueQueue(t)
	op := func(op, ns, key, extra string) string {
		return `{"op":"` + op + `","ns":"` + ns + `","key":"` + key + `"` + extra + `}`
	}
	const stored = `,"value":1,"forever":true`
	var writes []struct{ name, method, path, body string }
	for _, dot := range []string{".", ".."} {
		writes = append(writes, []struct{ name, method, path, body string }{
			{"batch put key " + dot, "POST", "/api/v1/kv", `{"operations":[` + op("put", ns, dot, stored) + `]}`},
			{"batch putIfAbsent key " + dot, "POST", "/api/v1/kv", `{"operations":[` + op("putIfAbsent", ns, dot, stored) + `]}`},
			{"batch incr key " + dot, "POST", "/api/v1/kv", `{"operations":[` + op("incr", ns, dot, `,"forever":true`) + `]}`},
			{"batch put namespace " + dot, "POST", "/api/v1/kv", `{"operations":[` + op("put", dot, "k", stored) + `]}`},
			{"transaction kv put key " + dot, "POST", "/api/v1/transaction", `{"operations":[],"kv":[` + op("put", ns, dot, stored) + `]}`},
			{"transaction kv incr namespace " + dot, "POST", "/api/v1/transaction", `{"operations":[],"kv":[` + op("incr", dot, "k", `,"forever":true`) + `]}`},
			{"key-route put key " + dot, "PUT", "/api/v1/kv/" + ns + "/" + url.PathEscape(dot), `{"value":1,"forever":true}`},
		}...)
	}
	for _, c := range writes {
		var e errorBody
		if status, _ := b.call(t, c.method, c.path, c.body, &e); status != http.StatusBadRequest || e.Code != CodeKVBadRequest {
			t.Fatalf("%s: %d %+v; want 400 kv_bad_request", c.name, status, e)
		}
	}
	var rows int
	if err := b.Pool.QueryRow(t.Context(), `SELECT count(*) FROM lanes.kv WHERE namespace IN ($1, '.', '..') AND key IN ('.', '..', 'k')`, ns).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("refused writes stored %d keys (%v)", rows, err)
	}

	// A key stored by an older broker: the batch route still reads and deletes it.
	if _, err := b.Pool.Exec(t.Context(), `INSERT INTO lanes.kv (namespace, key, value, version) VALUES ($1, '..', '7', 1)`, ns); err != nil {
		t.Fatal(err)
	}
	var read struct {
		Results []struct {
			Found *bool           `json:"found"`
			Value json.RawMessage `json:"value"`
		} `json:"results"`
	}
	if status, _ := b.call(t, "POST", "/api/v1/kv", `{"operations":[`+op("get", ns, "..", "")+`]}`, &read); status != http.StatusOK ||
		len(read.Results) != 1 || read.Results[0].Found == nil || !*read.Results[0].Found || string(read.Results[0].Value) != "7" {
		t.Fatalf("reading an older \"..\" key: %d %+v", status, read)
	}
	var deleted struct {
		Results []struct {
			Applied *bool `json:"applied"`
		} `json:"results"`
	}
	if status, _ := b.call(t, "POST", "/api/v1/kv", `{"operations":[`+op("delete", ns, "..", "")+`]}`, &deleted); status != http.StatusOK ||
		len(deleted.Results) != 1 || deleted.Results[0].Applied == nil || !*deleted.Results[0].Applied {
		t.Fatalf("deleting an older \"..\" key: %d %+v", status, deleted)
	}
}

// A required op that loses fails the whole call (reference §1.14): nothing
// is written, and no result shows what the rolled-back call read or wrote.
func TestKVRequiredLossFailsTheWholeBatch(t *testing.T) {
	b := newTestBroker(t)
	ns := uniqueQueue(t)
	if code, _ := b.call(t, "PUT", "/api/v1/kv/"+ns+"/taken", map[string]any{"value": "winner", "forever": true}, nil); code != http.StatusOK {
		t.Fatalf("put winner: %d", code)
	}
	var batch struct {
		Success     *bool            `json:"success"`
		Reason      string           `json:"reason"`
		FailedIndex *int             `json:"failedIndex"`
		KvReason    string           `json:"kvReason"`
		Error       string           `json:"error"`
		Results     []map[string]any `json:"results"`
	}
	status, _ := b.call(t, "POST", "/api/v1/kv", map[string]any{"operations": []map[string]any{
		{"op": "put", "ns": ns, "key": "side", "value": 1, "forever": true},
		{"op": "get", "ns": ns, "key": "side"},
		{"op": "getMany", "ns": ns, "keys": []string{"side", "taken"}},
		{"op": "getPrefix", "ns": ns, "prefix": "s"},
		{"op": "putIfAbsent", "ns": ns, "key": "taken", "value": "loser", "forever": true, "required": true},
		{"op": "incr", "ns": ns, "key": "after", "forever": true},
	}}, &batch)
	if status != http.StatusOK || batch.Success == nil || *batch.Success || batch.Reason != "kv_precondition" ||
		batch.FailedIndex == nil || *batch.FailedIndex != 4 || batch.KvReason != "exists" || batch.Error == "" || len(batch.Results) != 6 {
		t.Fatalf("call: %d %+v", status, batch)
	}
	r := batch.Results
	if r[4]["applied"] != false || r[4]["reason"] != "exists" || r[4]["value"] != "winner" || r[4]["version"] != float64(1) {
		t.Fatalf("the failing op carries its reason and the committed winner: %+v", r[4])
	}
	for _, i := range []int{0, 1, 2, 3, 5} {
		res := r[i]
		if res["error"] == nil || res["index"] != float64(i) || res["found"] != nil || res["rows"] != nil ||
			res["value"] != nil || res["version"] != nil || res["updatedAt"] != nil {
			t.Fatalf("result %d of the rolled-back call: %+v, want only a rolled-back error", i, res)
		}
		if (i == 0 || i == 5) && res["applied"] != false {
			t.Fatalf("write %d of the rolled-back call: %+v, want applied:false", i, res)
		}
	}
	var got map[string]any
	for _, key := range []string{"side", "after"} {
		if b.call(t, "GET", "/api/v1/kv/"+ns+"/"+key, nil, &got); got["found"] != false {
			t.Fatalf("%s was committed by a failed call: %+v", key, got)
		}
	}
}

// A KV value jsonb cannot hold is refused with kv_bad_request and nothing is
// stored, on every route that writes one: a lone surrogate escape used to be
// stored as U+FFFD without a word, and a number beyond numeric's range
// (1e-20000) answered 500.
func TestKVRefusesValuesJSONBCannotHold(t *testing.T) {
	b := newTestBroker(t)
	ns := uniqueQueue(t)
	values := []string{`"\ud800"`, `{"a":["x\udc00"]}`, `"\uD83Dx"`, `1e-20000`, `0.` + strings.Repeat("0", 16383) + `1`}
	for _, value := range values {
		bodies := []struct{ method, path, body string }{
			{"PUT", "/api/v1/kv/" + ns + "/k", `{"forever":true,"value":` + value + `}`},
			{"POST", "/api/v1/kv", `{"operations":[{"op":"put","ns":"` + ns + `","key":"k","forever":true,"value":` + value + `}]}`},
			{"POST", "/api/v1/transaction", `{"operations":[],"kv":[{"op":"put","ns":"` + ns + `","key":"k","forever":true,"value":` + value + `}]}`},
		}
		for _, c := range bodies {
			var e errorBody
			if status, _ := b.call(t, c.method, c.path, c.body, &e); status != http.StatusBadRequest || e.Code != "kv_bad_request" {
				t.Errorf("%s %s with value %.40s: %d %+v, want 400 kv_bad_request", c.method, c.path, value, status, e)
			}
		}
	}
	var got map[string]any
	b.call(t, "GET", "/api/v1/kv/"+ns+"/k", nil, &got)
	if got["found"] != false {
		t.Fatalf("a refused value was stored: %+v", got)
	}
	if status, _ := b.call(t, "PUT", "/api/v1/kv/"+ns+"/pair", `{"forever":true,"value":"\ud83d\ude00"}`, nil); status != http.StatusOK {
		t.Fatalf("a surrogate pair: %d", status)
	}
	var pair struct {
		Value string `json:"value"`
	}
	if b.call(t, "GET", "/api/v1/kv/"+ns+"/pair", nil, &pair); pair.Value != "\U0001F600" {
		t.Fatalf("a surrogate pair read back as %q", pair.Value)
	}
}

// kvPutRoutes are the three ways to put value under ns/key, each with where
// its answer carries the put's result.
func kvPutRoutes(ns, key, value string) []struct{ name, method, path, body string } {
	op := `{"op":"put","ns":"` + ns + `","key":"` + key + `","forever":true,"value":` + value + `}`
	return []struct{ name, method, path, body string }{
		{"PUT", "PUT", "/api/v1/kv/" + ns + "/" + key, `{"forever":true,"value":` + value + `}`},
		{"batch", "POST", "/api/v1/kv", `{"operations":[` + op + `]}`},
		{"rider", "POST", "/api/v1/transaction", `{"operations":[],"kv":[` + op + `]}`},
	}
}

// kvPutAnswer is the result of the one put a kvPutRoutes body carries.
type kvPutAnswer struct {
	Applied bool            `json:"applied"`
	Value   json.RawMessage `json:"value"`
	Results []kvPutAnswer   `json:"results"`
	KV      []kvPutAnswer   `json:"kv"`
}

func (a kvPutAnswer) result() kvPutAnswer {
	for _, list := range [][]kvPutAnswer{a.Results, a.KV} {
		if len(list) == 1 {
			return list[0]
		}
	}
	return a
}

// jsonbText is value as jsonb stores and prints it, compacted as the broker answers it.
func (b *testBroker) jsonbText(t *testing.T, value string) string {
	t.Helper()
	var text string
	if err := b.Pool.QueryRow(t.Context(), `SELECT $1::jsonb::text`, value).Scan(&text); err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(text)); err != nil {
		t.Fatal(err)
	}
	return compact.String()
}

// A KV value is any JSON value jsonb holds, numbers included: the validator
// once read a bare value as float64 and refused 1e400, which numeric holds.
// Null, booleans and strings stay values too. Reads show jsonb's text, not the
// text sent: 1E+2 reads 100, duplicate keys keep the last (model.md).
func TestKVTakesEveryNumberJSONBHolds(t *testing.T) {
	b := newTestBroker(t)
	ns := uniqueQueue(t)
	values := []string{`1e400`, `-1E+400`, `1e131071`, `123456789012345678901234567890`, `1e-400`, `0.` + strings.Repeat("0", 16382) + `1`,
		`-0`, `1.50`, `[1e400]`, `{"n":-1e400}`, `null`, `true`, `"1e400"`, `1E+2`, `{"x":1,"x":2}`}
	for i, value := range values {
		for _, c := range kvPutRoutes(ns, numberKey(i), value) {
			var raw json.RawMessage
			status, _ := b.call(t, c.method, c.path, c.body, &raw)
			var answer kvPutAnswer
			if err := json.Unmarshal(raw, &answer); err != nil || status != http.StatusOK || !answer.result().Applied {
				t.Errorf("%s of %.40s: %d %.200s", c.name, value, status, raw)
				continue
			}
			var got struct {
				Value json.RawMessage `json:"value"`
			}
			b.call(t, "GET", "/api/v1/kv/"+ns+"/"+numberKey(i), nil, &got)
			if want := b.jsonbText(t, value); string(got.Value) != want {
				t.Errorf("%s of %.40s read back as %.40s, want jsonb's %.40s", c.name, value, got.Value, want)
			}
		}
	}
}

func numberKey(i int) string { return "k" + strconv.Itoa(i) }

// A number numeric cannot hold is refused by name on every route that puts a
// value, bare or nested, and nothing is stored.
func TestKVRefusesNumbersNumericCannotHoldByName(t *testing.T) {
	b := newTestBroker(t)
	ns := uniqueQueue(t)
	for _, value := range []string{`1e131072`, `-1E+131072`, `[1e131072]`, `1e-16384`, `{"n":-1e-16384}`} {
		for _, c := range kvPutRoutes(ns, "k", value) {
			var e errorBody
			status, _ := b.call(t, c.method, c.path, c.body, &e)
			if status != http.StatusBadRequest || e.Code != "kv_bad_request" || !strings.Contains(e.Error, "numeric") {
				t.Errorf("%s of %.40s: %d %+v, want 400 kv_bad_request naming numeric", c.name, value, status, e)
			}
		}
	}
	var got map[string]any
	if b.call(t, "GET", "/api/v1/kv/"+ns+"/k", nil, &got); got["found"] != false {
		t.Fatalf("a refused value was stored: %+v", got)
	}
}

// Values and payloads take any JSON value, but the fields around them keep
// the spec's types, bounds and required fields: a number no float64 holds,
// or a wrong type, in any of them is still refused, and nothing is written.
func TestFreeFormValuesLeaveTypedFieldsChecked(t *testing.T) {
	b := newTestBroker(t)
	ns, q := uniqueQueue(t), uniqueQueue(t)
	put := func(fields string) string { return `{"op":"put","ns":"` + ns + `","key":"k",` + fields + `}` }
	cases := []struct{ name, method, path, body, code string }{
		{"ttlSeconds 1e400", "PUT", "/api/v1/kv/" + ns + "/k", `{"value":1,"ttlSeconds":1e400}`, "kv_bad_request"},
		{"expect 1e400", "PUT", "/api/v1/kv/" + ns + "/k", `{"value":1,"forever":true,"expect":1e400}`, "kv_bad_request"},
		{"forever a number", "PUT", "/api/v1/kv/" + ns + "/k", `{"value":1,"forever":1e400}`, "kv_bad_request"},
		{"no value", "PUT", "/api/v1/kv/" + ns + "/k", `{"forever":true}`, "kv_bad_request"},
		{"delta 1e400", "POST", "/api/v1/kv", `{"operations":[{"op":"incr","ns":"` + ns + `","key":"k","forever":true,"delta":1e400}]}`, "kv_bad_request"},
		{"delta a string", "POST", "/api/v1/kv", `{"operations":[{"op":"incr","ns":"` + ns + `","key":"k","forever":true,"delta":"1"}]}`, "kv_bad_request"},
		{"ttlSeconds above 100 years", "POST", "/api/v1/kv", `{"operations":[` + put(`"value":1,"ttlSeconds":3153600001`) + `]}`, "kv_bad_request"},
		{"ns a number", "POST", "/api/v1/kv", `{"operations":[{"op":"put","ns":1e400,"key":"k","forever":true,"value":1}]}`, "kv_bad_request"},
		{"rider expect below 0", "POST", "/api/v1/transaction", `{"operations":[],"kv":[` + put(`"value":1,"forever":true,"expect":-1`) + `]}`, "kv_bad_request"},
		{"operations 1e400", "POST", "/api/v1/transaction", `{"operations":1e400}`, "validation_failed"},
		{"type 1e400", "POST", "/api/v1/transaction", `{"operations":[{"type":1e400,"queue":"` + q + `","payload":1}]}`, "validation_failed"},
		{"queue 1e400", "POST", "/api/v1/transaction", `{"operations":[{"type":"push","queue":1e400,"payload":1}]}`, "validation_failed"},
		{"traceId 1e400", "POST", "/api/v1/transaction", `{"operations":[{"type":"push","queue":"` + q + `","payload":1,"traceId":1e400}]}`, "validation_failed"},
		{"item transactionId 1e400", "POST", "/api/v1/transaction",
			`{"operations":[{"type":"push","items":[{"queue":"` + q + `","payload":1,"transactionId":1e400}]}]}`, "validation_failed"},
		{"malformed payload", "POST", "/api/v1/transaction", `{"operations":[{"type":"push","queue":"` + q + `","payload":1e}]}`, "invalid_json"},
	}
	for _, c := range cases {
		var e errorBody
		if status, _ := b.call(t, c.method, c.path, c.body, &e); status != http.StatusBadRequest || e.Code != c.code {
			t.Errorf("%s: %d %+v, want 400 %s", c.name, status, e, c.code)
		}
	}
	var got map[string]any
	if b.call(t, "GET", "/api/v1/kv/"+ns+"/k", nil, &got); got["found"] != false {
		t.Fatalf("a refused request stored the key: %+v", got)
	}
	var popped popBody
	if b.call(t, "GET", "/api/v1/pop/queue/"+q+"?autoAck=true", nil, &popped); len(popped.Messages) != 0 {
		t.Fatalf("a refused bundle stored a message: %+v", popped)
	}
}

// A write's answer shows the value as every later read shows it, jsonb's
// form (keys in jsonb's order, the last of duplicate keys, escapes decoded,
// numbers as numeric prints them), not the text the client sent; so does a
// get after the put in the same call.
func TestKVPutAnswersTheValueAsReadsShowIt(t *testing.T) {
	b := newTestBroker(t)
	ns := uniqueQueue(t)
	values := []string{`{"b":1,"aa":2,"b":3}`, `1E+2`, `"\u00e9\/"`, `-0`, `1e400`, `[1.0e2,0.10,-0.0]`, `{"n":1e-3}`}
	for i, value := range values {
		key := numberKey(i)
		want := b.jsonbText(t, value)
		for _, c := range kvPutRoutes(ns, key, value) {
			var raw json.RawMessage
			status, _ := b.call(t, c.method, c.path, c.body, &raw)
			var answer kvPutAnswer
			if err := json.Unmarshal(raw, &answer); err != nil || status != http.StatusOK || !answer.result().Applied {
				t.Errorf("%s of %s: %d %.200s", c.name, value, status, raw)
				continue
			}
			var got struct {
				Value json.RawMessage `json:"value"`
			}
			b.call(t, "GET", "/api/v1/kv/"+ns+"/"+key, nil, &got)
			if put := string(answer.result().Value); put != want || string(got.Value) != want {
				t.Errorf("%s of %s answered %.60s, a get read %.60s, want jsonb's %.60s for both", c.name, value, put, got.Value, want)
			}
		}
		var raw json.RawMessage
		b.call(t, "POST", "/api/v1/kv", `{"operations":[{"op":"put","ns":"`+ns+`","key":"`+key+`","forever":true,"value":`+value+
			`},{"op":"get","ns":"`+ns+`","key":"`+key+`"}]}`, &raw)
		var batch kvPutAnswer
		if json.Unmarshal(raw, &batch) != nil || len(batch.Results) != 2 || string(batch.Results[0].Value) != want || string(batch.Results[1].Value) != want {
			t.Errorf("put then get of %s in one call answered %.300s, want jsonb's %.60s for both", value, raw, want)
		}
	}
}

// A counter field past int64 answered the decoder's words ("cannot unmarshal number
// 9223372036854775808 into Go struct field KvBatchRequest.operations.0.delta of type int"); the
// answer names the field and the range it takes, and the request changes nothing.
func TestKVIntegersPastInt64NameTheFieldAndTheRange(t *testing.T) {
	b := newTestBroker(t)
	ns := uniqueQueue(t)
	for _, c := range []struct{ name, path, body, field, number string }{
		{"delta", "/api/v1/kv", `{"operations":[{"op":"incr","ns":"` + ns + `","key":"n","delta":9223372036854775808,"forever":true}]}`, "operations.0.delta", "9223372036854775808"},
		{"min", "/api/v1/kv", `{"operations":[{"op":"incr","ns":"` + ns + `","key":"n","delta":1,"min":-9223372036854775809,"forever":true}]}`, "operations.0.min", "-9223372036854775809"},
		{"max in exponent form", "/api/v1/kv", `{"operations":[{"op":"get","ns":"` + ns + `","key":"k"},{"op":"incr","ns":"` + ns + `","key":"n","delta":1,"max":1e30,"forever":true}]}`, "operations.1.max", "1e30"},
		{"expect", "/api/v1/kv", `{"operations":[{"op":"put","ns":"` + ns + `","key":"n","value":1,"expect":9223372036854775808,"forever":true}]}`, "operations.0.expect", "9223372036854775808"},
		{"transaction rider delta", "/api/v1/transaction", `{"operations":[],"kv":[{"op":"incr","ns":"` + ns + `","key":"n","delta":-99999999999999999999,"forever":true}]}`, "kv.0.delta", "-99999999999999999999"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var e errorBody
			status, _ := b.call(t, "POST", c.path, c.body, &e)
			want := c.field + " must be an integer from -9223372036854775808 to 9223372036854775807, not " + c.number
			if status != http.StatusBadRequest || e.Code != CodeKVBadRequest || !strings.Contains(e.Error, want) || strings.Contains(e.Error, "Go struct") {
				t.Fatalf("%d %+v, want 400 kv_bad_request with %q", status, e, want)
			}
		})
	}
	var got struct {
		Found bool `json:"found"`
	}
	if status, _ := b.call(t, "GET", "/api/v1/kv/"+ns+"/n", nil, &got); status != http.StatusOK || got.Found {
		t.Fatalf("a refused incr wrote the counter: %d %+v", status, got)
	}
}
