package api

import (
	"fmt"
	"net/http"
	"testing"
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
