package api

import (
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

// wantNonNull fails unless obj has each key with a value other than null.
func wantNonNull(t *testing.T, what string, obj map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if v, ok := obj[k]; !ok || v == nil {
			t.Fatalf("%s: %q should be present and not null, got %v (present %v) in %+v", what, k, v, ok, obj)
		}
	}
}

// Inspection bodies carry their null fields as null (http-api-v1.md §1.10,
// §1.11, §1.12, §1.14, §1.15), so that a client checking `=== null` or decoding
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
	// The same group, seen from the message: consumed, holding no lease.
	detail = nil
	b.call(t, "GET", "/api/v1/messages/"+pid+"/m1", nil, &detail)
	consumers, _ := detail["consumerGroups"].([]any)
	if len(consumers) != 1 {
		t.Fatalf("message detail consumer groups: %+v", detail["consumerGroups"])
	}
	consumer, _ := consumers[0].(map[string]any)
	if consumer["name"] != group || consumer["consumed"] != true {
		t.Fatalf("message detail consumer group: %+v", consumer)
	}
	wantNull(t, "message detail consumer group without a lease", consumer, "leaseExpiresAt")

	var status struct {
		Partitions []map[string]any `json:"partitions"`
	}
	b.call(t, "GET", "/api/v1/status/queues/"+url.PathEscape(q)+"?includePartitions=true", nil, &status)
	if len(status.Partitions) != 2 {
		t.Fatalf("queue status partitions: %+v", status)
	}
	for _, part := range status.Partitions {
		wantNull(t, "queue status partition", part, "failed")
		wantNonNull(t, "queue status partition holding a message", part, "lastActivity", "oldestMessage", "newestMessage")
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
	wantNonNull(t, "kv getMany row", rows.Results[0].Rows[0], "updatedAt")
	wantNonNull(t, "kv getPrefix row", rows.Results[1].Rows[0], "updatedAt")
	var listed map[string]any
	b.call(t, "POST", "/api/v1/resources/kv/list", map[string]any{"namespace": q}, &listed)
	listedRows, _ := listed["rows"].([]any)
	if len(listedRows) != 1 {
		t.Fatalf("kv list: %+v", listed)
	}
	listedRow, _ := listedRows[0].(map[string]any)
	wantNull(t, "kv list row of a forever key", listedRow, "expiresAt")
	wantNonNull(t, "kv list row", listedRow, "updatedAt")
	wantNull(t, "kv list page that is not truncated", listed, "nextAfter")

	var scheduled struct {
		Results []map[string]any `json:"results"`
	}
	b.call(t, "POST", "/api/v1/timers", map[string]any{"operations": []map[string]any{
		{"op": "schedule", "queue": q, "timerKey": "later", "delayMs": 3600000, "txn": "t1", "payload": "MQ=="},
		{"op": "cancel", "queue": q, "timerKey": "never"}}}, &scheduled)
	if len(scheduled.Results) != 2 || scheduled.Results[0]["status"] != "scheduled" || scheduled.Results[1]["status"] != "absent" {
		t.Fatalf("timer schedule and cancel: %+v", scheduled)
	}
	wantNonNull(t, "scheduled timer result", scheduled.Results[0], "txn", "messageId", "deliverAt")
	wantNull(t, "cancel of no timer", scheduled.Results[1], "txn", "messageId", "deliverAt")
	var cancelAnswer map[string]any
	b.call(t, "DELETE", "/api/v1/timers/"+url.PathEscape(q)+"/never", nil, &cancelAnswer)
	if cancelAnswer["status"] != "absent" {
		t.Fatalf("timer cancel route: %+v", cancelAnswer)
	}
	wantNull(t, "cancel route of no timer", cancelAnswer, "txn", "messageId", "deliverAt")
	var timers map[string]any
	b.call(t, "GET", "/api/v1/timers/"+url.PathEscape(q), nil, &timers)
	if rows, _ := timers["rows"].([]any); len(rows) != 1 || timers["truncated"] != false {
		t.Fatalf("timer list: %+v", timers)
	}
	wantNull(t, "timer page that is not truncated", timers, "nextAfter")
	// The count answer stays the reference's bare {"count":N}.
	if raw := b.rawGet(t, "/api/v1/timers/"+url.PathEscape(q)+"?mode=count"); raw != `{"count":1}` {
		t.Fatalf("timer count: %s", raw)
	}
	var timer map[string]any
	b.call(t, "GET", "/api/v1/timers/"+url.PathEscape(q)+"/later", nil, &timer)
	if timer["found"] != true {
		t.Fatalf("timer get: %+v", timer)
	}
	wantNull(t, "timer", timer, "producerSub", "lastError")
	// A miss stays the reference's bare {"found":false}.
	if raw := b.rawGet(t, "/api/v1/timers/"+url.PathEscape(q)+"/never"); raw != `{"found":false}` {
		t.Fatalf("timer miss: %s", raw)
	}
}

// rawGet answers the trimmed body of a GET that must answer 200.
func (b *testBroker) rawGet(t *testing.T, path string) string {
	t.Helper()
	raw, _ := b.getOK(t, path)
	return strings.TrimSpace(string(raw))
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
