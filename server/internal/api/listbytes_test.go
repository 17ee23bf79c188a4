package api

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/lanesmq/lanes/server/internal/engine"
)

// listBudget is the answer byte budget of the budgeted test brokers: two
// 20 KB payloads of a message listing (each sent twice, data and payload), or
// three of a dead-letter listing, fit in it; a third (fourth) does not.
const listBudget = 100_000

func getPage(t *testing.T, b *testBroker, path string) listingPage {
	t.Helper()
	raw, _ := b.getOK(t, path)
	var p listingPage
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if p.Truncated == nil {
		t.Fatalf("GET %s: no truncated field: %.300s", path, raw)
	}
	if *p.Truncated != (p.NextOffset != nil) {
		t.Fatalf("GET %s: truncated %v with nextOffset %v", path, *p.Truncated, p.NextOffset)
	}
	p.bodyBytes = len(raw)
	return p
}

// pageThrough follows nextOffset from offset 0 and returns every page.
func pageThrough(t *testing.T, b *testBroker, path string, limit int) []listingPage {
	t.Helper()
	var pages []listingPage
	offset := 0
	for range 100 {
		p := getPage(t, b, fmt.Sprintf("%s&limit=%d&offset=%d", path, limit, offset))
		if len(p.Messages) == 0 {
			t.Fatalf("%s offset %d: empty page (truncated %v)", path, offset, *p.Truncated)
		}
		pages = append(pages, p)
		if !*p.Truncated {
			return pages
		}
		if *p.NextOffset <= offset {
			t.Fatalf("%s: nextOffset %d does not move past offset %d", path, *p.NextOffset, offset)
		}
		offset = *p.NextOffset
	}
	t.Fatalf("%s: more than 100 pages", path)
	return nil
}

// checkPages wants the pages, joined, to be the whole listing in its order,
// each page with at least one row and within the budget unless it holds one
// row, the row over the budget alone, and the first page cut short of limit.
func checkPages(t *testing.T, pages []listingPage, whole []string, limit int, over string) {
	t.Helper()
	var joined []string
	for i, p := range pages {
		joined = append(joined, p.ids()...)
		if len(p.Messages) > 1 && p.bodyBytes > listBudget+8000 {
			t.Errorf("page %d: %d rows in %d bytes, over the budget of %d", i, len(p.Messages), p.bodyBytes, listBudget)
		}
		if slices.Contains(p.ids(), over) && len(p.Messages) != 1 {
			t.Errorf("page %d: the row over the budget came with others: %v", i, p.ids())
		}
		if p.Total != len(p.Messages) {
			t.Errorf("page %d: total %d, %d rows", i, p.Total, len(p.Messages))
		}
	}
	if len(pages[0].Messages) >= limit {
		t.Errorf("the first page holds %d rows, limit %d: the budget did not cut it", len(pages[0].Messages), limit)
	}
	if !slices.Equal(joined, whole) {
		t.Fatalf("paging through gave\n%v\nthe whole listing is\n%v", joined, whole)
	}
}

// A message listing of large payloads stops at the answer byte budget, with
// at least one row, says truncated and where the next page starts; paging
// through returns every message once, in the listing's order.
func TestAMessageListingStopsAtTheByteBudget(t *testing.T) {
	b := newTestBrokerWith(t, engine.Config{ListMaxBytes: listBudget})
	whole := newTestBrokerWith(t, engine.Config{})
	q := uniqueQueue(t)
	pushBudgetMessages(t, b, q)

	checkListingPaging(t, b, whole, "/api/v1/messages?queue="+url.QueryEscape(q), 13)
}

// checkListingPaging checks a listing of rows rows, among them one "huge"
// row over the budget: paging through b (with the budget) at two limits
// returns what whole (without it) lists in one page, each row once; a page cut
// by its limit says there is more, too, and the last page says there is not.
func checkListingPaging(t *testing.T, b, whole *testBroker, path string, rows int) {
	t.Helper()
	all := getPage(t, whole, path+"&limit=1000")
	if len(all.Messages) != rows || *all.Truncated {
		t.Fatalf("the unbounded listing: %d rows, truncated %v", len(all.Messages), *all.Truncated)
	}
	for _, limit := range []int{10, 1000} {
		checkPages(t, pageThrough(t, b, path, limit), all.ids(), limit, "huge")
	}
	p := getPage(t, whole, path+"&limit=2&offset=1")
	if len(p.Messages) != 2 || !*p.Truncated || *p.NextOffset != 3 {
		t.Fatalf("a page cut by its limit: %v truncated %v nextOffset %v", p.ids(), *p.Truncated, p.NextOffset)
	}
	last := getPage(t, whole, path+fmt.Sprintf("&limit=2&offset=%d", rows-2))
	if len(last.Messages) != 2 || *last.Truncated {
		t.Fatalf("the last page: %v truncated %v", last.ids(), *last.Truncated)
	}
}

// deadLetterPayload pushes one message with payload to (q, partition), pops it and acks it "dlq".
func (b *testBroker) deadLetterPayload(t *testing.T, q, partition, txn string, payload any) {
	t.Helper()
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{
		{"queue": q, "partition": partition, "transactionId": txn, "payload": payload}}}, nil)
	var popped popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+q+"/partition/"+partition+"?wait=false", nil, &popped)
	if len(popped.Messages) != 1 {
		t.Fatalf("pop %s: %+v", partition, popped)
	}
	var acked []map[string]any
	b.call(t, "POST", "/api/v1/ack", map[string]any{"transactionId": txn, "partitionId": popped.Messages[0].PartitionID,
		"leaseId": popped.LeaseID, "status": "dlq", "error": "poison"}, &acked)
	if len(acked) != 1 || acked[0]["dlq"] != true {
		t.Fatalf("ack dlq: %+v", acked)
	}
}

// The dead-letter listing has the same budget and the same paging signals.
func TestADeadLetterListingStopsAtTheByteBudget(t *testing.T) {
	b := newTestBrokerWith(t, engine.Config{ListMaxBytes: listBudget})
	whole := newTestBrokerWith(t, engine.Config{})
	q := uniqueQueue(t)
	big := strings.Repeat("x", 30_000)
	for i := range 7 {
		b.deadLetterPayload(t, q, fmt.Sprintf("p%d", i%2), fmt.Sprintf("big-%d", i), big)
	}
	b.deadLetterPayload(t, q, "p0", "huge", strings.Repeat("y", 3*listBudget/2))
	for i := range 3 {
		b.deadLetterPayload(t, q, "p1", fmt.Sprintf("small-%d", i), i)
	}

	checkListingPaging(t, b, whole, "/api/v1/dlq?queue="+url.QueryEscape(q), 11)
}

// The timer listing has the same budget, counting each payload as its base64
// on the wire, and says where the rest starts with its own truncated and
// nextAfter; paging through returns every timer once.
func TestATimerListingStopsAtTheByteBudget(t *testing.T) {
	b := newTestBrokerWith(t, engine.Config{ListMaxBytes: listBudget})
	q := uniqueQueue(t)
	schedule := func(key string, payloadBytes int) {
		t.Helper()
		payload := base64.StdEncoding.EncodeToString([]byte(`"` + strings.Repeat("x", payloadBytes-2) + `"`))
		var res map[string]any
		if status, _ := b.call(t, "POST", "/api/v1/timers", map[string]any{"operations": []map[string]any{
			{"op": "schedule", "queue": q, "timerKey": key, "delayMs": 3_600_000, "payload": payload}}}, &res); status != http.StatusOK {
			t.Fatalf("schedule %s: %d %v", key, status, res)
		}
	}
	var want []string
	for i := range 7 {
		key := fmt.Sprintf("k%02d", i)
		size := 20_000
		if i == 3 {
			size = listBudget // 133 KB as base64, over the budget alone
		}
		schedule(key, size)
		want = append(want, key)
	}
	type timerPage struct {
		Rows      []struct{ TimerKey string } `json:"rows"`
		Truncated bool                        `json:"truncated"`
		NextAfter *string                     `json:"nextAfter"`
	}
	var got []string
	after, pages := "", 0
	for ; pages < 20; pages++ {
		var p timerPage
		if status, _ := b.call(t, "GET", "/api/v1/timers/"+url.PathEscape(q)+"?limit=10&after="+url.QueryEscape(after), nil, &p); status != http.StatusOK || len(p.Rows) == 0 {
			t.Fatalf("page after %q: %d, %d rows", after, status, len(p.Rows))
		}
		var keys []string
		for _, r := range p.Rows {
			keys = append(keys, r.TimerKey)
		}
		if len(keys) > 4 || (slices.Contains(keys, "k03") && len(keys) != 1) {
			t.Fatalf("page after %q holds %v: past the budget", after, keys)
		}
		got = append(got, keys...)
		if !p.Truncated {
			break
		}
		after = *p.NextAfter
	}
	if !slices.Equal(got, want) || pages < 2 {
		t.Fatalf("paging through gave %v in %d pages, want %v", got, pages+1, want)
	}
}

// A dead letter stored without a payload (SQL NULL, from older brokers) is
// counted as the null its answer carries, so it never stops a page early.
func TestDeadLettersWithoutAPayloadFitAPage(t *testing.T) {
	b := newTestBrokerWith(t, engine.Config{ListMaxBytes: listBudget})
	q := uniqueQueue(t)
	for i := range 3 {
		b.deadLetterPayload(t, q, "p", fmt.Sprintf("d%d", i), i)
	}
	if _, err := b.Pool.Exec(t.Context(), `UPDATE lanes.dlq d SET payload = NULL, payload_text = NULL
		FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id WHERE d.partition_id = p.id AND q.name = $1`, q); err != nil {
		t.Fatal(err)
	}
	p := getPage(t, b, "/api/v1/dlq?limit=10&queue="+url.QueryEscape(q))
	if !slices.Equal(p.ids(), []string{"d2", "d1", "d0"}) || *p.Truncated {
		t.Fatalf("page %v truncated %v, want all three", p.ids(), *p.Truncated)
	}
}

// kvConsolePage is one page of the KV console listing.
type kvConsolePage struct {
	Rows []struct {
		Key string `json:"key"`
	} `json:"rows"`
	Truncated bool    `json:"truncated"`
	NextAfter *string `json:"nextAfter"`
	Bytes     int     `json:"bytes"`
}

// kvConsolePages pages through ns on b with limit and returns each page's keys.
func kvConsolePages(t *testing.T, b *testBroker, ns string, limit int) [][]string {
	t.Helper()
	var pages [][]string
	after := ""
	for range 100 {
		var p kvConsolePage
		if status, _ := b.call(t, "POST", "/api/v1/resources/kv/list", map[string]any{"namespace": ns, "after": after, "limit": limit}, &p); status != http.StatusOK {
			t.Fatalf("kv list after %q: %d", after, status)
		}
		keys := []string{}
		for _, r := range p.Rows {
			keys = append(keys, r.Key)
		}
		pages = append(pages, keys)
		if !p.Truncated {
			return pages
		}
		if p.NextAfter == nil || *p.NextAfter != keys[len(keys)-1] {
			t.Fatalf("kv list after %q: truncated, nextAfter %v, keys %v", after, p.NextAfter, keys)
		}
		after = *p.NextAfter
	}
	t.Fatal("kv list: more than 100 pages")
	return nil
}

// The KV console listing stops at LANES_LIST_MAX_BYTES, as the other
// listings do, instead of a fixed 4 MiB of values: a page holds the values
// that fit, a value over the budget comes alone, and 0 is unbounded.
func TestTheKVConsoleListingStopsAtTheListingByteBudget(t *testing.T) {
	b := newTestBrokerWith(t, engine.Config{ListMaxBytes: listBudget})
	whole := newTestBrokerWith(t, engine.Config{})
	ns := uniqueQueue(t)
	value := strings.Repeat("v", 30_000) // three fit in the budget, a fourth does not
	for _, key := range []string{"a", "b", "c", "d", "e"} {
		b.call(t, "PUT", "/api/v1/kv/"+ns+"/"+key, map[string]any{"value": value, "forever": true}, nil)
	}
	b.call(t, "PUT", "/api/v1/kv/"+ns+"/f", map[string]any{"value": strings.Repeat("h", 3*listBudget/2), "forever": true}, nil)
	b.call(t, "PUT", "/api/v1/kv/"+ns+"/g", map[string]any{"value": 1, "forever": true}, nil)

	if got := fmt.Sprint(kvConsolePages(t, b, ns, 100)); got != "[[a b c] [d e] [f] [g]]" {
		t.Fatalf("paging with the budget: %s", got)
	}
	if got := fmt.Sprint(kvConsolePages(t, b, ns, 2)); got != "[[a b] [c d] [e] [f] [g]]" {
		t.Fatalf("paging with the budget and limit 2: %s", got)
	}
	if got := fmt.Sprint(kvConsolePages(t, whole, ns, 100)); got != "[[a b c d e f g]]" {
		t.Fatalf("unbounded: %s", got)
	}
	var keysOnly kvConsolePage
	b.call(t, "POST", "/api/v1/resources/kv/list", map[string]any{"namespace": ns, "keysOnly": true}, &keysOnly)
	if len(keysOnly.Rows) != 7 || keysOnly.Truncated || keysOnly.Bytes != 0 {
		t.Fatalf("keys only carry no values, so the budget leaves them whole: %d rows, truncated %v, %d bytes",
			len(keysOnly.Rows), keysOnly.Truncated, keysOnly.Bytes)
	}
}

// pushBudgetMessages pushes 13 messages to q, most of 20 KB and one of 1.5
// byte budgets, spread so a budget cuts pages inside a segment and between
// partitions, and returns their transaction ids in the listing's order.
func pushBudgetMessages(t *testing.T, b *testBroker, q string) []string {
	t.Helper()
	big := strings.Repeat("x", 20_000)
	var oneSegment []map[string]any
	for i := range 5 {
		oneSegment = append(oneSegment, map[string]any{"queue": q, "partition": "a", "transactionId": fmt.Sprintf("seg-%d", i), "payload": big})
	}
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": oneSegment}, nil)
	for i := range 4 {
		b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{
			{"queue": q, "partition": fmt.Sprintf("p%d", i%2), "transactionId": fmt.Sprintf("one-%d", i), "payload": big}}}, nil)
	}
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{
		{"queue": q, "partition": "a", "transactionId": "huge", "payload": strings.Repeat("y", 3*listBudget/2)}}}, nil)
	b.push(t, q, "a", "s1", "s2", "s3")
	return []string{"s3", "s2", "s1", "huge", "one-3", "one-2", "one-1", "one-0", "seg-4", "seg-3", "seg-2", "seg-1", "seg-0"}
}
