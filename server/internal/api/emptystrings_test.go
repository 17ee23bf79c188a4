package api

import (
	"net/http"
	"testing"
)

// Every string the broker refuses empty says so in the spec (minLength 1),
// so a client generated from openapi.yaml can refuse it too, and the answer
// keeps the code it had when only the handler knew.
func TestEmptyStringsTheBrokerRefusesAreMinLengthInTheSpec(t *testing.T) {
	spec := loadSpec(t)
	for schema, fields := range map[string][]string{
		"PushItem":       {"queue"},
		"AckRequest":     {"transactionId", "partitionId"},
		"AckItem":        {"transactionId", "partitionId"},
		"KvOperation":    {"ns", "key"},
		"TimerOperation": {"queue", "timerKey"},
	} {
		for _, field := range fields {
			if p := spec.Components.Schemas[schema].Value.Properties[field]; p == nil || p.Value.MinLength != 1 {
				t.Errorf("%s.%s: the spec does not state minLength 1", schema, field)
			}
		}
	}
	purge := spec.Paths.Find("/api/v1/dlq").Delete
	if q := purge.Parameters.GetByInAndName("query", "queue"); q == nil || q.Schema.Value.MinLength != 1 {
		t.Errorf("DELETE /api/v1/dlq: queue does not state minLength 1")
	}

	b := newTestBroker(t)
	const partition = "01a242eb-30e1-7416-8e68-a78e3cfd2e26"
	for _, c := range []struct {
		method, path, body, code string
	}{
		{"POST", "/api/v1/push", `{"items":[{"queue":"","payload":1}]}`, CodeBadRequest},
		{"POST", "/api/v1/ack", `{"transactionId":"","partitionId":"` + partition + `"}`, CodeValidation},
		{"POST", "/api/v1/ack", `{"transactionId":"t","partitionId":""}`, CodeValidation},
		{"POST", "/api/v1/ack/batch", `{"acknowledgments":[{"transactionId":"","partitionId":"` + partition + `"}]}`, CodeValidation},
		{"POST", "/api/v1/kv", `{"operations":[{"op":"get","ns":"","key":"k"}]}`, CodeKVBadRequest},
		{"POST", "/api/v1/kv", `{"operations":[{"op":"get","ns":"n","key":""}]}`, CodeKVBadRequest},
		{"POST", "/api/v1/timers", `{"operations":[{"op":"cancel","queue":"","timerKey":"k"}]}`, CodeTimersBadRequest},
		{"POST", "/api/v1/timers", `{"operations":[{"op":"cancel","queue":"q","timerKey":""}]}`, CodeTimersBadRequest},
		{"POST", "/api/v1/transaction", `{"operations":[],"kv":[{"op":"get","ns":"","key":"k"}]}`, CodeKVBadRequest},
		{"POST", "/api/v1/transaction", `{"operations":[],"timers":[{"op":"cancel","queue":"","timerKey":"k"}]}`, CodeTimersBadRequest},
		{"DELETE", "/api/v1/dlq?queue=", "", CodeQueueRequired},
	} {
		var e errorBody
		if status, _ := b.call(t, c.method, c.path, c.body, &e); status != http.StatusBadRequest || e.Code != c.code {
			t.Errorf("%s %s %s: %d %+v, want 400 %s", c.method, c.path, c.body, status, e, c.code)
		}
	}
}
