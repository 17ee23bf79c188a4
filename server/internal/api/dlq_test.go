package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
)

type dlqList struct {
	Messages []struct {
		ID            string `json:"id"`
		TransactionID string `json:"transactionId"`
		PartitionID   string `json:"partitionId"`
		Partition     string `json:"partition"`
		ConsumerGroup string `json:"consumerGroup"`
		ErrorMessage  string `json:"errorMessage"`
		Data          any    `json:"data"`
	} `json:"messages"`
	Total int `json:"total"`
}

type replayBody struct {
	Success    bool   `json:"success"`
	Result     string `json:"result"`
	Code       string `json:"code"`
	DlqID      string `json:"dlqId"`
	ReplayedAs struct {
		TransactionID string `json:"transaction_id"`
		Status        string `json:"status"`
	} `json:"replayedAs"`
}

// deadLetter pushes one message to (q, partition), pops it and acks it "dlq".
func (b *testBroker) deadLetter(t *testing.T, q, partition, txn string) popBody {
	t.Helper()
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{
		{"queue": q, "partition": partition, "transactionId": txn, "payload": map[string]any{"txn": txn}}}}, nil)
	var popped popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+q+"/partition/"+partition, nil, &popped)
	if len(popped.Messages) != 1 {
		t.Fatalf("pop %s: %+v", partition, popped)
	}
	var acked []map[string]any
	b.call(t, "POST", "/api/v1/ack", map[string]any{"transactionId": txn, "partitionId": popped.Messages[0].PartitionID,
		"leaseId": popped.LeaseID, "status": "dlq", "error": "poison " + txn}, &acked)
	if len(acked) != 1 || acked[0]["dlq"] != true {
		t.Fatalf("ack dlq: %+v", acked)
	}
	return popped
}

func TestDeadLetterListingReplayAndPurge(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	for i := 0; i < 3; i++ {
		b.deadLetter(t, q, fmt.Sprintf("p%d", i), fmt.Sprintf("m%d", i))
	}
	var all dlqList
	if status, _ := b.call(t, "GET", "/api/v1/dlq?queue="+url.QueryEscape(q), nil, &all); status != 200 || all.Total != 3 {
		t.Fatalf("list: %d %+v", status, all)
	}
	if all.Messages[0].TransactionID != "m2" || all.Messages[2].TransactionID != "m0" || all.Messages[0].ErrorMessage != "poison m2" {
		t.Fatalf("newest failure first, with its reason: %+v", all.Messages)
	}
	var page dlqList
	b.call(t, "GET", "/api/v1/dlq?limit=2&offset=2&queue="+url.QueryEscape(q), nil, &page)
	if page.Total != 1 || page.Messages[0].TransactionID != "m0" {
		t.Fatalf("page 2: %+v", page)
	}
	b.call(t, "GET", "/api/v1/dlq?partition=p1&queue="+url.QueryEscape(q), nil, &page)
	if page.Total != 1 || page.Messages[0].TransactionID != "m1" {
		t.Fatalf("partition filter: %+v", page)
	}
	b.call(t, "GET", "/api/v1/dlq?consumerGroup=nobody&queue="+url.QueryEscape(q), nil, &page)
	if page.Total != 0 {
		t.Fatalf("group filter: %+v", page)
	}
	rows := map[string]string{} // transaction id -> dlq row id
	pids := map[string]string{}
	for _, m := range all.Messages {
		rows[m.TransactionID], pids[m.TransactionID] = m.ID, m.PartitionID
	}

	// Two replays of one row race: exactly one moves it.
	var wg sync.WaitGroup
	results := make([]replayBody, 4)
	statuses := make([]int, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i], _ = b.call(t, "POST", "/api/v1/dlq/"+rows["m0"]+"/replay", nil, &results[i])
		}()
	}
	wg.Wait()
	moved := 0
	for i, r := range results {
		switch {
		case statuses[i] == 200 && r.Result == "moved":
			moved++
			if r.ReplayedAs.TransactionID != "dlq:"+rows["m0"] || r.ReplayedAs.Status != "queued" {
				t.Fatalf("replayed as %+v", r.ReplayedAs)
			}
		case statuses[i] == 404 && r.Result == "gone" && r.Code == "gone":
		case statuses[i] == 200 && r.Result == "duplicate":
		default:
			t.Fatalf("replay answered %d %+v", statuses[i], r)
		}
	}
	if moved != 1 {
		t.Fatalf("%d replays moved the row, want exactly 1", moved)
	}
	var again popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+q+"/partition/p0?batch=10", nil, &again)
	if len(again.Messages) != 1 || again.Messages[0].TransactionID != "dlq:"+rows["m0"] {
		t.Fatalf("the replayed message lands once at the tail: %+v", again.Messages)
	}

	// A re-push the dedup window rejects keeps the row.
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{
		{"queue": q, "partition": "p1", "transactionId": "dlq:" + rows["m1"], "payload": 1}}}, nil)
	var dup replayBody
	if status, _ := b.call(t, "POST", "/api/v1/dlq/"+rows["m1"]+"/replay", nil, &dup); status != 200 || dup.Result != "duplicate" || dup.Success {
		t.Fatalf("duplicate replay: %d %+v", status, dup)
	}
	b.call(t, "GET", "/api/v1/dlq?partition=p1&queue="+url.QueryEscape(q), nil, &page)
	if page.Total != 1 {
		t.Fatalf("a duplicate replay must keep the row")
	}

	// Retry by message address.
	var retried replayBody
	if status, _ := b.call(t, "POST", "/api/v1/messages/"+pids["m2"]+"/m2/retry", nil, &retried); status != 200 || retried.Result != "moved" {
		t.Fatalf("retry: %d %+v", status, retried)
	}
	var gone replayBody
	if status, _ := b.call(t, "POST", "/api/v1/messages/"+pids["m2"]+"/m2/retry", nil, &gone); status != 404 || gone.Result != "gone" {
		t.Fatalf("retry of a moved row: %d %+v", status, gone)
	}

	for _, c := range []struct{ path, code string }{
		{"/api/v1/dlq?queue=", "queue_required"},
		{"/api/v1/dlq", "queue_required"}, // absent or empty: one condition, one code
		{"/api/v1/dlq?consumerGroup=g", "queue_required"},
	} {
		var e errorBody
		if status, _ := b.call(t, "DELETE", c.path, nil, &e); status != 400 || e.Code != c.code || e.Error != "queue is required" {
			t.Fatalf("DELETE %s: %d %+v", c.path, status, e)
		}
	}
	var bad errorBody
	if status, _ := b.call(t, "POST", "/api/v1/dlq/not-a-uuid/replay", nil, &bad); status != 400 || bad.Code != "invalid_id" {
		t.Fatalf("bad id: %d %+v", status, bad)
	}
	var blank errorBody
	if status, _ := b.call(t, "POST", "/api/v1/dlq/"+rows["m1"]+"/replay", map[string]any{"queue": " "}, &blank); status != 400 || blank.Code == "" {
		t.Fatalf("blank destination: %d %+v", status, blank)
	}
	var purged map[string]any
	if status, _ := b.call(t, "DELETE", "/api/v1/dlq?queue="+url.QueryEscape(q)+"&consumerGroup=nobody", nil, &purged); status != http.StatusOK ||
		purged["deleted"] != float64(0) || purged["consumerGroup"] != "nobody" {
		t.Fatalf("purge of another group: %d %+v", status, purged)
	}
	purged = nil
	if status, _ := b.call(t, "DELETE", "/api/v1/dlq?queue="+url.QueryEscape(q), nil, &purged); status != http.StatusOK || purged["deleted"] != float64(1) {
		t.Fatalf("purge: %d %+v", status, purged)
	}
	// The reference body is {success, deleted, queue, consumerGroup}: null when no group was given.
	if group, present := purged["consumerGroup"]; !present || group != nil || purged["queue"] != q || purged["success"] != true {
		t.Fatalf("purge body: %+v", purged)
	}
}

func TestReplayToAnotherQueueCreatesIt(t *testing.T) {
	b := newTestBroker(t)
	q, target := uniqueQueue(t), uniqueQueue(t)
	b.deadLetter(t, q, "p", "m")
	var list dlqList
	b.call(t, "GET", "/api/v1/dlq?queue="+url.QueryEscape(q), nil, &list)
	var res replayBody
	if status, _ := b.call(t, "POST", "/api/v1/dlq/"+list.Messages[0].ID+"/replay", map[string]any{"queue": target}, &res); status != 200 || res.Result != "moved" {
		t.Fatalf("replay to %s: %d %+v", target, status, res)
	}
	var popped popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+target, nil, &popped)
	if len(popped.Messages) != 1 || fmt.Sprint(popped.Messages[0].Data) != "map[txn:m]" {
		t.Fatalf("replayed payload: %+v", popped.Messages)
	}
}

// Push maintenance holds every write off the database, and a replay writes a
// message and deletes a dead letter: both replay routes answer 503 and change nothing.
func TestReplayAndRetryRefusedUnderPushMaintenance(t *testing.T) {
	b := newTestBroker(t)
	t.Cleanup(func() { b.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}, nil) })
	q := uniqueQueue(t)
	popped := b.deadLetter(t, q, "p", "m")
	pid := popped.Messages[0].PartitionID
	var before dlqList
	b.call(t, "GET", "/api/v1/dlq?queue="+url.QueryEscape(q), nil, &before)
	if before.Total != 1 {
		t.Fatalf("fixture: %+v", before)
	}
	rowID := before.Messages[0].ID

	if status, _ := b.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": true}, nil); status != 200 {
		t.Fatalf("enable push maintenance: %d", status)
	}
	for _, path := range []string{"/api/v1/dlq/" + rowID + "/replay", "/api/v1/messages/" + pid + "/m/retry"} {
		var res replayBody
		if status, _ := b.call(t, "POST", path, nil, &res); status != http.StatusServiceUnavailable ||
			res.Result != "maintenance" || res.Code != "maintenance" || res.Success {
			t.Fatalf("POST %s under push maintenance: %d %+v", path, status, res)
		}
	}
	var during dlqList
	b.call(t, "GET", "/api/v1/dlq?queue="+url.QueryEscape(q), nil, &during)
	if during.Total != 1 || during.Messages[0].ID != rowID {
		t.Fatalf("the dead letter must stay: %+v", during)
	}
	var queued popBody
	if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=10", nil, &queued); status != http.StatusNoContent {
		t.Fatalf("nothing may be pushed: %d %+v", status, queued.Messages)
	}

	b.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}, nil)
	var res replayBody
	if status, _ := b.call(t, "POST", "/api/v1/messages/"+pid+"/m/retry", nil, &res); status != 200 || res.Result != "moved" {
		t.Fatalf("retry after maintenance: %d %+v", status, res)
	}
}

// JSON may escape a NUL character, which jsonb refuses: such a payload must be
// dead-lettered, listed and replayed unchanged, not refused on every ack.
func TestAPayloadHoldingANULEscapeIsDeadLetteredAndReplayed(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	payload := `{"s":"a\u0000b"}`
	if status, _ := b.call(t, "POST", "/api/v1/push", `{"items":[{"queue":"`+q+`","transactionId":"nul","payload":`+payload+`}]}`, nil); status != http.StatusCreated {
		t.Fatalf("push: %d", status)
	}
	var popped popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+q, nil, &popped)
	if len(popped.Messages) != 1 {
		t.Fatalf("pop: %+v", popped)
	}
	var acked []map[string]any
	if status, _ := b.call(t, "POST", "/api/v1/ack", map[string]any{"transactionId": "nul", "partitionId": popped.Messages[0].PartitionID,
		"leaseId": popped.LeaseID, "status": "dlq", "error": "poison"}, &acked); status != http.StatusOK || len(acked) != 1 || acked[0]["dlq"] != true {
		t.Fatalf("ack dlq: %d %+v", status, acked)
	}
	var listed dlqList
	b.call(t, "GET", "/api/v1/dlq?queue="+url.QueryEscape(q), nil, &listed)
	if listed.Total != 1 || listed.Messages[0].Data.(map[string]any)["s"] != "a\x00b" {
		t.Fatalf("listed: %+v", listed)
	}
	var replayed replayBody
	if status, _ := b.call(t, "POST", "/api/v1/dlq/"+listed.Messages[0].ID+"/replay", nil, &replayed); status != http.StatusOK || !replayed.Success {
		t.Fatalf("replay: %d %+v", status, replayed)
	}
	var again popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+q, nil, &again)
	if len(again.Messages) != 1 || again.Messages[0].Data.(map[string]any)["s"] != "a\x00b" {
		t.Fatalf("replayed message: %+v", again)
	}
}

// A replay or retry that fails on the database answers 500 with the replay
// outcome fields its schema (DlqReplayError) requires, success:false and
// result "failed", beside code and error: a generated client parses it instead
// of failing on a missing field.
func TestReplayAndRetryDatabaseFailureMatchesTheSpec(t *testing.T) {
	// Nothing listens on port 1: every database call fails to connect.
	b := newBrokerWith(t, "postgres://lanes@127.0.0.1:1/lanes?sslmode=disable&connect_timeout=1", Options{}, "")
	for _, path := range []string{
		"/api/v1/dlq/0190a0a0-0000-7000-8000-000000000000/replay",
		"/api/v1/messages/0190a0a0-0000-7000-8000-000000000000/txn-1/retry",
	} {
		status, raw := b.specAnswer(t, "POST", path, "")
		var res replayBody
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatalf("POST %s: %s: %v", path, raw, err)
		}
		if status != http.StatusInternalServerError || res.Code != CodeDatabase || res.Success || res.Result != "failed" ||
			!strings.Contains(string(raw), `"success":false`) {
			t.Fatalf("POST %s with the database down: %d %s, want 500 database_unavailable with success:false, result failed", path, status, raw)
		}
	}
}

// A query pair that does not parse would be dropped by r.URL.Query(), and its filter with it:
// the purge of one group's dead letters must not become a purge of every group's.
func TestMalformedQueryIs400AndChangesNothing(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.push(t, q, "p", "poison")
	for _, group := range []string{"g", "other"} {
		popped := b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup="+group+"&subscriptionMode=all")
		var acked []map[string]any
		b.call(t, "POST", "/api/v1/ack", map[string]any{"transactionId": "poison", "partitionId": popped.Messages[0].PartitionID,
			"leaseId": popped.LeaseID, "consumerGroup": group, "status": "dlq"}, &acked)
		if len(acked) != 1 || acked[0]["dlq"] != true {
			t.Fatalf("ack dlq in %s: %+v", group, acked)
		}
	}
	for _, c := range []struct{ method, path string }{
		{"DELETE", "/api/v1/dlq?queue=" + q + "&consumerGroup=g%zz"},
		{"DELETE", "/api/v1/dlq?queue=" + q + "&consumerGroup=g;x"},
		{"GET", "/api/v1/messages?queue=%zz"},
		{"GET", "/api/v1/dlq?queue=" + q + "&consumerGroup=%"},
	} {
		var e errorBody
		if status, _ := b.call(t, c.method, c.path, nil, &e); status != http.StatusBadRequest || e.Code != CodeBadRequest ||
			!strings.Contains(e.Error, "query string cannot be parsed") {
			t.Errorf("%s %s: %d %+v", c.method, c.path, status, e)
		}
	}
	var list dlqList
	if status, _ := b.call(t, "GET", "/api/v1/dlq?queue="+q, nil, &list); status != http.StatusOK || list.Total != 2 {
		t.Fatalf("dead letters after the refused purges: %d %+v", status, list)
	}
}

// A dead letter keeps its payload's bytes: listed and replayed, it is the
// JSON the producer pushed, as a pop answers it. jsonb would sort keys, drop
// duplicates, rewrite numbers (1e400 as 401 digits, -0 as 0) and unescape
// strings, and it refuses a lone surrogate or a number beyond numeric's range
// outright: that ack answered 500 and the poison message could never be filed.
func TestADeadLetterKeepsItsPayloadBytes(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	payloads := []string{`{"b":1,"a":2,"a":3}`, `1e400`, `-0`, `1E5`, `"\u00e9"`, `"a\/b"`, `"\ud800"`, `1e-20000`, `[1.50,{"z":null}]`}
	type rawMessages struct {
		LeaseID  string `json:"leaseId"`
		Messages []struct {
			ID            string          `json:"id"`
			TransactionID string          `json:"transactionId"`
			PartitionID   string          `json:"partitionId"`
			Data          json.RawMessage `json:"data"`
		} `json:"messages"`
	}
	for i, payload := range payloads {
		partition := fmt.Sprintf("p%d", i)
		if status, _ := b.call(t, "POST", "/api/v1/push", `{"items":[{"queue":"`+q+`","partition":"`+partition+`","payload":`+payload+`}]}`, nil); status != http.StatusCreated {
			t.Fatalf("push %s: %d", payload, status)
		}
		var popped rawMessages
		b.call(t, "GET", "/api/v1/pop/queue/"+q+"/partition/"+partition, nil, &popped)
		if len(popped.Messages) != 1 || string(popped.Messages[0].Data) != payload {
			t.Fatalf("pop %s: %+v", payload, popped)
		}
		m := popped.Messages[0]
		var acked []map[string]any
		if status, _ := b.call(t, "POST", "/api/v1/ack", map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID,
			"leaseId": popped.LeaseID, "status": "dlq"}, &acked); status != http.StatusOK || len(acked) != 1 || acked[0]["dlq"] != true {
			t.Fatalf("ack dlq of %s: %d %+v", payload, status, acked)
		}
		var listed rawMessages
		b.call(t, "GET", "/api/v1/dlq?queue="+url.QueryEscape(q)+"&partition="+partition, nil, &listed)
		if len(listed.Messages) != 1 || string(listed.Messages[0].Data) != payload {
			t.Fatalf("dead letter of %s listed as %+v", payload, listed)
		}
		var replayed replayBody
		if status, _ := b.call(t, "POST", "/api/v1/dlq/"+listed.Messages[0].ID+"/replay", nil, &replayed); status != http.StatusOK || !replayed.Success {
			t.Fatalf("replay %s: %d %+v", payload, status, replayed)
		}
		var again rawMessages
		b.call(t, "GET", "/api/v1/pop/queue/"+q+"/partition/"+partition, nil, &again)
		if len(again.Messages) != 1 || string(again.Messages[0].Data) != payload {
			t.Fatalf("replay of %s popped as %+v", payload, again)
		}
	}
}
