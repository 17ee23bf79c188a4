package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/google/uuid"

	"github.com/lanesmq/lanes/server/internal/api/gen"
)

// A pop's answer is, byte for byte, what encoding/json writes for the answer
// it decodes to (the broker builds and encodes it its own way, faster), with
// every message's own id, transaction id, trace id and payload, over several
// segments and two partitions.
func TestPopAnswerBytesAreEncodingJSONs(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	payloads := []string{`{"html":"<&>","sep":"a` + "\u2028" + `b"}`, `[1, 2.5, "x" , null]`, `"text"`, `{"n":{"deep":[true,false]}}`}
	var want []string
	for _, partition := range []string{"p1", "p2"} {
		for push := range 3 { // three pushes: three segments a partition
			items := make([]map[string]any, 40)
			for i := range items {
				txn := fmt.Sprintf("%s-%d-%d", partition, push, i)
				items[i] = map[string]any{"queue": q, "partition": partition, "transactionId": txn,
					"payload": json.RawMessage(payloads[i%len(payloads)])}
				want = append(want, txn)
			}
			if status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": items}, nil); status != http.StatusCreated {
				t.Fatalf("push: %d", status)
			}
		}
	}
	traced := map[string]any{"operations": []map[string]any{{"type": "push", "queue": q, "partition": "p2",
		"transactionId": "traced", "traceId": "trace<1>", "payload": map[string]any{"t": 1}}}}
	if status, _ := b.call(t, "POST", "/api/v1/transaction", traced, nil); status != http.StatusOK {
		t.Fatalf("transaction: %d", status)
	}
	want = append(want, "traced")

	resp, err := http.Get(b.URL + "/api/v1/pop/queue/" + q + "?batch=500&partitions=2&wait=false")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" ||
		resp.Header.Get("Content-Length") != strconv.Itoa(len(raw)) {
		t.Fatalf("pop: %d %v", resp.StatusCode, resp.Header)
	}
	var pop gen.PopResponse
	if err := json.Unmarshal(raw, &pop); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := json.NewEncoder(&again).Encode(pop); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, again.Bytes()) {
		t.Fatalf("pop answer differs from encoding/json's:\n got %s\nwant %s", raw, again.Bytes())
	}
	got := map[string]gen.PopMessage{}
	ids := map[string]bool{}
	for _, m := range pop.Messages {
		got[m.TransactionId] = m
		if id, err := uuid.Parse(m.Id); err != nil || id.String() != m.Id || ids[m.Id] {
			t.Fatalf("message %s: id %q is not a fresh canonical UUID", m.TransactionId, m.Id)
		}
		ids[m.Id] = true
	}
	if len(pop.Messages) != len(want) || len(got) != len(want) {
		t.Fatalf("popped %d messages (%d distinct), want %d", len(pop.Messages), len(got), len(want))
	}
	for i, txn := range want[:len(want)-1] {
		var compact, wantData bytes.Buffer // as encoding/json writes a raw payload
		if err := json.Compact(&compact, []byte(payloads[i%40%len(payloads)])); err != nil {
			t.Fatal(err)
		}
		json.HTMLEscape(&wantData, compact.Bytes())
		if m := got[txn]; !bytes.Equal(m.Data, wantData.Bytes()) || m.TraceId != nil {
			t.Fatalf("message %s: data %s trace %v, want %s and no trace", txn, m.Data, m.TraceId, wantData.Bytes())
		}
	}
	if m := got["traced"]; m.TraceId == nil || *m.TraceId != "trace<1>" || m.Partition != "p2" {
		t.Fatalf("traced message: %+v", m)
	}
}
