package engine

import (
	"context"
	"slices"
	"testing"
	"time"
)

// discoveryPop is a named group's discovery pop of namespace ns in the default
// subscription mode (new), without waiting.
func discoveryPop(ns, group string) PopRequest {
	return PopRequest{Namespace: ns, Group: group, Batch: 10, Partitions: 0, AutoAck: true}
}

// A group subscribed to a namespace by a discovery pop in mode new receives
// what is pushed afterwards to a queue created after it subscribed, while the
// backlog of a queue that existed at its first contact stays skipped.
func TestADiscoveryGroupReceivesAQueueCreatedAfterItSubscribed(t *testing.T) {
	e := newEngine(t)
	ns := queueName(t)
	mustPush(t, e, items(ns+".orders.eu", "p", "old")...)
	if res := mustPop(t, e, discoveryPop(ns, "billing")); len(res.Messages) != 0 {
		t.Fatalf("first contact delivered the backlog: %v", txnIDs(res.Messages))
	}
	mustPush(t, e, items(ns+".orders.eu", "p", "eu-after")...)
	mustPush(t, e, items(ns+".orders.us", "p", "us-after")...)
	if got := drain(t, e, discoveryPop(ns, "billing")); !slices.Equal(got, []string{"eu-after", "us-after"}) {
		t.Fatalf("delivered %v, want eu-after and us-after", got)
	}
}

// A group's discovery pop of a namespace holding no queue yet subscribes it:
// the first queue pushed into the namespace afterwards delivers everything.
func TestADiscoveryPopOfAnEmptyNamespaceSubscribesTheGroup(t *testing.T) {
	e := newEngine(t)
	ns := queueName(t)
	if res := mustPop(t, e, discoveryPop(ns, "billing")); len(res.Messages) != 0 {
		t.Fatalf("an empty namespace delivered %v", txnIDs(res.Messages))
	}
	mustPush(t, e, items(ns+".orders.eu", "p", "first", "second")...)
	if got := drain(t, e, discoveryPop(ns, "billing")); !slices.Equal(got, []string{"first", "second"}) {
		t.Fatalf("delivered %v, want first and second", got)
	}
}

// A discovery pop parked on its namespace is woken by a push that creates a new
// queue there, and its re-check delivers that push instead of skipping it as
// backlog and answering empty at its timeout.
func TestAParkedDiscoveryPopReceivesAPushToANewQueue(t *testing.T) {
	e := newEngine(t)
	ns := queueName(t)
	mustPush(t, e, items(ns+".orders.eu", "p", "old")...)
	mustPop(t, e, discoveryPop(ns, "billing"))
	parked := discoveryPop(ns, "billing")
	parked.Wait, parked.Timeout = true, 10*time.Second
	type popped struct {
		res *PopResult
		err error
	}
	done := make(chan popped, 1)
	started := time.Now()
	go func() {
		res, err := e.Pop(context.Background(), parked)
		done <- popped{res, err}
	}()
	time.Sleep(300 * time.Millisecond) // parked, past its first re-check
	mustPush(t, e, items(ns+".orders.us", "p", "us-after")...)
	p := <-done
	if p.err != nil || p.res == nil || !slices.Equal(txnIDs(p.res.Messages), []string{"us-after"}) {
		t.Fatalf("parked pop answered %+v %v, want us-after", p.res, p.err)
	}
	if waited := time.Since(started); waited > 5*time.Second {
		t.Fatalf("parked pop answered after %v: not woken by the push", waited)
	}
}

// Deleting the group with its metadata deletes its discovery subscriptions: the
// next discovery pop subscribes afresh, so a queue created between the old
// subscription and that pop is backlog again.
func TestDeletingADiscoveryGroupDeletesItsScopeSubscription(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	ns := queueName(t)
	mustPush(t, e, items(ns+".orders.eu", "p", "old")...)
	mustPop(t, e, discoveryPop(ns, "billing"))
	deleted, err := e.DeleteGroup(ctx, "billing", "", true)
	if err != nil || !deleted.MetadataDeleted {
		t.Fatalf("delete: %+v %v", deleted, err)
	}
	var scopes int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM lanes.discovery_subscriptions
		WHERE consumer_group = 'billing' AND namespace = $1`, ns).Scan(&scopes); err != nil || scopes != 0 {
		t.Fatalf("scope subscriptions left after the delete: %d %v", scopes, err)
	}
	mustPush(t, e, items(ns+".orders.us", "p", "before-resubscribe")...)
	mustPop(t, e, discoveryPop(ns, "billing"))
	mustPush(t, e, items(ns+".orders.us", "p", "after-resubscribe")...)
	if got := drain(t, e, discoveryPop(ns, "billing")); !slices.Equal(got, []string{"after-resubscribe"}) {
		t.Fatalf("delivered %v, want after-resubscribe only", got)
	}
}

// The subscription route moves a discovery scope's start too: a queue the
// group has not met in the scope yet starts at the new instant.
func TestTheSubscriptionRouteMovesADiscoveryScopeStart(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	ns := queueName(t)
	group := queueName(t) // the route moves every queue of the group: its own name
	mustPop(t, e, discoveryPop(ns, group))
	mustPush(t, e, items(ns+".orders.eu", "p", "before-move")...)
	var moveTo time.Time
	if err := e.pool.QueryRow(ctx, `SELECT now()`).Scan(&moveTo); err != nil {
		t.Fatal(err)
	}
	moved, err := e.UpdateSubscription(ctx, group, moveTo)
	if err != nil || moved.RowsUpdated != 1 {
		t.Fatalf("subscription update: %+v %v, want the scope's row updated", moved, err)
	}
	mustPush(t, e, items(ns+".orders.eu", "p", "after-move")...)
	if got := drain(t, e, discoveryPop(ns, group)); !slices.Equal(got, []string{"after-move"}) {
		t.Fatalf("delivered %v, want after-move only", got)
	}
}

// A group whose discovery pops ran on a broker older than the scope's stored
// subscription (schema 120) has queues registered in the scope but no scope
// row. Its first discovery pop after the upgrade starts the scope at the
// group's earliest registration there, not at that pop, so a queue created in
// the scope after the group subscribed still delivers everything pushed to it.
func TestADiscoveryGroupSubscribedBeforeTheUpgradeReceivesANewQueue(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	ns := queueName(t)
	mustPush(t, e, items(ns+".orders.eu", "p", "old")...)
	mustPop(t, e, discoveryPop(ns, "billing"))
	// What an older broker leaves: the queue registration, no scope row.
	if _, err := e.pool.Exec(ctx, `DELETE FROM lanes.discovery_subscriptions
		WHERE consumer_group = 'billing' AND namespace = $1`, ns); err != nil {
		t.Fatal(err)
	}
	mustPush(t, e, items(ns+".orders.us", "p", "us-after")...)
	if got := drain(t, e, discoveryPop(ns, "billing")); !slices.Equal(got, []string{"us-after"}) {
		t.Fatalf("delivered %v, want us-after", got)
	}
}
