package api

import (
	"net/http"
	"net/url"
	"testing"
)

// Clients escape names in paths (the SDKs use encodeURIComponent and quote):
// every route must address the resource the decoded name names, and a pop
// must never create a queue named after the escaped text.
func TestEscapedNamesInPathsAddressTheNamedResource(t *testing.T) {
	b := newTestBroker(t)
	queue := "sp ace é/" + uniqueQueue(t)
	const partition, txn, group = "part one/ü", "order 1:a", "my group"
	esc := url.PathEscape

	var pushed []map[string]any
	if status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{
		{"queue": queue, "partition": partition, "transactionId": txn, "payload": map[string]any{"n": 1}},
	}}, &pushed); status != http.StatusCreated || pushed[0]["status"] != "queued" {
		t.Fatalf("push: %d %+v", status, pushed)
	}

	var q map[string]any
	if status, _ := b.call(t, "GET", "/api/v1/resources/queues/"+esc(queue), nil, &q); status != http.StatusOK || q["name"] != queue {
		t.Fatalf("queue by escaped name: %d %+v", status, q)
	}

	var popped struct {
		Messages []struct {
			TransactionID string `json:"transactionId"`
			PartitionID   string `json:"partitionId"`
		} `json:"messages"`
	}
	path := "/api/v1/pop/queue/" + esc(queue) + "/partition/" + esc(partition) + "?batch=1&consumerGroup=" + url.QueryEscape(group) + "&subscriptionMode=all"
	if status, _ := b.call(t, "GET", path, nil, &popped); status != http.StatusOK || len(popped.Messages) != 1 || popped.Messages[0].TransactionID != txn {
		t.Fatalf("pop by escaped names: %d %+v", status, popped)
	}

	var msg map[string]any
	if status, _ := b.call(t, "GET", "/api/v1/messages/"+popped.Messages[0].PartitionID+"/"+esc(txn), nil, &msg); status != http.StatusOK || msg["transactionId"] != txn {
		t.Fatalf("message by escaped transaction id: %d %+v", status, msg)
	}

	// The pop created no queue named after the escaped text.
	var missing errorBody
	if status, _ := b.call(t, "GET", "/api/v1/resources/queues/"+esc(esc(queue)), nil, &missing); status != http.StatusNotFound {
		t.Fatalf("queue named after the escaped text: %d %+v", status, missing)
	}

	var deleted map[string]any
	if status, _ := b.call(t, "DELETE", "/api/v1/consumer-groups/"+esc(group)+"/queues/"+esc(queue), nil, &deleted); status != http.StatusOK || deleted["deletedPartitions"] != float64(1) {
		t.Fatalf("delete group by escaped names: %d %+v", status, deleted)
	}
}

func TestHeadAnswersEveryGetRouteButThePops(t *testing.T) {
	b := newTestBroker(t)
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/health", http.StatusOK},
		{"/api/v1/resources/queues", http.StatusOK},
		{"/api/v1/pop/queue/" + uniqueQueue(t), http.StatusMethodNotAllowed},
	} {
		resp, err := http.Head(b.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("HEAD %s: %d, want %d", tc.path, resp.StatusCode, tc.status)
		}
	}
}
