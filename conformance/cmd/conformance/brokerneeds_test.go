package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A case that needs more of the broker than its API (needs:) runs on the
// runner's own broker, which meets every need, and on a -url broker that
// -broker-meets says meets it; on any other it is skipped with the reason. An
// unknown need does not load, and -broker-meets refuses one.
func TestACaseThatNeedsABrokerSettingIsSkippedOnAnyOtherBroker(t *testing.T) {
	dir := t.TempDir()
	body := "cases:\n  - name: plain\n    steps:\n      - pop: {queue: q}\n" +
		"  - name: unswept\n    needs: [noKVSweeper]\n    steps:\n      - kvList: {ns: q, includeExpired: true}\n"
	if err := os.WriteFile(filepath.Join(dir, "x.yaml"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cases, err := loadCases(dir)
	if err != nil {
		t.Fatal(err)
	}
	if run, skipped := runnable(cases, true, nil); len(run) != 2 || len(skipped) != 0 {
		t.Errorf("own broker: ran %d, skipped %v; want both run", len(run), skipped)
	}
	run, skipped := runnable(cases, false, nil)
	if len(run) != 1 || run[0].ID != "x/plain" || !strings.Contains(skipped["x/unswept"], "LANES_KV_SWEEP_INTERVAL_MS=0") {
		t.Errorf("-url broker: ran %d, skipped %v; want x/plain run and x/unswept skipped naming the setting", len(run), skipped)
	}
	meets, err := parseBrokerMeets(" noKVSweeper ")
	if err != nil {
		t.Fatal(err)
	}
	if run, skipped := runnable(cases, false, meets); len(run) != 2 || len(skipped) != 0 {
		t.Errorf("-url broker with -broker-meets noKVSweeper: ran %d, skipped %v; want both run", len(run), skipped)
	}
	if _, err := parseBrokerMeets("noKVSweeper,noKVSweep"); err == nil || !strings.Contains(err.Error(), `unknown need "noKVSweep"`) {
		t.Errorf("-broker-meets with a misspelled need: error %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x.yaml"), []byte(strings.Replace(body, "noKVSweeper", "noKVSweep", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadCases(dir); err == nil || !strings.Contains(err.Error(), `unknown need "noKVSweep"`) {
		t.Errorf("a misspelled need: loadCases error %v", err)
	}
}
