package api

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/lanesmq/lanes/server/internal/api/gen"
)

const ackPartition = "0190a1b2-0000-7000-8000-000000000000"

// ackBodies are ack batch bodies the plain decoder takes (plain true) or
// leaves to the general one.
var ackBodies = []plainBody{
	{`{"acknowledgments":[{"transactionId":"a","partitionId":"` + ackPartition + `","leaseId":"l","status":"completed"}]}`, true},
	{" {\n \"consumerGroup\" : \"g\" ,\t\"acknowledgments\" : [ {\"transactionId\":\"a\",\"partitionId\":\"p\"} ,\r\n {\"status\":\"failed\",\"error\":\"boom\",\"transactionId\":\"b\",\"partitionId\":\"p\"} ] } \n", true},
	{`{"acknowledgments":[{"transactionId":"ünï","partitionId":"p","status":""},{}]}`, true},
	{`{"acknowledgments":[{"transactionId":"a","partitionId":"p","leaseId":"l1"},{"transactionId":"b","partitionId":"q","leaseId":"l2"},{"transactionId":"c","partitionId":"p","leaseId":"l1"}]}`, true},
	{`{"acknowledgments":[{"transactionId":"a\"b","partitionId":"p"}]}`, false},                  // an escape
	{`{"acknowledgments":[{"transactionId":"a\u0041","partitionId":"p"}]}`, false},               // a unicode escape
	{"{\"acknowledgments\":[{\"transactionId\":\"a\tb\",\"partitionId\":\"p\"}]}", false},        // a raw control character
	{`{"acknowledgments":[{"TransactionID":"a","partitionId":"p"}]}`, false},                     // another letter case
	{`{"acknowledgments":[{"transactionId":"a","partitionId":"p","extra":"x"}]}`, false},         // an unknown member
	{`{"acknowledgments":[{"transactionId":"a","transactionId":"b","partitionId":"p"}]}`, false}, // a member twice
	{`{"acknowledgments":[{"transactionId":"a","partitionId":"p"}],"acknowledgments":[]}`, false},
	{`{"consumerGroup":"g","consumerGroup":"h","acknowledgments":[{"transactionId":"a","partitionId":"p"}]}`, false},
	{`{"acknowledgments":[{"transactionId":"a","partitionId":"p","leaseId":null}]}`, false},
	{`{"acknowledgments":[{"transactionId":5,"partitionId":"p"}]}`, false},
	{`{"acknowledgments":[]}`, false},
	{`{"acknowledgments":null}`, false},
	{`{"acknowledgments":{}}`, false},
	{`{"consumerGroup":"g"}`, false},
	{`{}`, false},
	{`[]`, false},
	{`{"acknowledgments":[{"transactionId":"a","partitionId":"p"}]} {}`, false}, // data after the value
	{`{"acknowledgments":[{"transactionId":"a","partitionId":"p"}]`, false},
	{`{"acknowledgments":[{"transactionId":"a","partitionId":"p"},]}`, false},
	{`{"acknowledgments":[{"transactionId":"a","partitionId":"p",}]}`, false},
	{`{"acknowledgments":[{"transactionId":"a" "partitionId":"p"}]}`, false},
	{`{"acknowledgments":[{"transactionId":"a","partitionId":"p"}],}`, false},
	{`{"acknowledgments":[{"transactionId":"a,"partitionId":"p"}]}`, false},
	{``, false},
}

// Every body decodes, through the request codec, to what the general decoder
// gives it, and the bodies a consume loop sends take the plain decoder.
func TestAckBatchBodiesDecodeAsTheGeneralDecoderDecodesThem(t *testing.T) {
	ackDecoder.checkTable(t, ackBodies)
}

var ackDecoder = plainDecoder[gen.AckBatchRequest]{decode: decodePlainAckBatch, text: ackBatchText}

func ackBatchText(r gen.AckBatchRequest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "group %s, %d items", optionalText(r.ConsumerGroup), len(r.Acknowledgments))
	if r.Acknowledgments == nil {
		b.WriteString(" (nil)")
	}
	for _, a := range r.Acknowledgments {
		fmt.Fprintf(&b, " {%q %q %s %s %s}", a.TransactionId, a.PartitionId, optionalText(a.LeaseId), optionalText(a.Status), optionalText(a.Error))
	}
	return b.String()
}

// hundredAckBody is the ack of a 100-message pop, as the benchmark's consumers send it.
func hundredAckBody() []byte {
	var b strings.Builder
	b.WriteString(`{"acknowledgments":[`)
	for i := range 100 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"transactionId":"0192f1e2-7c3b-7d4e-8f90-%012d","partitionId":"%s","leaseId":"7d6f0f5e-3c1e-4c57-9a1e-2f4f4c1b8a10","status":"completed"}`, i, ackPartition)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// A 100-item ack body costs a few allocations, not six per item.
func TestPlainAckBatchDecodeAllocatesPerBodyNotPerItem(t *testing.T) {
	body := hundredAckBody()
	ackDecoder.sameAsGeneral(t, body)
	allocs := testing.AllocsPerRun(20, func() {
		var req gen.AckBatchRequest
		if !decodePlainAckBatch(body, &req) {
			t.Fatal("not a plain body")
		}
	})
	if allocs > 12 {
		t.Fatalf("decoding a 100-item ack allocated %.0f times, want at most 12", allocs)
	}
}

// The decoded strings do not alias the body, whose pooled buffer the next
// request reuses.
func TestPlainAckBatchOutlivesItsBody(t *testing.T) {
	body := hundredAckBody()
	var req gen.AckBatchRequest
	if !decodePlainAckBatch(body, &req) {
		t.Fatal("not a plain body")
	}
	for i := range body {
		body[i] = 'x'
	}
	a := req.Acknowledgments[99]
	if a.TransactionId != "0192f1e2-7c3b-7d4e-8f90-000000000099" || a.PartitionId != ackPartition ||
		*a.LeaseId != "7d6f0f5e-3c1e-4c57-9a1e-2f4f4c1b8a10" || *a.Status != "completed" {
		t.Fatalf("decoded item changed with its body: %s", ackBatchText(req))
	}
}

func FuzzAckBatchBodyDecode(f *testing.F) {
	for _, c := range ackBodies {
		f.Add([]byte(c.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { ackDecoder.sameAsGeneral(t, body) })
}

// Over HTTP: a plain ack batch, and one the general decoder takes, commit
// the same way; a refused body is refused as before.
func TestAckBatchOfEitherDecoderCommits(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	items := []map[string]any{{"queue": q, "partition": "p", "transactionId": "a", "payload": 1}, {"queue": q, "partition": "p", "transactionId": "b\"q", "payload": 2}}
	if status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": items}, nil); status != http.StatusCreated {
		t.Fatalf("push: %d", status)
	}
	for _, txn := range []string{"a", "b\"q"} { // the second body holds an escape: the general decoder's
		var pop popBody
		if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=1", nil, &pop); status != http.StatusOK || pop.Messages[0].TransactionID != txn {
			t.Fatalf("pop: %d %+v", status, pop)
		}
		var res []gen.AckResult
		ack := map[string]any{"acknowledgments": []map[string]any{{"transactionId": txn, "partitionId": pop.Messages[0].PartitionID,
			"leaseId": pop.LeaseID, "status": "completed"}}}
		if status, _ := b.call(t, "POST", "/api/v1/ack/batch", ack, &res); status != http.StatusOK || len(res) != 1 || !res[0].Success || res[0].TransactionId != txn {
			t.Fatalf("ack of %q: %d %+v", txn, status, res)
		}
	}
	var e errorBody
	if status, _ := b.call(t, "POST", "/api/v1/ack/batch", `{"acknowledgments":[{"transactionId":5}]}`, &e); status != http.StatusBadRequest || e.Code != CodeValidation ||
		!strings.Contains(e.Error, "cannot unmarshal number") {
		t.Fatalf("ack with a number for an id: %d %+v", status, e)
	}
}

// plainRunByBytes is plainRun one byte at a time, as the decoder scanned before.
func plainRunByBytes(s []byte) int {
	for i, c := range s {
		if c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return len(s)
}

// Every byte value at every place of runs as long as two words and a tail,
// over backgrounds of ASCII, of bytes above 0x7f (UTF-8) and of the bytes
// just above the stops, and behind an earlier stop: the word-at-a-time scan
// stops where the byte-at-a-time one does.
func TestPlainRunStopsWhereAByteAtATimeScanStops(t *testing.T) {
	for _, background := range []byte{'a', 0x80, 0xff, 0x20, '"' + 1, '\\' + 1, '"' - 1} {
		for n := 0; n <= 19; n++ {
			for at := 0; at < n; at++ {
				for c := 0; c < 256; c++ {
					s := bytes.Repeat([]byte{background}, n)
					s[at] = byte(c)
					if got, want := plainRun(s), plainRunByBytes(s); got != want {
						t.Fatalf("plainRun(%q) = %d, want %d", s, got, want)
					}
					if at+1 < n {
						s[n-1] = 0x1f // a second stop after the first
						if got, want := plainRun(s), plainRunByBytes(s); got != want {
							t.Fatalf("plainRun(%q) = %d, want %d", s, got, want)
						}
					}
				}
			}
		}
	}
}

func FuzzPlainRun(f *testing.F) {
	f.Add([]byte(`0192f1e2-7c3b-7d4e-8f90-000000000000","partitionId"`))
	f.Add([]byte("caf\xc3\xa9 \x1f\\\""))
	f.Fuzz(func(t *testing.T, s []byte) {
		if got, want := plainRun(s), plainRunByBytes(s); got != want {
			t.Fatalf("plainRun(%q) = %d, want %d", s, got, want)
		}
	})
}
