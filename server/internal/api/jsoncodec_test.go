package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/lanesmq/lanes/server/internal/api/gen"
)

// The hot answers are encoded with goccy/go-json; they must be the bytes the
// generated encoding/json code would have written.
func TestFastAnswersMatchEncodingJSON(t *testing.T) {
	trace := "t<1>&"
	lease := "7d6f0f5e-3c1e-4c57-9a1e-2f4f4c1b8a10"
	pop := gen.PopResponse{LeaseId: lease, Messages: []gen.PopMessage{{
		Id: "0192f1e2-7c3b-7d4e-8f90-123456789abc", TransactionId: "a\u2028b", TraceId: &trace,
		Data:      json.RawMessage("{ \"seq\" : 1,\n \"html\": \"<&>\" }"),
		CreatedAt: time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC), PartitionId: lease, Partition: "p",
		LeaseId: lease, ConsumerGroup: "g",
	}}}
	sameAsEncodingJSON(t, "pop", pop, 200, popAnswer(pop).VisitPopQueueResponse)

	reason := "already committed: <&> \u2028"
	dropped := true
	acks := gen.AckBatch200JSONResponse{
		{Index: 0, TransactionId: "a", Success: true, LeaseReleased: true},
		{Index: 1, TransactionId: "b<c>", Success: false, Error: &reason, Dlq: true, Dropped: &dropped, Noop: true},
	}
	sameAsEncodingJSON(t, "ack batch", acks, 200, ackBatchAnswer(acks).VisitAckBatchResponse)
}

// sameAsEncodingJSON checks that visit writes status, a JSON content type and
// the bytes encoding/json's Encoder gives for v, with their length.
func sameAsEncodingJSON(t *testing.T, name string, v any, status int, visit func(http.ResponseWriter) error) {
	t.Helper()
	var want bytes.Buffer
	if err := json.NewEncoder(&want).Encode(v); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	if err := visit(rec); err != nil {
		t.Fatal(err)
	}
	if rec.Code != status || rec.Header().Get("Content-Type") != "application/json" || !bytes.Equal(rec.Body.Bytes(), want.Bytes()) ||
		rec.Header().Get("Content-Length") != strconv.Itoa(want.Len()) {
		t.Fatalf("%s answer differs:\n got %d %q\nwant %q", name, rec.Code, rec.Body.Bytes(), want.Bytes())
	}
}

// A 100-item ack answer, as a consume loop gets back for every batch.
func hundredAckResults() gen.AckBatch200JSONResponse {
	out := make(gen.AckBatch200JSONResponse, 100)
	for i := range out {
		out[i] = gen.AckResult{Index: i, TransactionId: "0192f1e2-7c3b-7d4e-8f90-123456789abc", Success: true, LeaseReleased: i == 99}
	}
	return out
}

func BenchmarkAckBatchAnswerEncodingJSON(b *testing.B) {
	acks := hundredAckResults()
	for b.Loop() {
		if err := acks.VisitAckBatchResponse(httptest.NewRecorder()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAckBatchAnswerGoJSON(b *testing.B) {
	acks := ackBatchAnswer(hundredAckResults())
	for b.Loop() {
		if err := acks.VisitAckBatchResponse(httptest.NewRecorder()); err != nil {
			b.Fatal(err)
		}
	}
}

// Request bodies are decoded through a pooled buffer (UnmarshalRead); what a
// body decoded to must not change when the buffer is reused for the next one.
func TestDecodedBodyOutlivesItsPooledBuffer(t *testing.T) {
	codec := requestBodyCodec{}
	first := `{"items":[{"queue":"orders","partition":"p-1","transactionId":"tx-1","payload":{"n":1,"s":"abc"}}]}`
	var got gen.PushRequest
	if err := codec.UnmarshalRead(strings.NewReader(first), &got); err != nil {
		t.Fatal(err)
	}
	// The next bodies take the pooled buffer and overwrite the bytes the first was read into.
	for range 4 {
		var other gen.PushRequest
		next := strings.Repeat("x", len(first)) // not JSON: only the overwrite matters
		_ = codec.UnmarshalRead(strings.NewReader(next), &other)
	}
	it := got.Items[0]
	if it.Queue != "orders" || *it.Partition != "p-1" || *it.TransactionId != "tx-1" || string(it.Payload) != `{"n":1,"s":"abc"}` {
		t.Fatalf("decoded body changed after its buffer was reused: %+v payload %s", it, it.Payload)
	}
}

// hundredItemPushBody is a push of 100 small orders, the batch the benchmarks push.
func hundredItemPushBody() []byte {
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := range 100 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"queue":"orders","partition":"customer-` + strconv.Itoa(i%7) + `","transactionId":"0192f1e2-7c3b-7d4e-8f90-` +
			strconv.Itoa(100000000000+i) + `","payload":{"orderId":` + strconv.Itoa(i) + `,"amount":12.5,"note":"deliver after 5pm, ring twice"}}`)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// The request codec checks UTF-8 before decoding: compare with the bare decoder.
func BenchmarkPushBodyDecode(b *testing.B) {
	body := hundredItemPushBody()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var req gen.PushJSONRequestBody
		if err := (requestBodyCodec{}).Unmarshal(body, &req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPushBodyDecodeWithoutUTF8Check(b *testing.B) {
	body := hundredItemPushBody()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var req gen.PushJSONRequestBody
		if err := gojson.Unmarshal(body, &req); err != nil {
			b.Fatal(err)
		}
	}
}
