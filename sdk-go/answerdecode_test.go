package lanes

import (
	"encoding/json"
	"reflect"
	"testing"
)

// popAnswerSample is a pop answer as the broker writes it, with what its
// encoder escapes (HTML characters, U+2028, quotes, non-ASCII), nulls, an
// absent optional field and nested payloads.
const popAnswerSample = `{"autopilot":{"batch":100,"partitions":4,"waitMs":100},"consumerGroup":"__QUEUE_MODE__",` +
	`"leaseExpiresAt":"2026-12-07T14:00:00.123456789Z","leaseId":"0193a1b2-7c3b-7d4e-8f90-123456789abc","leaseSeconds":30,"messages":[` +
	`{"consumerGroup":"__QUEUE_MODE__","createdAt":"2026-12-07T13:59:30.1Z","data":{"html":"\u003c\u0026\u003e","sep":"a\u2028b","q":"\"x\\y\"","n":[1,2.5e-3,null,true,{}]},` +
	`"id":"0193a1b2-7c3b-7d4e-8f90-000000000001","leaseId":"0193a1b2-7c3b-7d4e-8f90-123456789abc","partition":"caf\u00e9 ☕","partitionId":"0193a1b2-7c3b-7d4e-8f90-aaaaaaaaaaaa",` +
	`"producerSub":"user-7","traceId":"trace \u003c1\u003e","transactionId":"tx\ttab"},` +
	`{"consumerGroup":"__QUEUE_MODE__","createdAt":"2026-12-07T13:59:30+05:30","data":"text","id":"0193a1b2-7c3b-7d4e-8f90-000000000002","leaseId":"",` +
	`"partition":"p","partitionId":"0193a1b2-7c3b-7d4e-8f90-bbbbbbbbbbbb","producerSub":null,"traceId":null,"transactionId":"tx-2"}],` +
	`"partition":"p","partitionId":"0193a1b2-7c3b-7d4e-8f90-aaaaaaaaaaaa","partitionsClaimed":2,"queue":"orders","success":true}`

// decodesAlike fails unless jsonUnmarshal and encoding/json agree on body:
// both fail, or both give equal values of the type new returns.
func decodesAlike[T any](t *testing.T, body []byte) {
	t.Helper()
	var got, want T
	gotErr, wantErr := jsonUnmarshal(body, &got), json.Unmarshal(body, &want)
	if (gotErr != nil) != (wantErr != nil) {
		t.Fatalf("%q: jsonUnmarshal error %v, encoding/json's %v", body, gotErr, wantErr)
	}
	if wantErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: jsonUnmarshal read %+v, encoding/json %+v", body, got, want)
	}
}

// The broker's answers decode to what encoding/json reads from them: the
// SDK's decoder (goccy/go-json, for speed) must not change a value a caller
// sees.
func TestAnswersDecodeAsEncodingJSONReadsThem(t *testing.T) {
	decodesAlike[PopResult](t, []byte(popAnswerSample))
	decodesAlike[[]AckResult](t, []byte(`[{"index":0,"transactionId":"t\u003c1\u003e","success":true,"error":null,"leaseReleased":true,"dlq":false,"noop":false},`+
		`{"index":1,"transactionId":"t2","success":false,"error":"invalid or expired lease","leaseReleased":false,"dlq":false,"noop":true,"dropped":true}]`))
	decodesAlike[AckResult](t, []byte(`{"index":0,"transactionId":"t","success":true,"error":null,"leaseReleased":false,"dlq":true,"noop":false}`))
	for _, broken := range []string{`{"messages":[{"id":1}]}`, `{"leaseSeconds":"30"}`, `{"queue":"q"`, `[`, `{"createdAt":"yesterday"}`, `{"messages":[{"createdAt":"yesterday"}]}`} {
		decodesAlike[PopResult](t, []byte(broken))
	}
}

func FuzzAnswerDecoding(f *testing.F) {
	f.Add([]byte(popAnswerSample))
	f.Add([]byte(`{"messages":[{"data":{"a":[1,{"b":null}]},"transactionId":"x"}],"leaseSeconds":5}`))
	f.Add([]byte(`{"Queue":"case","MESSAGES":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) {
			return // answers are JSON; an invalid body fails either way
		}
		decodesAlike[PopResult](t, body)
	})
}
