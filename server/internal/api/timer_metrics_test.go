package api

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// The timer series follow real timers: lanes_timers_waiting and
// lanes_timers_due count the table at each backlog refresh, and a timer the
// firing loop delivers late moves lanes_timers_fired_total by one and
// lanes_timer_fire_lag_seconds by how late it was.
func TestTimerMetricsFollowAFire(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{}, "")
	q := uniqueQueue(t)
	// Timers other tests left due would fire with ours: fire them first.
	b.fireDueTimers(t)
	refreshed := func() map[string]float64 {
		t.Helper()
		if err := b.Server.RefreshLag(t.Context(), 1000); err != nil {
			t.Fatal(err)
		}
		return scrape(t, b.URL)
	}
	before := refreshed()
	payload := base64.StdEncoding.EncodeToString([]byte(`{"timer":true}`))
	schedule := fmt.Sprintf(`{"operations":[
		{"op":"schedule","queue":%q,"timerKey":"soon","delayMs":300,"payload":%q},
		{"op":"schedule","queue":%q,"timerKey":"later","delayMs":3600000,"payload":%q}]}`, q, payload, q, payload)
	if status, _ := b.call(t, "POST", "/api/v1/timers", schedule, nil); status != http.StatusOK && status != http.StatusCreated {
		t.Fatalf("schedule: %d", status)
	}
	expect := func(got map[string]float64, name string, want float64) {
		t.Helper()
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
	scheduled := refreshed()
	expect(scheduled, "lanes_timers_waiting", before["lanes_timers_waiting"]+2)
	expect(scheduled, "lanes_timers_due", before["lanes_timers_due"])

	time.Sleep(500 * time.Millisecond) // "soon" is due for 200 ms when the loop starts
	due := refreshed()
	expect(due, "lanes_timers_waiting", before["lanes_timers_waiting"]+2)
	expect(due, "lanes_timers_due", before["lanes_timers_due"]+1)

	b.Engine.StartTimers(20 * time.Millisecond)
	waitFor(t, 10*time.Second, "the due timer to fire", func() bool {
		return scrape(t, b.URL)["lanes_timers_fired_total"] > before["lanes_timers_fired_total"]
	})
	fired := refreshed()
	expect(fired, "lanes_timers_fired_total", before["lanes_timers_fired_total"]+1)
	expect(fired, "lanes_timer_fire_lag_seconds_count", before["lanes_timer_fire_lag_seconds_count"]+1)
	expect(fired, `lanes_timer_fire_lag_seconds_bucket{le="0.1"}`, before[`lanes_timer_fire_lag_seconds_bucket{le="0.1"}`])
	expect(fired, `lanes_timer_fire_lag_seconds_bucket{le="10"}`, before[`lanes_timer_fire_lag_seconds_bucket{le="10"}`]+1)
	if late := fired["lanes_timer_fire_lag_seconds_sum"] - before["lanes_timer_fire_lag_seconds_sum"]; late < 0.2 || late > 10 {
		t.Errorf("the timer fired %v s after its deliver time by the histogram, want 0.2 s to 10 s", late)
	}
	expect(fired, "lanes_timers_waiting", before["lanes_timers_waiting"]+1)
	expect(fired, "lanes_timers_due", before["lanes_timers_due"])
}
