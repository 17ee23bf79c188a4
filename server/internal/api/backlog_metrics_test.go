package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/testdb"
)

// pushTo pushes n messages to one partition under fresh transaction ids.
func pushTo(t *testing.T, b *testBroker, queue, partition string, n int) {
	t.Helper()
	items := make([]map[string]any, n)
	for i := range items {
		items[i] = map[string]any{"queue": queue, "partition": partition, "transactionId": fmt.Sprintf("%s-%d-%d", partition, i, queueSeq.Add(1)), "payload": i}
	}
	if status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": items}, nil); status != http.StatusCreated {
		t.Fatalf("push to %s: %d", partition, status)
	}
}

// drainGroup pops (auto-ack) until the group gets nothing and returns how
// many messages it received.
func drainGroup(t *testing.T, b *testBroker, queue, group string) int {
	t.Helper()
	got := 0
	for range 50 {
		var p popBody
		status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+queue+"?batch=100&autoAck=true&consumerGroup="+group, nil, &p)
		if status == http.StatusNoContent || len(p.Messages) == 0 {
			return got
		}
		got += len(p.Messages)
	}
	t.Fatal("group never drained")
	return got
}

// The lag of a group counts every partition of its queue, those it has no
// cursor on yet included, as much as its pops would deliver from each; a queue
// nobody pops in queue mode shows its whole backlog as pending; dead letters
// show per queue. Before, partitions created after a group's last pop were
// missing from its lag, and an unconsumed queue had no series at all.
func TestBacklogGaugesCountWhatPopsWouldDeliver(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{}, "")
	q, dq := uniqueQueue(t), uniqueQueue(t)
	pushTo(t, b.testBroker, q, "a", 2)
	// "all" pops one and acks it; "fresh" subscribes now and so wants only what comes later.
	var p popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=1&autoAck=true&consumerGroup=all&subscriptionMode=all", nil, &p)
	if len(p.Messages) != 1 {
		t.Fatalf("pop: %+v", p)
	}
	var fresh popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=1&consumerGroup=fresh&subscriptionMode=new", nil, &fresh)
	if len(fresh.Messages) != 0 {
		t.Fatalf("a new subscription got old messages: %+v", fresh)
	}
	pushTo(t, b.testBroker, q, "b", 2)
	pushTo(t, b.testBroker, q, "c", 2)
	b.deadLetter(t, dq, "x", "dead-1")
	b.deadLetter(t, dq, "y", "dead-2")

	if err := b.Server.RefreshLag(t.Context(), 100000); err != nil {
		t.Fatal(err)
	}
	got := scrape(t, b.URL)
	lag := func(group string) float64 {
		return got[fmt.Sprintf(`lanes_queue_lag_messages{group=%q,queue=%q}`, group, q)]
	}
	want := map[string]float64{
		fmt.Sprintf(`lanes_queue_lag_messages{group="all",queue=%q}`, q):   5,
		fmt.Sprintf(`lanes_queue_lag_messages{group="fresh",queue=%q}`, q): 4,
		fmt.Sprintf(`lanes_queue_pending_messages{queue=%q}`, q):           6,
		fmt.Sprintf(`lanes_dlq_messages{queue=%q}`, dq):                    2,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	// The figures are what the groups' pops then deliver.
	for _, group := range []string{"all", "fresh"} {
		want := lag(group)
		if n := drainGroup(t, b.testBroker, q, group); float64(n) != want {
			t.Errorf("group %s: lag said %v, its pops delivered %d", group, want, n)
		}
	}

	// A queue-mode pop completes one: pending drops by one.
	var qm popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=1&autoAck=true", nil, &qm)
	if len(qm.Messages) != 1 {
		t.Fatalf("queue-mode pop: %+v", qm)
	}
	if err := b.Server.RefreshLag(t.Context(), 100000); err != nil {
		t.Fatal(err)
	}
	if v := scrape(t, b.URL)[fmt.Sprintf(`lanes_queue_pending_messages{queue=%q}`, q)]; v != 5 {
		t.Errorf("pending after one queue-mode pop = %v, want 5", v)
	}
}

// A lag refresh sums every cursor, so on many of them the collector waits 20
// of a refresh's durations from its start before starting the next, whatever
// LANES_LAG_REFRESH_MS says, and exports that wait: the gauges keep to 1/20 of
// the database's time. Before, the next refresh started the configured
// interval after the last one ended, so a refresh slower than the interval ran
// back to back with the next.
func TestLagRefreshesWaitTwentyOfTheirDurations(t *testing.T) {
	dsn, dropDatabase, err := testdb.NewDatabase(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dropDatabase)
	b := newBrokerWith(t, dsn, Options{}, "")
	if err := engine.ApplySchema(t.Context(), b.Pool); err != nil {
		t.Fatal(err)
	}
	// 40,000 cursors (two groups on 20,000 partitions): tens of milliseconds a refresh.
	if _, err := b.Pool.Exec(t.Context(), `
		INSERT INTO lanes.queues (name) VALUES ('wide');
		INSERT INTO lanes.partitions (queue_id, name, last_offset) SELECT q.id, 'p' || i, 9 FROM lanes.queues q, generate_series(1, 20000) i;
		INSERT INTO lanes.consumer_groups (consumer_group, queue_id, subscription_mode, subscription_timestamp)
			SELECT g, q.id, 'all', now() FROM lanes.queues q, (VALUES ('a'), ('b')) v(g);
		INSERT INTO lanes.consumers (partition_id, consumer_group, queue_id, committed, batch_end)
			SELECT p.id, g, p.queue_id, length(p.name) % 10 - 1, -1 FROM lanes.partitions p, (VALUES ('a'), ('b')) v(g);
		ANALYZE`); err != nil {
		t.Fatal(err)
	}

	const interval = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() { defer close(stopped); b.Server.RunLagCollector(ctx, interval, 100) }()
	// Every refresh seen, by its start; one missed between two seen ones only widens their gap.
	type refresh struct {
		start time.Time
		took  time.Duration
	}
	var seen []refresh
	deadline := time.Now().Add(60 * time.Second)
	for len(seen) < 3 && time.Now().Before(deadline) {
		l := b.Server.metrics.LagSnapshot()
		if !l.RefreshedAt.IsZero() && (len(seen) == 0 || l.RefreshedAt.After(seen[len(seen)-1].start)) {
			took := time.Duration(l.RefreshSeconds * float64(time.Second))
			if r := (refresh{l.RefreshedAt.Add(-took), took}); len(seen) == 0 || r.start.After(seen[len(seen)-1].start) {
				seen = append(seen, r)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	cancel()
	<-stopped
	if len(seen) < 3 {
		t.Fatalf("saw %d refreshes in 60 s", len(seen))
	}
	for i := 1; i < len(seen); i++ {
		prev, gap := seen[i-1], seen[i].start.Sub(seen[i-1].start)
		t.Logf("refresh %d took %v; the next started %v after its start", i, prev.took, gap)
		if prev.took <= interval {
			t.Fatalf("refresh %d took %v, not longer than the %v interval: too few cursors to tell", i, prev.took, interval)
		}
		if want := 20*prev.took - time.Millisecond; gap < want {
			t.Errorf("refresh %d took %v and the next started %v after its start, want at least %v (20 times)", i, prev.took, gap, want)
		}
	}
	got := scrape(t, b.URL)
	if took, next := got["lanes_queue_lag_refresh_seconds"], got["lanes_queue_lag_refresh_interval_seconds"]; next < 20*took || next > 20*took+0.01 {
		t.Errorf("lanes_queue_lag_refresh_interval_seconds = %v after a refresh of %v s, want 20 times that", next, took)
	}
	// The JSON metrics give the same wait.
	var view struct {
		Lag struct {
			RefreshSeconds  float64  `json:"refreshSeconds"`
			IntervalSeconds *float64 `json:"intervalSeconds"`
		} `json:"lag"`
	}
	res, err := http.Get(b.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	if err := json.NewDecoder(res.Body).Decode(&view); err != nil {
		t.Fatal(err)
	}
	if l := view.Lag; l.IntervalSeconds == nil || *l.IntervalSeconds < 20*l.RefreshSeconds || *l.IntervalSeconds > 20*l.RefreshSeconds+0.01 {
		t.Errorf("/api/v1/metrics lag = %+v, want intervalSeconds 20 times refreshSeconds", l)
	}
}
