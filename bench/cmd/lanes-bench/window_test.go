package main

import (
	"net/http"
	"testing"
)

func TestPopClaimCountersSumsClaimsOverPathsAndReadsHandOffs(t *testing.T) {
	h, _ := startFakeBroker(t, answer{status: http.StatusOK, body: `# HELP lanes_pop_transactions_total Pop claims.
# TYPE lanes_pop_transactions_total counter
lanes_pop_transactions_total{path="window"} 12
lanes_pop_transactions_total{path="single"} 30
lanes_pop_hand_offs_total 5
lanes_pop_hand_offs_total_other 1000
lanes_push_total 99
`})
	claims, handOffs, ok := h.popClaimCounters()
	if !ok || claims != 42 || handOffs != 5 {
		t.Fatalf("popClaimCounters = %d, %d, %v; want 42, 5, true", claims, handOffs, ok)
	}
}

func TestPopClaimCountersIsNotOKWhenTheBrokerFails(t *testing.T) {
	h, _ := startFakeBroker(t, answer{status: http.StatusServiceUnavailable, body: "lanes_pop_hand_offs_total 5\n"})
	if _, _, ok := h.popClaimCounters(); ok {
		t.Fatal("a 503 from /metrics/prometheus read as counters")
	}
	h.brokerURL = "http://127.0.0.1:1" // nothing listens there
	if _, _, ok := h.popClaimCounters(); ok {
		t.Fatal("an unreachable broker read as counters")
	}
}
