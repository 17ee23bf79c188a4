package api

import (
	"cmp"
	"context"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/engine"
)

type messageList struct {
	Messages []struct {
		TransactionID  string  `json:"transactionId"`
		PartitionID    string  `json:"partitionId"`
		Status         string  `json:"status"`
		LeaseExpiresAt *string `json:"leaseExpiresAt"`
		Data           any     `json:"data"`
	} `json:"messages"`
	Mode struct {
		Type string `json:"type"`
	} `json:"mode"`
	Total int `json:"total"`
}

func (l messageList) ids() []string {
	out := []string{}
	for _, m := range l.Messages {
		out = append(out, m.TransactionID)
	}
	return out
}

// statusFixture leaves m0 completed, m1 processing, m2 and m3 pending and d dead-lettered.
func statusFixture(t *testing.T, b *testBroker, q string) (partitionID string) {
	t.Helper()
	b.deadLetter(t, q, "p", "d")
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{
		{"queue": q, "partition": "p", "transactionId": "m0", "payload": 0},
		{"queue": q, "partition": "p", "transactionId": "m1", "payload": 1},
		{"queue": q, "partition": "p", "transactionId": "m2", "payload": 2},
		{"queue": q, "partition": "p", "transactionId": "m3", "payload": 3},
	}}, nil)
	var first popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=1", nil, &first)
	b.call(t, "POST", "/api/v1/ack", map[string]any{"transactionId": "m0", "partitionId": first.Messages[0].PartitionID, "leaseId": first.LeaseID}, nil)
	var second popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=1&leaseSeconds=300", nil, &second)
	if second.Messages[0].TransactionID != "m1" {
		t.Fatalf("fixture: second pop got %+v", second.Messages)
	}
	return second.Messages[0].PartitionID
}

func TestMessageListingDerivesStatusAndPaginates(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	pid := statusFixture(t, b, q)
	base := "/api/v1/messages?queue=" + url.QueryEscape(q)
	var all messageList
	if status, _ := b.call(t, "GET", base, nil, &all); status != 200 {
		t.Fatalf("list: %d", status)
	}
	if got := all.ids(); !reflect.DeepEqual(got, []string{"m3", "m2", "m1", "m0", "d"}) {
		t.Fatalf("newest first: %v", got)
	}
	want := map[string]string{"m3": "pending", "m2": "pending", "m1": "processing", "m0": "completed", "d": "dead_letter"}
	for _, m := range all.Messages {
		if m.Status != want[m.TransactionID] {
			t.Fatalf("%s status %s, want %s", m.TransactionID, m.Status, want[m.TransactionID])
		}
		if (m.Status == "processing") != (m.LeaseExpiresAt != nil) {
			t.Fatalf("%s leaseExpiresAt %v", m.TransactionID, m.LeaseExpiresAt)
		}
	}
	if all.Mode.Type != "queue" {
		t.Fatalf("mode %+v", all.Mode)
	}
	for status, ids := range map[string][]string{
		"pending": {"m3", "m2"}, "processing": {"m1"}, "completed": {"m0"}, "dead_letter": {"d"},
	} {
		var l messageList
		b.call(t, "GET", base+"&status="+status, nil, &l)
		if got := l.ids(); !reflect.DeepEqual(got, ids) {
			t.Fatalf("status=%s: %v, want %v", status, got, ids)
		}
	}
	var page messageList
	b.call(t, "GET", base+"&limit=2&offset=1", nil, &page)
	if got := page.ids(); !reflect.DeepEqual(got, []string{"m2", "m1"}) || page.Total != 2 {
		t.Fatalf("page: %v", got)
	}
	var other messageList
	b.call(t, "GET", base+"&partition=elsewhere", nil, &other)
	if other.Total != 0 {
		t.Fatalf("partition filter: %v", other.ids())
	}
	var e errorBody
	if status, _ := b.call(t, "GET", base+"&status=lost", nil, &e); status != 400 || e.Code == "" {
		t.Fatalf("bad status filter: %d %+v", status, e)
	}

	var detail struct {
		Status         string `json:"status"`
		Data           any    `json:"data"`
		ConsumerGroups []struct {
			Name     string `json:"name"`
			Consumed bool   `json:"consumed"`
		} `json:"consumerGroups"`
		QueueConfig struct {
			RetryLimit int `json:"retryLimit"`
		} `json:"queueConfig"`
	}
	if status, _ := b.call(t, "GET", "/api/v1/messages/"+pid+"/m1", nil, &detail); status != 200 || detail.Status != "processing" || detail.Data != float64(1) {
		t.Fatalf("detail: %d %+v", status, detail)
	}
	if len(detail.ConsumerGroups) != 1 || detail.ConsumerGroups[0].Consumed || detail.QueueConfig.RetryLimit != 3 {
		t.Fatalf("detail groups: %+v", detail)
	}
	b.call(t, "GET", "/api/v1/messages/"+pid+"/m0", nil, &detail)
	if detail.Status != "completed" || !detail.ConsumerGroups[0].Consumed {
		t.Fatalf("m0 detail: %+v", detail)
	}
	for _, c := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/api/v1/messages/" + pid + "/never-pushed", 404, "message_not_found"},
		{"GET", "/api/v1/messages/not-a-uuid/m0", 400, "invalid_id"},
		{"DELETE", "/api/v1/messages/not-a-uuid/m0", 400, "invalid_id"},
		{"POST", "/api/v1/messages/not-a-uuid/m0/retry", 400, "invalid_id"},
		{"POST", "/api/v1/dlq/not-a-uuid/replay", 400, "invalid_id"},
		{"DELETE", "/api/v1/messages/" + pid + "/m0", 404, "message_not_found"},
		{"POST", "/api/v1/messages/" + pid + "/m0/retry", 404, "gone"},
	} {
		var e errorBody
		if status, _ := b.call(t, c.method, c.path, nil, &e); status != c.status || e.Code != c.code {
			t.Fatalf("%s %s: %d %+v", c.method, c.path, status, e)
		}
	}
	var deleted map[string]any
	if status, _ := b.call(t, "DELETE", "/api/v1/messages/"+pid+"/d", nil, &deleted); status != 200 || deleted["deleted"] != float64(1) {
		t.Fatalf("delete dead letter: %d %+v", status, deleted)
	}
	var after messageList
	b.call(t, "GET", base+"&status=dead_letter", nil, &after)
	if after.Total != 0 {
		t.Fatalf("deleted dead letter still listed: %v", after.ids())
	}
}

// On a hybrid queue a bus group's dead letter can sit past the queue-mode
// cursor; each status filter must list what the unfiltered listing says.
func TestMessageStatusFilterAgreesWithListingOnHybridQueues(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	hybridFixture(t, b, q)
	base := "/api/v1/messages?queue=" + url.QueryEscape(q)
	var all messageList
	b.call(t, "GET", base, nil, &all)
	if all.Mode.Type != "hybrid" {
		t.Fatalf("mode %+v", all.Mode)
	}
	byStatus := map[string][]string{"pending": {}, "processing": {}, "completed": {}, "dead_letter": {}}
	for _, m := range all.Messages {
		byStatus[m.Status] = append(byStatus[m.Status], m.TransactionID)
	}
	if !reflect.DeepEqual(byStatus["dead_letter"], []string{"d0"}) {
		t.Fatalf("fixture statuses: %v", byStatus)
	}
	for status, ids := range byStatus {
		var l messageList
		b.call(t, "GET", base+"&status="+status, nil, &l)
		if got := l.ids(); !reflect.DeepEqual(got, ids) {
			t.Fatalf("status=%s lists %v; the unfiltered listing says %v", status, got, ids)
		}
	}
}

// The listing window follows the reference (http-api-v1.md §1.10): from
// defaults to now − 1 h whatever to says, and to is truncated to the minute
// and extended by one, exclusive.
func TestMessageListingTimeWindow(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.push(t, q, "p", "w1", "w2", "w3")
	minute := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	created := minute.Add(39 * time.Second)
	if _, err := b.Pool.Exec(context.Background(), `UPDATE lanes.segments SET created_at = $1
		WHERE partition_id IN (SELECT p.id FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $2)`,
		created, q); err != nil {
		t.Fatal(err)
	}
	base := "/api/v1/messages?queue=" + url.QueryEscape(q)
	at := func(t time.Time) string { return url.QueryEscape(t.Format(time.RFC3339)) }
	for _, c := range []struct {
		query string
		want  int
	}{
		{"", 3},
		{"&to=" + at(minute.Add(30*time.Second)), 3}, // created after to, within to's minute
		{"&to=" + at(minute), 3},
		{"&to=" + at(minute.Add(-time.Second)), 0}, // the window ends at the minute before
		{"&to=2030-01-01T00:00:00Z", 3},            // from stays now − 1 h
		{"&from=" + at(created), 3},
		{"&from=" + at(created.Add(time.Second)), 0},
		{"&from=" + at(minute.Add(40*time.Second)) + "&to=" + at(minute.Add(30*time.Second)), 0},
	} {
		var l messageList
		if status, _ := b.call(t, "GET", base+c.query, nil, &l); status != 200 || l.Total != c.want {
			t.Fatalf("%q: %d total %d, want %d", c.query, status, l.Total, c.want)
		}
	}
	var e errorBody
	if status, _ := b.call(t, "GET", base+"&from="+at(minute.Add(time.Minute))+"&to="+at(minute.Add(30*time.Second)), nil, &e); status != 400 {
		t.Fatalf("from at the end of the window: %d %+v", status, e)
	}
}

// A status-filtered page read only Offset+Limit segments per partition before
// it dropped the frames whose status did not match, so dead letters in the
// newest segments emptied or shortened the page while older matches existed,
// and a pager stepping offset by limit missed them.
func TestStatusFilteredPagesHoldLimitMatchesPastDeadLetters(t *testing.T) {
	b := newTestBroker(t)
	// Acks the next message of the group ("": queue mode) on partition p with status.
	popAndAck := func(q, group, status, want string) {
		t.Helper()
		path := "/api/v1/pop/queue/" + q + "/partition/p?batch=1"
		if group != "" {
			path += "&consumerGroup=" + group + "&subscriptionMode=all"
		}
		p := b.pop(t, path)
		m := p.Messages[0]
		var out []map[string]any
		if st, _ := b.call(t, "POST", "/api/v1/ack", map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID,
			"leaseId": p.LeaseID, "status": status, "consumerGroup": cmp.Or(group, engine.QueueModeGroup)}, &out); m.TransactionID != want || st != 200 || len(out) != 1 || out[0]["success"] != true {
			t.Fatalf("ack %s %s: %d %+v", m.TransactionID, status, st, out)
		}
	}
	pushFour := func(q string) {
		for _, id := range []string{"m1", "m2", "m3", "m4"} {
			b.push(t, q, "p", id) // one segment each
		}
	}
	// Queue mode: m1 and m2 completed, m3 and m4 dead letters above them.
	completed := uniqueQueue(t)
	pushFour(completed)
	for _, a := range [][2]string{{"m1", "completed"}, {"m2", "completed"}, {"m3", "dlq"}, {"m4", "dlq"}} {
		popAndAck(completed, "", a[1], a[0])
	}
	// Bus: a slow group's cursor keeps m1..m4 pending while a fast group
	// completes m1 and m2 and dead-letters m3 and m4.
	pending := uniqueQueue(t)
	pushFour(pending)
	slow, fast := pending+"-slow", pending+"-fast"
	b.call(t, "POST", "/api/v1/consumer-groups/"+slow+"/queues/"+pending+"/seek", `{"timestamp":"2000-01-01T00:00:00Z"}`, nil)
	for _, a := range [][2]string{{"m1", "completed"}, {"m2", "completed"}, {"m3", "dlq"}, {"m4", "dlq"}} {
		popAndAck(pending, fast, a[1], a[0])
	}
	t.Cleanup(func() {
		for _, g := range []string{slow, fast} {
			b.call(t, "DELETE", "/api/v1/consumer-groups/"+g, nil, nil)
		}
	})
	for _, c := range []struct{ queue, status string }{{completed, "completed"}, {pending, "pending"}} {
		base := "/api/v1/messages?queue=" + url.QueryEscape(c.queue) + "&status=" + c.status
		for _, page := range []struct {
			query string
			want  []string
		}{
			{"&limit=1", []string{"m2"}},
			{"&limit=1&offset=1", []string{"m1"}},
			{"&limit=2", []string{"m2", "m1"}},
			{"&limit=1&offset=2", []string{}},
		} {
			var got messageList
			b.call(t, "GET", base+page.query, nil, &got)
			if !reflect.DeepEqual(got.ids(), page.want) {
				t.Errorf("status=%s%s: %v; want %v (m3 and m4 are dead letters)", c.status, page.query, got.ids(), page.want)
			}
		}
	}
}
