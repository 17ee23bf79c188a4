package api

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/engine"
)

type txResultBody struct {
	TransactionID string `json:"transactionId"`
	Success       bool   `json:"success"`
	Reason        string `json:"reason"`
	Error         string `json:"error"`
	FailedIndex   *int   `json:"failedIndex"`
	KvReason      string `json:"kvReason"`
	Version       *int   `json:"version"`
	Value         any    `json:"value"`
	Results       []struct {
		Index         int     `json:"index"`
		Type          string  `json:"type"`
		Success       bool    `json:"success"`
		TransactionID string  `json:"transactionId"`
		MessageID     string  `json:"messageId"`
		QueueName     string  `json:"queueName"`
		Duplicate     *bool   `json:"duplicate"`
		Error         *string `json:"error"`
	} `json:"results"`
	Kv     []map[string]any `json:"kv"`
	Timers []map[string]any `json:"timers"`
}

// An ack result always carries "error", null when there is none (reference
// §1.7): a client comparing it with null must not see it missing.
func TestTransactionAckResultHasAnErrorKey(t *testing.T) {
	b := newTestBroker(t)
	txn, partition, lease := b.pushAndPop(t, uniqueQueue(t))
	var res struct {
		Success bool             `json:"success"`
		Results []map[string]any `json:"results"`
	}
	b.call(t, "POST", "/api/v1/transaction", map[string]any{"operations": []map[string]any{
		{"type": "ack", "transactionId": txn, "partitionId": partition, "leaseId": lease}}}, &res)
	if !res.Success || len(res.Results) != 1 {
		t.Fatalf("transaction: %+v", res)
	}
	if errValue, present := res.Results[0]["error"]; !present || errValue != nil {
		t.Fatalf("ack result must carry error:null: %v", res.Results[0])
	}
}

func TestTransactionPipelineOverHTTP(t *testing.T) {
	b := newTestBroker(t)
	orders, invoices, ns := uniqueQueue(t)+"-orders", uniqueQueue(t)+"-invoices", uniqueQueue(t)
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{
		{"queue": orders, "payload": map[string]any{"orderId": 1}, "transactionId": "order-1"},
	}}, nil)
	var popped popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+orders+"?consumerGroup=invoicing&subscriptionMode=all", nil, &popped)
	if len(popped.Messages) != 1 {
		t.Fatalf("pop: %+v", popped)
	}
	m := popped.Messages[0]
	bundle := map[string]any{
		"operations": []map[string]any{
			{"type": "push", "items": []map[string]any{
				{"queue": invoices, "data": map[string]any{"orderId": 1, "invoiced": true}, "transactionId": "invoice-1"},
				{"queue": invoices, "partition": "audit", "transactionId": "audit-1"},
			}},
			{"type": "ack", "transactionId": m.TransactionID, "partitionId": m.PartitionID, "consumerGroup": "invoicing"},
			{"type": "push", "queue": invoices, "payload": "flat", "transactionId": "invoice-1"},
		},
		"requiredLeases": []string{popped.LeaseID, popped.LeaseID},
		"kv":             []map[string]any{{"op": "putIfAbsent", "ns": ns, "key": "order-1", "value": "invoiced", "forever": true, "required": true}},
		"timers":         []map[string]any{{"op": "schedule", "queue": invoices, "timerKey": "remind-1", "delayMs": 3600000}},
	}
	var res txResultBody
	status, _ := b.call(t, "POST", "/api/v1/transaction", bundle, &res)
	if status != http.StatusOK || !res.Success || res.TransactionID == "" || len(res.Results) != 4 {
		t.Fatalf("bundle: %d %+v", status, res)
	}
	r := res.Results
	if r[0].Index != 0 || r[0].Type != "push" || r[0].QueueName != invoices || r[0].MessageID == "" || r[1].Index != 0 ||
		r[2].Index != 1 || r[2].Type != "ack" || !r[2].Success || r[2].Error != nil ||
		r[3].Index != 2 || r[3].Duplicate == nil || !*r[3].Duplicate || r[3].MessageID != r[0].MessageID {
		t.Fatalf("results: %+v", r)
	}
	if len(res.Kv) != 1 || res.Kv[0]["applied"] != true || len(res.Timers) != 1 || res.Timers[0]["status"] != "scheduled" {
		t.Fatalf("riders: %+v %+v", res.Kv, res.Timers)
	}
	var out popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+invoices+"/partition/Default?batch=10", nil, &out)
	if len(out.Messages) != 1 || out.Messages[0].TransactionID != "invoice-1" {
		t.Fatalf("the data alias is the payload; the duplicate was not stored: %+v", out)
	}
	var audit struct {
		Messages []struct{ Data any } `json:"messages"`
	}
	b.call(t, "GET", "/api/v1/pop/queue/"+invoices+"/partition/audit", nil, &audit)
	if len(audit.Messages) != 1 {
		t.Fatalf("audit: %+v", audit)
	}
	if d, ok := audit.Messages[0].Data.(map[string]any); !ok || len(d) != 0 {
		t.Fatalf("a missing payload is stored as {}: %#v", audit.Messages[0].Data)
	}

	// The same bundle again (a lost response): the marker aborts it and nothing doubles.
	var retry txResultBody
	b.call(t, "POST", "/api/v1/transaction", bundle, &retry)
	if retry.Success || retry.Reason != "kv_precondition" || retry.FailedIndex == nil || *retry.FailedIndex != 0 ||
		retry.KvReason != "exists" || retry.Value != "invoiced" || retry.Version == nil || *retry.Version != 1 ||
		retry.Results == nil || len(retry.Results) != 0 {
		t.Fatalf("retry: %+v", retry)
	}
	status, _ = b.call(t, "GET", "/api/v1/pop/queue/"+invoices+"/partition/Default", nil, nil)
	if status != http.StatusNoContent {
		t.Fatalf("the retry stored something: %d", status)
	}
}

func TestTransactionRollbackAndBadInputOverHTTP(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": 1, "transactionId": "dup"}}}, nil)
	var res txResultBody
	status, _ := b.call(t, "POST", "/api/v1/transaction", map[string]any{"operations": []map[string]any{
		{"type": "push", "queue": q, "payload": 2, "transactionId": "new"},
		{"type": "push", "queue": q, "payload": 3, "transactionId": "dup"},
	}}, &res)
	if status != http.StatusOK || res.Success || res.Reason != "duplicate" || res.Error == "" || len(res.Results) != 0 {
		t.Fatalf("duplicate: %d %+v", status, res)
	}
	status, _ = b.call(t, "POST", "/api/v1/transaction", map[string]any{"operations": []map[string]any{
		{"type": "push", "queue": q, "transactionId": "later"}},
		"timers": []map[string]any{{"op": "schedule", "queue": q, "timerKey": "far", "delayMs": 91 * 24 * 3600 * 1000}},
	}, &res)
	if status != http.StatusOK || res.Success || res.Reason != "timer_horizon_exceeded" {
		t.Fatalf("horizon: %d %+v", status, res)
	}
	var popped popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=10", nil, &popped)
	if len(popped.Messages) != 1 {
		t.Fatalf("a rolled-back push is visible: %+v", popped)
	}
	cases := []struct {
		name string
		body string
		code string
	}{
		{"missing operations", `{}`, "validation_failed"},
		{"kv inside operations", `{"operations":[{"type":"kv"}]}`, "validation_failed"},
		{"empty bundle", `{"operations":[]}`, CodeBadRequest},
		{"push without queue", `{"operations":[{"type":"push","payload":1}]}`, CodeBadRequest},
		{"ack without partition", `{"operations":[{"type":"ack","transactionId":"x"}]}`, CodeBadRequest},
		{"getPrefix rider", `{"operations":[],"kv":[{"op":"getPrefix","ns":"n","prefix":"p"}]}`, "kv_get_prefix_in_transaction"},
		{"kv without expiry", `{"operations":[],"kv":[{"op":"put","ns":"n","key":"k","value":1}]}`, "kv_expiry_not_specified"},
		{"server-owned timer field", `{"operations":[],"timers":[{"op":"schedule","queue":"` + q + `","timerKey":"k","messageId":"x"}]}`, "timers_bad_request"},
	}
	for _, c := range cases {
		var e errorBody
		status, _ := b.call(t, "POST", "/api/v1/transaction", c.body, &e)
		if status != http.StatusBadRequest || e.Code != c.code || e.Error == "" {
			t.Fatalf("%s: %d %+v, want 400 %s", c.name, status, e, c.code)
		}
	}
}

func TestTimersOverHTTP(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	payload := base64.StdEncoding.EncodeToString([]byte(`{"remind":true}`))
	var sched struct {
		Results []map[string]any `json:"results"`
	}
	status, _ := b.call(t, "POST", "/api/v1/timers", map[string]any{"operations": []map[string]any{
		{"op": "schedule", "queue": q, "timerKey": "soon", "delayMs": 200, "payload": payload, "txn": "soon-1"},
		{"op": "schedule", "queue": q, "timerKey": "later/x", "delayMs": 3600000},
		{"op": "cancel", "queue": q, "timerKey": "none"},
	}}, &sched)
	if status != http.StatusOK || len(sched.Results) != 3 || sched.Results[0]["status"] != "scheduled" ||
		sched.Results[0]["messageId"] == nil || sched.Results[2]["status"] != "absent" || sched.Results[2]["ok"] != false {
		t.Fatalf("schedule: %d %+v", status, sched)
	}
	var one map[string]any
	b.call(t, "GET", "/api/v1/timers/"+q+"/later%2Fx", nil, &one)
	if one["found"] != true || one["timerKey"] != "later/x" || one["payload"] != base64.StdEncoding.EncodeToString([]byte(`{}`)) {
		t.Fatalf("get: %+v", one)
	}
	var count map[string]any
	b.call(t, "GET", "/api/v1/timers/"+q+"?mode=count", nil, &count)
	if count["count"] != float64(2) {
		t.Fatalf("count: %+v", count)
	}
	var e errorBody
	status, _ = b.call(t, "POST", "/api/v1/timers", map[string]any{"operations": []map[string]any{
		{"op": "schedule", "queue": q, "timerKey": "far", "delayMs": 91 * 24 * 3600 * 1000}}}, &e)
	if status != http.StatusForbidden || e.Code != "timer_horizon_exceeded" {
		t.Fatalf("horizon: %d %+v", status, e)
	}
	status, _ = b.call(t, "POST", "/api/v1/timers", `{"operations":[{"op":"schedule","queue":"`+q+`","timerKey":"k","_tenant":"x"}]}`, &e)
	if status != http.StatusBadRequest || e.Code != "timers_bad_request" {
		t.Fatalf("server-owned field: %d %+v", status, e)
	}

	b.Engine.StartTimers(50 * time.Millisecond)
	var popped popBody
	status, _ = b.call(t, "GET", "/api/v1/pop/queue/"+q+"?wait=true&timeout=3000", nil, &popped)
	if status != http.StatusOK || len(popped.Messages) != 1 || popped.Messages[0].TransactionID != "soon-1" ||
		popped.Messages[0].ID != sched.Results[0]["messageId"] {
		t.Fatalf("fired timer: %d %+v", status, popped)
	}
	var cancel map[string]any
	b.call(t, "DELETE", "/api/v1/timers/"+q+"/later%2Fx", nil, &cancel)
	if cancel["status"] != engine.TimerCancelled || cancel["ok"] != true {
		t.Fatalf("cancel: %+v", cancel)
	}
	var list map[string]any
	b.call(t, "GET", "/api/v1/timers/"+q, nil, &list)
	if rows, _ := list["rows"].([]any); len(rows) != 0 {
		t.Fatalf("list after fire and cancel: %+v", list)
	}
}

// A bundle ack without leaseId after its lease expired has no lease
// information left (the expired lease is no current holder): it commits
// lease-less, as a plain lease-less ack does, instead of rolling back.
func TestTransactionAckWithoutLeaseAfterExpiryCommits(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.push(t, q, "p", "in")
	p := b.pop(t, "/api/v1/pop/queue/"+q+"?leaseSeconds=1")
	if len(p.Messages) != 1 {
		t.Fatalf("pop: %+v", p)
	}
	time.Sleep(1200 * time.Millisecond)
	var res map[string]any
	b.call(t, "POST", "/api/v1/transaction", map[string]any{"operations": []map[string]any{
		{"type": "push", "queue": q + "-out", "payload": 1},
		{"type": "ack", "transactionId": "in", "partitionId": p.Messages[0].PartitionID},
	}}, &res)
	if res["success"] != true {
		t.Fatalf("bundle acking without a lease after expiry: %+v", res)
	}
	if committed, _ := b.queueModeCursor(t, p.Messages[0].PartitionID); committed != 0 {
		t.Fatalf("the cursor is at %d, want 0", committed)
	}
}

// Under push maintenance a bundle carrying pushes answers 503 maintenance with
// Retry-After and changes nothing; a bundle of acks alone still commits, and
// the broker's timers wait for the end of maintenance.
func TestPushMaintenanceRefusesBundlesWithPushesAndHoldsTimers(t *testing.T) {
	b := newTestBroker(t)
	t.Cleanup(func() { b.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}, nil) })
	q := uniqueQueue(t)
	txn, partition, lease := b.pushAndPop(t, q)
	b.call(t, "POST", "/api/v1/timers", map[string]any{"operations": []map[string]any{
		{"op": "schedule", "queue": q, "timerKey": "due", "delayMs": 0, "payload": base64.StdEncoding.EncodeToString([]byte(`{"n":1}`))}}}, nil)
	if status, _ := b.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": true}, nil); status != http.StatusOK {
		t.Fatalf("enable push maintenance: %d", status)
	}
	ackOp := map[string]any{"type": "ack", "transactionId": txn, "partitionId": partition, "leaseId": lease}
	var refused errorBody
	status, hdr := b.call(t, "POST", "/api/v1/transaction", map[string]any{"operations": []map[string]any{
		{"type": "push", "queue": q, "transactionId": "output", "payload": 1}, ackOp}}, &refused)
	if status != http.StatusServiceUnavailable || refused.Code != CodeMaintenance || hdr.Get("Retry-After") == "" {
		t.Fatalf("bundle with a push under push maintenance: %d %+v Retry-After %q", status, refused, hdr.Get("Retry-After"))
	}
	if n, err := b.Engine.FireDueTimers(t.Context()); err != nil || n != 0 {
		t.Fatalf("fired %d timers (err %v) under push maintenance", n, err)
	}
	var acked txResultBody
	if status, _ := b.call(t, "POST", "/api/v1/transaction", map[string]any{"operations": []map[string]any{ackOp}}, &acked); status != http.StatusOK || !acked.Success {
		t.Fatalf("a bundle without pushes must commit under push maintenance: %d %+v", status, acked)
	}
	if n := b.countRows(t, `SELECT count(*) FROM lanes.txns WHERE transaction_id = 'output'`); n != 0 {
		t.Fatalf("the refused bundle stored its push")
	}

	b.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}, nil)
	if n, err := b.Engine.FireDueTimers(t.Context()); err != nil || n < 1 {
		t.Fatalf("timers must fire once maintenance ends: %d %v", n, err)
	}
}

// A transaction stores a push's traceId as given, UUID or not, up to the
// transaction id's 1024 bytes: an unbounded one was stored, and every pop of
// the message carried it (200 KB per message). Past the cap the bundle is a
// 400 bad_request naming the field, and nothing of it is stored.
func TestTransactionTraceIDIsStoredAsGivenUpTo1024Bytes(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	over := strings.Repeat("x", engine.MaxTransactionIDBytes+1)
	for _, c := range []struct{ name, body, field string }{
		{"flat push", `{"operations":[{"type":"push","queue":"` + q + `","payload":1,"traceId":"` + over + `"}]}`, "operations[0].traceId"},
		{"nested items", `{"operations":[{"type":"push","items":[{"queue":"` + q + `","payload":1},{"queue":"` + q + `","payload":2,"traceId":"` + over + `"}]}]}`, "operations[0].traceId"},
	} {
		var e errorBody
		status, raw := b.specAnswer(t, "POST", "/api/v1/transaction", c.body)
		if err := json.Unmarshal(raw, &e); err != nil || status != http.StatusBadRequest || e.Code != CodeBadRequest || !strings.Contains(e.Error, c.field) {
			t.Errorf("%s with a %d-byte traceId: %d %s; want 400 %s naming %s", c.name, len(over), status, raw, CodeBadRequest, c.field)
		}
	}
	if n := b.countQueueRows(t, q); n != 0 {
		t.Fatalf("refused bundles created %d queues", n)
	}
	atCap := strings.Repeat("y", engine.MaxTransactionIDBytes)
	var res txResultBody
	if status, _ := b.call(t, "POST", "/api/v1/transaction", map[string]any{"operations": []map[string]any{
		{"type": "push", "queue": q, "payload": 1, "transactionId": "t1", "traceId": atCap},
		{"type": "push", "queue": q, "payload": 2, "transactionId": "t2", "traceId": "not-a-uuid"},
	}}, &res); status != http.StatusOK || !res.Success {
		t.Fatalf("traceIds at the cap and not a UUID: %d %+v", status, res)
	}
	var popped struct {
		Messages []struct {
			TransactionID string `json:"transactionId"`
			TraceID       string `json:"traceId"`
		} `json:"messages"`
	}
	b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=10", nil, &popped)
	got := map[string]string{}
	for _, m := range popped.Messages {
		got[m.TransactionID] = m.TraceID
	}
	if got["t1"] != atCap || got["t2"] != "not-a-uuid" {
		t.Fatalf("popped trace ids %d and %q; want %d bytes and %q", len(got["t1"]), got["t2"], len(atCap), "not-a-uuid")
	}
}

// A transaction's push stores its payload as /push does, byte for byte, in
// both forms: the bundle used to be bound from the validator's decoded value,
// which sorted keys, dropped duplicate ones, unescaped strings and turned a
// lone surrogate into U+FFFD without a word.
func TestTransactionPushKeepsThePayloadBytes(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	payloads := []string{`{"b":1,"a":2,"a":3}`, `"\u00e9"`, `"a\/b"`, `"\ud800"`, `[{"z":1,"y":[true,null]},1.50,-0,1E5]`}
	for i, payload := range payloads {
		for _, form := range []string{"flat", "nested"} {
			partition := form + strconv.Itoa(i)
			push := `{"type":"push","queue":"` + q + `","partition":"` + partition + `","payload":` + payload + `}`
			if form == "nested" {
				push = `{"type":"push","items":[{"queue":"` + q + `","partition":"` + partition + `","payload":` + payload + `}]}`
			}
			var res txResultBody
			if status, _ := b.call(t, "POST", "/api/v1/transaction", `{"operations":[`+push+`]}`, &res); status != http.StatusOK || !res.Success {
				t.Fatalf("%s push of %s: %d %+v", form, payload, status, res)
			}
			if popped := popPartitionData(t, b, q, partition); len(popped) != 1 || string(popped[0]) != payload {
				t.Errorf("%s push of %s popped as %s", form, payload, popped)
			}
		}
	}
}

// A push moved into a bundle is stored as /push stores it: every JSON number,
// even one no float64 holds (the validator once read payloads as float64 and
// refused a bare 1e400 that /push took), comes back from a pop byte for byte.
func TestTransactionPushTakesEveryNumberPushTakes(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	numbers := []string{`1e400`, `-1E+400`, `1e131072`, `123456789012345678901234567890`, `1e-400`, `1e-20000`, `-0`, `1.50`, `null`, `false`, `"1e400"`}
	for i, number := range numbers {
		for _, payload := range []string{number, `[` + number + `]`, `{"n":` + number + `}`} {
			routes := map[string]string{
				"push": `{"items":[{"queue":"` + q + `","partition":"%s","payload":` + payload + `}]}`,
				"flat": `{"operations":[{"type":"push","queue":"` + q + `","partition":"%s","payload":` + payload + `}]}`,
				"data": `{"operations":[{"type":"push","queue":"` + q + `","partition":"%s","data":` + payload + `}]}`,
				"nested": `{"operations":[{"type":"push","items":[{"queue":"` + q + `","partition":"%s","payload":` +
					payload + `}]}]}`,
			}
			for form, body := range routes {
				partition := form + "-" + strconv.Itoa(i) + "-" + strconv.Itoa(len(payload))
				path := "/api/v1/transaction"
				if form == "push" {
					path = "/api/v1/push"
				}
				var answer json.RawMessage
				status, _ := b.call(t, "POST", path, strings.Replace(body, "%s", partition, 1), &answer)
				if (form == "push" && status != http.StatusCreated) || (form != "push" && (status != http.StatusOK ||
					!strings.Contains(string(answer), `"success":true`))) {
					t.Errorf("%s of %.40s: %d %.200s", form, payload, status, answer)
					continue
				}
				if popped := popPartitionData(t, b, q, partition); len(popped) != 1 || string(popped[0]) != payload {
					t.Errorf("%s of %.40s popped as %.200s", form, payload, popped)
				}
			}
		}
	}
}

// popPartitionData pops a partition with autoAck and returns the messages'
// data as the broker sent it.
func popPartitionData(t *testing.T, b *testBroker, queue, partition string) []json.RawMessage {
	t.Helper()
	var popped struct {
		Messages []struct {
			Data json.RawMessage `json:"data"`
		} `json:"messages"`
	}
	b.call(t, "GET", "/api/v1/pop/queue/"+queue+"/partition/"+partition+"?autoAck=true", nil, &popped)
	data := make([]json.RawMessage, len(popped.Messages))
	for i, m := range popped.Messages {
		data[i] = m.Data
	}
	return data
}
