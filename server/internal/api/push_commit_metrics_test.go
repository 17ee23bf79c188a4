package api

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/lanesmq/lanes/server/internal/api/gen"
)

// The push commit series follow the group commits: each commit observes the
// messages it took and its duration once, and each request its wait for the
// commit to start. Requests sent together may share a commit, so the commits
// number between one and the requests.
func TestPushCommitMetricsFollowTheGroupCommits(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	push := func(items int) {
		t.Helper()
		body := `{"items":[`
		for i := range items {
			if i > 0 {
				body += ","
			}
			body += fmt.Sprintf(`{"queue":%q,"payload":{"n":%d}}`, q, i)
		}
		if status, _ := b.call(t, "POST", "/api/v1/push", body+`]}`, nil); status != http.StatusCreated {
			t.Errorf("push of %d items: %d", items, status)
		}
	}
	delta := func(before, after map[string]float64, name string) float64 { return after[name] - before[name] }

	before := scrape(t, b.URL)
	push(3)
	after := scrape(t, b.URL)
	for name, want := range map[string]float64{
		"lanes_push_commit_duration_seconds_count":           1,
		"lanes_push_commit_messages_count":                   1,
		"lanes_push_commit_messages_sum":                     3,
		`lanes_push_commit_messages_bucket{le="2"}`:          0,
		`lanes_push_commit_messages_bucket{le="5"}`:          1,
		"lanes_push_commit_wait_seconds_count":               1,
		`lanes_push_commit_duration_seconds_bucket{le="30"}`: 1,
	} {
		if got := delta(before, after, name); got != want {
			t.Errorf("one push of 3 items: %s moved by %v, want %v", name, got, want)
		}
	}
	if took := delta(before, after, "lanes_push_commit_duration_seconds_sum"); took <= 0 {
		t.Errorf("the commit took %v s by the histogram, want more than 0", took)
	}

	const requests = 16
	before = scrape(t, b.URL)
	var wg sync.WaitGroup
	for range requests {
		wg.Go(func() { push(1) })
	}
	wg.Wait()
	after = scrape(t, b.URL)
	if got := delta(before, after, "lanes_push_commit_messages_sum"); got != requests {
		t.Errorf("%d concurrent pushes of one item: the commits took %v messages", requests, got)
	}
	if got := delta(before, after, "lanes_push_commit_wait_seconds_count"); got != requests {
		t.Errorf("%d concurrent pushes: %v waits observed, want one a request", requests, got)
	}
	commits := delta(before, after, "lanes_push_commit_duration_seconds_count")
	if commits < 1 || commits > requests || delta(before, after, "lanes_push_commit_messages_count") != commits {
		t.Errorf("%d concurrent pushes: %v commit durations and %v message counts, want as many of each, 1 to %d",
			requests, commits, delta(before, after, "lanes_push_commit_messages_count"), requests)
	}
	t.Logf("%d concurrent pushes of one item went in %v group commits", requests, commits)
}

// GET /metrics gives the push commit histograms' totals: the same counts and
// sums as /metrics/prometheus, moved by each commit.
func TestJSONMetricsGiveThePushCommitTotals(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	read := func() gen.MetricsPushCommits {
		t.Helper()
		var m gen.Metrics
		if status, _ := b.call(t, "GET", "/metrics", nil, &m); status != http.StatusOK || m.PushCommits == nil {
			t.Fatalf("GET /metrics: %d, pushCommits %v", status, m.PushCommits)
		}
		return *m.PushCommits
	}
	before := read()
	if status, _ := b.call(t, "POST", "/api/v1/push", fmt.Sprintf(`{"items":[{"queue":%q,"payload":1},{"queue":%q,"payload":2}]}`, q, q), nil); status != http.StatusCreated {
		t.Fatalf("push: %d", status)
	}
	after := read()
	if after.Committers != 1 {
		t.Errorf("committers %d, want the default 1", after.Committers)
	}
	if got := after.Commits - before.Commits; got != 1 {
		t.Errorf("one push moved commits by %d", got)
	}
	if got := after.Messages - before.Messages; got != 2 {
		t.Errorf("a push of 2 items moved messages by %d", got)
	}
	if got := after.Requests - before.Requests; got != 1 {
		t.Errorf("one push moved requests by %d", got)
	}
	if after.Seconds <= before.Seconds || after.WaitSeconds < before.WaitSeconds {
		t.Errorf("seconds %v → %v, wait seconds %v → %v: want the commit's time added", before.Seconds, after.Seconds, before.WaitSeconds, after.WaitSeconds)
	}

	series := scrape(t, b.URL)
	now := read()
	for name, want := range map[string]float64{
		"lanes_push_commit_duration_seconds_count": float64(now.Commits),
		"lanes_push_commit_messages_sum":           float64(now.Messages),
		"lanes_push_commit_wait_seconds_count":     float64(now.Requests),
	} {
		if series[name] != want {
			t.Errorf("%s is %v in /metrics/prometheus, %v in /metrics", name, series[name], want)
		}
	}
	if d := series["lanes_push_commit_duration_seconds_sum"] - now.Seconds; d > 1e-9 || d < -1e-9 {
		t.Errorf("commit seconds %v in /metrics/prometheus, %v in /metrics", series["lanes_push_commit_duration_seconds_sum"], now.Seconds)
	}
}
