package api

import (
	"net/http"
	"testing"
)

// Page parameters past int64 arithmetic are an empty page, not a 500.
func TestMessageListingWithHugeOffsetOrLimitAnswersAPage(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.push(t, q, "p", "m1", "m2")
	for _, c := range []struct {
		query string
		rows  int
	}{
		{"offset=9223372036854775807", 0},
		{"limit=9223372036854775807&offset=1", 1},
		{"limit=9223372036854775807&offset=9223372036854775807", 0},
		{"limit=9223372036854775807", 2},
	} {
		var list struct {
			Messages []map[string]any `json:"messages"`
		}
		status, _ := b.call(t, "GET", "/api/v1/messages?queue="+q+"&"+c.query, nil, &list)
		if status != http.StatusOK || len(list.Messages) != c.rows {
			t.Fatalf("%s: %d with %d rows, want 200 with %d", c.query, status, len(list.Messages), c.rows)
		}
	}
}
