package api

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"testing"
)

// listingPage is one page of a listing that names its paging fields in its
// body (the dead-letter and message listings).
type listingPage struct {
	Messages []struct {
		ID            string `json:"id"`
		TransactionID string `json:"transactionId"`
		PartitionID   string `json:"partitionId"`
		Data          any    `json:"data"`
	} `json:"messages"`
	Total      int     `json:"total"`
	Truncated  *bool   `json:"truncated"`
	NextAfter  *string `json:"nextAfter"`
	NextOffset *int    `json:"nextOffset"`
	Unreadable []struct {
		Messages int `json:"messages"`
	} `json:"unreadable"`
	bodyBytes int
}

func (p listingPage) ids() []string {
	out := []string{}
	for _, m := range p.Messages {
		out = append(out, m.TransactionID)
	}
	return out
}

func getBodyKeyPage(t *testing.T, b *testBroker, path string) listingPage {
	t.Helper()
	raw, _ := b.getOK(t, path)
	var p listingPage
	if err := json.Unmarshal(raw, &p); err != nil || p.Truncated == nil {
		t.Fatalf("GET %s: %v %.300s", path, err, raw)
	}
	if *p.Truncated != (p.NextAfter != nil) {
		t.Fatalf("GET %s: truncated %v with nextAfter %v", path, *p.Truncated, p.NextAfter)
	}
	p.bodyBytes = len(raw)
	return p
}

// bodyPagesByKey follows nextAfter from the first page of path with limit and
// returns every page. A page asked for by key names no nextOffset, and only
// messages that do not decode (counted as unreadable) leave a page empty.
func bodyPagesByKey(t *testing.T, b *testBroker, path string, limit int) []listingPage {
	t.Helper()
	var pages []listingPage
	query := fmt.Sprintf("%s&limit=%d", path, limit)
	for range 100 {
		p := getBodyKeyPage(t, b, query)
		if (len(p.Messages) == 0 && len(p.Unreadable) == 0) || len(p.Messages) > limit {
			t.Fatalf("%s: %d rows", query, len(p.Messages))
		}
		if len(pages) > 0 && p.NextOffset != nil {
			t.Fatalf("%s: a page asked for by key gave nextOffset %d", query, *p.NextOffset)
		}
		pages = append(pages, p)
		if !*p.Truncated {
			return pages
		}
		query = fmt.Sprintf("%s&limit=%d&after=%s", path, limit, url.QueryEscape(*p.NextAfter))
	}
	t.Fatalf("%s: more than 100 pages", path)
	return nil
}

func joinedIDs(pages []listingPage) []string {
	var out []string
	for _, p := range pages {
		out = append(out, p.ids()...)
	}
	return out
}

// wantBudgetPagesByKey pages path by key at limits 10 and 1000 on a broker
// whose byte budget is listBudget: the budget cuts the first page before its
// limit, no page of more than one row passes the budget, and the pages join
// to whole.
func wantBudgetPagesByKey(t *testing.T, b *testBroker, path string, whole ...string) {
	t.Helper()
	for _, limit := range []int{10, 1000} {
		pages := bodyPagesByKey(t, b, path, limit)
		for i, p := range pages {
			if len(p.Messages) > 1 && p.bodyBytes > listBudget+8000 {
				t.Errorf("limit %d page %d: %d rows in %d bytes, over the budget", limit, i, len(p.Messages), p.bodyBytes)
			}
		}
		if len(pages[0].Messages) >= limit {
			t.Errorf("limit %d: the first page holds %d rows: the budget did not cut it", limit, len(pages[0].Messages))
		}
		if got := joinedIDs(pages); !slices.Equal(got, whole) {
			t.Fatalf("limit %d: paging by key gave\n%v\nwant\n%v", limit, got, whole)
		}
	}
}

// wantSecondPages reads path's first page of two rows, which must be
// firstIDs, lets between change the rows, and wants the second page by
// offset to be byOffset (what an offset does to a change) and by key byKey.
func wantSecondPages(t *testing.T, b *testBroker, path string, firstIDs []string, between func(first listingPage), byOffset, byKey []string) {
	t.Helper()
	first := getBodyKeyPage(t, b, path+"&limit=2")
	if !slices.Equal(first.ids(), firstIDs) || first.NextAfter == nil || first.NextOffset == nil || *first.NextOffset != 2 {
		t.Fatalf("the first page: %v nextAfter %v nextOffset %v", first.ids(), first.NextAfter, first.NextOffset)
	}
	between(first)
	if got := getBodyKeyPage(t, b, path+"&limit=2&offset=2"); !slices.Equal(got.ids(), byOffset) {
		t.Fatalf("the second page by offset: %v, want %v (what an offset does)", got.ids(), byOffset)
	}
	if got := getBodyKeyPage(t, b, path+"&limit=2&after="+url.QueryEscape(*first.NextAfter)); !slices.Equal(got.ids(), byKey) {
		t.Fatalf("the second page by key: %v, want %v", got.ids(), byKey)
	}
}
