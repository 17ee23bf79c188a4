package api

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// BenchmarkPushHandler runs push requests through the broker's whole handler
// (middleware, decode, engine, group commit on the test PostgreSQL, answer),
// one request at a time: allocs/op counts every allocation a push costs the
// broker, the committer's included, and cpu-ns/msg the process's CPU time
// (PostgreSQL's is its own). Each request carries new transaction ids.
func BenchmarkPushHandler(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			br := newTestBroker(b)
			h, err := NewServer(br.Engine, Options{Version: "test", MaxBodyBytes: 1 << 20}).Handler()
			if err != nil {
				b.Fatal(err)
			}
			queue := uniqueQueue(b)
			var body []byte
			seq := 0
			cpu := processCPU()
			for b.Loop() {
				body = appendPushBody(body[:0], queue, batch, &seq)
				req := httptest.NewRequest(http.MethodPost, "/api/v1/push", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusCreated {
					b.Fatalf("push: %d %s", rec.Code, rec.Body.Bytes())
				}
			}
			b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/float64(b.N*batch), "cpu-ns/msg")
		})
	}
}

// appendPushBody appends a push of n orders to one partition, the shape the
// benchmark harness sends, numbering their transaction ids from *seq on.
func appendPushBody(body []byte, queue string, n int, seq *int) []byte {
	body = append(body, `{"items":[`...)
	for i := range n {
		if i > 0 {
			body = append(body, ',')
		}
		*seq++
		body = append(body, `{"queue":"`...)
		body = append(body, queue...)
		body = append(body, `","partition":"p-1","transactionId":"p-1-`...)
		body = strconv.AppendInt(body, int64(*seq), 10)
		body = append(body, `","payload":{"orderId":`...)
		body = strconv.AppendInt(body, int64(*seq), 10)
		body = append(body, `,"amount":12.5,"note":"deliver after 5pm, ring twice"}}`...)
	}
	return append(body, `]}`...)
}
