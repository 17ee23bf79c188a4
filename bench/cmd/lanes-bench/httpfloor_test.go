package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve the HTTP floor when the scenario starts
// it as its child, as the lanes-bench binary does.
func TestMain(m *testing.M) {
	if serveHTTPFloorIfAsked() {
		return
	}
	os.Exit(m.Run())
}

func TestHTTPFloorScenarioMeasuresAChildServerThatOnlyAnswers(t *testing.T) {
	h := newHarness(options{duration: 300 * time.Millisecond}, "/repo")
	r, err := h.httpFloorScenario(4)
	if err != nil {
		t.Fatal(err)
	}
	if r.Scenario != "http-floor" || r.System != "http" || !r.Available || r.Messages == 0 || r.MsgPerSec <= 0 {
		t.Fatalf("result %+v", r)
	}
	if r.LatencyMs["p50"] <= 0 || r.LatencyMs["p99"] < r.LatencyMs["p50"] {
		t.Errorf("latencies %v", r.LatencyMs)
	}
	if r.BrokerCPUCores <= 0 || r.HarnessCPUCores <= 0 {
		t.Errorf("CPU: server %.3f cores, harness %.3f cores; both did work", r.BrokerCPUCores, r.HarnessCPUCores)
	}
}

func TestPushB1TargetSaysWhereItsGoalPassesTheHTTPFloor(t *testing.T) {
	run := &Run{Results: []Result{
		{Scenario: "ceiling-b1", System: "postgres", Available: true, MsgPerSec: 20000},
		{Scenario: "http-floor", System: "http", Available: true, MsgPerSec: 70000},
		{Scenario: "push-b1", System: "lanes", Available: true, MsgPerSec: 12000},
	}}
	applyRatios(run.Results)
	for _, tg := range evaluateTargets(run) {
		if strings.HasPrefix(tg.Name, "push batch 1 ") {
			if want := "the goal, 100000 req/s, is 1.43× what a Go HTTP server that does nothing answers here (http-floor, 70000 req/s)"; !strings.Contains(tg.Value, want) {
				t.Fatalf("push-b1 target value %q lacks %q", tg.Value, want)
			}
			return
		}
	}
	t.Fatal("no push-b1 target")
}
