package engine

import (
	"testing"
	"time"
)

// leaseOldest pops batch=1 n times under a lease of leaseSeconds, holding one
// partition each without acking; it returns the transaction ids it holds.
func leaseOldest(t *testing.T, e *Engine, q, group string, n, leaseSeconds int) map[string]bool {
	t.Helper()
	held := map[string]bool{}
	for i := 0; i < n; i++ {
		r := mustPop(t, e, PopRequest{Queue: q, Group: group, Batch: 1, LeaseSeconds: leaseSeconds})
		if len(r.Messages) != 1 {
			t.Fatalf("lease pop %d took %d messages", i, len(r.Messages))
		}
		held[r.Messages[0].TransactionID] = true
	}
	return held
}

// A windowed claim looks at the oldest-written partitions with work; leased
// ones must not fill that window, or free partitions behind 16 leased ones
// wait for the every-32nd full scan. The leased ones still hold the claim
// floor: once their leases expire the group gets them back.
func TestWindowedPopFindsFreePartitionsBehindLeasedOnes(t *testing.T) {
	for _, group := range []string{"", "g"} {
		t.Run("group="+group, func(t *testing.T) {
			e := newEngine(t)
			q := queueName(t)
			mustPop(t, e, PopRequest{Queue: q, Group: group}) // subscribes the group before the pushes
			pushPartitions(t, e, q, 20, 1)
			held := leaseOldest(t, e, q, group, claimWindowMin, 1)
			for i := 0; i < 20-claimWindowMin; i++ {
				r := mustPop(t, e, PopRequest{Queue: q, Group: group, Batch: 1, AutoAck: true})
				if len(r.Messages) != 1 || held[r.Messages[0].TransactionID] {
					t.Fatalf("pop %d behind %d leased partitions: %+v", i, claimWindowMin, r.Messages)
				}
			}
			if r := mustPop(t, e, PopRequest{Queue: q, Group: group, Batch: 1}); len(r.Messages) != 0 {
				t.Fatalf("every partition is leased or drained, yet a pop took %+v", r.Messages)
			}
			time.Sleep(1100 * time.Millisecond) // the leases expire
			for range held {
				r := mustPop(t, e, PopRequest{Queue: q, Group: group, Batch: 1, AutoAck: true})
				if len(r.Messages) != 1 || !held[r.Messages[0].TransactionID] {
					t.Fatalf("after the leases expired a pop took %+v, want one of %v", r.Messages, held)
				}
				delete(held, r.Messages[0].TransactionID)
			}
		})
	}
}

// A parked long poll woken by a push to a new partition must be handed its
// message although 16 older partitions are leased.
func TestParkedPopGetsAFreePartitionBehindLeasedOnes(t *testing.T) {
	e := newEngineWithoutRechecks(t)
	q := queueName(t)
	pushPartitions(t, e, q, claimWindowMin, 1)
	leaseOldest(t, e, q, "", claimWindowMin, 60)
	done := parkIdle(t, e, PopRequest{Queue: q, Batch: 1, Wait: true, Timeout: wakePopTimeout, AutoAck: true})
	pushedAt := time.Now()
	mustPush(t, e, items(q, "free", "free-m0")...)
	p := wokenBy(t, done, "push", pushedAt)
	if p.err != nil || len(p.res.Messages) != 1 || p.res.Messages[0].TransactionID != "free-m0" {
		t.Fatalf("parked pop: %+v %v", p.res, p.err)
	}
}
