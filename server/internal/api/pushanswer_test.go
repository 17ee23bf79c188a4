package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
)

// genPushResults is what the push handler built for encoding/json before it
// wrote its answer itself: the wire model of each result.
func genPushResults(results []engine.PushResult) []gen.PushResult {
	out := make([]gen.PushResult, len(results))
	for i, r := range results {
		out[i] = gen.PushResult{Index: r.Index, MessageId: r.MessageID.String(), TransactionId: r.TransactionID,
			QueueName: r.Queue, Status: gen.PushResultStatus(r.Status)}
		if r.Error != "" {
			out[i].Error = &r.Error
		}
	}
	return out
}

// A push's answer is, byte for byte, what encoding/json writes for its wire
// model, whatever its strings hold.
func TestPushAnswerBytesAreEncodingJSONs(t *testing.T) {
	texts := []string{"", "orders", "a\"b\\c", "<&>", "tab\there\n", "\x00\x1f\x7f", "café", "a\u2028b\u2029", "bad \xff utf-8", "😀", "ok-1.2_3"}
	var results []engine.PushResult
	for i, text := range texts {
		results = append(results,
			engine.PushResult{Index: i, MessageID: engine.NewMessageID(), TransactionID: text, Queue: "q", Status: engine.PushQueued},
			engine.PushResult{Index: 1000 + i, TransactionID: "t", Queue: text, Status: engine.PushFailed, Error: text + " failed"})
	}
	for _, answer := range [][]engine.PushResult{{}, results[:1], results} {
		sameAsEncodingJSON(t, "push", genPushResults(answer), http.StatusCreated, pushAnswer(answer).VisitPushResponse)
	}
}

func FuzzPushAnswer(f *testing.F) {
	f.Add("tx-1", "orders", "", 7)
	f.Add("<&>\u2028", "caf\xe9", "boom \"x\"", -1)
	f.Fuzz(func(t *testing.T, txn, queue, reason string, index int) {
		answer := []engine.PushResult{{Index: index, MessageID: uuid.New(), TransactionID: txn, Queue: queue, Status: engine.PushStatus(reason), Error: reason}}
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(genPushResults(answer)); err != nil {
			t.Fatal(err)
		}
		if got := appendPushAnswer(nil, answer); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("got  %q\nwant %q", got, want.Bytes())
		}
	})
}

// A 100-message push is answered with a few allocations, not one or more
// per message.
func TestPushAnswerAllocatesPerAnswerNotPerItem(t *testing.T) {
	results := make([]engine.PushResult, 100)
	for i := range results {
		results[i] = engine.PushResult{Index: i, MessageID: engine.NewMessageID(), TransactionID: "0192f1e2-7c3b-7d4e-8f90-" + strings.Repeat("7", 12),
			Queue: "orders", Status: engine.PushQueued}
	}
	w := &discardingWriter{header: http.Header{}}
	allocs := testing.AllocsPerRun(50, func() {
		if err := pushAnswer(results).VisitPushResponse(w); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 4 {
		t.Fatalf("answering a 100-message push allocated %.0f times, want at most 4", allocs)
	}
}

// discardingWriter is a ResponseWriter that keeps nothing but its header.
type discardingWriter struct{ header http.Header }

func (w *discardingWriter) Header() http.Header         { return w.header }
func (w *discardingWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardingWriter) WriteHeader(int)             {}
