package api

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"slices"
	"testing"
	"time"
)

// A walk of the message listing without from or to takes its first page, then
// the rest later. The messages of the first page's window, here ones created
// at its lower edge an hour ago, are listed by the later pages too, though a
// window computed from their own clock would leave them out.
func TestAMessageWalkKeepsTheWindowOfItsFirstPage(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	for _, id := range []string{"m0", "m1", "m2"} {
		b.push(t, q, "p", id)
	}
	// One instant for the three, so a first page listing m2 had m1 and m0 in
	// its window too; two seconds inside the default window's lower edge.
	created := time.Now().Add(-time.Hour + 2*time.Second)
	if _, err := b.Pool.Exec(t.Context(), `UPDATE lanes.segments SET created_at = $1
		WHERE partition_id IN (SELECT p.id FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $2)`,
		created, q); err != nil {
		t.Fatal(err)
	}
	path := "/api/v1/messages?queue=" + url.QueryEscape(q) + "&limit=1"
	first := getBodyKeyPage(t, b, path)
	if !slices.Equal(first.ids(), []string{"m2"}) || first.NextAfter == nil {
		t.Fatalf("the first page: %v nextAfter %v (was it asked for more than 2 s after the UPDATE?)", first.ids(), first.NextAfter)
	}
	// The clock moves past the messages: a fresh listing no longer holds them.
	time.Sleep(time.Until(created.Add(time.Hour + 500*time.Millisecond)))
	if now := getBodyKeyPage(t, b, path); len(now.Messages) != 0 {
		t.Fatalf("a first page asked for now: %v, want none", now.ids())
	}
	var placeOnly []string
	if err := json.Unmarshal(decodeKey(t, *first.NextAfter), &placeOnly); err != nil || len(placeOnly) < 3 {
		t.Fatalf("the key %q: %v %v", *first.NextAfter, placeOnly, err)
	}
	// A key of a broker before the window was carried: the message's place alone.
	oldKey := listKey(placeOnly[:3]...)
	at := func(t time.Time) string { return url.QueryEscape(t.UTC().Format(time.RFC3339Nano)) }
	for _, c := range []struct {
		name, query string
		want        []string
	}{
		{"by the key", "&after=" + url.QueryEscape(*first.NextAfter), []string{"m1", "m0"}},
		// A bound the page names wins over the key's.
		{"by the key, from after them", "&after=" + url.QueryEscape(*first.NextAfter) + "&from=" + at(created.Add(time.Microsecond)), []string{}},
		{"by the key, to before them", "&after=" + url.QueryEscape(*first.NextAfter) + "&to=" + at(created.Add(-2*time.Minute)), []string{}},
		{"by the key, from and to around them", "&after=" + url.QueryEscape(*first.NextAfter) +
			"&from=" + at(created) + "&to=" + at(created), []string{"m1", "m0"}},
		// An old key keeps the window of the page's own clock, as its broker did.
		{"by an old key", "&after=" + url.QueryEscape(oldKey), []string{}},
		{"by an old key, from before them", "&after=" + url.QueryEscape(oldKey) + "&from=" + at(created), []string{"m1", "m0"}},
	} {
		if got := walkMessagesAfter(t, b, path+c.query); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// walkMessagesAfter follows nextAfter from the page query asks for, keeping
// its filters, and returns the ids of every page.
func walkMessagesAfter(t *testing.T, b *testBroker, query string) []string {
	t.Helper()
	ids := []string{}
	for range 100 {
		p := getBodyKeyPage(t, b, query)
		ids = append(ids, p.ids()...)
		if !*p.Truncated {
			return ids
		}
		u, err := url.Parse(query)
		if err != nil {
			t.Fatal(err)
		}
		values := u.Query()
		values.Set("after", *p.NextAfter)
		u.RawQuery = values.Encode()
		query = u.String()
	}
	t.Fatalf("%s: more than 100 pages", query)
	return nil
}

func decodeKey(t *testing.T, key string) []byte {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(key)
	if err != nil {
		t.Fatalf("the key %q: %v", key, err)
	}
	return raw
}
