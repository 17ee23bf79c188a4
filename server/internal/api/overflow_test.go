package api

import (
	"net/http"
	"testing"
)

// An offset past int64 arithmetic (offset + limit) is an empty page, not a
// 500. (A limit above 1000 is refused: TestListingLimitsAboveTheMaximumAre400.)
func TestMessageListingWithHugeOffsetAnswersAPage(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.push(t, q, "p", "m1", "m2")
	for _, c := range []struct {
		query string
		rows  int
	}{
		{"offset=9223372036854775807", 0},
		{"limit=1000&offset=1", 1},
		{"limit=1000&offset=9223372036854775807", 0},
		{"limit=1000", 2},
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

// A threshold past what a time.Duration holds lists nothing: no lag reaches it.
func TestLaggingWithAHugeThresholdListsNothing(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	group := "lag-" + q
	b.pop(t, "/api/v1/pop/queue/"+q+"?consumerGroup="+group+"&subscriptionMode=all")
	b.push(t, q, "a", "a1", "a2")
	b.ackAll(t, b.pop(t, "/api/v1/pop/queue/"+q+"/partition/a?consumerGroup="+group+"&batch=1"), group)
	for _, threshold := range []string{"0", "9999999999", "99999999999999999", "9223372036854775807"} {
		var lagging []map[string]any
		status, _ := b.call(t, "GET", "/api/v1/consumer-groups/lagging?minLagSeconds="+threshold, nil, &lagging)
		mine := 0
		for _, r := range lagging {
			if r["consumer_group"] == group {
				mine++
			}
		}
		want := 0
		if threshold == "0" {
			want = 1
		}
		if status != http.StatusOK || mine != want {
			t.Fatalf("minLagSeconds=%s: %d with %d rows of the group, want 200 with %d", threshold, status, mine, want)
		}
	}
}
