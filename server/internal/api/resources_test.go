package api

import (
	"fmt"
	"net/url"
	"testing"
	"time"
)

type counts struct {
	Total, Pending, Processing, Completed, DeadLetter int
}

func TestResourcesCountFromWatermarks(t *testing.T) {
	b := newTestBroker(t)
	ns := fmt.Sprintf("ns%d", time.Now().UnixNano())
	q := ns + ".billing." + uniqueQueue(t)
	statusFixture(t, b, q) // d (dead letter), m0 completed, m1 processing, m2 m3 pending
	// d sits below the queue-mode cursor but is counted once, as dead: the buckets partition the total.
	want := counts{Total: 5, Pending: 2, Processing: 1, Completed: 1, DeadLetter: 1}

	var list struct {
		Queues []struct {
			Name       string `json:"name"`
			Partitions int    `json:"partitions"`
			Messages   counts `json:"messages"`
		} `json:"queues"`
		Total int `json:"total"`
	}
	if status, _ := b.call(t, "GET", "/api/v1/resources/queues?namespace="+ns, nil, &list); status != 200 || list.Total != 1 || len(list.Queues) != 1 {
		t.Fatalf("queues: %d %+v", status, list)
	}
	if got := list.Queues[0]; got.Name != q || got.Partitions != 1 || got.Messages != want {
		t.Fatalf("queue summary %+v, want %+v", got, want)
	}
	var namespaces struct {
		Namespaces []struct {
			Namespace string `json:"namespace"`
			Queues    int    `json:"queues"`
			Messages  counts `json:"messages"`
		} `json:"namespaces"`
	}
	b.call(t, "GET", "/api/v1/resources/namespaces", nil, &namespaces)
	found := false
	for _, n := range namespaces.Namespaces {
		if n.Namespace == ns {
			found = n.Queues == 1 && n.Messages == want
		}
	}
	if !found {
		t.Fatalf("namespace %s missing or wrong: %+v", ns, namespaces)
	}
	var tasks struct {
		Tasks []map[string]any `json:"tasks"`
	}
	if status, _ := b.call(t, "GET", "/api/v1/resources/tasks", nil, &tasks); status != 200 || len(tasks.Tasks) == 0 {
		t.Fatalf("tasks: %d %+v", status, tasks)
	}
	var overview struct {
		Queues   int    `json:"queues"`
		Messages counts `json:"messages"`
	}
	if status, _ := b.call(t, "GET", "/api/v1/resources/overview", nil, &overview); status != 200 || overview.Queues < 1 || overview.Messages.Total < 5 {
		t.Fatalf("overview: %d %+v", status, overview)
	}

	var depth struct {
		Group             string `json:"group"`
		Pending           int    `json:"pending"`
		PartitionsPending int    `json:"partitionsPending"`
		Partitions        []struct {
			Partition string `json:"partition"`
			Pending   int    `json:"pending"`
		} `json:"partitions"`
	}
	b.call(t, "GET", "/api/v1/resources/queues/"+url.PathEscape(q)+"/depth", nil, &depth)
	if depth.Group != "__QUEUE_MODE__" || depth.Pending != 3 || depth.PartitionsPending != 1 || depth.Partitions[0].Pending != 3 {
		t.Fatalf("queue-mode depth (m1 leased but uncommitted counts): %+v", depth)
	}
	b.call(t, "GET", "/api/v1/resources/queues/"+url.PathEscape(q)+"/depth?group=latecomer", nil, &depth)
	if depth.Pending != 5 {
		t.Fatalf("a group without a cursor has everything retained pending: %+v", depth)
	}

	var status struct {
		Messages   counts `json:"messages"`
		Partitions []struct {
			Name          string         `json:"name"`
			Messages      counts         `json:"messages"`
			Cursor        map[string]any `json:"cursor"`
			OldestMessage map[string]any `json:"oldestMessage"`
		} `json:"partitions"`
	}
	if code, _ := b.call(t, "GET", "/api/v1/status/queues/"+url.PathEscape(q)+"?includePartitions=true", nil, &status); code != 200 ||
		status.Messages != want || len(status.Partitions) != 1 || status.Partitions[0].Cursor["leaseActive"] != true || status.Partitions[0].OldestMessage == nil {
		t.Fatalf("queue status: %d %+v", code, status)
	}
	var statusList struct {
		Queues []struct {
			Messages counts `json:"messages"`
		} `json:"queues"`
	}
	b.call(t, "GET", "/api/v1/status/queues?queue="+url.QueryEscape(q), nil, &statusList)
	if len(statusList.Queues) != 1 || statusList.Queues[0].Messages != want {
		t.Fatalf("status list: %+v", statusList)
	}
	var agg struct {
		Messages map[string]float64 `json:"messages"`
		Leases   map[string]float64 `json:"leases"`
	}
	if code, _ := b.call(t, "GET", "/api/v1/status?queue="+url.QueryEscape(q), nil, &agg); code != 200 || agg.Messages["total"] != 5 ||
		agg.Messages["completed"] != 1 || agg.Messages["deadLetter"] != 1 || agg.Leases["active"] < 1 {
		t.Fatalf("status: %d %+v", code, agg)
	}
	for _, path := range []string{"/api/v1/status/queues/no-such-queue", "/api/v1/resources/queues/no-such-queue/depth"} {
		var e errorBody
		if code, _ := b.call(t, "GET", path, nil, &e); code != 404 || e.Code != "queue_not_found" {
			t.Fatalf("%s: %d %+v", path, code, e)
		}
	}
}

func TestDeleteQueueRemovesEverythingAndIsIdempotent(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.deadLetter(t, q, "p", "d")
	if code, _ := b.call(t, "POST", "/api/v1/kv", map[string]any{"operations": []map[string]any{
		{"op": "put", "ns": q, "key": "marker", "value": 1, "forever": true}}}, nil); code != 200 {
		t.Fatalf("kv put: %d", code)
	}
	if code, _ := b.call(t, "POST", "/api/v1/timers", map[string]any{"operations": []map[string]any{
		{"op": "schedule", "queue": q, "timerKey": "later", "delayMs": 3600000, "txn": "t1", "payload": "MQ=="}}}, nil); code != 200 {
		t.Fatalf("timer schedule: %d", code)
	}
	var partitions []string
	if err := b.Pool.QueryRow(t.Context(), `SELECT array_agg(p.id::text) FROM lanes.partitions p
		JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $1`, q).Scan(&partitions); err != nil || len(partitions) == 0 {
		t.Fatalf("partitions before the delete: %v %v", partitions, err)
	}
	var stored int
	if err := b.Pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM lanes.segments WHERE partition_id::text = ANY($1))
		+ (SELECT count(*) FROM lanes.txns WHERE partition_id::text = ANY($1))`, partitions).Scan(&stored); err != nil || stored < 2 {
		t.Fatalf("segments and transaction index rows before the delete: %d %v", stored, err)
	}
	var res struct {
		Deleted bool    `json:"deleted"`
		Queue   string  `json:"queue"`
		Message *string `json:"message"`
	}
	if code, _ := b.call(t, "DELETE", "/api/v1/resources/queues/"+url.PathEscape(q), nil, &res); code != 200 || !res.Deleted || res.Queue != q {
		t.Fatalf("delete: %d %+v", code, res)
	}
	// Segments and the transaction index have no foreign key to cascade from.
	for _, table := range []string{"lanes.partitions", "lanes.segments", "lanes.txns", "lanes.partition_writes", "lanes.consumers"} {
		column := "partition_id"
		if table == "lanes.partitions" {
			column = "id"
		}
		var left int
		if err := b.Pool.QueryRow(t.Context(), `SELECT count(*) FROM `+table+` WHERE `+column+`::text = ANY($1)`, partitions).Scan(&left); err != nil || left != 0 {
			t.Fatalf("%s kept %d rows of the deleted queue's partitions (%v)", table, left, err)
		}
	}
	var n int
	if err := b.Pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM lanes.queues WHERE name = $1)
		+ (SELECT count(*) FROM lanes.dlq WHERE transaction_id = 'd' AND consumer_group = '__QUEUE_MODE__'
			AND partition_id NOT IN (SELECT id FROM lanes.partitions))
		+ (SELECT count(*) FROM lanes.timers WHERE queue = $1)`, q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("queue, its dead letters or timers survived the delete")
	}
	// A KV namespace is not the queue's, even when it has the queue's name.
	b.wantKVKey(t, q, "marker")
	if code, _ := b.call(t, "GET", "/api/v1/resources/queues/"+url.PathEscape(q), nil, nil); code != 404 {
		t.Fatalf("deleted queue still answers %d", code)
	}
	res.Message = nil
	if code, _ := b.call(t, "DELETE", "/api/v1/resources/queues/"+url.PathEscape(q), nil, &res); code != 200 || res.Deleted || res.Message == nil {
		t.Fatalf("second delete: %d %+v", code, res)
	}
}

func TestDeleteQueueOfAKVNamespaceNamedLikeItDeletesNothing(t *testing.T) {
	b := newTestBroker(t)
	ns := uniqueQueue(t)
	if code, _ := b.call(t, "POST", "/api/v1/kv", map[string]any{"operations": []map[string]any{
		{"op": "put", "ns": ns, "key": "invoice-seq", "value": 41, "forever": true}}}, nil); code != 200 {
		t.Fatalf("kv put: %d", code)
	}
	var res struct {
		Deleted bool    `json:"deleted"`
		Message *string `json:"message"`
	}
	if code, _ := b.call(t, "DELETE", "/api/v1/resources/queues/"+url.PathEscape(ns), nil, &res); code != 200 || res.Deleted || res.Message == nil {
		t.Fatalf("delete of a queue that does not exist: %d %+v, want deleted:false with a message", code, res)
	}
	b.wantKVKey(t, ns, "invoice-seq")
}

// wantKVKey fails unless the KV key is live.
func (b *testBroker) wantKVKey(t *testing.T, ns, key string) {
	t.Helper()
	var got struct {
		Found bool `json:"found"`
	}
	if code, _ := b.call(t, "GET", "/api/v1/kv/"+url.PathEscape(ns)+"/"+url.PathEscape(key), nil, &got); code != 200 || !got.Found {
		t.Fatalf("KV key %s/%s: %d found=%v, want it kept", ns, key, code, got.Found)
	}
}

func TestDeleteQueueUnderALongPollEndsThePopCleanly(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": 1}}}, nil)
	b.call(t, "GET", "/api/v1/pop/queue/"+q+"?autoAck=true", nil, nil)
	done := make(chan int, 1)
	start := time.Now()
	go func() {
		code, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?wait=true&timeout=1500", nil, nil)
		done <- code
	}()
	time.Sleep(200 * time.Millisecond)
	if code, _ := b.call(t, "DELETE", "/api/v1/resources/queues/"+url.PathEscape(q), nil, nil); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	select {
	case code := <-done:
		if code != 204 {
			t.Fatalf("parked pop ended with %d, want a bare 204", code)
		}
		var recreated bool
		_ = b.Pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM lanes.queues WHERE name = $1)`, q).Scan(&recreated)
		// Known: pop names a queue into existence, so a parked pop's re-check recreates an empty queue row.
		t.Logf("parked pop ended after %v; queue row recreated by its re-check: %v", time.Since(start), recreated)
	case <-time.After(5 * time.Second):
		t.Fatalf("parked pop did not end")
	}
}

// hybridFixture leaves, on one partition consumed in queue mode and by the bus
// group "g": d0 dead-lettered by g and leased in queue mode, d1 leased in queue
// mode, d2 pending.
func hybridFixture(t *testing.T, b *testBroker, q string) {
	t.Helper()
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{
		{"queue": q, "partition": "p", "transactionId": "d0", "payload": 0},
		{"queue": q, "partition": "p", "transactionId": "d1", "payload": 1},
		{"queue": q, "partition": "p", "transactionId": "d2", "payload": 2},
	}}, nil)
	var bus popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=1&consumerGroup=g&subscriptionMode=all", nil, &bus)
	if len(bus.Messages) != 1 || bus.Messages[0].TransactionID != "d0" {
		t.Fatalf("fixture: bus pop %+v", bus)
	}
	var acked []map[string]any
	b.call(t, "POST", "/api/v1/ack", map[string]any{"transactionId": "d0", "partitionId": bus.Messages[0].PartitionID,
		"leaseId": bus.LeaseID, "consumerGroup": "g", "status": "dlq", "error": "poison"}, &acked)
	if len(acked) != 1 || acked[0]["dlq"] != true {
		t.Fatalf("fixture: ack dlq %+v", acked)
	}
	var queueMode popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=2&leaseSeconds=300", nil, &queueMode)
	if len(queueMode.Messages) != 2 {
		t.Fatalf("fixture: queue-mode pop %+v", queueMode)
	}
}

// Every counting route agrees with the status GET /api/v1/messages derives,
// one status per message, also where a dead letter sits in the queue-mode lease.
func TestStatusCountsPartitionTheTotalOnHybridQueues(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	hybridFixture(t, b, q)
	var all messageList
	b.call(t, "GET", "/api/v1/messages?queue="+url.QueryEscape(q), nil, &all)
	tally := map[string]int{}
	for _, m := range all.Messages {
		tally[m.Status]++
	}
	want := counts{Total: len(all.Messages), Pending: tally["pending"], Processing: tally["processing"],
		Completed: tally["completed"], DeadLetter: tally["dead_letter"]}
	if want != (counts{Total: 3, Pending: 1, Processing: 1, DeadLetter: 1}) {
		t.Fatalf("fixture statuses: %+v", all.Messages)
	}
	var list struct {
		Queues []struct {
			Messages counts `json:"messages"`
		} `json:"queues"`
	}
	b.call(t, "GET", "/api/v1/status/queues?queue="+url.QueryEscape(q), nil, &list)
	if len(list.Queues) != 1 || list.Queues[0].Messages != want {
		t.Fatalf("/status/queues counts %+v, want %+v", list, want)
	}
	var status struct {
		Messages   counts `json:"messages"`
		Partitions []struct {
			Messages counts `json:"messages"`
		} `json:"partitions"`
	}
	b.call(t, "GET", "/api/v1/status/queues/"+url.PathEscape(q)+"?includePartitions=true", nil, &status)
	if status.Messages != want || len(status.Partitions) != 1 || status.Partitions[0].Messages != want {
		t.Fatalf("/status/queues/%s counts %+v, want %+v", q, status, want)
	}
	var agg struct {
		Messages        counts         `json:"messages"`
		DeadLetterQueue map[string]int `json:"deadLetterQueue"`
	}
	b.call(t, "GET", "/api/v1/status?queue="+url.QueryEscape(q), nil, &agg)
	if agg.Messages != want || agg.DeadLetterQueue["total"] != 1 {
		t.Fatalf("/api/v1/status %+v, want messages %+v and one dead letter", agg, want)
	}
}
