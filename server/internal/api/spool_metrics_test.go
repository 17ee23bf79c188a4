package api

import (
	"net/http"
	"regexp"
	"testing"
	"time"
)

// The spool gauges count items (one record per pushed message), not push
// requests or files, and say so: two pushes of 3 and 2 items leave 5
// pending; the drain replays 5, of which the 2 repeated transaction ids
// are duplicates, so lanes_messages_pushed_total{source="spool"} grows by 3.
func TestSpoolMetricsCountItems(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{}, t.TempDir())
	q := uniqueQueue(t)
	maintenance := func(on bool) {
		t.Helper()
		if status, _ := b.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": on}, nil); status != http.StatusOK {
			t.Fatalf("push maintenance %v: %d", on, status)
		}
	}
	maintenance(true)
	t.Cleanup(func() { maintenance(false) })
	for _, n := range []int{3, 2} {
		var res []pushResult
		if status, _ := b.call(t, "POST", "/api/v1/push", pushItems(q, n), &res); status != http.StatusCreated || len(res) != n || res[0].Status != "buffered" {
			t.Fatalf("push of %d under maintenance: %d %+v", n, status, res)
		}
	}
	before := scrape(t, b.URL)
	if got := before["lanes_spool_pending"]; got != 5 {
		t.Fatalf("lanes_spool_pending = %v after 2 pushes of 5 items, want 5", got)
	}
	text := scrapeText(t, b.URL)
	for _, name := range []string{"lanes_spool_pending", "lanes_spool_failed", "lanes_spool_drained_total"} {
		help := regexp.MustCompile(`(?m)^# HELP ` + name + ` (.*)$`).FindStringSubmatch(text)
		if help == nil || !regexp.MustCompile(`^Items\b`).MatchString(help[1]) {
			t.Errorf("%s HELP does not say it counts items: %v", name, help)
		}
	}

	maintenance(false)
	b.runDrain(t)
	waitFor(t, 10*time.Second, "the spool to drain", func() bool { return scrape(t, b.URL)["lanes_spool_pending"] == 0 })
	after := scrape(t, b.URL)
	if got := after["lanes_spool_drained_total"]; got != 5 {
		t.Errorf("lanes_spool_drained_total = %v, want 5 (3 stored, 2 duplicates)", got)
	}
	stored := `lanes_messages_pushed_total{source="spool"}`
	if got := after[stored] - before[stored]; got != 3 {
		t.Errorf("%s grew by %v, want 3", stored, got)
	}
	if got := after["lanes_spool_failed"]; got != 0 {
		t.Errorf("lanes_spool_failed = %v, want 0", got)
	}
}
