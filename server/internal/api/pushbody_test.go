package api

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	gojson "github.com/goccy/go-json"

	"github.com/lanesmq/lanes/server/internal/api/gen"
)

// pushBodies are push bodies the plain decoder takes (plain true) or leaves
// to the general one.
var pushBodies = []plainBody{
	{`{"items":[{"queue":"orders","partition":"p-1","transactionId":"tx-1","payload":{"n":1}}]}`, true},
	{" {\n \"items\" : [ {\"payload\" : [1, 2.5e-3, -0, \"x\\u00e9\\n\", true, false, null, {}, []] ,\"queue\":\"q\"} ,\r\n {\"queue\":\"q\",\"payload\":\"<&>\\\"\\\\\\/\\b\\f\\r\\t\"} ] } \n", true},
	{`{"items":[{"queue":"ünï","partition":"","transactionId":"","traceId":"t","payload":0}]}`, true},
	{`{"items":[{"queue":"q","partition":"a","payload":1},{"queue":"r","partition":"b","payload":2},{"queue":"q","partition":"a","transactionId":"x","payload":3}]}`, true},
	{`{"items":[{"queue":"q","payload":{"k":"v","k":[{"deep":{"er":[[]]}}]}},{}]}`, true},
	{`{"items":[{"queue":"q"}]}`, true},                                                                      // no payload: refused later, as before
	{`{"items":[{"queue":"q","payload":1e400}]}`, true},                                                      // a number jsonb refuses later, as before
	{`{"items":[{"queue":"q","payload":"\ud800"}]}`, true},                                                   // a lone surrogate: refused later, as before
	{`{"items":[{"queue":"q\"","payload":1}]}`, false},                                                       // an escape in a name
	{`{"items":[{"queue":"q","transactionId":"a\u0041","payload":1}]}`, false},                               // a unicode escape in an id
	{"{\"items\":[{\"queue\":\"a\tb\",\"payload\":1}]}", false},                                              // a raw control character
	{"{\"items\":[{\"queue\":\"q\",\"payload\":\"a\tb\"}]}", false},                                          // a raw control character in the payload
	{`{"items":[{"Queue":"q","payload":1}]}`, false},                                                         // another letter case
	{`{"Items":[{"queue":"q","payload":1}]}`, false},                                                         // another letter case
	{`{"items":[{"queue":"q","payload":1,"data":2}]}`, false},                                                // an unknown member
	{`{"items":[{"queue":"q","queue":"r","payload":1}]}`, false},                                             // a member twice
	{`{"items":[{"queue":"q","payload":1,"payload":2}]}`, false},                                             // a member twice
	{`{"items":[{"queue":"q","payload":1}],"items":[]}`, false},                                              // a member twice
	{`{"items":[{"queue":"q","payload":1}],"extra":1}`, false},                                               // an unknown member
	{`{"items":[{"queue":"q","payload":null}]}`, false},                                                      // null
	{`{"items":[{"queue":"q","partition":null,"payload":1}]}`, false},                                        // null
	{`{"items":[{"queue":5,"payload":1}]}`, false},                                                           // a number for a name
	{`{"items":[{"queue":"q","payload":01}]}`, false},                                                        // not a JSON number
	{`{"items":[{"queue":"q","payload":1.}]}`, false},                                                        // not a JSON number
	{`{"items":[{"queue":"q","payload":-}]}`, false},                                                         // not a JSON number
	{`{"items":[{"queue":"q","payload":.5}]}`, false},                                                        // not a JSON number
	{`{"items":[{"queue":"q","payload":1e}]}`, false},                                                        // not a JSON number
	{`{"items":[{"queue":"q","payload":tru}]}`, false},                                                       // not a literal
	{`{"items":[{"queue":"q","payload":"\x"}]}`, false},                                                      // a bad escape
	{`{"items":[{"queue":"q","payload":"\u12"}]}`, false},                                                    // a bad escape
	{`{"items":[{"queue":"q","payload":{"a" 1}}]}`, false},                                                   // no colon
	{`{"items":[{"queue":"q","payload":{"a":1,}}]}`, false},                                                  // a trailing comma
	{`{"items":[{"queue":"q","payload":[1,]}]}`, false},                                                      // a trailing comma
	{`{"items":[{"queue":"q","payload":{1:2}}]}`, false},                                                     // a number for a key
	{`{"items":[{"queue":"q","payload":[` + strings.Repeat("[", 100) + `]}]}`, false},                        // too deep, unbalanced
	{`{"items":[{"queue":"q","payload":` + strings.Repeat("[", 80) + strings.Repeat("]", 80) + `}]}`, false}, // deeper than the scanner follows
	{`{"items":[]}`, false},
	{`{"items":null}`, false},
	{`{"items":{}}`, false},
	{`{}`, false},
	{`[]`, false},
	{`{"items":[{"queue":"q","payload":1}]} {}`, false}, // data after the value
	{`{"items":[{"queue":"q","payload":1}]`, false},
	{`{"items":[{"queue":"q","payload":1},]}`, false},
	{`{"items":[{"queue":"q","payload":1,}]}`, false},
	{`{"items":[{"queue":"q" "payload":1}]}`, false},
	{`{"items":[{"queue":"q","payload":1}],}`, false},
	{`{"items":[{"queue":"q,"payload":1}]}`, false},
	{`{"items":[{"queue":"q","payload":1`, false},
	{``, false},
}

// Every body decodes, through the request codec, to what the general decoder
// gives it, and the bodies producers send take the plain decoder.
func TestPushBodiesDecodeAsTheGeneralDecoderDecodesThem(t *testing.T) {
	pushDecoder.checkTable(t, pushBodies)
}

var pushDecoder = plainDecoder[gen.PushRequest]{decode: decodePlainPush, text: pushRequestText}

func pushRequestText(r gen.PushRequest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d items", len(r.Items))
	if r.Items == nil {
		b.WriteString(" (nil)")
	}
	for _, it := range r.Items {
		fmt.Fprintf(&b, " {%q %s %s %s %q (nil: %v)}", it.Queue, optionalText(it.Partition), optionalText(it.TransactionId), optionalText(it.TraceId), it.Payload, it.Payload == nil)
	}
	return b.String()
}

// The request codec decodes a 100-item push body with a few allocations, not
// five per item.
func TestPushBodyDecodeAllocatesPerBodyNotPerItem(t *testing.T) {
	body := hundredItemPushBody()
	pushDecoder.sameAsGeneral(t, body)
	allocs := testing.AllocsPerRun(20, func() {
		var req gen.PushRequest
		if err := (requestBodyCodec{}).Unmarshal(body, &req); err != nil || len(req.Items) != 100 {
			t.Fatal(err)
		}
	})
	if allocs > 30 {
		t.Fatalf("decoding a 100-item push allocated %.0f times, want at most 30", allocs)
	}
}

// The decoded strings and payloads do not alias the body, whose pooled buffer
// the next request reuses.
func TestPlainPushOutlivesItsBody(t *testing.T) {
	body := hundredItemPushBody()
	var req gen.PushRequest
	if !decodePlainPush(body, &req) {
		t.Fatal("not a plain body")
	}
	var want gen.PushRequest
	if err := gojson.Unmarshal(body, &want); err != nil {
		t.Fatal(err)
	}
	for i := range body {
		body[i] = 'x'
	}
	if !reflect.DeepEqual(req, want) {
		t.Fatalf("decoded items changed with their body: %s", pushRequestText(req))
	}
}

func FuzzPushBodyDecode(f *testing.F) {
	for _, c := range pushBodies {
		f.Add([]byte(c.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { pushDecoder.sameAsGeneral(t, body) })
}

// Over HTTP: a plain push, and one the general decoder takes, store the same
// messages; a refused body is refused as before.
func TestPushOfEitherDecoderStores(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	bodies := []string{
		`{"items":[{"queue":"` + q + `","partition":"p","transactionId":"a","payload":{"n":1, "s":"<&>"}}]}`,
		`{"items":[{"queue":"` + q + `","partition":"p","transactionId":"b\u0022q","payload":{"n":2, "s":"<&>"}}]}`, // an escape: the general decoder's
	}
	for _, body := range bodies {
		var res []gen.PushResult
		if status, _ := b.call(t, "POST", "/api/v1/push", body, &res); status != http.StatusCreated || len(res) != 1 || res[0].Status != "queued" {
			t.Fatalf("push %s: %d %+v", body, status, res)
		}
	}
	var pop popBody
	if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=10", nil, &pop); status != http.StatusOK || len(pop.Messages) != 2 {
		t.Fatalf("pop: %d %+v", status, pop)
	}
	for i, txn := range []string{"a", `b"q`} {
		m := pop.Messages[i]
		if data, _ := m.Data.(map[string]any); m.TransactionID != txn || data["n"] != float64(i+1) || data["s"] != "<&>" {
			t.Fatalf("message %d: %q %v", i, m.TransactionID, m.Data)
		}
	}
	var e errorBody
	if status, _ := b.call(t, "POST", "/api/v1/push", `{"items":[{"queue":5,"payload":1}]}`, &e); status != http.StatusBadRequest || e.Code != CodeValidation ||
		!strings.Contains(e.Error, "cannot unmarshal number") {
		t.Fatalf("push with a number for a queue: %d %+v", status, e)
	}
}
