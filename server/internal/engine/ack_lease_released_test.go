package engine

import (
	"testing"
	"time"
)

// leaseReleased says that the ack ended a live lease on the cursor, so a
// lease-less nack sent while nothing is leased answers false, while one that
// ends another consumer's live lease still answers true.
func TestLeaseReleasedOnlyWhenTheAckEndedALiveLease(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	pushN(t, e, q, "p", 5)
	first := mustPop(t, e, PopRequest{Queue: q, Batch: 1})
	if r := mustAck(t, e, ack(first.Messages[0], "completed")); !r[0].Success || !r[0].LeaseReleased {
		t.Fatalf("the leased ack of m0: %+v", r[0])
	}
	partition := first.PartitionID.String()
	leaseless := func(txn, status string) AckResult {
		t.Helper()
		return mustAck(t, e, AckItem{TransactionID: txn, PartitionID: partition, Status: status, Error: "boom"})[0]
	}

	// Nothing is leased: the cursor moves (dlq) or the budget is charged
	// (failed), and no lease is released.
	if r := leaseless("m1", "dlq"); !r.Success || !r.DLQ || r.LeaseReleased {
		t.Fatalf("lease-less dlq of m1 with nothing leased: %+v, want success, dlq, leaseReleased false", r)
	}
	if r := leaseless("m2", "failed"); !r.Success || r.DLQ || r.LeaseReleased {
		t.Fatalf("lease-less failed of m2 with nothing leased: %+v, want success, leaseReleased false", r)
	}

	// A lease that expired is no longer held: ending the row's record of it
	// releases nothing.
	expired := mustPop(t, e, PopRequest{Queue: q, Batch: 1, LeaseSeconds: 1})
	if len(expired.Messages) != 1 || expired.Messages[0].TransactionID != "m2" {
		t.Fatalf("pop after the failed m2: %v", txnIDs(expired.Messages))
	}
	time.Sleep(1100 * time.Millisecond)
	if r := leaseless("m2", "dlq"); !r.Success || !r.DLQ || r.LeaseReleased {
		t.Fatalf("lease-less dlq of m2 under an expired lease: %+v, want success, dlq, leaseReleased false", r)
	}

	// Another consumer's live lease is ended by a lease-less nack: true.
	live := mustPop(t, e, PopRequest{Queue: q, Batch: 1})
	if len(live.Messages) != 1 || live.Messages[0].TransactionID != "m3" {
		t.Fatalf("pop after m2: %v", txnIDs(live.Messages))
	}
	if r := leaseless("m3", "failed"); !r.Success || !r.LeaseReleased {
		t.Fatalf("lease-less failed of m3 under a live lease: %+v, want success, leaseReleased true", r)
	}
	if again := mustPop(t, e, PopRequest{Queue: q, Batch: 1}); len(again.Messages) != 1 || again.LeaseID == live.LeaseID {
		t.Fatalf("the released lease still holds the partition: %+v", again)
	}
}
