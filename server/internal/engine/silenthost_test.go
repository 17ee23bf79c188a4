package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/testdb"
)

// The tests here run an engine through a proxy whose connections go silent
// (testdb.Proxy.Kill) with a 200 ms listener check, so the listener finds
// the host silent within a check and a ping deadline (about 0.6 s), and give
// the requests a 5 s deadline: a request that answers only at its deadline
// waited on its dead connection.
const (
	silentCheck    = 200 * time.Millisecond
	silentDeadline = 5 * time.Second
	// silentBound is well past the listener's detection, well within the deadline.
	silentBound = silentDeadline / 2
)

// A push whose commit is under way when the database host falls silent
// fails once the listener finds the host silent, as in an outage, instead of
// at its deadline (30 s by default; the group commit's own 30 s held every
// push queued behind it too). Its commit landed unseen; the same push sent
// again once the host answers is answered duplicate and stores nothing more.
// Before, the push failed at its 5 s deadline (context deadline exceeded).
func TestAPushInFlightWhenTheHostFallsSilentFailsWithinTheListenersCheck(t *testing.T) {
	proxy := newTestProxy(t)
	a := newWatchedEngineThrough(t, proxy, Config{ListenerCheckInterval: silentCheck})
	direct := newEngine(t)
	q := queueName(t)
	mustPush(t, a, items(q, "p", "warm")...) // the partition's id cached: the push goes in one trip
	waitListening(t, a)
	// The push's statement sleeps in PostgreSQL and then commits, whatever
	// becomes of its connection (pgx sends a cancel request for a connection
	// it finds broken, which the proxy passes to the same server; the pause
	// ends soon after absorbing it, and is long enough to contain it).
	awaitStall := testdb.StallNextSegmentWritePastCancel(t, direct.pool, q, "p", 3*time.Second)
	t.Cleanup(proxy.Close) // first: a dead connection makes the pool's close wait 15 s

	pushed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), silentDeadline)
		defer cancel()
		_, err := a.Push(ctx, items(q, "p", "t1", "t2"))
		pushed <- err
	}()
	awaitStall()
	silent := time.Now()
	if n := proxy.Kill(""); n < 2 {
		t.Fatalf("made %d connections silent, want the listener's and the push's", n)
	}
	err := <-pushed
	took := time.Since(silent)
	t.Logf("the push in flight answered %v after the host fell silent (check %v, deadline %v): %v", took.Round(time.Millisecond), silentCheck, silentDeadline, err)
	if err == nil {
		t.Fatal("the push on a silent connection succeeded")
	}
	if took > silentBound || !IsUnreachable(err) {
		t.Fatalf("the push in flight failed %v after the host fell silent with %v, want a lost connection within %v", took, err, silentBound)
	}

	// The host answers again (new connections pass): the same push again
	// stores nothing twice. On a loaded machine the listener may find its new
	// connection slow too and cut the pool's again; the push then fails as
	// unreachable, and is sent again, as a client would.
	ctx, cancel := context.WithTimeout(context.Background(), silentDeadline)
	defer cancel()
	var again []PushResult
	for {
		again, err = a.Push(ctx, items(q, "p", "t1", "t2"))
		if err == nil || !IsUnreachable(err) || ctx.Err() != nil {
			break
		}
		t.Logf("the push sent again failed (%v); sending it again", err)
	}
	if err != nil {
		t.Fatalf("the push sent again: %v", err)
	}
	for _, r := range again {
		if r.Status != PushDuplicate {
			t.Errorf("the push sent again answered %+v, want duplicate: its first commit landed", r)
		}
	}
	got := mustPop(t, direct, PopRequest{Queue: q, Batch: 10, AutoAck: true})
	var txns []string
	for _, m := range got.Messages {
		txns = append(txns, m.TransactionID)
	}
	if !slices.Equal(txns, []string{"warm", "t1", "t2"}) {
		t.Fatalf("the partition holds %v, want warm, t1, t2 once each", txns)
	}
}

// A pop whose claim runs when the database host falls silent fails once the
// listener finds the host silent, instead of at the claim's deadline (60 s by
// default). Before, it failed at its 5 s claim deadline.
func TestAPopInFlightWhenTheHostFallsSilentFailsWithinTheListenersCheck(t *testing.T) {
	proxy := newTestProxy(t)
	a := newWatchedEngineThrough(t, proxy, Config{ListenerCheckInterval: silentCheck, ClaimTimeout: silentDeadline})
	direct := newEngine(t)
	q := queueName(t)
	mustPush(t, direct, items(q, "p", "m1")...)
	waitListening(t, a)
	testdb.StallNextClaim(t, func(ctx context.Context, sql string) error {
		_, err := direct.pool.Exec(ctx, sql)
		return err
	}, "workers", 3*time.Second)
	t.Cleanup(proxy.Close) // first: a dead connection makes the pool's close wait 15 s

	popped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), silentDeadline)
		defer cancel()
		_, err := a.Pop(ctx, PopRequest{Queue: q, Group: "workers", SubscriptionMode: "all"})
		popped <- err
	}()
	testdb.AwaitSleepingStatement(t, direct.pool)
	silent := time.Now()
	if n := proxy.Kill(""); n < 2 {
		t.Fatalf("made %d connections silent, want the listener's and the pop's", n)
	}
	err := <-popped
	took := time.Since(silent)
	t.Logf("the pop in flight answered %v after the host fell silent (check %v, claim deadline %v): %v", took.Round(time.Millisecond), silentCheck, silentDeadline, err)
	if err == nil {
		t.Fatal("the pop on a silent connection succeeded")
	}
	if took > silentBound || !IsUnreachable(err) {
		t.Fatalf("the pop in flight failed %v after the host fell silent with %v, want a lost connection within %v", took, err, silentBound)
	}
}

// A database that is only slow kills nothing: a statement running far past
// the listener's ping deadline (a push stalled 2 s in PostgreSQL) on a
// database whose every answer comes late, though within that deadline,
// finishes, and the listener keeps its connection.
func TestASlowDatabaseKillsNoStatement(t *testing.T) {
	proxy := newTestProxy(t)
	a := newWatchedEngineThrough(t, proxy, Config{ListenerCheckInterval: silentCheck})
	direct := newEngine(t)
	q := queueName(t)
	mustPush(t, a, items(q, "p", "warm")...)
	waitListening(t, a)
	awaitStall := testdb.StallNextSegmentWrite(t, direct.pool, q, "p", 2*time.Second)
	proxy.Slow("", 3*silentCheck/2) // every answer, within the ping's deadline of 2 checks

	pushed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*silentDeadline)
		defer cancel()
		_, err := a.Push(ctx, items(q, "p", "t1"))
		pushed <- err
	}()
	awaitStall()
	if err := <-pushed; err != nil {
		t.Fatalf("a push stalled in a slow database failed: %v", err)
	}
	if n := proxy.Sent(listenQuery); n != 1 {
		t.Fatalf("the listener connected %d times while the database was slow, want once", n)
	}
}
