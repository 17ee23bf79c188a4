package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/testdb"
)

// model.md: a named group's `new` skips the backlog of its first contact. A
// message into a new partition that commits after that contact is not backlog,
// even when its push stamped the segment before the contact began: the group
// must receive it.
// pushAcrossFirstContact pushes txn into queue/partition with the push held
// between its segment write and its commit while firstContact, the group's
// first pop, answers: that pop must get nothing (it skips the backlog and
// cannot see the uncommitted push), and the push must commit only after it.
func pushAcrossFirstContact(t *testing.T, e *Engine, queue, partition, txn string, firstContact PopRequest) {
	t.Helper()
	awaitStall := testdb.StallNextSegmentWrite(t, e.pool, queue, partition, 2*time.Second)
	pushed := make(chan []PushResult, 1)
	go func() {
		res, err := e.Push(context.Background(), items(queue, partition, txn))
		if err != nil {
			t.Error(err)
		}
		pushed <- res
	}()
	awaitStall()
	if b := mustPop(t, e, firstContact); len(b.Messages) != 0 {
		t.Fatalf("first contact: %v, want nothing (the backlog is skipped)", txnIDs(b.Messages))
	}
	select {
	case <-pushed:
		t.Fatal("the push committed before the first contact answered: the test shows nothing")
	default:
	}
	if res := <-pushed; len(res) != 1 || res[0].Status != PushQueued {
		t.Fatalf("push: %+v", res)
	}
}

func TestANewGroupReceivesAMessageCommittedAfterItsFirstContact(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	mustPush(t, e, items(q, "old", "backlog")...)
	const stall = 1500 * time.Millisecond
	testdb.StallNextSegmentWrite(t, e.pool, q, "fresh", stall)
	pushed := make(chan []PushResult, 1)
	start := time.Now()
	go func() {
		res, err := e.Push(context.Background(), items(q, "fresh", "n1"))
		if err != nil {
			t.Error(err)
		}
		pushed <- res
	}()
	time.Sleep(300 * time.Millisecond) // the push is inside its stall
	if b := mustPop(t, e, PopRequest{Queue: q, Group: "late", SubscriptionMode: "new"}); len(b.Messages) != 0 {
		t.Fatalf("first contact: %v, want nothing (the backlog is skipped)", txnIDs(b.Messages))
	}
	if time.Since(start) >= stall {
		t.Fatalf("the first contact waited for the stalled push (%v): the test shows nothing", time.Since(start))
	}
	if res := <-pushed; len(res) != 1 || res[0].Status != PushQueued {
		t.Fatalf("push: %+v", res)
	}
	b := mustPop(t, e, PopRequest{Queue: q, Group: "late", Partitions: 10, Batch: 10})
	if got := txnIDs(b.Messages); len(got) != 1 || got[0] != "n1" {
		t.Fatalf("after the push committed: %v, want [n1] (it committed after the group subscribed)", got)
	}
}

// model.md: a discovery group's `new` skips the backlog of the queues in its
// scope at its first contact. A queue created in the scope by a push that
// began before that contact and committed after it was not there: nothing in
// it is backlog, though the push stamped its segment before the contact, and
// the group must receive it. Both ways a first contact stores the scope's
// subscription are covered: a scope holding no queue yet, and one holding a
// queue with a backlog.
func TestANewDiscoveryGroupReceivesAMessageIntoANewQueueCommittedAfterItsFirstContact(t *testing.T) {
	for _, withBacklog := range []bool{false, true} {
		t.Run(fmt.Sprintf("backlog=%v", withBacklog), func(t *testing.T) {
			e := newEngine(t)
			ns := queueName(t)
			if withBacklog {
				mustPush(t, e, items(ns+".orders.old", "p", "backlog")...)
			}
			fresh := ns + ".orders.fresh"
			// the push creates the queue and stamps its segment before the first contact
			pushAcrossFirstContact(t, e, fresh, "p", "n1", discoveryPop(ns, "late"))
			if got := drain(t, e, discoveryPop(ns, "late")); !slices.Equal(got, []string{"n1"}) {
				t.Fatalf("after the push committed: %v, want [n1] (its queue was created after the group subscribed)", got)
			}
		})
	}
}

// A queue that existed at a discovery group's first contact keeps its
// backlog skipped when it enters the scope later: relabelled into it by
// configure, or registered again after a group delete on that queue alone.
// Only a queue created after the first contact starts at everything retained.
func TestAQueueThatExistedAtADiscoveryGroupsFirstContactDecidesByTime(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	ns := queueName(t)
	inScope, elsewhere := ns+".orders.eu", ns+"-other.orders.us"
	mustPush(t, e, items(inScope, "p", "eu-old")...)
	mustPush(t, e, items(elsewhere, "p", "us-old")...)
	if res := mustPop(t, e, discoveryPop(ns, "billing")); len(res.Messages) != 0 {
		t.Fatalf("first contact delivered the backlog: %v", txnIDs(res.Messages))
	}
	mustPush(t, e, items(inScope, "p", "eu-after")...)
	mustPush(t, e, items(elsewhere, "p", "us-after")...)
	if _, err := e.Configure(ctx, ConfigureRequest{Queue: elsewhere, Namespace: &ns, Merge: true}); err != nil {
		t.Fatal(err)
	}
	got := drain(t, e, discoveryPop(ns, "billing"))
	slices.Sort(got)
	if !slices.Equal(got, []string{"eu-after", "us-after"}) {
		t.Fatalf("delivered %v, want eu-after and us-after (the relabelled queue's backlog stays skipped)", got)
	}
	if deleted, err := e.DeleteGroup(ctx, "billing", inScope, true); err != nil || !deleted.MetadataDeleted {
		t.Fatalf("delete on %s: %+v %v", inScope, deleted, err)
	}
	if got := drain(t, e, discoveryPop(ns, "billing")); !slices.Equal(got, []string{"eu-after"}) {
		t.Fatalf("after the group delete on one queue: %v, want eu-after again (from the scope's instant, not everything)", got)
	}
}

// model.md: a discovery group's `new` skips what its scope's queues held at its
// first contact. A queue that existed then and is met again later (relabelled
// into the scope by configure, or registered again after a group delete on it)
// decides by the scope's instant, but a partition of it created by a push that
// began before that contact and committed after it was not there: nothing in it
// is backlog, though the push stamped its segment before the contact, and the
// group must receive it.
func TestADiscoveryGroupReceivesAMessageIntoANewPartitionOfAQueueMetAgainAfterItsFirstContact(t *testing.T) {
	for _, metAgain := range []string{"relabelled", "group deleted"} {
		t.Run(metAgain, func(t *testing.T) {
			e := newEngine(t)
			ctx := context.Background()
			ns := queueName(t)
			inScope, elsewhere := ns+".orders.eu", ns+"-other.orders.us"
			mustPush(t, e, items(inScope, "p", "eu-old")...)
			mustPush(t, e, items(elsewhere, "p", "us-old")...)
			queue := inScope
			if metAgain == "relabelled" {
				queue = elsewhere
			}
			// the push creates the partition and stamps its segment before the first contact
			pushAcrossFirstContact(t, e, queue, "fresh", "n1", discoveryPop(ns, "billing"))
			if metAgain == "relabelled" {
				if _, err := e.Configure(ctx, ConfigureRequest{Queue: elsewhere, Namespace: &ns, Merge: true}); err != nil {
					t.Fatal(err)
				}
			} else if deleted, err := e.DeleteGroup(ctx, "billing", inScope, true); err != nil || !deleted.MetadataDeleted {
				t.Fatalf("delete on %s: %+v %v", inScope, deleted, err)
			}
			if got := drain(t, e, discoveryPop(ns, "billing")); !slices.Equal(got, []string{"n1"}) {
				t.Fatalf("%s queue met again: %v, want [n1] (its partition was created after the group subscribed)", metAgain, got)
			}
		})
	}
}
