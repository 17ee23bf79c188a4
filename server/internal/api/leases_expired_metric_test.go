package api

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/engine"
)

// expiredLeases reads lanes_leases_expired_total from b's scrape, and fails
// unless the JSON snapshot's messages.leasesExpired says the same.
func expiredLeases(t *testing.T, b *testBroker) float64 {
	t.Helper()
	v, ok := scrape(t, b.URL)["lanes_leases_expired_total"]
	if !ok {
		t.Fatal("lanes_leases_expired_total is not exported")
	}
	var snapshot struct {
		Messages struct {
			LeasesExpired *float64 `json:"leasesExpired"`
		} `json:"messages"`
	}
	if status, _ := b.call(t, "GET", "/metrics", nil, &snapshot); status != http.StatusOK {
		t.Fatalf("GET /metrics: %d", status)
	}
	if got := snapshot.Messages.LeasesExpired; got == nil || *got != v {
		t.Fatalf("the JSON snapshot's messages.leasesExpired is %s, the scrape's lanes_leases_expired_total %v", formatOptional(got), v)
	}
	return v
}

// pushToPartitions pushes one message to each partition named, with transaction id
// "<prefix>-<partition>".
func pushToPartitions(t *testing.T, b *testBroker, q, prefix string, partitions ...string) {
	t.Helper()
	items := make([]map[string]any, len(partitions))
	for i, p := range partitions {
		items[i] = map[string]any{"queue": q, "partition": p, "transactionId": prefix + "-" + p, "payload": i}
	}
	if status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": items}, nil); status != http.StatusCreated {
		t.Fatalf("push: %d", status)
	}
}

// lanes_leases_expired_total counts one per partition whose lease ran out and
// that a later pop took over: a lease over two partitions left to expire
// counts 2, once, however often the queue is popped after; a lease acked, one
// renewed past its first expiry and then acked, and one nacked count nothing.
func TestLeasesExpiredCountsEachExpiredPartitionLeaseOnce(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	pop := func(query string) popBody {
		t.Helper()
		var p popBody
		status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?wait=false&batch=10&partitions=0&"+query, nil, &p)
		if status != http.StatusOK && status != http.StatusNoContent {
			t.Fatalf("pop %s: %d", query, status)
		}
		return p
	}
	ack := func(p popBody, status string) {
		t.Helper()
		acks := make([]map[string]any, len(p.Messages))
		for i, m := range p.Messages {
			acks[i] = map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": p.LeaseID, "status": status}
		}
		var out []map[string]any
		if code, _ := b.call(t, "POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks}, &out); code != http.StatusOK {
			t.Fatalf("ack %s: %d %+v", status, code, out)
		}
		for _, r := range out {
			if r["success"] != true {
				t.Fatalf("ack %s: %+v", status, out)
			}
		}
	}
	if n := expiredLeases(t, b); n != 0 {
		t.Fatalf("a new broker counts %v expired leases", n)
	}

	// Two partitions under one 1 s lease, left to expire, then taken over.
	pushToPartitions(t, b, q, "a", "p1", "p2")
	first := pop("leaseSeconds=1")
	if len(first.Messages) != 2 {
		t.Fatalf("the first pop took %d messages, want both partitions' 2", len(first.Messages))
	}
	var again popBody
	waitFor(t, 10*time.Second, "the expired lease's messages to be delivered again", func() bool {
		again = pop("leaseSeconds=60")
		return len(again.Messages) > 0
	})
	if len(again.Messages) != 2 || again.LeaseID == first.LeaseID {
		t.Fatalf("the takeover delivered %+v, want both messages under a new lease", again)
	}
	if n := expiredLeases(t, b); n != 2 {
		t.Fatalf("lanes_leases_expired_total = %v after one lease over 2 partitions expired, want 2", n)
	}
	ack(again, "completed")

	// Acked before it expires (a long lease: no stall of the machine can
	// expire it first): nothing to take over.
	pushToPartitions(t, b, q, "b", "p1")
	acked := pop("leaseSeconds=60")
	ack(acked, "completed")
	// Nacked (retry): released at once and delivered again, not expired.
	pushToPartitions(t, b, q, "c", "p2")
	nacked := pop("leaseSeconds=60")
	ack(nacked, "retry")
	redelivered := pop("leaseSeconds=60")
	if len(redelivered.Messages) != 1 {
		t.Fatalf("the nacked message came back %d times, want once", len(redelivered.Messages))
	}
	ack(redelivered, "completed")
	// Renewed past its first expiry, then acked.
	pushToPartitions(t, b, q, "d", "p1")
	poppedAt := time.Now()
	renewed := pop("leaseSeconds=2")
	var ext struct {
		Renewed int `json:"renewed"`
	}
	if code, _ := b.call(t, "POST", "/api/v1/lease/"+renewed.LeaseID+"/extend", map[string]any{"seconds": 60}, &ext); code != http.StatusOK || ext.Renewed != 1 {
		t.Fatalf("extend: %d %+v", code, ext)
	}
	time.Sleep(time.Until(poppedAt.Add(2200 * time.Millisecond))) // past the first expiry
	if p := pop("leaseSeconds=60"); len(p.Messages) != 0 {
		t.Fatalf("a renewed lease's message was taken over: %+v", p)
	}
	ack(renewed, "completed")
	// The partitions popped again after all of that take over nothing.
	pushToPartitions(t, b, q, "e", "p1", "p2")
	ack(pop("leaseSeconds=60"), "completed")
	if p := pop(""); len(p.Messages) != 0 {
		t.Fatalf("messages left after every ack: %+v", p)
	}
	if n := expiredLeases(t, b); n != 2 {
		t.Fatalf("lanes_leases_expired_total = %v after acked, nacked and renewed leases, want still 2", n)
	}
}

// A lease that expires on a partition which a push then hands to a parked
// long poll (the claim in the push's round trip) is counted by that claim.
func TestLeasesExpiredCountsTheTakeoverOfAHandOff(t *testing.T) {
	// The parked pop does not re-check (one key at 0.001 a second: every
	// 1,000 s), so the push's hand-off is what takes the expired lease over.
	b := newTestBrokerWith(t, engine.Config{ParkedRecheckRate: 0.001})
	q := uniqueQueue(t)
	pushToPartitions(t, b, q, "a", "p1")
	// This pop also caches the group's claim plan, which hand-offs need. Its
	// lease outlasts the parked pop's first check by the margin a loaded
	// machine needs.
	expiry := time.Now().Add(2100 * time.Millisecond)
	var first popBody
	if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?wait=false&leaseSeconds=2", nil, &first); status != http.StatusOK {
		t.Fatalf("pop: %d", status)
	}
	parked := make(chan popBody, 1)
	go func() {
		var p popBody
		b.call(t, "GET", fmt.Sprintf("/api/v1/pop/queue/%s?wait=true&timeout=%d&batch=10&leaseSeconds=60", q, 30000), nil, &p)
		parked <- p
	}()
	waitFor(t, 5*time.Second, "the long poll to park", func() bool { return b.Engine.ParkedPops() == 1 })
	time.Sleep(time.Until(expiry))
	before := b.Engine.HotPathStats().HandOffs
	pushToPartitions(t, b, q, "b", "p1")
	got := <-parked
	if len(got.Messages) != 2 {
		t.Fatalf("the parked pop got %+v, want the expired lease's message and the new one", got)
	}
	if b.Engine.HotPathStats().HandOffs == before {
		t.Fatal("the push did not claim for the parked pop")
	}
	if n := expiredLeases(t, b); n != 1 {
		t.Fatalf("lanes_leases_expired_total = %v after a hand-off took over an expired lease, want 1", n)
	}
}

// formatOptional prints a JSON number that may be missing.
func formatOptional(v *float64) string {
	if v == nil {
		return "missing"
	}
	return fmt.Sprint(*v)
}
