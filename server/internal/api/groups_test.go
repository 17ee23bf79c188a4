package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/internal/engine"
)

// groupPop is a pop answer with the fields these tests read.
type groupPop struct {
	LeaseID           string `json:"leaseId"`
	PartitionsClaimed int    `json:"partitionsClaimed"`
	Messages          []struct {
		TransactionID string `json:"transactionId"`
		PartitionID   string `json:"partitionId"`
		Partition     string `json:"partition"`
		LeaseID       string `json:"leaseId"`
	} `json:"messages"`
	Autopilot *struct {
		Partitions int  `json:"partitions"`
		Batch      int  `json:"batch"`
		WaitMs     *int `json:"waitMs"`
	} `json:"autopilot"`
}

func (p groupPop) txns() []string {
	out := make([]string, len(p.Messages))
	for i, m := range p.Messages {
		out[i] = m.TransactionID
	}
	return out
}

// newTestBrokerWith is newTestBroker with an engine configuration.
func newTestBrokerWith(t testing.TB, cfg engine.Config) *testBroker {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), testDSN)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(pool, cfg)
	h, err := NewServer(eng, Options{Version: "test", MaxBodyBytes: 1 << 20}).Handler()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); eng.Close(); pool.Close() })
	return &testBroker{URL: srv.URL, Engine: eng, Pool: pool}
}

// push stores one segment per call (calls are sequential, so never coalesced).
func (b *testBroker) push(t testing.TB, queue, partition string, txns ...string) {
	t.Helper()
	items := make([]map[string]any, len(txns))
	for i, id := range txns {
		items[i] = map[string]any{"queue": queue, "partition": partition, "transactionId": id, "payload": map[string]string{"id": id}}
	}
	var res []pushResult
	if status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": items}, &res); status != http.StatusCreated {
		t.Fatalf("push: %d %+v", status, res)
	}
	for _, r := range res {
		if r.Status != "queued" {
			t.Fatalf("push: %+v", res)
		}
	}
}

func (b *testBroker) pop(t testing.TB, path string) groupPop {
	t.Helper()
	var p groupPop
	status, _ := b.call(t, "GET", path, nil, &p)
	if status != http.StatusOK && status != http.StatusNoContent {
		t.Fatalf("GET %s: %d", path, status)
	}
	return p
}

// ackAll acknowledges every message of p as completed.
func (b *testBroker) ackAll(t testing.TB, p groupPop, group string) {
	t.Helper()
	acks := make([]map[string]any, len(p.Messages))
	for i, m := range p.Messages {
		acks[i] = map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": p.LeaseID, "status": "completed"}
	}
	var out []map[string]any
	if status, _ := b.call(t, "POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks, "consumerGroup": group}, &out); status != http.StatusOK {
		t.Fatalf("ack batch: %d %+v", status, out)
	}
	for _, r := range out {
		if r["success"] != true {
			t.Fatalf("ack: %+v", out)
		}
	}
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func segmentTimes(t *testing.T, b *testBroker, queue string) []time.Time {
	t.Helper()
	rows, err := b.Pool.Query(t.Context(), `SELECT s.created_at FROM lanes.segments s JOIN lanes.partitions p ON p.id = s.partition_id
		JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $1 ORDER BY s.base_offset`, queue)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []time.Time
	for rows.Next() {
		var ts time.Time
		if err := rows.Scan(&ts); err != nil {
			t.Fatal(err)
		}
		out = append(out, ts)
	}
	return out
}

func seekPath(group, queue string) string {
	return "/api/v1/consumer-groups/" + group + "/queues/" + queue + "/seek"
}

func TestSeekBackwardsRedeliversFromTheSegmentBoundary(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=audit&subscriptionMode=all")
	b.push(t, q, "p", "a1", "a2")
	time.Sleep(20 * time.Millisecond)
	b.push(t, q, "p", "b1")
	time.Sleep(20 * time.Millisecond)
	b.push(t, q, "p", "c1")
	first := b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=audit&batch=10")
	if !sameStrings(first.txns(), []string{"a1", "a2", "b1", "c1"}) {
		t.Fatalf("first read: %v", first.txns())
	}
	b.ackAll(t, first, "audit")
	if p := b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=audit"); len(p.Messages) != 0 {
		t.Fatalf("consumed group still gets %v", p.txns())
	}
	segs := segmentTimes(t, b, q)
	// An instant between the first and second segment lands on the second one.
	target := segs[0].Add(segs[1].Sub(segs[0]) / 2)
	var res map[string]any
	status, _ := b.call(t, "POST", seekPath("audit", q), map[string]any{"timestamp": target.Format(time.RFC3339Nano)}, &res)
	if status != 200 || res["success"] != true || res["partitionsUpdated"] != float64(1) || res["seekToEnd"] != false ||
		res["queueName"] != q || res["consumerGroup"] != "audit" || res["targetTimestamp"] == nil {
		t.Fatalf("seek: %d %+v", status, res)
	}
	again := b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=audit&batch=10")
	if !sameStrings(again.txns(), []string{"b1", "c1"}) {
		t.Fatalf("after seek: %v, want [b1 c1]", again.txns())
	}
	// Exactly at a segment's instant includes that segment.
	b.call(t, "POST", seekPath("audit", q), map[string]any{"timestamp": segs[2].Format(time.RFC3339Nano)}, nil)
	if p := b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=audit&batch=10"); !sameStrings(p.txns(), []string{"c1"}) {
		t.Fatalf("seek to the last segment's instant: %v", p.txns())
	}
	// Newer than every segment: the end.
	b.call(t, "POST", seekPath("audit", q), map[string]any{"timestamp": time.Now().Add(time.Hour).Format(time.RFC3339)}, nil)
	if p := b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=audit&batch=10"); len(p.Messages) != 0 {
		t.Fatalf("seek past everything still delivers %v", p.txns())
	}
}

// TestSeekFigure is the model page's figure: offsets below log_start (4) are gone,
// the billing cursor sits at 7, and a seek to before everything stops at the
// log_start boundary.
func TestSeekFigure(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=billing&subscriptionMode=all")
	for i := 0; i < 10; i++ {
		b.push(t, q, "p", fmt.Sprintf("m%d", i))
	}
	read := b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=billing&batch=8")
	if len(read.Messages) != 8 {
		t.Fatalf("read %v", read.txns())
	}
	b.ackAll(t, read, "billing")
	if c := billingCursor(t, b, q); c != 7 {
		t.Fatalf("cursor before seek = %d, want 7", c)
	}
	// Retention (simulated): segments below offset 4 deleted, log_start = 4.
	if _, err := b.Pool.Exec(t.Context(), `WITH p AS (SELECT p.id FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $1),
		d AS (DELETE FROM lanes.segments s USING p WHERE s.partition_id = p.id AND s.end_offset < 4)
		UPDATE lanes.partitions SET log_start = 4 WHERE id IN (SELECT id FROM p)`, q); err != nil {
		t.Fatal(err)
	}
	var res map[string]any
	status, _ := b.call(t, "POST", seekPath("billing", q), map[string]any{"timestamp": "2000-01-01T00:00:00Z"}, &res)
	if status != 200 || res["partitionsUpdated"] != float64(1) {
		t.Fatalf("seek: %d %+v", status, res)
	}
	if committed := billingCursor(t, b, q); committed != 3 {
		t.Fatalf("cursor after seek = %d, want log_start-1 = 3", committed)
	}
	p := b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=billing&batch=20")
	if !sameStrings(p.txns(), []string{"m4", "m5", "m6", "m7", "m8", "m9"}) {
		t.Fatalf("replay after seek: %v", p.txns())
	}
}

func billingCursor(t *testing.T, b *testBroker, q string) int64 {
	t.Helper()
	var committed int64
	if err := b.Pool.QueryRow(t.Context(), `SELECT c.committed FROM lanes.consumers c JOIN lanes.partitions p ON p.id = c.partition_id
		JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $1 AND c.consumer_group = 'billing'`, q).Scan(&committed); err != nil {
		t.Fatal(err)
	}
	return committed
}

func TestSeekToEndTouchesOneGroupAndReleasesItsLease(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	for _, g := range []string{"fast", "slow"} {
		b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup="+g+"&subscriptionMode=all")
	}
	b.push(t, q, "p", "x1", "x2")
	b.push(t, q, "p", "x3")
	leased := b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=slow&batch=10&leaseSeconds=300")
	if len(leased.Messages) != 3 {
		t.Fatalf("lease: %v", leased.txns())
	}
	// Charge the retry budget so the reset is visible.
	b.call(t, "POST", "/api/v1/ack", map[string]any{"transactionId": "x1", "partitionId": leased.Messages[0].PartitionID,
		"leaseId": leased.LeaseID, "consumerGroup": "slow", "status": "failed"}, nil)
	leased = b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=slow&batch=10&leaseSeconds=300")
	if len(leased.Messages) != 3 {
		t.Fatalf("re-lease: %v", leased.txns())
	}
	// Back to the start under a live lease: the batch is abandoned, redelivered at once.
	var res map[string]any
	status, _ := b.call(t, "POST", seekPath("slow", q), map[string]any{"timestamp": "2000-01-01T00:00:00Z"}, &res)
	if status != 200 {
		t.Fatalf("seek: %d %+v", status, res)
	}
	var retries int
	var leaseNull bool
	if err := b.Pool.QueryRow(t.Context(), `SELECT c.retry_count, c.lease_id IS NULL FROM lanes.consumers c JOIN lanes.partitions p ON p.id = c.partition_id
		JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $1 AND c.consumer_group = 'slow'`, q).Scan(&retries, &leaseNull); err != nil {
		t.Fatal(err)
	}
	if retries != 0 || !leaseNull {
		t.Fatalf("after seek retry_count=%d lease released=%v", retries, leaseNull)
	}
	var stale []map[string]any
	b.call(t, "POST", "/api/v1/ack", map[string]any{"transactionId": "x3", "partitionId": leased.Messages[0].PartitionID,
		"leaseId": leased.LeaseID, "consumerGroup": "slow"}, &stale)
	if len(stale) != 1 || stale[0]["success"] == true {
		t.Fatalf("the abandoned lease still acks: %+v", stale)
	}
	if p := b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=slow&batch=10"); !sameStrings(p.txns(), []string{"x1", "x2", "x3"}) {
		t.Fatalf("after seek under a lease: %v", p.txns())
	}
	// toEnd on "fast" empties its backlog and leaves "slow" where it is.
	b.call(t, "POST", seekPath("slow", q), map[string]any{"timestamp": "2000-01-01T00:00:00Z"}, nil)
	status, _ = b.call(t, "POST", seekPath("fast", q), map[string]any{"toEnd": true}, &res)
	if status != 200 || res["seekToEnd"] != true {
		t.Fatalf("toEnd: %d %+v", status, res)
	}
	if p := b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=fast"); len(p.Messages) != 0 {
		t.Fatalf("toEnd left a backlog: %v", p.txns())
	}
	if p := b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=slow&batch=10"); len(p.Messages) != 3 {
		t.Fatalf("another group's seek moved slow: %v", p.txns())
	}
}

func TestSeekPartitionAndErrors(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=g&subscriptionMode=all")
	b.push(t, q, "one", "o1")
	b.push(t, q, "two", "t1")
	var res map[string]any
	// An empty body on the partition route means toEnd.
	status, _ := b.call(t, "POST", "/api/v1/consumer-groups/g/queues/"+q+"/partitions/one/seek", nil, &res)
	if status != 200 || res["updated"] != true || res["seekToEnd"] != true || res["partitionName"] != "one" {
		t.Fatalf("partition seek: %d %+v", status, res)
	}
	if p := b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=g&partitions=0"); !sameStrings(p.txns(), []string{"t1"}) {
		t.Fatalf("partition seek touched the other partition: %v", p.txns())
	}
	// So does {}, what a generated client sends for an empty SeekRequest.
	b.push(t, q, "one", "o2")
	res = nil
	status, _ = b.call(t, "POST", "/api/v1/consumer-groups/g/queues/"+q+"/partitions/one/seek", map[string]any{}, &res)
	if status != 200 || res["updated"] != true || res["seekToEnd"] != true || res["targetTimestamp"] != nil {
		t.Fatalf("partition seek with {}: %d %+v", status, res)
	}
	if p := b.pop(t, "/api/v1/pop/queue/"+q+"/partition/one?consumerGroup=g"); len(p.txns()) != 0 {
		t.Fatalf("partition seek with {} left %v before the end", p.txns())
	}
	cases := []struct {
		name, path string
		body       any
		status     int
		msg        string
	}{
		{"unknown queue", seekPath("g", q+"-nope"), map[string]any{"toEnd": true}, 404, "Queue not found or has no partitions"},
		{"unknown partition", "/api/v1/consumer-groups/g/queues/" + q + "/partitions/nope/seek", map[string]any{"toEnd": true}, 404, "Partition not found"},
		{"no body", seekPath("g", q), nil, 400, "Must specify toEnd=true or a timestamp"},
		{"neither field", seekPath("g", q), map[string]any{}, 400, "Must specify toEnd=true or a timestamp"},
		{"toEnd false alone", seekPath("g", q), map[string]any{"toEnd": false}, 400, "Must specify toEnd=true or a timestamp"},
		{"toEnd false alone on the partition route", "/api/v1/consumer-groups/g/queues/" + q + "/partitions/one/seek", map[string]any{"toEnd": false}, 400, "Must specify toEnd=true or a timestamp"},
		{"bad timestamp", seekPath("g", q), map[string]any{"timestamp": "yesterday"}, 400, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e struct {
				errorBody
				Success *bool `json:"success"`
			}
			status, _ := b.call(t, "POST", c.path, c.body, &e)
			if status != c.status || e.Code == "" || (c.msg != "" && e.Error != c.msg) {
				t.Fatalf("want %d %q, got %d %+v", c.status, c.msg, status, e)
			}
			if c.msg == "Must specify toEnd=true or a timestamp" && e.Code != CodeBadRequest {
				t.Fatalf("want code %s, got %+v", CodeBadRequest, e)
			}
			// The reference's 404 carries success:false; clients read it.
			if status == 404 && (e.Success == nil || *e.Success) {
				t.Fatalf("404 body lacks success:false: %+v", e)
			}
		})
	}
	var cursors int
	if err := b.Pool.QueryRow(t.Context(), `SELECT count(*) FROM lanes.consumers WHERE consumer_group = 'g'
		AND partition_id IN (SELECT p.id FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $1)`, q).Scan(&cursors); err != nil {
		t.Fatal(err)
	}
	if cursors != 2 {
		t.Fatalf("rejected seeks wrote cursors: %d", cursors)
	}
}

func TestNewGroupReceivesPartitionsCreatedAfterItSubscribed(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.push(t, q, "old", "backlog")
	if p := b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=late"); len(p.Messages) != 0 {
		t.Fatalf("new skips the backlog, got %v", p.txns())
	}
	b.push(t, q, "brand-new", "n1")
	b.push(t, q, "old", "o2")
	p := b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=late&partitions=0&batch=10")
	got := map[string]bool{}
	for _, id := range p.txns() {
		got[id] = true
	}
	if len(got) != 2 || !got["n1"] || !got["o2"] {
		t.Fatalf("want n1 and o2, got %v", p.txns())
	}
}

func TestSubscriptionChangeOnlyMovesUnseededPartitions(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=sub&subscriptionMode=all")
	b.push(t, q, "seeded", "s0")
	b.ackAll(t, b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=sub"), "sub") // seeds the "seeded" cursor
	future := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	var res map[string]any
	status, _ := b.call(t, "POST", "/api/v1/consumer-groups/sub/subscription", map[string]any{"subscriptionTimestamp": future.Format(time.RFC3339)}, &res)
	if status != 200 || res["success"] != true || res["rowsUpdated"] != float64(1) || res["newTimestamp"] != future.Format(time.RFC3339) {
		t.Fatalf("subscription: %d %+v", status, res)
	}
	// A partition created now is seeded at the (future) subscription instant: its message is skipped;
	// the existing cursor keeps its place.
	b.push(t, q, "unseeded", "u1")
	b.push(t, q, "seeded", "s1")
	p := b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=sub&partitions=0&batch=10")
	if !sameStrings(p.txns(), []string{"s1"}) {
		t.Fatalf("want only s1, got %v", p.txns())
	}
	var e errorBody
	if status, _ := b.call(t, "POST", "/api/v1/consumer-groups/sub/subscription", map[string]any{}, &e); status != 400 || e.Code == "" {
		t.Fatalf("missing timestamp: %d %+v", status, e)
	}
}

func TestGroupAdminListsLagAndDeleteReseeds(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	group := "admin-" + q
	b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup="+group+"&subscriptionMode=all")
	b.push(t, q, "a", "a1", "a2", "a3")
	b.push(t, q, "b", "b1")
	p := b.pop(t, "/api/v1/pop/queue/"+q+"/partition/a?consumerGroup="+group+"&batch=1")
	b.ackAll(t, p, group)

	var list []map[string]any
	if status, _ := b.call(t, "GET", "/api/v1/consumer-groups", nil, &list); status != 200 {
		t.Fatalf("list: %d", status)
	}
	var row map[string]any
	for _, r := range list {
		if r["name"] == group && r["queueName"] == q {
			row = r
		}
	}
	if row == nil || row["totalLag"] != float64(3) || row["partitionsWithLag"] != float64(2) || row["members"] != float64(2) ||
		row["partitionCursors"] != float64(2) || row["state"] != "Stable" || row["storage"] != "segments" || row["subscriptionMode"] != "all" {
		t.Fatalf("list row: %+v", row)
	}

	var detail map[string]struct {
		Partitions []map[string]any `json:"partitions"`
	}
	b.call(t, "GET", "/api/v1/consumer-groups/"+group, nil, &detail)
	lag := map[string]float64{}
	for _, part := range detail[q].Partitions {
		lag[part["partition"].(string)] = part["offsetLag"].(float64)
	}
	if len(detail) != 1 || lag["a"] != 2 || lag["b"] != 1 {
		t.Fatalf("detail: %+v", detail)
	}
	var unknown map[string]any
	if status, _ := b.call(t, "GET", "/api/v1/consumer-groups/nobody-"+q, nil, &unknown); status != 200 || len(unknown) != 0 {
		t.Fatalf("unknown group: %d %+v", status, unknown)
	}

	// Lag is measured from the oldest unconsumed segment: 0 s threshold lists both, 1 h none.
	var lagging []map[string]any
	b.call(t, "GET", "/api/v1/consumer-groups/lagging?minLagSeconds=0", nil, &lagging)
	mine := 0
	for _, r := range lagging {
		if r["consumer_group"] == group {
			mine++
			if r["queue_name"] != q || r["offset_lag"] == nil || r["partition_id"] == nil || r["oldest_unconsumed_at"] == nil {
				t.Fatalf("lagging row: %+v", r)
			}
		}
	}
	if mine != 2 {
		t.Fatalf("lagging rows for the group: %d in %+v", mine, lagging)
	}
	lagging = nil
	b.call(t, "GET", "/api/v1/consumer-groups/lagging", nil, &lagging)
	for _, r := range lagging {
		if r["consumer_group"] == group {
			t.Fatalf("an hour threshold lists a fresh lag: %+v", r)
		}
	}

	// Delete on one queue keeping metadata: cursors go, the next pop re-seeds from the stored "all".
	var del map[string]any
	status, _ := b.call(t, "DELETE", "/api/v1/consumer-groups/"+group+"/queues/"+q+"?deleteMetadata=false", nil, &del)
	if status != 200 || del["success"] != true || del["deletedPartitions"] != float64(2) || del["metadataDeleted"] != false || del["queueName"] != q {
		t.Fatalf("delete queue: %d %+v", status, del)
	}
	again := b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup="+group+"&partitions=0&batch=10")
	if len(again.Messages) != 4 {
		t.Fatalf("re-seeded group should read all 4 again, got %v", again.txns())
	}
	b.ackAll(t, again, group)
	// Delete everything (metadata too): the next pop subscribes afresh with the default "new".
	status, _ = b.call(t, "DELETE", "/api/v1/consumer-groups/"+group, nil, &del)
	if status != 200 || del["deletedPartitions"] != float64(2) || del["metadataDeleted"] != true {
		t.Fatalf("delete group: %d %+v", status, del)
	}
	list = nil
	b.call(t, "GET", "/api/v1/consumer-groups", nil, &list)
	for _, r := range list {
		if r["name"] == group {
			t.Fatalf("deleted group still listed: %+v", r)
		}
	}
}

// The broker's configured default mode applies when a pop leaves subscriptionMode out: the
// spec declares no default that the request validator could write in over it.
func TestBrokerDefaultSubscriptionModeAppliesWhenThePopOmitsIt(t *testing.T) {
	b := newTestBrokerWith(t, engine.Config{DefaultSubscriptionMode: "all"})
	q := uniqueQueue(t)
	b.push(t, q, "p", "backlog")
	if p := b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=defaulted"); !sameStrings(p.txns(), []string{"backlog"}) {
		t.Fatalf("broker default all: want the backlog, got %v", p.txns())
	}
	if p := b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=explicit&subscriptionMode=new"); len(p.Messages) != 0 {
		t.Fatalf("explicit new skips the backlog, got %v", p.txns())
	}
}

// An instant outside the years 0001–9999 once in UTC is valid RFC 3339
// ("9999-12-31T23:59:59-05:00" is in the year 10000) but no answer can echo
// it. The subscription, both seek routes and a pop's subscriptionFrom stored
// it and answered 500 after committing, and every later group listing
// answered 500; each now answers 400 and writes nothing.
func TestGroupTimestampsOutsideTheJSONYearsAre400AndStoreNothing(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	g := q + "-g"
	t.Cleanup(func() { b.call(t, "DELETE", "/api/v1/consumer-groups/"+g, nil, nil) })
	b.push(t, q, "a", "m1")
	b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup="+g+"&subscriptionMode=all&batch=1&autoAck=true")
	stored := func() (subscription time.Time, committed int64) {
		t.Helper()
		if err := b.Pool.QueryRow(context.Background(), `SELECT cg.subscription_timestamp, c.committed
			FROM lanes.consumer_groups cg JOIN lanes.queues q ON q.id = cg.queue_id
			JOIN lanes.partitions p ON p.queue_id = q.id
			JOIN lanes.consumers c ON c.partition_id = p.id AND c.consumer_group = cg.consumer_group
			WHERE q.name = $1 AND cg.consumer_group = $2`, q, g).Scan(&subscription, &committed); err != nil {
			t.Fatal(err)
		}
		return subscription, committed
	}
	subscriptionBefore, committedBefore := stored()
	for _, instant := range []string{"9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+01:00"} {
		for _, c := range []struct{ method, path, body string }{
			{"POST", "/api/v1/consumer-groups/" + g + "/subscription", `{"subscriptionTimestamp":"` + instant + `"}`},
			{"POST", "/api/v1/consumer-groups/" + g + "/queues/" + q + "/seek", `{"timestamp":"` + instant + `"}`},
			{"POST", "/api/v1/consumer-groups/" + g + "/queues/" + q + "/partitions/a/seek", `{"timestamp":"` + instant + `"}`},
			{"GET", "/api/v1/pop/queue/" + q + "?consumerGroup=" + g + "-pop&subscriptionFrom=" + url.QueryEscape(instant), ""},
		} {
			status, raw := b.specAnswer(t, c.method, c.path, c.body)
			var e errorBody
			if err := json.Unmarshal(raw, &e); err != nil || status != http.StatusBadRequest || e.Code != CodeBadRequest {
				t.Errorf("%s %s with %s: %d %s; want 400 %s", c.method, c.path, instant, status, raw, CodeBadRequest)
			}
		}
	}
	if subscription, committed := stored(); !subscription.Equal(subscriptionBefore) || committed != committedBefore {
		t.Errorf("stored subscription %v, cursor %d; want %v and %d untouched", subscription, committed, subscriptionBefore, committedBefore)
	}
	var popGroups int
	if err := b.Pool.QueryRow(context.Background(), `SELECT count(*) FROM lanes.consumer_groups WHERE consumer_group = $1`, g+"-pop").Scan(&popGroups); err != nil || popGroups != 0 {
		t.Errorf("the refused pop stored %d subscriptions (%v)", popGroups, err)
	}
	// The edges of the range are fine.
	for _, instant := range []string{"9999-12-31T23:59:59.999999999Z", "0001-01-01T00:00:00Z"} {
		if status, raw := b.specAnswer(t, "POST", "/api/v1/consumer-groups/"+g+"/subscription", `{"subscriptionTimestamp":"`+instant+`"}`); status != http.StatusOK {
			t.Errorf("subscription to %s: %d %s", instant, status, raw)
		}
	}
}

// A subscription an older build stored outside the years JSON can write is
// listed clamped to the range's edge, instead of answering 500 to every
// caller of the group listing.
func TestGroupListingClampsStoredTimestampsOutsideTheJSONYears(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	late, early := q+"-late", q+"-early"
	for _, g := range []string{late, early} {
		t.Cleanup(func() { b.call(t, "DELETE", "/api/v1/consumer-groups/"+g, nil, nil) })
		b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup="+g)
	}
	if _, err := b.Pool.Exec(context.Background(), `UPDATE lanes.consumer_groups SET subscription_timestamp =
			CASE consumer_group WHEN $1 THEN '10000-01-01 04:59:59+00'::timestamptz ELSE '0001-12-31 23:00:00+00 BC'::timestamptz END
		WHERE consumer_group IN ($1, $2)`, late, early); err != nil {
		t.Fatal(err)
	}
	status, raw := b.specAnswer(t, "GET", "/api/v1/consumer-groups", "")
	var groups []struct {
		Name                  string `json:"name"`
		SubscriptionTimestamp string `json:"subscriptionTimestamp"`
	}
	if err := json.Unmarshal(raw, &groups); err != nil || status != http.StatusOK {
		t.Fatalf("list: %d %s (%v)", status, raw, err)
	}
	want := map[string]string{late: "9999-12-31T23:59:59.999999999Z", early: "0001-01-01T00:00:00Z"}
	for _, g := range groups {
		if w, ok := want[g.Name]; ok {
			if g.SubscriptionTimestamp != w {
				t.Errorf("%s: subscriptionTimestamp %s; want %s", g.Name, g.SubscriptionTimestamp, w)
			}
			delete(want, g.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("groups missing from the listing: %v", want)
	}
}
