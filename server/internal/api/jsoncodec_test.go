package api

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

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
	var want bytes.Buffer
	if err := json.NewEncoder(&want).Encode(pop); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	if err := popAnswer(pop).VisitPopQueueResponse(rec); err != nil {
		t.Fatal(err)
	}
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" || !bytes.Equal(rec.Body.Bytes(), want.Bytes()) {
		t.Fatalf("pop answer differs:\n got %d %q\nwant %q", rec.Code, rec.Body.Bytes(), want.Bytes())
	}

	msg := "bad"
	push := []gen.PushResult{{Index: 0, MessageId: lease, TransactionId: "x", QueueName: "q", Status: "failed", Error: &msg}}
	want.Reset()
	if err := json.NewEncoder(&want).Encode(push); err != nil {
		t.Fatal(err)
	}
	rec = httptest.NewRecorder()
	if err := pushAnswer(push).VisitPushResponse(rec); err != nil {
		t.Fatal(err)
	}
	if rec.Code != 201 || !bytes.Equal(rec.Body.Bytes(), want.Bytes()) {
		t.Fatalf("push answer differs:\n got %d %q\nwant %q", rec.Code, rec.Body.Bytes(), want.Bytes())
	}

	reason := "already committed: <&> \u2028"
	dropped := true
	acks := gen.AckBatch200JSONResponse{
		{Index: 0, TransactionId: "a", Success: true, LeaseReleased: true},
		{Index: 1, TransactionId: "b<c>", Success: false, Error: &reason, Dlq: true, Dropped: &dropped, Noop: true},
	}
	want.Reset()
	if err := json.NewEncoder(&want).Encode(acks); err != nil {
		t.Fatal(err)
	}
	rec = httptest.NewRecorder()
	if err := ackBatchAnswer(acks).VisitAckBatchResponse(rec); err != nil {
		t.Fatal(err)
	}
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" || !bytes.Equal(rec.Body.Bytes(), want.Bytes()) {
		t.Fatalf("ack batch answer differs:\n got %d %q\nwant %q", rec.Code, rec.Body.Bytes(), want.Bytes())
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
