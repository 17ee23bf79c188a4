package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
)

// messagesIn counts every message ever stored in queue (all partitions).
func messagesIn(t testing.TB, e *Engine, queue string) int64 {
	t.Helper()
	var n int64
	if err := e.pool.QueryRow(context.Background(), `SELECT coalesce(sum(p.last_offset + 1), 0)::int8
		FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $1`, queue).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// consumedIn counts the messages group has committed on queue.
func consumedIn(t testing.TB, e *Engine, queue, group string) int64 {
	t.Helper()
	var n int64
	if err := e.pool.QueryRow(context.Background(), `SELECT coalesce(sum(c.committed + 1), 0)::int8
		FROM lanes.consumers c JOIN lanes.partitions p ON p.id = c.partition_id JOIN lanes.queues q ON q.id = p.queue_id
		WHERE q.name = $1 AND c.consumer_group = $2`, queue, group).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// deadlocks is PostgreSQL's count of deadlocks detected in the test database.
func deadlocks(t testing.TB, e *Engine) int64 {
	t.Helper()
	var n int64
	if _, err := e.pool.Exec(context.Background(), `SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := e.pool.QueryRow(context.Background(), `SELECT pg_stat_clear_snapshot(), deadlocks FROM pg_stat_database
		WHERE datname = current_database()`).Scan(nil, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func mustTransaction(t testing.TB, e *Engine, req TransactionRequest) *TransactionResult {
	t.Helper()
	res, err := e.Transaction(context.Background(), req)
	if err != nil {
		t.Fatalf("transaction: %v", err)
	}
	return res
}

func pushOp(index int, queue, partition, txn string, payload any) TxOp {
	return TxOp{Index: index, Push: &PushItem{Queue: queue, Partition: partition, TransactionID: txn, Payload: raw(payload)}}
}

func ackOp(index int, m Message, group, leaseID string) TxOp {
	return TxOp{Index: index, Ack: &AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID.String(),
		Group: group, LeaseID: leaseID}}
}

// TestPipelineHandoffNeverSplitsInputAndOutput consumes orders and, per order,
// pushes an invoice and acks the order in one bundle. The handler "dies" at
// random points: before the bundle (lease lapses, the order redelivers) and
// after it (the response is lost, the retry must abort). After every step an
// invoice exists exactly when its order is consumed.
func TestPipelineHandoffNeverSplitsInputAndOutput(t *testing.T) {
	e := newEngine(t)
	orders, invoices := queueName(t)+"-orders", queueName(t)+"-invoices"
	const n = 12
	for i := 0; i < n; i++ {
		mustPush(t, e, PushItem{Queue: orders, TransactionID: fmt.Sprintf("order-%d", i), Payload: raw(map[string]int{"orderId": i})})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	crashesBefore, lostResponses := 0, 0
	for step := 0; step < 200 && consumedIn(t, e, orders, "invoicing") < n; step++ {
		pop := mustPop(t, e, PopRequest{Queue: orders, Group: "invoicing", SubscriptionMode: "all", Batch: 1, LeaseSeconds: 1})
		if len(pop.Messages) == 0 {
			time.Sleep(300 * time.Millisecond) // a crashed handler's lease is lapsing
			continue
		}
		m := pop.Messages[0]
		bundle := TransactionRequest{Ops: []TxOp{
			pushOp(0, invoices, "", "invoice-for-"+m.TransactionID, map[string]any{"invoiced": true}),
			ackOp(1, m, "invoicing", ""),
		}, RequiredLeases: []string{pop.LeaseID}}
		switch rng.IntN(3) {
		case 0: // dies before committing: nothing happens, the order redelivers after its lease
			crashesBefore++
		case 1: // commits, then the response is lost and the handler retries blindly
			if res := mustTransaction(t, e, bundle); !res.Success {
				t.Fatalf("bundle: %+v", res)
			}
			retry := mustTransaction(t, e, bundle)
			if retry.Success || retry.Reason != TxReasonDuplicate {
				t.Fatalf("a retry after a lost response must abort as duplicate: %+v", retry)
			}
			lostResponses++
		default:
			if res := mustTransaction(t, e, bundle); !res.Success {
				t.Fatalf("bundle: %+v", res)
			}
		}
		if in, out := consumedIn(t, e, orders, "invoicing"), messagesIn(t, e, invoices); in != out {
			t.Fatalf("step %d: %d orders consumed but %d invoices exist", step, in, out)
		}
	}
	if in, out := consumedIn(t, e, orders, "invoicing"), messagesIn(t, e, invoices); in != n || out != n {
		t.Fatalf("end: %d orders consumed, %d invoices; want %d each", in, out, n)
	}
	if crashesBefore == 0 || lostResponses == 0 {
		t.Fatalf("the run must exercise both failure points: %d crashes, %d lost responses", crashesBefore, lostResponses)
	}
}

func TestFanInAcksThreePartitionsOfTwoQueuesAndPushesToTwoQueues(t *testing.T) {
	e := newEngine(t)
	qa, qb := queueName(t)+"-a", queueName(t)+"-b"
	outX, outY := queueName(t)+"-x", queueName(t)+"-y"
	mustPush(t, e, items(qa, "p1", "a1-1", "a1-2")...)
	mustPush(t, e, items(qa, "p2", "a2-1")...)
	mustPush(t, e, items(qb, "p1", "b1-1", "b1-2", "b1-3")...)
	var ops []TxOp
	var leases []string
	for _, q := range []string{qa, qb} {
		pop := mustPop(t, e, PopRequest{Queue: q, Group: "joiner", SubscriptionMode: "all", Batch: 10})
		leases = append(leases, pop.LeaseID)
		for _, m := range pop.Messages {
			ops = append(ops, ackOp(len(ops), m, "joiner", m.LeaseID))
		}
	}
	if len(ops) != 6 {
		t.Fatalf("popped %d messages, want 6", len(ops))
	}
	ops = append(ops, TxOp{Index: len(ops), Push: &PushItem{Queue: outX, Payload: raw("joined")}},
		TxOp{Index: len(ops) + 1, Push: &PushItem{Queue: outY, Partition: "z", Payload: raw("joined")}})
	res := mustTransaction(t, e, TransactionRequest{Ops: ops, RequiredLeases: leases})
	if !res.Success || len(res.Results) != 8 {
		t.Fatalf("fan-in bundle: %+v", res)
	}
	for _, r := range res.Results {
		if (r.Ack != nil && !r.Ack.Success) || (r.Push != nil && r.Push.Status != PushQueued) {
			t.Fatalf("result %+v", r)
		}
	}
	if consumedIn(t, e, qa, "joiner") != 3 || consumedIn(t, e, qb, "joiner") != 3 ||
		messagesIn(t, e, outX) != 1 || messagesIn(t, e, outY) != 1 {
		t.Fatal("the fan-in bundle did not commit every part")
	}
	for _, q := range []string{qa, qb} {
		if again := mustPop(t, e, PopRequest{Queue: q, Group: "joiner"}); len(again.Messages) != 0 {
			t.Fatalf("%s redelivered after a committed bundle: %v", q, txnIDs(again.Messages))
		}
	}
}

// bundleLeavesNoTrace runs a bundle that must roll back and checks that none
// of its push, ack or kv write is visible.
func bundleLeavesNoTrace(t *testing.T, e *Engine, req TransactionRequest, reason, input, group, output, ns string) {
	t.Helper()
	before := messagesIn(t, e, output)
	consumed := consumedIn(t, e, input, group)
	res := mustTransaction(t, e, req)
	if res.Success || res.Reason != reason || len(res.Results) != 0 {
		t.Fatalf("want rollback %q, got %+v", reason, res)
	}
	if messagesIn(t, e, output) != before {
		t.Fatal("a push of a rolled-back bundle is visible")
	}
	if consumedIn(t, e, input, group) != consumed {
		t.Fatal("an ack of a rolled-back bundle moved the cursor")
	}
	kv, _, err := e.KV(context.Background(), []KVOp{{Op: KVGet, Namespace: ns, Key: "marker"}})
	if err != nil || kv[0].Found {
		t.Fatalf("a kv write of a rolled-back bundle is visible: %+v %v", kv, err)
	}
}

func TestBundleRollsBackOnDuplicatePushStaleLeaseAndLostKVPrecondition(t *testing.T) {
	e := newEngine(t)
	in, out := queueName(t)+"-in", queueName(t)+"-out"
	ns := queueName(t)
	mustPush(t, e, items(in, "", "m1")...)
	mustPush(t, e, items(out, "", "already-there")...)
	marker := KVOp{Op: KVPut, Namespace: ns, Key: "marker", Value: raw(1), Forever: true}

	t.Run("duplicate push", func(t *testing.T) {
		pop := mustPop(t, e, PopRequest{Queue: in, Group: "g", SubscriptionMode: "all"})
		m := pop.Messages[0]
		bundleLeavesNoTrace(t, e, TransactionRequest{Ops: []TxOp{
			pushOp(0, out, "", "fresh", 1), pushOp(1, out, "", "already-there", 2), ackOp(2, m, "g", pop.LeaseID),
		}, KV: []KVOp{marker}}, TxReasonDuplicate, in, "g", out, ns)
		mustAck(t, e, AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID.String(), Group: "g", Status: "retry", LeaseID: pop.LeaseID})
	})
	t.Run("stale lease", func(t *testing.T) {
		pop := mustPop(t, e, PopRequest{Queue: in, Group: "g", SubscriptionMode: "all", LeaseSeconds: 1})
		if len(pop.Messages) != 1 {
			t.Fatalf("pop: %+v", pop)
		}
		time.Sleep(1100 * time.Millisecond)
		m := pop.Messages[0]
		bundleLeavesNoTrace(t, e, TransactionRequest{Ops: []TxOp{
			pushOp(0, out, "", "after-lease", 1), ackOp(1, m, "g", ""),
		}, RequiredLeases: []string{pop.LeaseID}, KV: []KVOp{marker}}, TxReasonAckRejected, in, "g", out, ns)
		// The same with the lease named on the op.
		bundleLeavesNoTrace(t, e, TransactionRequest{Ops: []TxOp{
			pushOp(0, out, "", "after-lease", 1), ackOp(1, m, "g", pop.LeaseID),
		}, KV: []KVOp{marker}}, TxReasonAckRejected, in, "g", out, ns)
	})
	t.Run("unresolvable ack", func(t *testing.T) {
		pop := mustPop(t, e, PopRequest{Queue: in, Group: "g", SubscriptionMode: "all"})
		m := pop.Messages[0]
		m.TransactionID = "never-pushed"
		bundleLeavesNoTrace(t, e, TransactionRequest{Ops: []TxOp{
			pushOp(0, out, "", "x", 1), ackOp(1, m, "g", pop.LeaseID),
		}, KV: []KVOp{marker}}, TxReasonAckRejected, in, "g", out, ns)
	})
	t.Run("lost kv precondition", func(t *testing.T) {
		if _, _, err := e.KV(context.Background(), []KVOp{{Op: KVPut, Namespace: ns, Key: "winner", Value: raw("first"), Forever: true}}); err != nil {
			t.Fatal(err)
		}
		pop := mustPop(t, e, PopRequest{Queue: in, Group: "g2", SubscriptionMode: "all"})
		m := pop.Messages[0]
		zero := int64(0)
		req := TransactionRequest{Ops: []TxOp{pushOp(0, out, "", "y", 1), ackOp(1, m, "g2", pop.LeaseID)},
			KV: []KVOp{marker, {Op: KVPut, Namespace: ns, Key: "winner", Value: raw("second"), Forever: true, Expect: &zero, Required: true}}}
		bundleLeavesNoTrace(t, e, req, TxReasonKVPrecondition, in, "g2", out, ns)
		res := mustTransaction(t, e, req)
		f := res.KVFailure
		if f == nil || f.Index != 1 || f.Reason != KVReasonExists || string(f.Value) != `"first"` || f.Version != 1 {
			t.Fatalf("the failure must carry the winner's value and version: %+v", f)
		}
	})
}

func TestBundleIntraDuplicatePushFirstWinsWithoutRollback(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	res := mustTransaction(t, e, TransactionRequest{Ops: []TxOp{
		pushOp(0, q, "", "same", "first"), pushOp(1, q, "", "same", "second"), pushOp(2, q, "other", "same", "third"),
	}})
	if !res.Success || res.Results[0].Duplicate || !res.Results[1].Duplicate || res.Results[2].Duplicate ||
		res.Results[1].Push.MessageID != res.Results[0].Push.MessageID {
		t.Fatalf("first wins within a partition: %+v", res.Results)
	}
	if messagesIn(t, e, q) != 2 {
		t.Fatalf("stored %d, want 2", messagesIn(t, e, q))
	}
	pop := mustPop(t, e, PopRequest{Queue: q, Partition: DefaultPartition})
	if len(pop.Messages) != 1 || string(pop.Messages[0].Data) != `"first"` {
		t.Fatalf("pop: %+v", pop.Messages)
	}
}

// TestIdempotencyMarkerAckAndPushRetriedAfterLostResponse is the external-effect
// pattern: a required putIfAbsent marker, the ack of the input and the push
// of the output commit together; a blind retry aborts and doubles nothing.
func TestIdempotencyMarkerAckAndPushRetriedAfterLostResponse(t *testing.T) {
	e := newEngine(t)
	in, out := queueName(t)+"-in", queueName(t)+"-out"
	ns := queueName(t)
	mustPush(t, e, items(in, "", "payment-7")...)
	pop := mustPop(t, e, PopRequest{Queue: in, Group: "charger", SubscriptionMode: "all"})
	m := pop.Messages[0]
	bundle := TransactionRequest{
		Ops: []TxOp{pushOp(0, out, "", "receipt-"+m.TransactionID, "charged"), ackOp(1, m, "charger", pop.LeaseID)},
		KV:  []KVOp{{Op: KVPutIfAbsent, Namespace: ns, Key: "charged:" + m.TransactionID, Value: raw("done"), Forever: true, Required: true}},
	}
	first := mustTransaction(t, e, bundle)
	if !first.Success || len(first.KV) != 1 || !first.KV[0].Applied || first.KV[0].Version != 1 {
		t.Fatalf("first commit: %+v", first)
	}
	retry := mustTransaction(t, e, bundle)
	if retry.Success || retry.Reason != TxReasonKVPrecondition || retry.KVFailure.Reason != KVReasonExists ||
		string(retry.KVFailure.Value) != `"done"` {
		t.Fatalf("the retry must abort on the marker: %+v", retry)
	}
	if messagesIn(t, e, out) != 1 || consumedIn(t, e, in, "charger") != 1 {
		t.Fatal("the retry doubled something")
	}
}

func TestBundleWithoutRidersBehavesAsBefore(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	res := mustTransaction(t, e, TransactionRequest{Ops: []TxOp{pushOp(0, q, "", "", nil)}})
	if !res.Success || res.KV != nil || res.Timers != nil || len(res.Results) != 1 || res.Results[0].Push.TransactionID == "" {
		t.Fatalf("%+v", res)
	}
	pop := mustPop(t, e, PopRequest{Queue: q})
	if len(pop.Messages) != 1 || string(pop.Messages[0].Data) != "null" {
		t.Fatalf("a JSON null payload is kept: %+v", pop.Messages)
	}
	if _, err := e.Transaction(context.Background(), TransactionRequest{}); err == nil {
		t.Fatal("an empty bundle without riders is a bad request")
	}
	if _, err := e.Transaction(context.Background(), TransactionRequest{Ops: []TxOp{{Index: 0, Push: &PushItem{}}}}); err == nil {
		t.Fatal("a push without a queue is a bad request")
	}
}

func TestBundleStoresTraceID(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	trace := NewMessageID().String()
	mustTransaction(t, e, TransactionRequest{Ops: []TxOp{{Index: 0, Push: &PushItem{Queue: q, TraceID: trace, Payload: raw(1)}}}})
	pop := mustPop(t, e, PopRequest{Queue: q})
	if len(pop.Messages) != 1 || pop.Messages[0].TraceID != trace {
		t.Fatalf("trace id: %+v", pop.Messages)
	}
}

// TestConcurrentBundlesPushesAndPopsDoNotDeadlock runs bundles that push to
// and ack on overlapping partitions in opposite orders, plain pushes and pops
// together, and checks every call succeeds and the totals add up.
func TestConcurrentBundlesPushesAndPopsDoNotDeadlock(t *testing.T) {
	// With kv riders every bundle runs the general way; without, a bundle
	// acking one leased message runs in one round trip unless the database
	// disagrees, so both paths meet plain pushes and pops.
	t.Run("with kv riders", func(t *testing.T) { runConcurrentBundles(t, true) })
	t.Run("without riders", func(t *testing.T) { runConcurrentBundles(t, false) })
}

func runConcurrentBundles(t *testing.T, riders bool) {
	e := newEngine(t)
	qa, qb := queueName(t)+"-a", queueName(t)+"-b"
	ns := queueName(t)
	parts := []string{"p0", "p1", "p2", "p3"}
	const seed = 40
	for _, q := range []string{qa, qb} {
		for _, p := range parts {
			var txns []string
			for i := 0; i < seed; i++ {
				txns = append(txns, fmt.Sprintf("seed-%s-%d", p, i))
			}
			mustPush(t, e, items(q, p, txns...)...)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var bundlePushes, plainPushes, acked atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	worker := func(id int) {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(uint64(id), 7))
		for i := 0; i < 25; i++ {
			switch rng.IntN(3) {
			case 0: // plain push
				if _, err := e.Push(ctx, items(qa, parts[rng.IntN(4)], fmt.Sprintf("plain-%d-%d", id, i))); err != nil {
					errs <- err
					return
				}
				plainPushes.Add(1)
			default: // pop one queue, then bundle: ack it and push to both queues, orders flipped per worker
				src := qa
				if id%2 == 1 {
					src = qb
				}
				req := PopRequest{Queue: src, Group: "mix", SubscriptionMode: "all", Batch: 3, Partitions: 2}
				if !riders {
					req.Batch, req.Partitions = 1, 1 // one lease on one partition: the one-trip shape
				}
				pop, err := e.Pop(ctx, req)
				if err != nil {
					errs <- err
					return
				}
				var ops []TxOp
				order := []string{parts[0], parts[1], parts[2], parts[3]}
				if id%2 == 1 {
					order = []string{parts[3], parts[2], parts[1], parts[0]}
				}
				for j, p := range order {
					q := qa
					if j%2 == 1 {
						q = qb
					}
					if !riders && i%4 == 0 {
						p = fmt.Sprintf("%s-w%d-%d", p, id, i) // a partition the broker does not know yet: the general way
					}
					ops = append(ops, pushOp(len(ops), q, p, fmt.Sprintf("b-%d-%d-%d", id, i, j), j))
				}
				for _, m := range pop.Messages {
					ops = append(ops, ackOp(len(ops), m, "mix", m.LeaseID))
				}
				kv := []KVOp{
					{Op: KVIncr, Namespace: ns, Key: "bundles", Forever: true},
					{Op: KVIncr, Namespace: ns, Key: fmt.Sprintf("w%d", id%3), Forever: true},
				}
				if id%2 == 1 {
					kv[0], kv[1] = kv[1], kv[0]
				}
				if !riders {
					kv = nil
				}
				res, err := e.Transaction(ctx, TransactionRequest{Ops: ops, KV: kv})
				if err != nil {
					errs <- err
					return
				}
				if !res.Success {
					errs <- fmt.Errorf("bundle rolled back: %s %s", res.Reason, res.Error)
					return
				}
				bundlePushes.Add(int64(len(order)))
				acked.Add(int64(len(pop.Messages)))
			}
		}
	}
	deadlocksBefore := deadlocks(t, e)
	const workers = 16
	for id := 0; id < workers; id++ {
		wg.Add(1)
		go worker(id)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Deadlocks would be retried and go unseen by the callers; the server counts them.
	if n := deadlocks(t, e) - deadlocksBefore; n != 0 {
		t.Fatalf("PostgreSQL detected %d deadlocks", n)
	}
	total := messagesIn(t, e, qa) + messagesIn(t, e, qb)
	if want := int64(2*len(parts)*seed) + bundlePushes.Load() + plainPushes.Load(); total != want {
		t.Fatalf("stored %d messages, want %d", total, want)
	}
	if got := consumedIn(t, e, qa, "mix") + consumedIn(t, e, qb, "mix"); got != acked.Load() {
		t.Fatalf("cursors moved %d, acks committed %d", got, acked.Load())
	}
	if !riders {
		stats := e.HotPathStats()
		if stats.BundlesOneTrip == 0 || stats.BundlesGeneral == 0 {
			t.Fatalf("both paths must run: %+v", stats)
		}
		t.Logf("bundles: %d in one trip, %d the general way", stats.BundlesOneTrip, stats.BundlesGeneral)
		return
	}
	kv, _, err := e.KV(context.Background(), []KVOp{{Op: KVGet, Namespace: ns, Key: "bundles"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := bundlePushes.Load() / int64(len(parts)); string(kv[0].Value) != fmt.Sprint(want) {
		t.Fatalf("bundle counter %s, want %d", kv[0].Value, want)
	}
}

// BenchmarkTransactionHandoff measures one pipeline bundle: a push, the ack of
// a popped message and an idempotency marker, in one commit.
func BenchmarkTransactionHandoff(b *testing.B) {
	e := newEngine(b)
	in, out, ns := queueName(b)+"-in", queueName(b)+"-out", queueName(b)
	var txns []string
	for i := 0; i < b.N; i++ {
		txns = append(txns, fmt.Sprintf("in-%d", i))
	}
	for i := 0; i < len(txns); i += 1000 {
		mustPush(b, e, items(in, "", txns[i:min(i+1000, len(txns))]...)...)
	}
	pop := mustPop(b, e, PopRequest{Queue: in, Group: "bench", SubscriptionMode: "all", Batch: b.N, LeaseSeconds: 600})
	b.ResetTimer()
	for i, m := range pop.Messages {
		res, err := e.Transaction(context.Background(), TransactionRequest{
			Ops: []TxOp{pushOp(0, out, "", "out-"+m.TransactionID, i), ackOp(1, m, "bench", pop.LeaseID)},
			KV:  benchKV(ns, m.TransactionID),
		})
		if err != nil || !res.Success {
			b.Fatalf("%v %+v", err, res)
		}
	}
}

// benchKV is the marker of BenchmarkTransactionHandoff; LANES_BENCH_NO_KV=1 leaves it out.
func benchKV(ns, key string) []KVOp {
	if os.Getenv("LANES_BENCH_NO_KV") != "" {
		return nil
	}
	return []KVOp{{Op: KVPutIfAbsent, Namespace: ns, Key: key, Value: raw(true), TTLSeconds: 3600, Required: true}}
}

// Bundles lock partitions the broker knows by id; when such a partition is
// gone (its queue was deleted) the bundle recreates it in the same transaction,
// and a duplicate inside the dedup window is still caught on the id path.
func TestBundleToAPartitionWhoseQueueWasDeleted(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	q := queueName(t)
	push := func(txn string) *TransactionResult {
		t.Helper()
		res, err := e.Transaction(ctx, TransactionRequest{Ops: []TxOp{{Push: &PushItem{Queue: q, Partition: "p", TransactionID: txn, Payload: json.RawMessage(`1`)}}}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := push("first"); !res.Success {
		t.Fatalf("first bundle: %+v", res)
	}
	if res := push("first"); res.Success || res.Reason != TxReasonDuplicate {
		t.Fatalf("a repeated id through the known-partition path must roll back as duplicate: %+v", res)
	}
	if _, err := e.DeleteQueue(ctx, q); err != nil {
		t.Fatal(err)
	}
	if res := push("after-delete"); !res.Success {
		t.Fatalf("bundle after the queue was deleted: %+v", res)
	}
	got := mustPop(t, e, PopRequest{Queue: q, Batch: 10, AutoAck: true})
	if len(got.Messages) != 1 || got.Messages[0].TransactionID != "after-delete" {
		t.Fatalf("the recreated partition holds %+v", got.Messages)
	}
}

// A bundle of pushes to known partitions and acks of one lease this broker
// granted commits in one round trip; when the database no longer agrees with
// what the broker assumed (a stored transaction id, an expired lease, a
// deleted queue) the one-statement attempt rolls back whole and the bundle
// runs the general way, which gives the verdict.
func TestBundlesRunInOneTripAndFallBackForVerdicts(t *testing.T) {
	e := newEngine(t)
	in, out := queueName(t)+"-in", queueName(t)+"-out"
	mustPush(t, e, items(in, "p", "m1", "m2", "m3", "m4")...)
	mustPush(t, e, items(out, "p", "already-there")...)
	handoff := func(pop *PopResult, txn string) TransactionRequest {
		return TransactionRequest{Ops: []TxOp{
			ackOp(0, pop.Messages[0], "", pop.LeaseID),
			pushOp(1, out, "p", txn, map[string]string{"from": pop.Messages[0].TransactionID}),
		}}
	}
	// rolledBack checks that req rolls back with reason, through the general
	// path after the one-statement attempt, leaving nothing behind.
	rolledBack := func(t *testing.T, req TransactionRequest, reason string) {
		t.Helper()
		before, consumed, stats := messagesIn(t, e, out), consumedIn(t, e, in, QueueModeGroup), e.HotPathStats()
		res := mustTransaction(t, e, req)
		if res.Success || res.Reason != reason {
			t.Fatalf("want rollback %q, got %+v", reason, res)
		}
		if messagesIn(t, e, out) != before || consumedIn(t, e, in, QueueModeGroup) != consumed {
			t.Fatal("a rolled-back bundle left a push or a cursor move behind")
		}
		if after := e.HotPathStats(); after.BundlesOneTrip != stats.BundlesOneTrip {
			t.Fatalf("a rolled-back bundle counted as committed: %+v", after)
		}
	}

	t.Run("commits in one trip", func(t *testing.T) {
		pop := mustPop(t, e, PopRequest{Queue: in, Batch: 1})
		stats := e.HotPathStats()
		res := mustTransaction(t, e, handoff(pop, "next-m1"))
		if !res.Success || len(res.Results) != 2 || !res.Results[0].Ack.Success || !res.Results[0].Ack.LeaseReleased ||
			res.Results[1].Push.Status != PushQueued || res.Results[1].Push.MessageID == uuid.Nil {
			t.Fatalf("bundle: %+v", res)
		}
		if after := e.HotPathStats(); after.BundlesOneTrip != stats.BundlesOneTrip+1 || after.BundlesGeneral != stats.BundlesGeneral {
			t.Fatalf("the bundle did not commit in one trip: %+v -> %+v", stats, after)
		}
		if consumedIn(t, e, in, QueueModeGroup) != 1 {
			t.Fatal("the ack did not move the cursor")
		}
		got := mustPop(t, e, PopRequest{Queue: out, Group: "reader", SubscriptionMode: "all", Batch: 10, AutoAck: true})
		if len(got.Messages) != 2 || got.Messages[1].TransactionID != "next-m1" || got.Messages[1].ID != res.Results[1].Push.MessageID {
			t.Fatalf("the pushed message: %+v", got.Messages)
		}
	})
	t.Run("stored transaction id", func(t *testing.T) {
		pop := mustPop(t, e, PopRequest{Queue: in, Batch: 1})
		rolledBack(t, handoff(pop, "already-there"), TxReasonDuplicate)
		mustAck(t, e, AckItem{TransactionID: pop.Messages[0].TransactionID, PartitionID: pop.PartitionID.String(), Status: "retry", LeaseID: pop.LeaseID})
	})
	t.Run("expired lease", func(t *testing.T) {
		pop := mustPop(t, e, PopRequest{Queue: in, Batch: 1, LeaseSeconds: 1})
		time.Sleep(1100 * time.Millisecond)
		rolledBack(t, handoff(pop, "after-expiry"), TxReasonAckRejected)
	})
	t.Run("message acked through another broker", func(t *testing.T) {
		// This broker's lease index still resolves the message; the cursor moved.
		pop := mustPop(t, e, PopRequest{Queue: in, Batch: 1})
		m := pop.Messages[0]
		if r := mustAck(t, newEngine(t), AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID.String(), LeaseID: pop.LeaseID}); !r[0].Success {
			t.Fatalf("ack through the other broker: %+v", r)
		}
		rolledBack(t, handoff(pop, "after-other-ack"), TxReasonAckRejected)
	})
	t.Run("queue deleted by another broker", func(t *testing.T) {
		// This broker still has the partition's id cached.
		if _, err := newEngine(t).DeleteQueue(context.Background(), out); err != nil {
			t.Fatal(err)
		}
		pop := mustPop(t, e, PopRequest{Queue: in, Batch: 1})
		stats := e.HotPathStats()
		if res := mustTransaction(t, e, handoff(pop, "after-delete")); !res.Success {
			t.Fatalf("bundle after the output queue was deleted: %+v", res)
		}
		if after := e.HotPathStats(); after.BundlesGeneral != stats.BundlesGeneral+1 {
			t.Fatalf("the bundle to a deleted queue's partition must run the general way: %+v -> %+v", stats, after)
		}
		got := mustPop(t, e, PopRequest{Queue: out, Batch: 10, AutoAck: true})
		if len(got.Messages) != 1 || got.Messages[0].TransactionID != "after-delete" {
			t.Fatalf("the recreated partition holds %+v", got.Messages)
		}
	})
}

// A bundle's acks see the bundle's own pushes, as in the reference's order
// (pushes, then acks): a lease-less ack of a message the same bundle pushes
// resolves and moves the cursor past it.
func TestBundleAckSeesTheBundlesOwnPush(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	mustPush(t, e, items(q, "p", "first")...)
	first := mustPop(t, e, PopRequest{Queue: q, Batch: 1, AutoAck: true}) // registers the group, seeds the cursor
	if len(first.Messages) != 1 {
		t.Fatalf("pop: %+v", first.Messages)
	}
	own := Message{TransactionID: "pushed-and-acked", PartitionID: first.PartitionID}
	res := mustTransaction(t, e, TransactionRequest{Ops: []TxOp{
		pushOp(0, q, "p", own.TransactionID, 1),
		ackOp(1, own, "", ""),
	}})
	if !res.Success || !res.Results[1].Ack.Success {
		t.Fatalf("bundle: %+v (ack %+v)", res, res.Results)
	}
	if got := consumedIn(t, e, q, QueueModeGroup); got != 2 {
		t.Fatalf("the cursor covers %d messages, want 2 (the bundle's own push acked)", got)
	}
	if left := mustPop(t, e, PopRequest{Queue: q, Batch: 10, AutoAck: true}); len(left.Messages) != 0 {
		t.Fatalf("the acked push was delivered again: %+v", left.Messages)
	}
}

// A bundle ack naming no lease takes the cursor's current holder only while
// that lease is live: after it expired there is no lease information left,
// so the ack is lease-less and succeeds, as a plain lease-less ack does
// (http-api-v1 §1.7), instead of being rejected for the expired lease.
func TestBundleAckWithoutLeaseAfterExpiryIsLeaseless(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	mustPush(t, e, items(q, "p", "in")...)
	b := mustPop(t, e, PopRequest{Queue: q, Batch: 1, LeaseSeconds: 1})
	if len(b.Messages) != 1 {
		t.Fatalf("pop: %+v", b.Messages)
	}
	time.Sleep(1200 * time.Millisecond)
	res := mustTransaction(t, e, TransactionRequest{Ops: []TxOp{
		pushOp(0, q+"-out", "p", "out", 1),
		ackOp(1, b.Messages[0], "", ""),
	}})
	if !res.Success || !res.Results[1].Ack.Success {
		t.Fatalf("bundle acking without a lease after expiry: %+v", res)
	}
	if got := consumedIn(t, e, q, QueueModeGroup); got != 1 {
		t.Fatalf("the cursor covers %d messages, want 1", got)
	}
}
