package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// keyedListings are the listings that page by key: the two that span every group, one
// group's cursors (of g1), the partitions of the queue "wide" (detail, depth, status), the
// namespaces, the tasks and the KV namespaces.
func keyedListings() map[string]listing {
	out := map[string]listing{}
	for name, l := range pagedListings() {
		if l.keyNames > 0 {
			out[name] = l
		}
	}
	return out
}

// wantBadAfters fails the test unless each query added to path answers 400
// bad_request about after.
func (b *testBroker) wantBadAfters(t *testing.T, path string, queries ...string) {
	t.Helper()
	for _, query := range queries {
		var e errorBody
		if status, _ := b.call(t, "GET", path+"&"+query, nil, &e); status != http.StatusBadRequest || e.Code != CodeBadRequest || !strings.Contains(e.Error, "after") {
			t.Errorf("%s&%s: %d %+v", path, query, status, e)
		}
	}
}

// keyedPage is one page asked for with query, its rows and the places of the page after it.
type keyedPage struct {
	rows       []string
	truncated  bool
	nextAfter  string
	nextOffset string
}

func (l listing) keyed(t *testing.T, b *testBroker, query string) keyedPage {
	t.Helper()
	raw, header := b.getOK(t, l.path+"&"+query)
	if l.inHeaders {
		return keyedPage{rows: l.rows(t, raw), truncated: header.Get("X-Lanes-Truncated") == "true",
			nextAfter: header.Get("X-Lanes-Next-After"), nextOffset: header.Get("X-Lanes-Next-Offset")}
	}
	var paging struct {
		Truncated  *bool   `json:"truncated"`
		NextAfter  *string `json:"nextAfter"`
		NextOffset *int    `json:"nextOffset"`
	}
	if err := json.Unmarshal(raw, &paging); err != nil || paging.Truncated == nil {
		t.Fatalf("GET %s&%s: no truncated field (%v): %.300s", l.path, query, err, raw)
	}
	p := keyedPage{rows: l.rows(t, raw), truncated: *paging.Truncated}
	if paging.NextAfter != nil {
		p.nextAfter = *paging.NextAfter
	}
	if paging.NextOffset != nil {
		p.nextOffset = strconv.Itoa(*paging.NextOffset)
	}
	return p
}

// pageThroughByKey follows X-Lanes-Next-After from the first page with limit
// and returns the rows joined.
func (l listing) pageThroughByKey(t *testing.T, b *testBroker, limit int) []string {
	t.Helper()
	var joined []string
	query := fmt.Sprintf("limit=%d", limit)
	for range 1000 {
		p := l.keyed(t, b, query)
		if len(p.rows) > limit {
			t.Fatalf("%s %s: %d rows", l.path, query, len(p.rows))
		}
		joined = append(joined, p.rows...)
		if !p.truncated {
			if p.nextAfter != "" || p.nextOffset != "" {
				t.Fatalf("%s %s: the last page names a next one: after %q offset %q", l.path, query, p.nextAfter, p.nextOffset)
			}
			return joined
		}
		if p.nextAfter == "" || len(p.rows) == 0 {
			t.Fatalf("%s %s: a cut page of %d rows without X-Lanes-Next-After", l.path, query, len(p.rows))
		}
		if joined := len(joined) > len(p.rows); joined && p.nextOffset != "" {
			t.Fatalf("%s %s: a page asked for by key gave X-Lanes-Next-Offset %s", l.path, query, p.nextOffset)
		}
		query = fmt.Sprintf("limit=%d&after=%s", limit, url.QueryEscape(p.nextAfter))
	}
	t.Fatalf("%s: more than 1000 pages", l.path)
	return nil
}

// Paging the group and partition listings by key gives every row once, in
// the listing's order, whatever the page size.
func TestTheListingsPagedByKeyGiveEveryRowOnceInOrder(t *testing.T) {
	b := newIsolatedTestBroker(t)
	fillWideQueue(t, b, 23)
	for name, l := range keyedListings() {
		t.Run(name, func(t *testing.T) {
			whole := l.keyed(t, b, "limit=10000")
			if whole.truncated || len(whole.rows) < 6 {
				t.Fatalf("the whole listing: %d rows, truncated %v", len(whole.rows), whole.truncated)
			}
			for _, limit := range []int{1, 4, len(whole.rows) - 1, len(whole.rows)} {
				if got := l.pageThroughByKey(t, b, limit); !slices.Equal(got, whole.rows) {
					t.Fatalf("limit %d: paging by key gave\n%v\nthe whole listing is\n%v", limit, got, whole.rows)
				}
			}
			// The first page, asked for without either, names both places of the next.
			first := l.keyed(t, b, "limit=2")
			if !first.truncated || first.nextAfter == "" || first.nextOffset != "2" {
				t.Fatalf("the first page of 2: %+v", first)
			}
		})
	}
}

// groupsBeforeAndAfter fills queues q1…q3 with partitions p0…p5 each, a
// message on every partition, and subscribes groups "a" and "b" from the
// start, so every cursor lags; "a" sorts first.
func groupsBeforeAndAfter(t *testing.T, b *testBroker) {
	t.Helper()
	for _, q := range []string{"q1", "q2", "q3"} {
		items := []map[string]any{}
		for i := range 6 {
			items = append(items, map[string]any{"queue": q, "partition": fmt.Sprintf("p%d", i), "payload": i})
		}
		b.call(t, "POST", "/api/v1/push", map[string]any{"items": items}, nil)
		for _, g := range []string{"a", "b"} {
			b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup="+g+"&subscriptionMode=all&wait=false&batch=1")
		}
	}
}

// A group that sorts first and loses rows before the page's end between two
// pages (its cursors on q1 deleted here; cursors catching up leave the lagging
// listing the same way) shifts every offset after them: the second page by
// offset skips rows. The second page by key starts where the first ended.
func TestAnEarlierGroupLosingRowsBetweenPagesSkipsRowsByOffsetButNotByKey(t *testing.T) {
	for name, c := range map[string]struct {
		firstPage, byOffset, byKey []string
	}{
		"lagging": {
			firstPage: []string{"a/q1/p0", "a/q1/p1", "a/q1/p2", "a/q1/p3", "a/q1/p4", "a/q1/p5", "a/q2/p0", "a/q2/p1"},
			byOffset:  []string{"a/q3/p2", "a/q3/p3", "a/q3/p4", "a/q3/p5", "b/q1/p0", "b/q1/p1", "b/q1/p2", "b/q1/p3"},
			byKey:     []string{"a/q2/p2", "a/q2/p3", "a/q2/p4", "a/q2/p5", "a/q3/p0", "a/q3/p1", "a/q3/p2", "a/q3/p3"},
		},
		"consumer groups": {
			firstPage: []string{"a/q1", "a/q2"},
			byOffset:  []string{"b/q1", "b/q2"},
			byKey:     []string{"a/q3", "b/q1"},
		},
		"one group": { // group a's cursors, rows of its own that go before the page's end
			firstPage: []string{"q1/p0", "q1/p1", "q1/p2", "q1/p3", "q1/p4", "q1/p5", "q2/p0", "q2/p1"},
			byOffset:  []string{"q3/p2", "q3/p3", "q3/p4", "q3/p5"},
			byKey:     []string{"q2/p2", "q2/p3", "q2/p4", "q2/p5", "q3/p0", "q3/p1", "q3/p2", "q3/p3"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			b := newIsolatedTestBroker(t)
			groupsBeforeAndAfter(t, b)
			l := keyedListings()[name]
			if name == "one group" {
				l.path = "/api/v1/consumer-groups/a?"
			}
			limit := len(c.firstPage)
			first := l.keyed(t, b, fmt.Sprintf("limit=%d", limit))
			if !slices.Equal(first.rows, c.firstPage) || !first.truncated {
				t.Fatalf("the first page: %v truncated %v", first.rows, first.truncated)
			}
			if status, _ := b.call(t, "DELETE", "/api/v1/consumer-groups/a/queues/q1", nil, nil); status != http.StatusOK {
				t.Fatalf("delete group a on q1: %d", status)
			}
			byOffset := l.keyed(t, b, fmt.Sprintf("limit=%d&offset=%s", limit, first.nextOffset))
			if !slices.Equal(byOffset.rows, c.byOffset) {
				t.Fatalf("the second page by offset: %v, want %v (the rows an offset skips)", byOffset.rows, c.byOffset)
			}
			byKey := l.keyed(t, b, fmt.Sprintf("limit=%d&after=%s", limit, url.QueryEscape(first.nextAfter)))
			if !slices.Equal(byKey.rows, c.byKey) {
				t.Fatalf("the second page by key: %v, want %v", byKey.rows, c.byKey)
			}
		})
	}
}

// An after sent with an offset, or one that is not a key of the listing,
// answers 400 bad_request.
func TestABadAfterAnswers400BadRequest(t *testing.T) {
	b := newIsolatedTestBroker(t)
	fillWideQueue(t, b, 3)
	for _, l := range keyedListings() {
		good := l.keyed(t, b, "limit=1").nextAfter
		bad := []string{
			"offset=0&after=" + url.QueryEscape(good),
			"offset=1&after=" + url.QueryEscape(good),
			"after=",
			"after=%21%21%21",
			"after=" + base64.StdEncoding.EncodeToString([]byte(`["g1","wide"]`)) + "%3D",
			"after=" + base64.RawURLEncoding.EncodeToString([]byte(`{"g":"g1"}`)),
			"after=" + base64.RawURLEncoding.EncodeToString([]byte(`["g1",2,"p"]`)),
			"after=" + listKey("g1", "wide", "p00000", "x"),
			"after=" + listKey("p00000\x00"),
			"after=" + listKey("g1\x00", "wide", "p00000"),
			"after=" + listKey("g1\x00", "wide"),
			"after=" + listKey(),
		}
		if l.keyNames != 1 {
			bad = append(bad, "after="+listKey("g1"))
		}
		b.wantBadAfters(t, l.path, bad...)
	}
}

// A partition created (a push to a new partition name) before the page's end
// between two pages shifts every partition after it: the second page by
// offset repeats the first page's last row; one removed makes it skip one.
// The second page by key starts where the first ended either way.
func TestAPartitionCreatedOrRemovedBetweenPagesShiftsTheOffsetButNotTheKey(t *testing.T) {
	for _, change := range []string{"created", "removed"} {
		for _, name := range []string{"queue detail", "queue depth", "queue status"} {
			t.Run(change+"/"+name, func(t *testing.T) {
				b := newIsolatedTestBroker(t)
				fillWideQueue(t, b, 10)
				l := keyedListings()[name]
				first := l.keyed(t, b, "limit=4")
				if want := []string{"p00000", "p00001", "p00002", "p00003"}; !slices.Equal(first.rows, want) || !first.truncated {
					t.Fatalf("the first page: %v truncated %v", first.rows, first.truncated)
				}
				byOffset := []string{"p00003", "p00004", "p00005", "p00006"}
				if change == "created" {
					b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{
						{"queue": "wide", "partition": "a-new", "payload": 1}}}, nil)
				} else {
					// No route removes one partition yet (a queue's go all at once);
					// one gone, as an idle-partition cleanup would make it go.
					if _, err := b.Pool.Exec(context.Background(), `DELETE FROM lanes.partitions WHERE name = 'p00001'`); err != nil {
						t.Fatal(err)
					}
					byOffset = []string{"p00005", "p00006", "p00007", "p00008"}
				}
				if got := l.keyed(t, b, "limit=4&offset="+first.nextOffset).rows; !slices.Equal(got, byOffset) {
					t.Fatalf("the second page by offset: %v, want %v (the rows an offset repeats or skips)", got, byOffset)
				}
				byKey := l.keyed(t, b, "limit=4&after="+url.QueryEscape(first.nextAfter))
				if want := []string{"p00004", "p00005", "p00006", "p00007"}; !slices.Equal(byKey.rows, want) || !byKey.truncated {
					t.Fatalf("the second page by key: %v truncated %v, want %v", byKey.rows, byKey.truncated, want)
				}
				if byKey.nextOffset != "" {
					t.Fatalf("a page asked for by key gave nextOffset %s", byKey.nextOffset)
				}
			})
		}
	}
}

// A namespace, task or KV namespace that sorts before the page's end and goes
// between two pages (its one queue deleted, its one key deleted) shifts every
// later row: the second page by offset skips one. The second page by key
// starts where the first ended.
func TestALabelGoneBetweenPagesSkipsARowByOffsetButNotByKey(t *testing.T) {
	for name, c := range map[string]struct {
		prefix, remove string
	}{
		"namespaces":    {"ns-", "/api/v1/resources/queues/labeled-1"},
		"tasks":         {"task-", "/api/v1/resources/queues/labeled-1"},
		"kv namespaces": {"kv-", "/api/v1/kv/kv-1/k"},
	} {
		t.Run(name, func(t *testing.T) {
			b := newIsolatedTestBroker(t)
			fillWideQueue(t, b, 1)
			l := keyedListings()[name]
			rows := func(ids ...int) []string {
				var out []string
				for _, id := range ids {
					out = append(out, fmt.Sprintf("%s%d", c.prefix, id))
				}
				return out
			}
			first := l.keyed(t, b, "limit=3")
			if !slices.Equal(first.rows, rows(0, 1, 2)) || !first.truncated {
				t.Fatalf("the first page: %v truncated %v", first.rows, first.truncated)
			}
			if status, _ := b.call(t, "DELETE", c.remove, nil, nil); status != http.StatusOK {
				t.Fatalf("DELETE %s: %d", c.remove, status)
			}
			if got := l.keyed(t, b, "limit=3&offset="+first.nextOffset).rows; !slices.Equal(got, rows(4, 5)) {
				t.Fatalf("the second page by offset: %v, want %v (the row an offset skips)", got, rows(4, 5))
			}
			byKey := l.keyed(t, b, "limit=3&after="+url.QueryEscape(first.nextAfter))
			if !slices.Equal(byKey.rows, rows(3, 4, 5)) || byKey.truncated {
				t.Fatalf("the second page by key: %v truncated %v, want %v", byKey.rows, byKey.truncated, rows(3, 4, 5))
			}
		})
	}
}

// queueListingPage is one page of a queue listing (GET /resources/queues or
// /status/queues) asked for with query: its queue names, nextAfter and total.
type queueListingPage struct {
	names     []string
	nextAfter string
	total     *int
}

func queueListing(t *testing.T, b *testBroker, path, query string) queueListingPage {
	t.Helper()
	raw, _ := b.getOK(t, path+"?"+query)
	var body struct {
		Queues     []struct{ Name string }
		NextAfter  *string `json:"nextAfter"`
		Pagination struct{ Total *int }
	}
	if err := json.Unmarshal(raw, &body); err != nil || !bytes.Contains(raw, []byte(`"nextAfter":`)) {
		t.Fatalf("GET %s?%s: %v: %.300s", path, query, err, raw)
	}
	p := queueListingPage{total: body.Pagination.Total}
	for _, q := range body.Queues {
		p.names = append(p.names, q.Name)
	}
	if body.NextAfter != nil {
		p.nextAfter = *body.NextAfter
	}
	return p
}

var queueListingPaths = []string{"/api/v1/resources/queues", "/api/v1/status/queues"}

// The queue listings paged by key give every queue once, by name, whatever
// the page size, with the total of the whole listing on every page.
func TestTheQueueListingsPagedByKeyGiveEveryQueueOnceInOrder(t *testing.T) {
	b := newIsolatedTestBroker(t)
	fillWideQueue(t, b, 1)
	for _, path := range queueListingPaths {
		whole := queueListing(t, b, path, "limit=1000")
		if len(whole.names) != 7 || whole.nextAfter != "" || *whole.total != 7 {
			t.Fatalf("%s: the whole listing: %v next %q total %v", path, whole.names, whole.nextAfter, *whole.total)
		}
		for _, limit := range []int{1, 3, 6, 7} {
			var joined []string
			query := fmt.Sprintf("limit=%d", limit)
			for range 100 {
				p := queueListing(t, b, path, query)
				if len(p.names) > limit || *p.total != 7 {
					t.Fatalf("%s %s: %v total %v", path, query, p.names, *p.total)
				}
				joined = append(joined, p.names...)
				if p.nextAfter == "" {
					break
				}
				query = fmt.Sprintf("limit=%d&after=%s", limit, url.QueryEscape(p.nextAfter))
			}
			if !slices.Equal(joined, whole.names) {
				t.Fatalf("%s limit %d: paging by key gave %v, the whole listing is %v", path, limit, joined, whole.names)
			}
		}
		// Filters combine with the key.
		if p := queueListing(t, b, path, "namespace=ns-2&after="+listKey("labeled-1")); !slices.Equal(p.names, []string{"labeled-2"}) {
			t.Fatalf("%s: namespace ns-2 after labeled-1: %v", path, p.names)
		}
		if p := queueListing(t, b, path, "namespace=ns-2&after="+listKey("labeled-2")); len(p.names) != 0 || *p.total != 1 {
			t.Fatalf("%s: namespace ns-2 after labeled-2: %v total %v", path, p.names, *p.total)
		}
	}
}

// A queue that sorts before the page's end and is deleted between two pages
// makes the second page by offset skip a queue; by key it starts where the
// first ended. An after with an offset, or a malformed one, answers 400.
func TestAQueueDeletedBetweenPagesSkipsAQueueByOffsetButNotByKey(t *testing.T) {
	for _, path := range queueListingPaths {
		t.Run(path, func(t *testing.T) {
			b := newIsolatedTestBroker(t)
			fillWideQueue(t, b, 1)
			first := queueListing(t, b, path, "limit=3")
			if !slices.Equal(first.names, []string{"labeled-0", "labeled-1", "labeled-2"}) || first.nextAfter == "" {
				t.Fatalf("the first page: %v next %q", first.names, first.nextAfter)
			}
			if status, _ := b.call(t, "DELETE", "/api/v1/resources/queues/labeled-1", nil, nil); status != http.StatusOK {
				t.Fatalf("delete labeled-1: %d", status)
			}
			if got := queueListing(t, b, path, "limit=3&offset=3").names; !slices.Equal(got, []string{"labeled-4", "labeled-5", "wide"}) {
				t.Fatalf("the second page by offset: %v (labeled-3 is the queue an offset skips)", got)
			}
			byKey := queueListing(t, b, path, "limit=3&after="+url.QueryEscape(first.nextAfter))
			if !slices.Equal(byKey.names, []string{"labeled-3", "labeled-4", "labeled-5"}) || byKey.nextAfter == "" {
				t.Fatalf("the second page by key: %v next %q", byKey.names, byKey.nextAfter)
			}
			b.wantBadAfters(t, path+"?limit=3", "offset=0&after="+url.QueryEscape(first.nextAfter), "after=", "after=%21",
				"after="+listKey("a", "b"), "after="+listKey("a\x00"))
		})
	}
}
