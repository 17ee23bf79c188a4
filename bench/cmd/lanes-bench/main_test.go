package main

import (
	"strings"
	"testing"
	"time"
)

func TestSystemOfNamesWhatAScenarioMeasures(t *testing.T) {
	for name, want := range map[string]string{
		"ceiling-b1":        "postgres",
		"ceiling-b100":      "postgres",
		"ceiling-b1-serial": "postgres",
		"ceiling-b1-notify": "postgres",
		"shared-river":      "river",
		"shared-lanes":      "lanes",
		"push-b1":           "lanes",
		"consume-fanout":    "lanes",
		"txn":               "lanes",
		"http-floor":        "http",
	} {
		if got := systemOf(name); got != want {
			t.Errorf("systemOf(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestEveryScenarioOfAllScenariosHasAKnownSystem(t *testing.T) {
	// -scenarios is checked against allScenarios; a typo there would make a scenario unreachable
	seen := map[string]bool{}
	for _, s := range strings.Split(allScenarios, ",") {
		if seen[s] {
			t.Errorf("scenario %q listed twice", s)
		}
		seen[s] = true
	}
	for _, s := range []string{"ceiling-b1", "ceiling-b1-serial", "ceiling-b100", "ceiling-b1-notify", "http-floor", "push-b1", "push-b100",
		"consume-queue", "consume-fanout", "latency", "wake", "parts", "txn", "shared-lanes", "shared-river"} {
		if !seen[s] {
			t.Errorf("allScenarios lacks %q, which run steps through", s)
		}
	}
}

func TestNewHarnessKeepsItsOptionsAndHasAClient(t *testing.T) {
	h := newHarness(options{short: true, pgPort: 54339}, "/repo")
	if h.http == nil || h.runID == 0 || h.root != "/repo" || !h.o.short || h.o.pgPort != 54339 {
		t.Fatalf("newHarness = %+v", h)
	}
	// scenarios open many connections at once: a default fasthttp limit (512) would queue them
	if h.http.MaxConnsPerHost < 1024 {
		t.Errorf("MaxConnsPerHost = %d", h.http.MaxConnsPerHost)
	}
}

func TestBrokerSettingsNameWhatTheEnvironmentChanges(t *testing.T) {
	if got := brokerSettings([]string{"HOME=/root", "LANES_PORT=1", "LANES_LOG_LEVEL=debug"}); strings.Contains(got, "set in the environment") {
		t.Errorf("settings the harness sets itself were reported: %q", got)
	}
	got := brokerSettings([]string{"LANES_PUSH_COMMITTERS=3", "PATH=/bin", "LANES_ACK_SYNC_COMMIT=true"})
	if want := "; set in the environment: LANES_ACK_SYNC_COMMIT=true, LANES_PUSH_COMMITTERS=3"; !strings.HasSuffix(got, want) {
		t.Errorf("brokerSettings = %q, want it to end %q", got, want)
	}
}

// Any lost message, or one that arrived though never pushed, fails the run
// and names its scenario; duplicates and redeliveries are reported, and a
// scenario that kept no tally has no loss to judge.
func TestLossFailuresNameEveryScenarioThatLostAMessage(t *testing.T) {
	rs := []Result{
		{Scenario: "push-b100", System: "lanes", LossChecked: true},
		{Scenario: "consume-queue", System: "lanes", LossChecked: true, Lost: 1, Redelivered: 40},
		{Scenario: "latency-250", System: "lanes", LossChecked: true, Unexpected: 2},
		{Scenario: "txn", System: "lanes", LossChecked: true, Duplicated: 3},
		{Scenario: "shared", System: "river", LossChecked: true, Lost: 5},
		{Scenario: "ceiling-b1", System: "postgres", Lost: 7}, // no tally: nothing to judge
	}
	got := strings.Join(lossFailures(rs), "; ")
	want := "consume-queue (lanes): 1 lost, 0 never pushed; latency-250 (lanes): 0 lost, 2 never pushed; shared (river): 5 lost, 0 never pushed"
	if got != want {
		t.Fatalf("lossFailures\n got %q\nwant %q", got, want)
	}
}

// A failed scenario's rates are not available: a figure measured on a drain
// timeout must not read as a throughput.
func TestFailLeavesNoRate(t *testing.T) {
	r := Result{Scenario: "consume-queue", System: "lanes", Available: true, Messages: 900, MsgPerSec: 12, TxPerSec: 3, PushedPerSec: 4, Note: "n"}
	r.fail(drainDeadlineError(time.Minute, 900, 1000))
	if r.Available || r.MsgPerSec != 0 || r.TxPerSec != 0 || r.PushedPerSec != 0 {
		t.Fatalf("failed result keeps a rate: %+v", r)
	}
	if r.Note != "n; error: drain deadline (1m0s) expired with 900 of 1000 messages done" {
		t.Fatalf("note %q", r.Note)
	}
}
