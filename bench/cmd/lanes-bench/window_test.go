package main

import (
	"net/http"
	"testing"
)

func TestBrokerCountersSumClaimsOverPathsAndReadThePushCommits(t *testing.T) {
	h, _ := startFakeBroker(t, answer{status: http.StatusOK, body: `# HELP lanes_pop_transactions_total Pop claims.
# TYPE lanes_pop_transactions_total counter
lanes_pop_transactions_total{path="window"} 12
lanes_pop_transactions_total{path="single"} 30
lanes_pop_hand_offs_total 5
lanes_pop_hand_offs_total_other 1000
lanes_push_total 99
lanes_push_commit_duration_seconds_bucket{le="0.001"} 3
lanes_push_commit_duration_seconds_sum 0.75
lanes_push_commit_duration_seconds_count 300
lanes_push_commit_messages_sum 8100
lanes_push_commit_messages_count 300
lanes_push_commit_wait_seconds_sum 2.5
lanes_push_commit_wait_seconds_count 5000
`})
	c, ok := h.brokerCounters()
	want := brokerCounters{claims: 42, handOffs: 5, pushCommits: 300, pushCommitMessages: 8100, pushCommitSeconds: 0.75, pushWaits: 5000, pushWaitSeconds: 2.5}
	if !ok || c != want {
		t.Fatalf("brokerCounters = %+v, %v; want %+v, true", c, ok, want)
	}
}

func TestBrokerCountersAreNotOKWhenTheBrokerFails(t *testing.T) {
	h, _ := startFakeBroker(t, answer{status: http.StatusServiceUnavailable, body: "lanes_pop_hand_offs_total 5\n"})
	if _, ok := h.brokerCounters(); ok {
		t.Fatal("a 503 from /metrics/prometheus read as counters")
	}
	h.brokerURL = "http://127.0.0.1:1" // nothing listens there
	if _, ok := h.brokerCounters(); ok {
		t.Fatal("an unreachable broker read as counters")
	}
}
