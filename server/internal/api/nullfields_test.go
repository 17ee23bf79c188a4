package api

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// wantNull fails unless obj has each key, with the value null: the reference
// sends these keys as null rather than leaving them out.
func wantNull(t *testing.T, what string, obj map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if v, ok := obj[k]; !ok || v != nil {
			t.Fatalf("%s: %q should be present and null, got %v (present %v) in %+v", what, k, v, ok, obj)
		}
	}
}

// Inspection bodies carry their null fields as null (http-api-v1.md §1.10,
// §1.11, §1.14, §1.15), so that a client checking `=== null` or decoding
// strictly reads what it would read from the reference.
func TestInspectionBodiesSendNullFields(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	group := q + "-g"
	b.deadLetter(t, q, "dead", "d")
	b.push(t, q, "p", "m1")

	var list struct {
		Messages []map[string]any `json:"messages"`
	}
	b.call(t, "GET", "/api/v1/messages?queue="+url.QueryEscape(q), nil, &list)
	var pid string
	for _, m := range list.Messages {
		if m["transactionId"] == "m1" {
			wantNull(t, "message listing", m, "traceId", "producerSub", "leaseExpiresAt")
			pid, _ = m["partitionId"].(string)
		}
		for _, gone := range []string{"txnHash", "segment"} {
			if _, ok := m[gone]; ok {
				t.Fatalf("listing item carries %q: %+v", gone, m)
			}
		}
	}
	if pid == "" {
		t.Fatalf("m1 not listed: %+v", list)
	}
	var detail map[string]any
	if status, _ := b.call(t, "GET", "/api/v1/messages/"+pid+"/m1", nil, &detail); status != http.StatusOK {
		t.Fatalf("detail: %d %+v", status, detail)
	}
	wantNull(t, "message detail", detail, "traceId", "producerSub", "errorMessage", "leaseExpiresAt")
	// No group has popped partition p yet (the dead letter is on another one).
	if mode, _ := detail["mode"].(map[string]any); mode["type"] != "none" || mode["hasQueueMode"] != false || mode["busGroupsCount"] != float64(0) {
		t.Fatalf("message detail mode: %+v", detail["mode"])
	}

	var dlq struct {
		Messages []map[string]any `json:"messages"`
	}
	b.call(t, "GET", "/api/v1/dlq?queue="+url.QueryEscape(q), nil, &dlq)
	if len(dlq.Messages) != 1 {
		t.Fatalf("dlq: %+v", dlq)
	}
	wantNull(t, "dead letter", dlq.Messages[0], "producerSub")

	// A group that consumed and acked holds no lease: workerId is null.
	popped := b.pop(t, "/api/v1/pop/queue/"+url.PathEscape(q)+"/partition/p?consumerGroup="+group+"&subscriptionMode=all")
	b.ackAll(t, popped, group)
	var groupDetail map[string]struct {
		Partitions []map[string]any `json:"partitions"`
	}
	b.call(t, "GET", "/api/v1/consumer-groups/"+group, nil, &groupDetail)
	if len(groupDetail[q].Partitions) == 0 {
		t.Fatalf("group detail: %+v", groupDetail)
	}
	for _, part := range groupDetail[q].Partitions {
		wantNull(t, "group partition", part, "workerId")
	}

	b.call(t, "PUT", "/api/v1/kv/"+url.PathEscape(q)+"/k", map[string]any{"value": 1, "forever": true}, nil)
	var kv map[string]any
	b.call(t, "GET", "/api/v1/kv/"+url.PathEscape(q)+"/k", nil, &kv)
	if kv["found"] != true {
		t.Fatalf("kv get: %+v", kv)
	}
	wantNull(t, "kv get of a forever key", kv, "expiresAt")
	var batch struct {
		Results []map[string]any `json:"results"`
	}
	b.call(t, "POST", "/api/v1/kv", map[string]any{"operations": []map[string]any{{"op": "get", "ns": q, "key": "k"}}}, &batch)
	if len(batch.Results) != 1 {
		t.Fatalf("kv batch get: %+v", batch)
	}
	wantNull(t, "kv batch get of a forever key", batch.Results[0], "expiresAt")
	var rows struct {
		Results []struct {
			Rows []map[string]any `json:"rows"`
		} `json:"results"`
	}
	b.call(t, "POST", "/api/v1/kv", map[string]any{"operations": []map[string]any{
		{"op": "getMany", "ns": q, "keys": []string{"k"}}, {"op": "getPrefix", "ns": q, "prefix": "k"}}}, &rows)
	if len(rows.Results) != 2 || len(rows.Results[0].Rows) != 1 || len(rows.Results[1].Rows) != 1 {
		t.Fatalf("kv getMany/getPrefix: %+v", rows)
	}
	wantNull(t, "kv getMany row of a forever key", rows.Results[0].Rows[0], "expiresAt")
	wantNull(t, "kv getPrefix row of a forever key", rows.Results[1].Rows[0], "expiresAt")
	var listed struct {
		Rows []map[string]any `json:"rows"`
	}
	b.call(t, "POST", "/api/v1/resources/kv/list", map[string]any{"namespace": q}, &listed)
	if len(listed.Rows) != 1 {
		t.Fatalf("kv list: %+v", listed)
	}
	wantNull(t, "kv list row of a forever key", listed.Rows[0], "expiresAt")

	b.call(t, "POST", "/api/v1/timers", map[string]any{"operations": []map[string]any{
		{"op": "schedule", "queue": q, "timerKey": "later", "delayMs": 3600000, "txn": "t1", "payload": "MQ=="}}}, nil)
	var timer map[string]any
	b.call(t, "GET", "/api/v1/timers/"+url.PathEscape(q)+"/later", nil, &timer)
	if timer["found"] != true {
		t.Fatalf("timer get: %+v", timer)
	}
	wantNull(t, "timer", timer, "producerSub", "lastError")
	// A miss stays the reference's bare {"found":false}.
	resp, err := http.Get(b.URL + "/api/v1/timers/" + url.PathEscape(q) + "/never")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(raw)) != `{"found":false}` {
		t.Fatalf("timer miss: %d %s", resp.StatusCode, raw)
	}
}

// A seek to the end has no target instant, a group a seek created has no
// subscription, and a lagging cursor nobody leased has no worker: each is
// sent as null (http-api-v1.md §1.11).
func TestGroupAndSeekBodiesSendNullFields(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	group := q + "-sought"
	b.push(t, q, "p", "m1")

	var seek map[string]any
	if status, _ := b.call(t, "POST", seekPath(group, q), map[string]any{"toEnd": true}, &seek); status != http.StatusOK || seek["success"] != true {
		t.Fatalf("queue seek: %d %+v", status, seek)
	}
	wantNull(t, "queue seek to the end", seek, "targetTimestamp")
	seek = nil
	if status, _ := b.call(t, "POST", "/api/v1/consumer-groups/"+group+"/queues/"+q+"/partitions/p/seek", map[string]any{"toEnd": true}, &seek); status != http.StatusOK || seek["success"] != true {
		t.Fatalf("partition seek: %d %+v", status, seek)
	}
	wantNull(t, "partition seek to the end", seek, "targetTimestamp")

	var groups []map[string]any
	b.call(t, "GET", "/api/v1/consumer-groups", nil, &groups)
	var summary map[string]any
	for _, g := range groups {
		if g["name"] == group && g["queueName"] == q {
			summary = g
		}
	}
	if summary == nil {
		t.Fatalf("group %s not listed: %+v", group, groups)
	}
	wantNull(t, "group created by a seek", summary, "subscriptionMode", "subscriptionTimestamp", "subscriptionCreatedAt")

	b.push(t, q, "p", "m2") // one message behind the sought cursor
	var lagging []map[string]any
	b.call(t, "GET", "/api/v1/consumer-groups/lagging?minLagSeconds=0", nil, &lagging)
	var row map[string]any
	for _, l := range lagging {
		if l["consumer_group"] == group {
			row = l
		}
	}
	if row == nil {
		t.Fatalf("group %s not lagging: %+v", group, lagging)
	}
	wantNull(t, "lagging cursor nobody leased", row, "worker_id", "last_consumed_at")
}
