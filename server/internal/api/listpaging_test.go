package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"

	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/testdb"
)

// newIsolatedTestBroker is a broker on a database of its own, for the
// listings that span every queue and group: the shared database holds the
// other tests' rows, which come and go while a test pages.
func newIsolatedTestBroker(t *testing.T) *testBroker {
	t.Helper()
	dsn, cleanup, err := testdb.NewDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pool := newEnginePool(t, dsn)
	if err := engine.ApplySchema(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	eng := engine.New(pool, engine.Config{})
	h, err := NewServer(eng, Options{Version: "test", MaxBodyBytes: 1 << 20}).Handler()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); eng.Close(); pool.Close(); cleanup() })
	return &testBroker{URL: srv.URL, Engine: eng, Pool: pool}
}

// listedPage is one page of a paged listing: its rows, each named by a key,
// and its paging signal, from the body (truncated, nextOffset) or, for an
// answer that is a bare array or keyed by queue, from the headers.
type listedPage struct {
	rows       []string
	truncated  bool
	nextOffset *int
	body       map[string]any
}

// listing names a paged route and how to read its rows.
type listing struct {
	path      string // with a query string
	inHeaders bool   // the paging signal is in X-Lanes-Truncated / X-Lanes-Next-Offset
	rows      func(t *testing.T, raw []byte) []string
	keyNames  int // the names in the listing's key (after), 0 when it pages by offset only
}

func (l listing) get(t *testing.T, b *testBroker, query string) listedPage {
	t.Helper()
	path := l.path + "&" + query
	raw, header := b.getOK(t, path)
	p := listedPage{rows: l.rows(t, raw)}
	if l.inHeaders {
		flag := header.Get("X-Lanes-Truncated")
		if flag != "true" && flag != "false" {
			t.Fatalf("GET %s: X-Lanes-Truncated %q", path, flag)
		}
		p.truncated = flag == "true"
		if next := header.Get("X-Lanes-Next-Offset"); next != "" {
			n, err := strconv.Atoi(next)
			if err != nil {
				t.Fatalf("GET %s: X-Lanes-Next-Offset %q", path, next)
			}
			p.nextOffset = &n
		}
	} else {
		var paging struct {
			Truncated  *bool `json:"truncated"`
			NextOffset *int  `json:"nextOffset"`
		}
		if err := json.Unmarshal(raw, &paging); err != nil || paging.Truncated == nil {
			t.Fatalf("GET %s: no truncated field (%v): %.300s", path, err, raw)
		}
		p.truncated, p.nextOffset = *paging.Truncated, paging.NextOffset
		_ = json.Unmarshal(raw, &p.body)
	}
	if p.truncated != (p.nextOffset != nil) {
		t.Fatalf("GET %s: truncated %v with nextOffset %v", path, p.truncated, p.nextOffset)
	}
	return p
}

// pageThrough follows nextOffset from offset 0 with limit and returns the rows joined.
func (l listing) pageThrough(t *testing.T, b *testBroker, limit int) []string {
	t.Helper()
	var joined []string
	offset := 0
	for range 1000 {
		p := l.get(t, b, fmt.Sprintf("limit=%d&offset=%d", limit, offset))
		if len(p.rows) > limit {
			t.Fatalf("%s: %d rows at limit %d", l.path, len(p.rows), limit)
		}
		joined = append(joined, p.rows...)
		if !p.truncated {
			return joined
		}
		if len(p.rows) == 0 || *p.nextOffset != offset+len(p.rows) {
			t.Fatalf("%s offset %d: %d rows, nextOffset %d", l.path, offset, len(p.rows), *p.nextOffset)
		}
		offset = *p.nextOffset
	}
	t.Fatalf("%s: more than 1000 pages", l.path)
	return nil
}

func decodeInto[T any](t *testing.T, raw []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decode %.300s: %v", raw, err)
	}
	return v
}

func namedRows(field, key string) func(t *testing.T, raw []byte) []string {
	return func(t *testing.T, raw []byte) []string {
		body := decodeInto[map[string]json.RawMessage](t, raw)
		out := []string{}
		for _, r := range decodeInto[[]map[string]any](t, body[field]) {
			out = append(out, fmt.Sprint(r[key]))
		}
		return out
	}
}

// pagedListings are the listings a wide queue ("wide", partitions p00…) with
// two groups on it and a few labeled queues fill.
func pagedListings() map[string]listing {
	return map[string]listing{
		"consumer groups": {path: "/api/v1/consumer-groups?", inHeaders: true, keyNames: 2, rows: func(t *testing.T, raw []byte) []string {
			out := []string{}
			for _, g := range decodeInto[[]struct{ Name, QueueName string }](t, raw) {
				out = append(out, g.Name+"/"+g.QueueName)
			}
			return out
		}},
		"lagging": {path: "/api/v1/consumer-groups/lagging?minLagSeconds=0", inHeaders: true, keyNames: 3, rows: func(t *testing.T, raw []byte) []string {
			out := []string{}
			for _, r := range decodeInto[[]map[string]any](t, raw) {
				out = append(out, fmt.Sprint(r["consumer_group"], "/", r["queue_name"], "/", r["partition_name"]))
			}
			return out
		}},
		"one group": {path: "/api/v1/consumer-groups/g1?", inHeaders: true, keyNames: 2, rows: func(t *testing.T, raw []byte) []string {
			byQueue := decodeInto[map[string]struct{ Partitions []struct{ Partition string } }](t, raw)
			queues := make([]string, 0, len(byQueue))
			for q := range byQueue {
				queues = append(queues, q)
			}
			slices.Sort(queues)
			out := []string{}
			for _, q := range queues {
				for _, p := range byQueue[q].Partitions {
					out = append(out, q+"/"+p.Partition)
				}
			}
			return out
		}},
		"namespaces":    {path: "/api/v1/resources/namespaces?", rows: namedRows("namespaces", "namespace"), keyNames: 1},
		"kv namespaces": {path: "/api/v1/resources/kv/namespaces?", rows: namedRows("namespaces", "namespace"), keyNames: 1},
		"tasks":         {path: "/api/v1/resources/tasks?", rows: namedRows("tasks", "task"), keyNames: 1},
		"queue detail":  {path: "/api/v1/resources/queues/wide?", rows: namedRows("partitions", "name"), keyNames: 1},
		"queue depth":   {path: "/api/v1/resources/queues/wide/depth?group=g1", rows: namedRows("partitions", "partition"), keyNames: 1},
		"queue status":  {path: "/api/v1/status/queues/wide?includePartitions=true", rows: namedRows("partitions", "name"), keyNames: 1},
	}
}

// fillWideQueue pushes one message to each of partitions partitions of
// "wide", subscribes groups g1 and g2 from the start (a cursor on every
// partition, each a message behind), labels a few queues and fills a few KV
// namespaces.
func fillWideQueue(t *testing.T, b *testBroker, partitions int) {
	t.Helper()
	items := make([]map[string]any, partitions)
	for i := range items {
		items[i] = map[string]any{"queue": "wide", "partition": fmt.Sprintf("p%05d", i), "payload": i}
	}
	for len(items) > 0 { // a push carries at most 10,000 items
		n := min(len(items), 5000)
		b.call(t, "POST", "/api/v1/push", map[string]any{"items": items[:n]}, nil)
		items = items[n:]
	}
	for _, g := range []string{"g1", "g2"} {
		b.pop(t, "/api/v1/pop/queue/wide?consumerGroup="+g+"&subscriptionMode=all&wait=false&batch=1")
	}
	for i := range 6 {
		q := fmt.Sprintf("labeled-%d", i)
		b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": i}}}, nil)
		b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q,
			"namespace": fmt.Sprintf("ns-%d", i), "task": fmt.Sprintf("task-%d", i), "options": map[string]any{}}, nil)
		b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup=g1&subscriptionMode=all&wait=false&batch=1")
		b.call(t, "PUT", fmt.Sprintf("/api/v1/kv/kv-%d/k", i), map[string]any{"value": i, "forever": true}, nil)
	}
}

// Every listing whose rows grow with the partitions, groups or labels pages
// with limit and offset: a page holds at most limit rows, says it was cut
// (truncated/nextOffset, or their headers where the answer is a bare array or
// keyed by queue), and paging through returns the whole listing once, in its order.
func TestTheGroupPartitionAndLabelListingsPageWithLimitAndOffset(t *testing.T) {
	b := newIsolatedTestBroker(t)
	fillWideQueue(t, b, 23)
	for name, l := range pagedListings() {
		t.Run(name, func(t *testing.T) {
			whole := l.get(t, b, "limit=10000")
			if whole.truncated || len(whole.rows) < 6 {
				t.Fatalf("the whole listing: %d rows, truncated %v", len(whole.rows), whole.truncated)
			}
			if len(slices.Compact(slices.Clone(whole.rows))) != len(whole.rows) {
				t.Fatalf("a row listed twice: %v", whole.rows)
			}
			for _, limit := range []int{1, 4, len(whole.rows) - 1, len(whole.rows)} {
				if got := l.pageThrough(t, b, limit); !slices.Equal(got, whole.rows) {
					t.Fatalf("limit %d: paging through gave\n%v\nthe whole listing is\n%v", limit, got, whole.rows)
				}
			}
			first := l.get(t, b, "limit=2")
			if len(first.rows) != 2 || !first.truncated || *first.nextOffset != 2 {
				t.Fatalf("the first page of 2: %v truncated %v nextOffset %v", first.rows, first.truncated, first.nextOffset)
			}
			past := l.get(t, b, fmt.Sprintf("limit=5&offset=%d", len(whole.rows)+3))
			if len(past.rows) != 0 || past.truncated {
				t.Fatalf("a page past the end: %v truncated %v", past.rows, past.truncated)
			}
		})
	}
	// The depth's totals stay those of the whole queue on every page.
	depth := pagedListings()["queue depth"].get(t, b, "limit=3&offset=6")
	if depth.body["pending"] != float64(23) || depth.body["partitionsPending"] != float64(23) {
		t.Fatalf("a depth page's totals: pending %v partitionsPending %v", depth.body["pending"], depth.body["partitionsPending"])
	}
}

// A client that does not page gets the default page of 10,000 rows and sees
// that the answer was cut, never a silent truncation.
func TestAListingPastTheDefaultPageSaysItWasCut(t *testing.T) {
	b := newIsolatedTestBroker(t)
	fillWideQueue(t, b, 10003)
	for _, name := range []string{"queue detail", "queue status", "queue depth", "one group", "lagging"} {
		l := pagedListings()[name]
		p := l.get(t, b, "")
		if len(p.rows) != 10000 || !p.truncated || *p.nextOffset != 10000 {
			t.Errorf("%s without limit: %d rows, truncated %v, nextOffset %v", name, len(p.rows), p.truncated, p.nextOffset)
		}
	}
}

// Paging parameters out of their bounds are refused before anything is read.
func TestBadPagingParametersAnswer400(t *testing.T) {
	b := newIsolatedTestBroker(t)
	fillWideQueue(t, b, 3)
	for name, l := range pagedListings() {
		for _, query := range []string{"limit=0", "limit=10001", "limit=-1", "limit=x", "offset=-1", "offset=x"} {
			resp, err := http.Get(b.URL + l.path + "&" + query)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e errorBody
			_ = json.Unmarshal(raw, &e)
			if resp.StatusCode != http.StatusBadRequest || e.Code != CodeValidation || e.Error == "" {
				t.Errorf("%s %s: %d %.200s", name, query, resp.StatusCode, raw)
			}
		}
	}
}
