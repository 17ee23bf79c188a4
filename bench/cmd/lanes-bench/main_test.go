package main

import (
	"strings"
	"testing"
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
