package api

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// A long poll that parks 1.5 s shows as 1.5 s in the HTTP histogram, whose
// buckets now reach the 300 s wait limit, while lanes_pop_claim_duration_seconds
// records only its database claims, each a few milliseconds.
func TestPopClaimHistogramLeavesOutTheParking(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	before := scrape(t, b.URL)
	start := time.Now()
	if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?wait=true&timeout=1500", nil, nil); status != http.StatusNoContent {
		t.Fatalf("long poll on an empty queue: %d", status)
	}
	parked := time.Since(start)
	after := scrape(t, b.URL)

	claims := after["lanes_pop_claim_duration_seconds_count"] - before["lanes_pop_claim_duration_seconds_count"]
	claimed := after["lanes_pop_claim_duration_seconds_sum"] - before["lanes_pop_claim_duration_seconds_sum"]
	if claims < 1 || claimed <= 0 || claimed > parked.Seconds()/3 {
		t.Errorf("claims: %v taking %.3f s in all, for a pop parked %v; want at least one, a small part of the wait", claims, claimed, parked)
	}
	const popSeries = `route="/api/v1/pop/queue/{queue}"`
	raw := scrapeText(t, b.URL)
	if !strings.Contains(raw, `lanes_http_request_duration_seconds_bucket{method="GET",`+popSeries+`,le="300"}`) {
		t.Errorf("HTTP latency buckets of the pop route stop short of the 300 s long-poll limit")
	}
	if !strings.Contains(raw, `lanes_http_request_duration_seconds_bucket{method="GET",`+popSeries+`,le="1"} 0`) {
		t.Errorf("the parked pop is not in the pop route's HTTP latency beyond 1 s")
	}
}

// scrapeText is the Prometheus text of the broker at url.
func scrapeText(t *testing.T, url string) string { return getText(t, url+"/metrics/prometheus") }
