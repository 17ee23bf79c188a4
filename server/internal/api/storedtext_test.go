package api

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// countQueueRows counts queue rows whose name starts with prefix.
func (b *testBroker) countQueueRows(t *testing.T, prefix string) int {
	t.Helper()
	var n int
	if err := b.Pool.QueryRow(t.Context(), `SELECT count(*) FROM lanes.queues WHERE starts_with(name, $1)`, prefix).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// countRows runs a count(*) query.
func (b *testBroker) countRows(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.Pool.QueryRow(t.Context(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// writtenUnder counts what requests may have written for queue (or KV
// namespace) names starting with prefix: queues, timers, KV keys.
func (b *testBroker) writtenUnder(t *testing.T, prefix string) int {
	t.Helper()
	return b.countRows(t, `SELECT (SELECT count(*) FROM lanes.queues WHERE starts_with(name, $1))
		+ (SELECT count(*) FROM lanes.timers WHERE starts_with(queue, $1))
		+ (SELECT count(*) FROM lanes.kv WHERE starts_with(namespace, $1))`, prefix)
}

func TestPushOfTextPostgreSQLCannotStoreIs400AndStoresNothing(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	long := func(n int) string { return strings.Repeat("x", n) }
	cases := []struct {
		name string
		item map[string]any
	}{
		{"NUL in queue", map[string]any{"queue": q + "\x00", "payload": 1}},
		{"NUL in partition", map[string]any{"queue": q, "partition": "p\x00", "payload": 1}},
		{"NUL in transactionId", map[string]any{"queue": q, "transactionId": "t\x00", "payload": 1}},
		{"transactionId past the txns_pkey entry limit", map[string]any{"queue": q, "transactionId": long(3000), "payload": 1}},
		{"transactionId one byte over the limit", map[string]any{"queue": q, "transactionId": long(1025), "payload": 1}},
		{"queue name past the index limit", map[string]any{"queue": q + long(9000), "payload": 1}},
		{"partition name past the index limit", map[string]any{"queue": q, "partition": long(9000), "payload": 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e errorBody
			// A good item first: the request fails as a whole.
			status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{
				{"queue": q, "payload": 1}, c.item}}, &e)
			if status != http.StatusBadRequest || e.Code != CodeBadRequest || !strings.Contains(e.Error, "items[1].") {
				t.Fatalf("want 400 bad_request naming items[1], got %d %+v", status, e)
			}
		})
	}
	if n := b.countQueueRows(t, q); n != 0 {
		t.Fatalf("rejected pushes created %d queues", n)
	}
	// At the limits the push is stored.
	var ok []pushResult
	status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{
		{"queue": q + long(512-len(q)), "partition": long(512), "transactionId": long(1024), "payload": "a\u0000b"}}}, &ok)
	if status != http.StatusCreated || len(ok) != 1 || ok[0].Status != "queued" {
		t.Fatalf("push at the limits (payload with a NUL): %d %+v", status, ok)
	}
}

// One producer sending a bad item must not fail the pushes coalesced with it
// into the same group commit.
func TestBadPushFailsOnlyItsSenderUnderConcurrency(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	const rounds, innocents = 15, 20
	bad := []map[string]any{
		{"queue": q + "-evil\x00", "payload": 1},
		{"queue": q, "transactionId": strings.Repeat("y", 3000), "payload": 1},
	}
	var mu sync.Mutex
	statuses := map[string]map[int]int{"innocent": {}, "bad": {}}
	for r := range rounds {
		var wg sync.WaitGroup
		for i := range innocents {
			wg.Go(func() {
				var out []pushResult
				status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{
					{"queue": q, "partition": fmt.Sprintf("p%d", i), "transactionId": fmt.Sprintf("g-%d-%d", r, i), "payload": 1}}}, &out)
				mu.Lock()
				statuses["innocent"][status]++
				mu.Unlock()
			})
		}
		wg.Go(func() {
			var e errorBody
			status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{bad[r%len(bad)]}}, &e)
			mu.Lock()
			statuses["bad"][status]++
			mu.Unlock()
		})
		wg.Wait()
	}
	if statuses["innocent"][http.StatusCreated] != rounds*innocents || statuses["bad"][http.StatusBadRequest] != rounds {
		t.Fatalf("innocent pushes by status %v (want all 201), bad pushes %v (want all 400)", statuses["innocent"], statuses["bad"])
	}
	var stored int
	if err := b.Pool.QueryRow(t.Context(), `SELECT count(*) FROM lanes.txns t JOIN lanes.partitions p ON p.id = t.partition_id
		JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $1`, q).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != rounds*innocents {
		t.Fatalf("stored %d transaction ids, want %d", stored, rounds*innocents)
	}
}

// Text PostgreSQL cannot store, anywhere a route takes a name, an id or a
// filter, is a 400 with a code, never a 500, and creates nothing.
func TestUnstorableTextOutsidePushIs400(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	long := strings.Repeat("x", 600)
	nul := `\u0000`
	cases := []struct {
		name, method, path, body, code string
	}{
		{"ack: NUL transactionId", "POST", "/api/v1/ack", `{"transactionId":"t` + nul + `","partitionId":"0190a1b2-0000-7000-8000-000000000000"}`, CodeBadRequest},
		{"ack: NUL consumerGroup", "POST", "/api/v1/ack", `{"transactionId":"t","partitionId":"0190a1b2-0000-7000-8000-000000000000","consumerGroup":"g` + nul + `"}`, CodeBadRequest},
		{"ack batch: NUL transactionId", "POST", "/api/v1/ack/batch", `{"acknowledgments":[{"transactionId":"t` + nul + `","partitionId":"0190a1b2-0000-7000-8000-000000000000"}]}`, CodeBadRequest},
		{"ack batch: NUL consumerGroup", "POST", "/api/v1/ack/batch", `{"consumerGroup":"g` + nul + `","acknowledgments":[{"transactionId":"t","partitionId":"0190a1b2-0000-7000-8000-000000000000"}]}`, CodeBadRequest},
		{"pop: NUL consumerGroup", "GET", "/api/v1/pop/queue/" + q + "?consumerGroup=g%00x", "", CodeBadRequest},
		{"pop: NUL namespace", "GET", "/api/v1/pop?namespace=a%00", "", CodeBadRequest},
		{"pop: NUL task", "GET", "/api/v1/pop?task=a%00", "", CodeBadRequest},
		{"pop: NUL queue in the path", "GET", "/api/v1/pop/queue/" + q + "%00x", "", CodeBadRequest},
		{"pop: NUL partition in the path", "GET", "/api/v1/pop/queue/" + q + "/partition/p%00", "", CodeBadRequest},
		{"pop: invalid UTF-8 queue", "GET", "/api/v1/pop/queue/" + q + "%FF", "", CodeBadRequest},
		{"pop: over-long consumerGroup", "GET", "/api/v1/pop/queue/" + q + "?consumerGroup=" + long, "", CodeBadRequest},
		{"pop: over-long queue", "GET", "/api/v1/pop/queue/" + q + long, "", CodeBadRequest},
		{"configure: NUL queue", "POST", "/api/v1/configure", `{"queue":"` + q + nul + `","options":{}}`, CodeBadRequest},
		{"configure: over-long queue", "POST", "/api/v1/configure", `{"queue":"` + q + long + `","options":{}}`, CodeBadRequest},
		{"configure: NUL namespace", "POST", "/api/v1/configure", `{"queue":"` + q + `","namespace":"n` + nul + `","options":{}}`, CodeBadRequest},
		{"configure: over-long namespace", "POST", "/api/v1/configure", `{"queue":"` + q + `","namespace":"` + long + `","options":{}}`, CodeBadRequest},
		{"configure: NUL task in options", "POST", "/api/v1/configure", `{"queue":"` + q + `","options":{"task":"t` + nul + `"}}`, CodeBadRequest},
		{"configure: over-long task in options", "POST", "/api/v1/configure", `{"queue":"` + q + `","mode":"merge","options":{"task":"` + long + `"}}`, CodeBadRequest},
		{"configure: namespace ..", "POST", "/api/v1/configure", `{"queue":"` + q + `","namespace":"..","options":{}}`, CodeBadRequest},
		{"transaction: NUL queue", "POST", "/api/v1/transaction", `{"operations":[{"type":"push","queue":"` + q + nul + `","payload":1}]}`, CodeBadRequest},
		{"transaction: NUL ack transactionId", "POST", "/api/v1/transaction", `{"operations":[{"type":"ack","transactionId":"t` + nul + `","partitionId":"0190a1b2-0000-7000-8000-000000000000"}]}`, CodeBadRequest},
		{"messages: NUL queue filter", "GET", "/api/v1/messages?queue=a%00b", "", CodeBadRequest},
		{"dlq: NUL queue filter", "GET", "/api/v1/dlq?queue=a%00b", "", CodeBadRequest},
		{"kv: NUL namespace in the path", "GET", "/api/v1/kv/a%00b/k", "", "kv_bad_request"},
		{"kv: NUL key in the path", "PUT", "/api/v1/kv/" + q + "/k%00", `{"value":1,"forever":true}`, "kv_bad_request"},
		{"kv: NUL in a value", "PUT", "/api/v1/kv/" + q + "/k", `{"value":{"a":"x` + nul + `"},"forever":true}`, "kv_bad_request"},
		{"kv batch: NUL namespace", "POST", "/api/v1/kv", `{"operations":[{"op":"get","ns":"a` + nul + `","key":"k"}]}`, "kv_bad_request"},
		{"kv batch: NUL in a value", "POST", "/api/v1/kv", `{"operations":[{"op":"put","ns":"` + q + `","key":"k","value":"` + nul + `","forever":true}]}`, "kv_bad_request"},
		{"timers: NUL queue in the path", "GET", "/api/v1/timers/a%00b", "", "timers_bad_request"},
		{"timers: NUL queue", "POST", "/api/v1/timers", `{"operations":[{"op":"schedule","queue":"` + q + nul + `","timerKey":"k","delayMs":1000}]}`, "timers_bad_request"},
		{"timers: over-long queue", "POST", "/api/v1/timers", `{"operations":[{"op":"schedule","queue":"` + q + long + `","timerKey":"k","delayMs":1000}]}`, "timers_bad_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { b.wantBadRequest(t, c.method, c.path, c.body, c.code, "") })
	}
	if n := b.countQueueRows(t, q); n != 0 {
		t.Fatalf("rejected requests created %d queues", n)
	}
	var kv int
	if err := b.Pool.QueryRow(t.Context(), `SELECT count(*) FROM lanes.kv WHERE namespace = $1`, q).Scan(&kv); err != nil {
		t.Fatal(err)
	}
	if kv != 0 {
		t.Fatalf("rejected requests stored %d kv keys", kv)
	}
	// A \\u0000 that is text, not an escape, is an ordinary value.
	var put map[string]any
	status, _ := b.call(t, "PUT", "/api/v1/kv/"+q+"/k", `{"value":"a\\u0000b","forever":true}`, &put)
	if status != http.StatusOK || put["applied"] != true {
		t.Fatalf("a value with an escaped backslash: %d %+v", status, put)
	}
}

// An ack item's text a database cannot take is refused naming the item and
// its field, in an ack batch and in a transaction alike.
func TestUnstorableAckTextNamesItsItemAndField(t *testing.T) {
	b := newTestBroker(t)
	pid := "0190a1b2-0000-7000-8000-000000000000"
	cases := []struct{ path, body, want string }{
		{"/api/v1/ack/batch", `{"acknowledgments":[{"transactionId":"a","partitionId":"` + pid + `"},` +
			`{"transactionId":"b","partitionId":"` + pid + `","status":"completed\u0000"}]}`,
			`acknowledgments[1].status must not contain a NUL character (\u0000)`},
		{"/api/v1/ack/batch", `{"acknowledgments":[{"transactionId":"a","partitionId":"` + pid + `"},` +
			`{"transactionId":"b","partitionId":"` + pid + `","leaseId":"l\u0000"}]}`,
			`acknowledgments[1].leaseId must not contain a NUL character (\u0000)`},
		{"/api/v1/ack/batch", `{"consumerGroup":"  ","acknowledgments":[{"transactionId":"a","partitionId":"` + pid + `"}]}`,
			`acknowledgments[0].consumerGroup must hold more than white space`},
		{"/api/v1/transaction", `{"operations":[{"type":"push","queue":"q","payload":{}},` +
			`{"type":"ack","transactionId":"t","partitionId":"` + pid + `","error":"e\u0000"}]}`,
			`operations[1].error must not contain a NUL character (\u0000)`},
	}
	for _, c := range cases {
		var e errorBody
		status, _ := b.call(t, "POST", c.path, c.body, &e)
		if status != http.StatusBadRequest || e.Code != CodeBadRequest || !strings.HasSuffix(e.Error, c.want) {
			t.Fatalf("%s %s: %d %+v, want 400 %s ending %q", c.path, c.body, status, e, CodeBadRequest, c.want)
		}
	}
}
