package api

import (
	"encoding/json"
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

// A 405 must say which methods the path serves (RFC 9110 §15.5.6): clients
// and proxies read Allow, and schemathesis's unsupported_method check fails
// every path without it.
func TestMethodNotAllowedListsTheServedMethods(t *testing.T) {
	b := newTestBroker(t)
	queue := uniqueQueue(t)
	for _, tc := range []struct {
		method, path, allow string
	}{
		{"TRACE", "/api/v1/ack", "POST"},
		{"GET", "/api/v1/push", "POST"},
		{"PATCH", "/api/v1/resources/queues/" + queue, "GET, HEAD, DELETE"},
		{"POST", "/health", "GET, HEAD"},
		{"PUT", "/api/v1/system/maintenance", "GET, HEAD, POST"},
		{"DELETE", "/api/v1/kv", "POST"},
		// The spec's concrete path wins over /consumer-groups/{group}.
		{"DELETE", "/api/v1/consumer-groups/lagging", "GET, HEAD"},
		{"TRACE", "/api/v1/kv/ns/some%2Fkey", "GET, HEAD, PUT, DELETE"},
		// A pop claims messages, so HEAD is not served as GET there.
		{"HEAD", "/api/v1/pop/queue/" + queue, "GET"},
		{"POST", "/api/v1/pop/queue/" + queue + "/partition/p", "GET"},
	} {
		req, err := http.NewRequest(tc.method, b.URL+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body errorBody
		if tc.method != http.MethodHead {
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Errorf("%s %s: body: %v", tc.method, tc.path, err)
			}
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d Allow %q, want 405 Allow %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), tc.allow)
		}
		if tc.method != http.MethodHead && body.Code != CodeMethod {
			t.Errorf("%s %s: code %q, want %q", tc.method, tc.path, body.Code, CodeMethod)
		}
	}
}
