package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// BenchmarkConsumeCycle is the benchmark harness's consume-queue loop in one
// process: each op pops 100 messages under a lease and acks every one of them
// in one ack batch, over HTTP against a real broker and PostgreSQL. Its
// allocations count the client's too (the same for every broker build):
//
//	go test ./internal/api -run '^$' -bench ConsumeCycle -benchmem -benchtime 200x
func BenchmarkConsumeCycle(b *testing.B) {
	broker := newTestBroker(b)
	q := uniqueQueue(b)
	const batch, partitions = 100, 16
	for push := range b.N {
		items := make([]map[string]any, batch)
		for i := range items {
			items[i] = map[string]any{"queue": q, "partition": fmt.Sprintf("p%d", push%partitions),
				"transactionId": fmt.Sprintf("0192f1e2-7c3b-7d4e-%04d-%012d", push, i), "payload": map[string]any{"orderId": i, "note": "ring twice"}}
		}
		if status, _ := broker.call(b, "POST", "/api/v1/push", map[string]any{"items": items}, nil); status != http.StatusCreated {
			b.Fatalf("push: %d", status)
		}
	}
	client := &http.Client{}
	popURL := broker.URL + "/api/v1/pop/queue/" + q + "?batch=100&wait=true&timeout=200"
	type ackItem struct {
		TransactionID string `json:"transactionId"`
		PartitionID   string `json:"partitionId"`
		LeaseID       string `json:"leaseId"`
		Status        string `json:"status"`
	}
	b.ReportAllocs()
	b.ResetTimer()
	delivered := 0
	for range b.N {
		resp, err := client.Get(popURL)
		if err != nil {
			b.Fatal(err)
		}
		var pop popBody
		err = json.NewDecoder(resp.Body).Decode(&pop)
		resp.Body.Close()
		if err != nil || len(pop.Messages) == 0 {
			b.Fatalf("pop: %d %v", resp.StatusCode, err)
		}
		acks := make([]ackItem, len(pop.Messages))
		for i, m := range pop.Messages {
			acks[i] = ackItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: pop.LeaseID, Status: "completed"}
		}
		body, _ := json.Marshal(map[string]any{"acknowledgments": acks})
		resp, err = client.Post(broker.URL+"/api/v1/ack/batch", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("ack: %d", resp.StatusCode)
		}
		delivered += len(pop.Messages)
	}
	b.ReportMetric(float64(delivered)/float64(b.N), "deliveries/op")
}
