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
