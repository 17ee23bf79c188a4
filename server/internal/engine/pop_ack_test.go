package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// pushN pushes txn ids m0..m(n-1) to queue/partition, one push each.
func pushN(t *testing.T, e *Engine, q, p string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("m%d", i)
	}
	mustPush(t, e, items(q, p, ids...)...)
	return ids
}

func ack(m Message, status string) AckItem {
	return AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID.String(), Status: status,
		Group: m.ConsumerGroup, LeaseID: m.LeaseID}
}

// The figure in model.md: offsets 6..9, 6 committed; 7 completed, 8 failed,
// 9 completed. The cursor moves to 7 and the next pop starts at 8.
func TestAckClampFigure(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	ids := pushN(t, e, q, "p", 10)
	first := mustPop(t, e, PopRequest{Queue: q, Batch: 7})
	if got := txnIDs(first.Messages); !reflect.DeepEqual(got, ids[:7]) {
		t.Fatalf("first pop %v", got)
	}
	res := mustAck(t, e, ack(first.Messages[6], "completed")) // commit through offset 6
	if !res[0].Success || !res[0].LeaseReleased {
		t.Fatalf("ack through 6: %+v", res[0])
	}
	batch := mustPop(t, e, PopRequest{Queue: q, Batch: 10})
	if got := txnIDs(batch.Messages); !reflect.DeepEqual(got, []string{"m7", "m8", "m9"}) {
		t.Fatalf("second pop %v", got)
	}
	out := mustAck(t, e, ack(batch.Messages[0], "completed"), ack(batch.Messages[1], "failed"), ack(batch.Messages[2], "completed"))
	for _, r := range out {
		if !r.Success {
			t.Fatalf("ack item %+v", r)
		}
	}
	next := mustPop(t, e, PopRequest{Queue: q, Batch: 10})
	if got := txnIDs(next.Messages); !reflect.DeepEqual(got, []string{"m8", "m9"}) {
		t.Fatalf("after clamp the next pop starts at m8, got %v", got)
	}
	var retries int
	_ = e.pool.QueryRow(context.Background(), `SELECT retry_count FROM lanes.consumers WHERE partition_id = $1 AND consumer_group = $2`,
		next.PartitionID, QueueModeGroup).Scan(&retries)
	if retries != 1 {
		t.Fatalf("retry counter %d, want 1 after one failed ack", retries)
	}
}

// Acking message N commits everything up to N, mentioned or not, whichever
// way the ack is resolved: by the lease index of the broker that granted the
// lease, or through lanes.txns on a broker that did not (the general path).
func TestAckOfTheLastCompletesTheUnmentioned(t *testing.T) {
	granting, other := newEngine(t), newEngine(t)
	for name, acker := range map[string]*Engine{"granting broker": granting, "other broker": other} {
		t.Run(name, func(t *testing.T) {
			q := queueName(t)
			pushN(t, granting, q, "p", 4)
			b := mustPop(t, granting, PopRequest{Queue: q, Batch: 3})
			if got := txnIDs(b.Messages); !reflect.DeepEqual(got, []string{"m0", "m1", "m2"}) {
				t.Fatalf("pop %v", got)
			}
			r := mustAck(t, acker, ack(b.Messages[2], "completed"))
			if !r[0].Success || !r[0].LeaseReleased {
				t.Fatalf("ack of the last message alone: %+v", r[0])
			}
			next := mustPop(t, granting, PopRequest{Queue: q, Batch: 10})
			if got := txnIDs(next.Messages); !reflect.DeepEqual(got, []string{"m3"}) {
				t.Fatalf("m0 and m1 were never mentioned but are below the ack: next pop %v, want [m3]", got)
			}
		})
	}
}

// A leased ack names only the lease's batch: an id beyond it is unresolvable,
// commits nothing and keeps the lease, so the batch's own acks still work.
func TestLeasedAckBeyondTheBatchCommitsNothing(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	pushN(t, e, q, "p", 6)
	b := mustPop(t, e, PopRequest{Queue: q, Batch: 3})
	if got := txnIDs(b.Messages); !reflect.DeepEqual(got, []string{"m0", "m1", "m2"}) || b.LeaseID == "" {
		t.Fatalf("leased pop %v lease %q", got, b.LeaseID)
	}
	beyond := ack(b.Messages[0], "completed")
	beyond.TransactionID = "m4"
	r := mustAck(t, e, beyond)
	if r[0].Success || !strings.HasPrefix(r[0].Error, "unresolvable") || r[0].LeaseReleased {
		t.Fatalf("ack of m4 under the lease of m0..m2: %+v", r[0])
	}
	out := mustAck(t, e, ack(b.Messages[0], "completed"), ack(b.Messages[1], "completed"), ack(b.Messages[2], "completed"))
	if !out[2].Success || !out[2].LeaseReleased {
		t.Fatalf("the lease survives the stray ack: %+v", out)
	}
	next := mustPop(t, e, PopRequest{Queue: q, Batch: 10})
	if got := txnIDs(next.Messages); !reflect.DeepEqual(got, []string{"m3", "m4", "m5"}) {
		t.Fatalf("the stray ack committed past the batch: next pop %v", got)
	}
}

// The lease figure: 7..9 leased while committed stays at 6; expiry redelivers
// the whole span from committed+1 and charges no retry budget.
func TestExpiredLeaseRedeliversWholeSpanWithoutCharge(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	pushN(t, e, q, "p", 10)
	first := mustPop(t, e, PopRequest{Queue: q, Batch: 7})
	mustAck(t, e, ack(first.Messages[6], "completed"))
	leased := mustPop(t, e, PopRequest{Queue: q, Batch: 10, LeaseSeconds: 1})
	if len(leased.Messages) != 3 {
		t.Fatalf("leased %d", len(leased.Messages))
	}
	// While the lease lives nobody else in the group takes the partition.
	if other := mustPop(t, e, PopRequest{Queue: q, Batch: 10}); len(other.Messages) != 0 {
		t.Fatalf("second consumer got %v while the lease was live", txnIDs(other.Messages))
	}
	time.Sleep(1100 * time.Millisecond)
	again := mustPop(t, e, PopRequest{Queue: q, Batch: 10})
	if got := txnIDs(again.Messages); !reflect.DeepEqual(got, []string{"m7", "m8", "m9"}) {
		t.Fatalf("redelivery %v", got)
	}
	if again.LeaseID == leased.LeaseID {
		t.Fatal("redelivery reused the expired lease id")
	}
	// The stale lease can no longer ack.
	stale := mustAck(t, e, ack(leased.Messages[0], "completed"))
	if stale[0].Success || stale[0].Error != errInvalidLease {
		t.Fatalf("stale lease ack %+v", stale[0])
	}
	var retries int
	_ = e.pool.QueryRow(context.Background(), `SELECT retry_count FROM lanes.consumers WHERE partition_id = $1`, again.PartitionID).Scan(&retries)
	if retries != 0 {
		t.Fatalf("expiry charged the budget: %d", retries)
	}
}

func TestRetryBudgetThenDeadLetter(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	pushN(t, e, q, "p", 2)
	for attempt := 0; attempt < 3; attempt++ {
		b := mustPop(t, e, PopRequest{Queue: q, Batch: 1})
		r := mustAck(t, e, AckItem{TransactionID: "m0", PartitionID: b.PartitionID.String(), Status: "failed", LeaseID: b.LeaseID, Error: "boom"})
		if !r[0].Success || r[0].DLQ || !r[0].LeaseReleased {
			t.Fatalf("attempt %d: %+v", attempt, r[0])
		}
	}
	b := mustPop(t, e, PopRequest{Queue: q, Batch: 1})
	if b.Messages[0].TransactionID != "m0" {
		t.Fatalf("m0 should redeliver until the budget is spent, got %s", b.Messages[0].TransactionID)
	}
	r := mustAck(t, e, AckItem{TransactionID: "m0", PartitionID: b.PartitionID.String(), Status: "FAILED", LeaseID: b.LeaseID, Error: "still boom"})
	if !r[0].DLQ {
		t.Fatalf("exhausted budget should dead-letter: %+v", r[0])
	}
	var reason, payload string
	var retries int
	if err := e.pool.QueryRow(context.Background(), `SELECT error, payload::text, retry_count FROM lanes.dlq WHERE partition_id = $1 AND transaction_id = 'm0'`,
		b.PartitionID).Scan(&reason, &payload, &retries); err != nil {
		t.Fatal(err)
	}
	if reason != "still boom" || payload != `{"id": "m0"}` || retries != 3 {
		t.Fatalf("dlq row reason=%q payload=%s retries=%d", reason, payload, retries)
	}
	next := mustPop(t, e, PopRequest{Queue: q, Batch: 5})
	if got := txnIDs(next.Messages); !reflect.DeepEqual(got, []string{"m1"}) {
		t.Fatalf("after dead-lettering m0 the cursor moves on: %v", got)
	}
}

func TestRetryStatusIsFreeAndDLQStatusFilesAtOnce(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	if _, err := e.Configure(context.Background(), ConfigureRequest{Queue: q, Options: map[string]json.RawMessage{
		"retryLimit": json.RawMessage("1")}}); err != nil {
		t.Fatal(err)
	}
	pushN(t, e, q, "p", 3)
	for i := 0; i < 5; i++ {
		b := mustPop(t, e, PopRequest{Queue: q, Batch: 1})
		mustAck(t, e, ack(b.Messages[0], "retry"))
	}
	// With a budget of one, a failed ack after five retries still redelivers:
	// the retries spent nothing.
	b := mustPop(t, e, PopRequest{Queue: q, Batch: 1})
	if r := mustAck(t, e, ack(b.Messages[0], "failed")); !r[0].Success || r[0].DLQ || r[0].Dropped {
		t.Fatalf("first failed ack after retries: %+v", r[0])
	}
	if n := dlqRows(t, e, b.PartitionID); n != 0 {
		t.Fatalf("retries spent the budget: %d dead letters", n)
	}
	b = mustPop(t, e, PopRequest{Queue: q, Batch: 3})
	if len(b.Messages) != 3 || b.Messages[0].TransactionID != "m0" {
		t.Fatalf("retry must not spend the budget: %v", txnIDs(b.Messages))
	}
	r := mustAck(t, e, ack(b.Messages[0], "completed"), ack(b.Messages[1], "dlq"), ack(b.Messages[2], "completed"))
	if !r[1].DLQ {
		t.Fatalf("dlq status: %+v", r[1])
	}
	next := mustPop(t, e, PopRequest{Queue: q, Batch: 3})
	if got := txnIDs(next.Messages); !reflect.DeepEqual(got, []string{"m2"}) {
		t.Fatalf("after dlq of m1 the completed m2 above it redelivers: %v", got)
	}
}

func TestDeadLetteringOffDropsThePoison(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	if _, err := e.Configure(context.Background(), ConfigureRequest{Queue: q, Options: map[string]json.RawMessage{
		"retryLimit": json.RawMessage("0"), "deadLetterQueue": json.RawMessage("false"), "dlqAfterMaxRetries": json.RawMessage("false")}}); err != nil {
		t.Fatal(err)
	}
	pushN(t, e, q, "p", 2)
	b := mustPop(t, e, PopRequest{Queue: q, Batch: 1})
	r := mustAck(t, e, ack(b.Messages[0], "failed"))
	if !r[0].Dropped || r[0].DLQ {
		t.Fatalf("want dropped: %+v", r[0])
	}
	if n := dlqRows(t, e, b.PartitionID); n != 0 {
		t.Fatal("dropped message was dead-lettered")
	}
	// An explicit dlq status files even with dead-lettering off: the
	// switch governs only what an exhausted budget does.
	b = mustPop(t, e, PopRequest{Queue: q, Batch: 1})
	if r := mustAck(t, e, ack(b.Messages[0], "dlq")); !r[0].Success || !r[0].DLQ || r[0].Dropped {
		t.Fatalf("dlq ack with dead-lettering off: %+v", r[0])
	}
	if n := dlqRows(t, e, b.PartitionID); n != 1 {
		t.Fatalf("dlq ack filed %d dead letters, want 1", n)
	}
}

// dlqRows counts the dead letters of a partition.
func dlqRows(t *testing.T, e *Engine, partition uuid.UUID) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM lanes.dlq WHERE partition_id = $1`, partition).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAckNoopUnresolvableAndAlreadyCommitted(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	pushN(t, e, q, "p", 2)
	b := mustPop(t, e, PopRequest{Queue: q, Batch: 2})
	mustAck(t, e, ack(b.Messages[0], "completed"), ack(b.Messages[1], "completed"))
	again := mustAck(t, e, AckItem{TransactionID: "m0", PartitionID: b.PartitionID.String()},
		AckItem{TransactionID: "m1", PartitionID: b.PartitionID.String(), Status: "failed"},
		AckItem{TransactionID: "never-pushed", PartitionID: b.PartitionID.String()})
	if !again[0].Success || !again[0].Noop {
		t.Fatalf("repeat completed ack should be a noop: %+v", again[0])
	}
	if again[1].Success || again[1].Error != errAlreadyCommitted {
		t.Fatalf("nack below cursor: %+v", again[1])
	}
	if again[2].Success || again[2].Error != errUnresolvable {
		t.Fatalf("unknown id: %+v", again[2])
	}
}

func TestSubscriptionModes(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	pushN(t, e, q, "p", 3)
	if b := mustPop(t, e, PopRequest{Queue: q, Group: "fresh"}); len(b.Messages) != 0 {
		t.Fatalf("a new group skips the backlog, got %v", txnIDs(b.Messages))
	}
	if b := mustPop(t, e, PopRequest{Queue: q, Group: "replayer", SubscriptionMode: "all"}); len(b.Messages) != 3 {
		t.Fatalf("mode all delivers everything, got %v", txnIDs(b.Messages))
	}
	if b := mustPop(t, e, PopRequest{Queue: q}); len(b.Messages) != 3 {
		t.Fatalf("queue mode never skips the backlog, got %v", txnIDs(b.Messages))
	}
	mustPush(t, e, items(q, "p", "after")...)
	mustPush(t, e, items(q, "created-later", "later")...)
	// Passing a mode later changes nothing: "fresh" stays a `new` group.
	b := mustPop(t, e, PopRequest{Queue: q, Group: "fresh", SubscriptionMode: "all", Partitions: 10})
	if len(b.Messages) != 2 || b.PartitionsClaimed != 2 {
		t.Fatalf("new group sees messages after its subscription, incl. a later partition: %v", txnIDs(b.Messages))
	}
}

func TestAutoAckCommitsInThePop(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	pushN(t, e, q, "p", 3)
	b := mustPop(t, e, PopRequest{Queue: q, AutoAck: true})
	if len(b.Messages) != 3 || b.LeaseID != "" {
		t.Fatalf("autoAck pop %+v", b)
	}
	if again := mustPop(t, e, PopRequest{Queue: q}); len(again.Messages) != 0 {
		t.Fatalf("autoAck is at-most-once: nothing redelivers, got %v", txnIDs(again.Messages))
	}
}

func TestWidePopSharesBudgetAndLease(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	for p := 0; p < 4; p++ {
		pushN(t, e, q, fmt.Sprintf("p%d", p), 3)
	}
	b := mustPop(t, e, PopRequest{Queue: q, Batch: 7, Partitions: 4})
	if len(b.Messages) != 7 || b.PartitionsClaimed != 3 {
		t.Fatalf("got %d messages from %d partitions", len(b.Messages), b.PartitionsClaimed)
	}
	ext, err := e.ExtendLease(context.Background(), b.LeaseID, 120)
	if err != nil || ext.Renewed != 3 || ext.ExpiresAt == nil {
		t.Fatalf("extend %+v %v", ext, err)
	}
	if none, _ := e.ExtendLease(context.Background(), "00000000-0000-0000-0000-000000000000", 10); none.Renewed != 0 {
		t.Fatal("unknown lease renewed")
	}
}

// An uncapped width stops at the batch, and so does the claim's window of
// partitions it considers: a pop still fills its batch from one-message
// partitions, and the next pop takes the rest.
func TestUncappedWidthFillsTheBatchFromManyPartitions(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	const partitions = 60
	var all []PushItem
	for p := 0; p < partitions; p++ {
		all = append(all, items(q, fmt.Sprintf("p%02d", p), "only")...)
	}
	mustPush(t, e, all...)
	first := mustPop(t, e, PopRequest{Queue: q, Batch: 10, AutoAck: true})
	if len(first.Messages) != 10 || first.PartitionsClaimed != 10 {
		t.Fatalf("batch 10 over %d one-message partitions: %d messages from %d partitions", partitions, len(first.Messages), first.PartitionsClaimed)
	}
	rest := mustPop(t, e, PopRequest{Queue: q, Batch: 100, AutoAck: true})
	if len(rest.Messages) != partitions-10 {
		t.Fatalf("batch 100 took %d of the remaining %d", len(rest.Messages), partitions-10)
	}
}

// pushPartitions fills partitions p0..p(n-1) of q with per messages each,
// transaction ids "p<i>-m<j>".
func pushPartitions(t *testing.T, e *Engine, q string, partitions, per int) {
	t.Helper()
	for p := 0; p < partitions; p++ {
		ids := make([]string, per)
		for i := range ids {
			ids[i] = fmt.Sprintf("p%d-m%d", p, i)
		}
		mustPush(t, e, items(q, fmt.Sprintf("p%d", p), ids...)...)
	}
}

// drainConcurrently runs workers that pop until each has seen three empty pops
// in a row, handing every non-empty batch to handle; it returns how often each
// transaction id was delivered.
func drainConcurrently(t *testing.T, workers int, pop func(worker int) (*PopResult, error), handle func(*PopResult) error) map[string]int {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for empties := 0; empties < 3; {
				b, err := pop(w)
				if err != nil {
					t.Error(err)
					return
				}
				if len(b.Messages) == 0 {
					empties++
					time.Sleep(10 * time.Millisecond)
					continue
				}
				empties = 0
				mu.Lock()
				for _, m := range b.Messages {
					seen[m.TransactionID]++
				}
				mu.Unlock()
				if err := handle(b); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return seen
}

// checkEachDeliveredOnce fails unless seen holds want distinct ids, each once.
func checkEachDeliveredOnce(t *testing.T, seen map[string]int, want int) {
	t.Helper()
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s delivered %d times in a no-fault run", id, n)
		}
	}
	if len(seen) != want {
		t.Fatalf("delivered %d distinct messages, want %d", len(seen), want)
	}
}

func TestCompetingConsumersDeliverEveryMessageOnce(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	const partitions, perPartition = 8, 25
	pushPartitions(t, e, q, partitions, perPartition)
	var mu sync.Mutex
	holding := map[string]bool{}
	seen := drainConcurrently(t, 6, func(int) (*PopResult, error) {
		return e.Pop(context.Background(), PopRequest{Queue: q, Batch: 5})
	}, func(b *PopResult) error {
		mu.Lock()
		if holding[b.Partition] {
			t.Errorf("partition %s held by two consumers at once", b.Partition)
		}
		holding[b.Partition] = true
		mu.Unlock()
		acks := make([]AckItem, len(b.Messages))
		for i, m := range b.Messages {
			acks[i] = ack(m, "completed")
		}
		mu.Lock()
		holding[b.Partition] = false
		mu.Unlock()
		_, err := e.Ack(context.Background(), acks)
		return err
	})
	checkEachDeliveredOnce(t, seen, partitions*perPartition)
}

// AutoAck pops from two brokers race on the same cursors: a cursor another
// pop moved after a claim statement's snapshot must be left for a later pop,
// never delivered from the stale position (a duplicate) nor written at it (a
// cursor moved back).
func TestCompetingAutoAckPopsAcrossBrokersDeliverEveryMessageOnce(t *testing.T) {
	brokers := []*Engine{newEngine(t), newEngine(t)}
	q := queueName(t)
	const partitions, perPartition = 4, 60
	pushPartitions(t, brokers[0], q, partitions, perPartition)
	seen := drainConcurrently(t, 8, func(w int) (*PopResult, error) {
		return brokers[w%2].Pop(context.Background(), PopRequest{Queue: q, Batch: 3, Partitions: 2, AutoAck: true})
	}, func(*PopResult) error { return nil })
	checkEachDeliveredOnce(t, seen, partitions*perPartition)
	var committed int64
	if err := brokers[0].pool.QueryRow(context.Background(), `SELECT sum(c.committed + 1) FROM lanes.consumers c
		JOIN lanes.partitions p ON p.id = c.partition_id JOIN lanes.queues qu ON qu.id = p.queue_id
		WHERE qu.name = $1`, q).Scan(&committed); err != nil {
		t.Fatal(err)
	}
	if committed != partitions*perPartition {
		t.Fatalf("cursors cover %d messages, want %d", committed, partitions*perPartition)
	}
}

// A pop parked on one broker is woken by a push through it or through
// another broker (its NOTIFY), not left to its re-checks.
func TestLongPollWakesOnPushAcrossBrokers(t *testing.T) {
	a, b := newEngineWithoutRechecks(t), newEngine(t)
	q := queueName(t)
	mustPop(t, a, PopRequest{Queue: q}) // creates the queue
	waitListening(t, a)
	for _, pusher := range []*Engine{a, b} {
		r := wakeParkedPop(t, a, pusher, q)
		mustAck(t, a, ack(r.Messages[0], "completed"))
	}
}

func TestLongPollTimesOutEmpty(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	start := time.Now()
	r := mustPop(t, e, PopRequest{Queue: q, Wait: true, Timeout: 300 * time.Millisecond})
	if len(r.Messages) != 0 || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("timeout pop returned %d after %v", len(r.Messages), time.Since(start))
	}
}

// A repeat pop claims in one round trip on the plan the previous pop saw; a
// seek in between must void that plan, so the sought-back messages are
// delivered at once, not after the cached claim floor catches up.
// A seek to the end lands exactly after the last message: nothing already
// pushed redelivers, and the next push is the next delivery.
func TestSeekToEndLandsAfterTheLastMessage(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	pushN(t, e, q, "p", 3)
	if _, err := e.Seek(context.Background(), SeekRequest{Queue: q, ToEnd: true}); err != nil {
		t.Fatal(err)
	}
	if res := mustPop(t, e, PopRequest{Queue: q, Batch: 10}); len(res.Messages) != 0 {
		t.Fatalf("after a seek to the end a pop delivered %v", txnIDs(res.Messages))
	}
	mustPush(t, e, items(q, "p", "next")...)
	res := mustPop(t, e, PopRequest{Queue: q, Batch: 10})
	if got := txnIDs(res.Messages); !reflect.DeepEqual(got, []string{"next"}) {
		t.Fatalf("the first push after a seek to the end: got %v", got)
	}
}

func TestRepeatPopAfterSeekSeesTheSeek(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	mustPush(t, e, items(q, "p", "a", "b")...)
	for _, want := range []string{"a", "b"} {
		res := mustPop(t, e, PopRequest{Queue: q, Batch: 1, AutoAck: true})
		if len(res.Messages) != 1 || res.Messages[0].TransactionID != want {
			t.Fatalf("pop: got %+v, want %s", res.Messages, want)
		}
	}
	for range 3 { // empty pops: the claim floor moves past the partition's last write
		if res := mustPop(t, e, PopRequest{Queue: q, Batch: 1, AutoAck: true}); len(res.Messages) != 0 {
			t.Fatalf("drained queue delivered %+v", res.Messages)
		}
	}
	past := time.Now().Add(-time.Hour)
	if _, err := e.Seek(context.Background(), SeekRequest{Queue: q, Timestamp: &past}); err != nil {
		t.Fatal(err)
	}
	before := e.HotPathStats()
	res := mustPop(t, e, PopRequest{Queue: q, Batch: 10, AutoAck: true})
	if len(res.Messages) != 2 || res.Messages[0].TransactionID != "a" {
		t.Fatalf("after seeking back the next pop must redeliver a and b, got %+v", res.Messages)
	}
	if after := e.HotPathStats(); after.PopsOneTrip != before.PopsOneTrip || after.PopsGeneral != before.PopsGeneral+1 {
		t.Fatalf("the pop after a seek must run the general way: before %+v, after %+v", before, after)
	}
}

// popPaths counts pops by path since before.
func popPaths(e *Engine, before HotPathStats) (oneTrip, general uint64) {
	after := e.HotPathStats()
	return after.PopsOneTrip - before.PopsOneTrip, after.PopsGeneral - before.PopsGeneral
}

// Repeat pops of a group run in one round trip on the plan the previous pop
// cached, with the same answers the general way gives: the batch budget split
// over partitions in serving order, one lease for all, the cursor rows written.
// A plan a new partition or a deleted queue made stale falls back to the
// general way, which seeds the new cursor or registers the group again.
func TestRepeatPopsRunInOneTripAndFallBackOnStalePlans(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	mustPush(t, e, items(q, "a", "a0", "a1")...)
	mustPush(t, e, items(q, "b", "b0", "b1")...)
	before := e.HotPathStats()
	first := mustPop(t, e, PopRequest{Queue: q, Batch: 1})
	if oneTrip, general := popPaths(e, before); oneTrip != 0 || general != 1 {
		t.Fatalf("a group's first pop registers it the general way: one-trip %d, general %d", oneTrip, general)
	}
	mustAck(t, e, ack(first.Messages[0], "completed"))

	before = e.HotPathStats()
	wide := mustPop(t, e, PopRequest{Queue: q, Batch: 3, Partitions: 2, LeaseSeconds: 45})
	if oneTrip, general := popPaths(e, before); oneTrip != 1 || general != 0 {
		t.Fatalf("a repeat pop must take one round trip: one-trip %d, general %d", oneTrip, general)
	}
	if len(wide.Messages) != 3 || wide.PartitionsClaimed != 2 || wide.LeaseID == "" {
		t.Fatalf("one-trip wide pop: messages %v, %d partitions, lease %q", txnIDs(wide.Messages), wide.PartitionsClaimed, wide.LeaseID)
	}
	remaining := map[string]bool{"a0": true, "a1": true, "b0": true, "b1": true}
	for _, m := range append(first.Messages, wide.Messages...) {
		if !remaining[m.TransactionID] {
			t.Fatalf("%s delivered twice or never pushed (first %v, wide %v)", m.TransactionID, txnIDs(first.Messages), txnIDs(wide.Messages))
		}
		delete(remaining, m.TransactionID)
	}
	rows, err := e.pool.Query(context.Background(), `SELECT p.name, c.committed, c.batch_end, c.lease_id::text,
			round(extract(epoch FROM c.lease_expires_at - now()))::int
		FROM lanes.consumers c JOIN lanes.partitions p ON p.id = c.partition_id JOIN lanes.queues qu ON qu.id = p.queue_id
		WHERE qu.name = $1 AND c.consumer_group = $2 ORDER BY p.name`, q, QueueModeGroup)
	if err != nil {
		t.Fatal(err)
	}
	type cursor struct {
		partition          string
		committed, end     int64
		lease              string
		leaseSecondsRemain int
	}
	cursors, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (cursor, error) {
		var c cursor
		return c, r.Scan(&c.partition, &c.committed, &c.end, &c.lease, &c.leaseSecondsRemain)
	})
	if err != nil {
		t.Fatal(err)
	}
	spans := map[string][2]int64{}
	for _, m := range wide.Messages {
		s, ok := spans[m.Partition]
		if !ok {
			s = [2]int64{m.Offset, m.Offset}
		}
		spans[m.Partition] = [2]int64{min(s[0], m.Offset), max(s[1], m.Offset)}
	}
	for _, c := range cursors {
		span := spans[c.partition]
		if c.committed != span[0]-1 || c.end != span[1] || c.lease != wide.LeaseID || c.leaseSecondsRemain < 40 || c.leaseSecondsRemain > 45 {
			t.Fatalf("cursor %+v does not hold the span %v under lease %s for 45 s", c, span, wide.LeaseID)
		}
	}
	acks := make([]AckItem, len(wide.Messages))
	for i, m := range wide.Messages {
		acks[i] = ack(m, "completed")
	}
	mustAck(t, e, acks...)

	if len(remaining) != 0 {
		t.Fatalf("%v not delivered: the budget of 3 must cover the 1 + 2 messages left", remaining)
	}

	// A new partition bumps the queue's partition version: the plan is stale.
	mustPush(t, e, items(q, "c", "c0")...)
	before = e.HotPathStats()
	var drained []string
	for range 3 {
		res := mustPop(t, e, PopRequest{Queue: q, Batch: 10, AutoAck: true})
		drained = append(drained, txnIDs(res.Messages)...)
	}
	if !slices.Equal(drained, []string{"c0"}) {
		t.Fatalf("after a new partition the group must get c0, got %v", drained)
	}
	if oneTrip, general := popPaths(e, before); general != 1 || oneTrip != 2 {
		t.Fatalf("stale plan: one general pop (seeding c) then one-trip pops, got one-trip %d, general %d", oneTrip, general)
	}

	// A queue deleted and named again by a push has another id: stale again.
	if deleted, err := e.DeleteQueue(context.Background(), q); err != nil || !deleted {
		t.Fatalf("delete queue: %v %v", deleted, err)
	}
	mustPush(t, e, items(q, "a", "again")...)
	before = e.HotPathStats()
	res := mustPop(t, e, PopRequest{Queue: q, Batch: 10, AutoAck: true})
	if ids := txnIDs(res.Messages); len(ids) != 1 || ids[0] != "again" {
		t.Fatalf("the recreated queue's pop got %v", ids)
	}
	if oneTrip, general := popPaths(e, before); oneTrip != 0 || general != 1 {
		t.Fatalf("a recreated queue voids the plan: one-trip %d, general %d", oneTrip, general)
	}
}

// poppedAt is what a pop started in the background returned, and when.
type poppedAt struct {
	res *PopResult
	err error
	at  time.Time
}

// popInBackground starts a pop; its answer, and when it came, arrive on the
// channel.
func popInBackground(e *Engine, req PopRequest) <-chan poppedAt {
	done := make(chan poppedAt, 1)
	go func() {
		res, err := e.Pop(context.Background(), req)
		done <- poppedAt{res, err, time.Now()}
	}()
	return done
}

// wokenBy waits for the answer of a pop parked idle (parkIdle) on an engine
// without re-checks (newEngineWithoutRechecks) and fails t unless it came
// within wakeBound of cause, which happened at since: before its timeout only
// a wake answers such a pop. It returns the answer.
func wokenBy(t *testing.T, done <-chan poppedAt, cause string, since time.Time) poppedAt {
	t.Helper()
	select {
	case p := <-done:
		if waited := p.at.Sub(since); waited > wakeBound {
			t.Fatalf("the parked pop took %v after the %s; the %s should have woken it", waited, cause, cause)
		}
		t.Logf("%s→delivery latency of the parked pop: %v", cause, p.at.Sub(since))
		return p
	case <-time.After(time.Until(since.Add(wakeBound))):
		t.Fatalf("the parked pop got nothing within %v of the %s: the %s did not wake it (its re-checks are %v apart)",
			wakeBound, cause, cause, time.Duration(float64(time.Second)/rateWithoutRechecks))
		return poppedAt{}
	}
}

// parkIdle starts a long-poll pop and returns once it waits idle on e (see
// waitIdleParked) beside the pops of its queue already waiting so. On an
// engine without re-checks nothing but a wake answers it before its timeout.
func parkIdle(t *testing.T, e *Engine, req PopRequest) <-chan poppedAt {
	t.Helper()
	already := idleParked(e, req.Queue)
	done := popInBackground(e, req)
	waitIdleParked(t, e, req.Queue, already+1, done)
	return done
}

// An ack that releases a lease on a partition that still holds messages wakes
// a parked pop of the group at once, instead of leaving the backlog to its
// next re-check: a plain ack, and an ack inside a transaction bundle.
func TestAckReleasingABacklogWakesAParkedPop(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release func(t *testing.T, e *Engine, held *PopResult)
	}{
		{"ack", func(t *testing.T, e *Engine, held *PopResult) {
			mustAck(t, e, AckItem{TransactionID: "first", PartitionID: held.PartitionID.String(), LeaseID: held.LeaseID})
		}},
		{"transaction bundle", func(t *testing.T, e *Engine, held *PopResult) {
			mustTransaction(t, e, TransactionRequest{Ops: []TxOp{
				ackOp(0, held.Messages[0], "", held.LeaseID),
				pushOp(1, queueName(t)+"-next", "p", "first-next", 1),
			}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngineWithoutRechecks(t)
			q := queueName(t)
			mustPush(t, e, items(q, "p", "first", "second")...)
			held := mustPop(t, e, PopRequest{Queue: q, Batch: 1, LeaseSeconds: 60})
			if len(held.Messages) != 1 {
				t.Fatalf("pop: %+v", held.Messages)
			}
			done := parkIdle(t, e, PopRequest{Queue: q, Batch: 1, Wait: true, Timeout: 10 * time.Second, AutoAck: true})
			releasedAt := time.Now()
			tc.release(t, e, held)
			p := wokenBy(t, done, "release", releasedAt)
			if p.err != nil || len(p.res.Messages) != 1 || p.res.Messages[0].TransactionID != "second" {
				t.Fatalf("parked pop: %+v %v", p.res, p.err)
			}
		})
	}
}

// Pops of a registered group claim in one round trip on a cached plan; when
// new partitions appear meanwhile the plan is stale and its claim must not keep
// its locks while the pop seeds cursors, or two pops seeding the same new
// partitions deadlock (seen as 500s under load before the fix).
func TestPopsSeedingNewPartitionsDoNotDeadlock(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	ctx := context.Background()
	mustPush(t, e, items(q, "p-seed", "first")...)
	before := deadlocks(t, e)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := e.Pop(ctx, PopRequest{Queue: q, Batch: 5, AutoAck: true}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		if _, err := e.Push(ctx, items(q, fmt.Sprintf("p%d", i), "m")); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("pop failed: %v", err)
	}
	if n := deadlocks(t, e) - before; n != 0 {
		t.Fatalf("%d deadlocks while pops seeded new partitions", n)
	}
}

// A claim that finds nothing to take writes nothing: no row lock on the
// group's claim floor unless the floor moves, so it takes no transaction id,
// writes no WAL and its commit waits for no flush. (Every empty claim took the
// floor's row lock before: with more consumers than partitions, most claims
// are empty.) The claim statement runs in a test transaction so that the check
// is about it alone, whatever else the cluster runs meanwhile.
func TestAClaimThatTakesNothingStaysReadOnly(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	ctx := context.Background()
	mustPush(t, e, items(q, "p", "m1", "m2")...)
	if held := mustPop(t, e, PopRequest{Queue: q, Batch: 1}); len(held.Messages) != 1 {
		t.Fatalf("pop: %+v", held.Messages)
	}
	// The first empty claim may move the floor to the leased partition's write.
	mustPop(t, e, PopRequest{Queue: q, Batch: 1})
	for _, autoAck := range []bool{false, true} {
		var d delivery
		var assigned bool
		inClaimTx(t, e, PopRequest{Queue: q, Batch: 1, AutoAck: autoAck}, func(tx pgx.Tx, sql string, args []any) {
			rows, err := tx.Query(ctx, sql, args...)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.scan(rows); err != nil {
				t.Fatal(err)
			}
			if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id_if_assigned() IS NOT NULL`).Scan(&assigned); err != nil {
				t.Fatal(err)
			}
		})
		if len(d.taken) != 0 {
			t.Fatalf("autoAck %v: the claim took %+v from a leased partition", autoAck, d.taken)
		}
		if assigned {
			t.Fatalf("autoAck %v: a claim that took nothing wrote (it took a transaction id)", autoAck)
		}
	}
}

// A long-poll pop that arrives while a pop of its group is parked takes its
// turn behind it: it runs no claim on arrival (with more consumers than
// partitions that claim found nothing or raced the woken pop: 2.5 claims per
// delivery in the pipeline-handoff benchmark); its first claim is its own
// re-check 100 ms later, or a wake. The claims of the newcomer are told apart
// through the admission hook, which sees each claim's context.
func TestANewLongPollQueuesBehindAParkedPopOfItsGroup(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	mustPop(t, e, PopRequest{Queue: q}) // creates the queue and registers the group
	type newcomerKey struct{}
	firstClaim := make(chan time.Time, 1)
	e.cfg.AdmitPopCheck = func(ctx context.Context) (func(), error) {
		if ctx.Value(newcomerKey{}) != nil {
			select {
			case firstClaim <- time.Now():
			default:
			}
		}
		return func() {}, nil
	}
	park := func(ctx context.Context) chan poppedAt {
		done := make(chan poppedAt, 1)
		go func() {
			res, err := e.Pop(ctx, PopRequest{Queue: q, Batch: 1, Wait: true, Timeout: 10 * time.Second, AutoAck: true})
			done <- poppedAt{res, err, time.Now()}
		}()
		return done
	}
	parked := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); e.waiters.count() != n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("parked pops: %d, want %d", e.waiters.count(), n)
			}
		}
	}
	first := park(context.Background())
	parked(1)
	arrived := time.Now()
	second := park(context.WithValue(context.Background(), newcomerKey{}, true))
	parked(2)
	select {
	case at := <-firstClaim:
		if since := at.Sub(arrived); since < 90*time.Millisecond {
			t.Fatalf("the newcomer claimed %v after it arrived; it should have parked behind the first pop until its re-check", since)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the newcomer never claimed")
	}
	mustPush(t, e, items(q, "p", "m1")...)
	mustPush(t, e, items(q, "p", "m2")...)
	got := map[string]bool{}
	for _, done := range []chan poppedAt{first, second} {
		p := <-done
		if p.err != nil || len(p.res.Messages) != 1 {
			t.Fatalf("parked pop: %+v %v", p.res, p.err)
		}
		got[p.res.Messages[0].TransactionID] = true
	}
	if !got["m1"] || !got["m2"] {
		t.Fatalf("the two parked pops got %v, want m1 and m2 one each", got)
	}
}

// A seek makes messages claimable that no push announces (the cursor moves
// back, a live lease is dropped): it wakes the parked pops of the queue, on
// the broker that ran it and on the others.
func TestSeekWakesAParkedPop(t *testing.T) {
	for _, across := range []bool{false, true} {
		t.Run(map[bool]string{false: "same broker", true: "other broker"}[across], func(t *testing.T) {
			testSeekWakesAParkedPop(t, across)
		})
	}
}

func testSeekWakesAParkedPop(t *testing.T, acrossBrokers bool) {
	e := newEngineWithoutRechecks(t)
	seeker := e
	if acrossBrokers {
		seeker = newEngine(t)
		waitListening(t, e)
	}
	q := queueName(t)
	mustPush(t, e, items(q, "p", "a", "b")...)
	if res := mustPop(t, e, PopRequest{Queue: q, Batch: 10, AutoAck: true}); len(res.Messages) != 2 {
		t.Fatalf("drain: %+v", res.Messages)
	}
	done := parkIdle(t, e, PopRequest{Queue: q, Batch: 10, Wait: true, Timeout: 10 * time.Second, AutoAck: true})
	past := time.Now().Add(-time.Hour)
	soughtAt := time.Now()
	if _, err := seeker.Seek(context.Background(), SeekRequest{Queue: q, Timestamp: &past}); err != nil {
		t.Fatal(err)
	}
	p := wokenBy(t, done, "seek", soughtAt)
	if p.err != nil || len(p.res.Messages) != 2 || p.res.Messages[0].TransactionID != "a" {
		t.Fatalf("parked pop after the seek: %+v %v", p.res, p.err)
	}
}

// A dead letter replayed to its partition is a message no push announced: the
// replay wakes the parked pops of the queue, on the broker that ran it and on
// the others.
func TestDeadLetterReplayWakesAParkedPop(t *testing.T) {
	for _, acrossBrokers := range []bool{false, true} {
		t.Run(map[bool]string{false: "same broker", true: "other broker"}[acrossBrokers], func(t *testing.T) {
			e := newEngineWithoutRechecks(t)
			replayer := e
			if acrossBrokers {
				replayer = newEngine(t)
				waitListening(t, e)
			}
			q := queueName(t)
			mustPush(t, e, items(q, "p", "poison")...)
			held := mustPop(t, e, PopRequest{Queue: q, Batch: 1})
			if len(held.Messages) != 1 {
				t.Fatalf("pop: %+v", held.Messages)
			}
			if r := mustAck(t, e, ack(held.Messages[0], "dlq")); !r[0].DLQ {
				t.Fatalf("dlq ack: %+v", r[0])
			}
			done := parkIdle(t, e, PopRequest{Queue: q, Batch: 10, Wait: true, Timeout: 10 * time.Second, AutoAck: true})
			replayedAt := time.Now()
			if _, err := replayer.RetryDeadLetter(context.Background(), held.Messages[0].PartitionID, "poison"); err != nil {
				t.Fatal(err)
			}
			p := wokenBy(t, done, "replay", replayedAt)
			if p.err != nil || len(p.res.Messages) != 1 {
				t.Fatalf("parked pop after the replay: %+v %v", p.res, p.err)
			}
		})
	}
}

// deliver sizes a pop's answer once: a span of 250 messages over three
// segments comes back in a slice allocated for exactly 250.
func TestDeliverSizesTheAnswerOnce(t *testing.T) {
	e := &Engine{leases: newLeaseIndex()}
	pid := uuid.New()
	seg := newSegmenter(0)
	for i := range 250 {
		seg.add(&Frame{MessageID: NewMessageID(), TransactionID: fmt.Sprint(i), Payload: raw(i)})
	}
	d := &delivery{now: time.Now(), segs: map[uuid.UUID][]segment{}}
	for _, c := range seg.segments() {
		d.segs[pid] = append(d.segs[pid], segment{base: int64(c.first + 1), end: int64(c.first + c.count), createdAt: d.now, frames: c.frames})
	}
	d.taken = []claim{{partitionID: pid, partition: "p", queue: "q", from: 1, to: 250, lease: 30}}
	res, err := e.deliver(&PopRequest{Queue: "q", Group: "g", Batch: 250}, "lease", d)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.segs[pid]) < 3 || len(res.Messages) != 250 || cap(res.Messages) != 250 {
		t.Fatalf("%d segments delivered %d messages in a slice of capacity %d, want 250 in 250", len(d.segs[pid]), len(res.Messages), cap(res.Messages))
	}
	if res.Messages[0].Offset != 1 || res.Messages[249].Offset != 250 || res.Messages[249].TransactionID != "249" {
		t.Fatalf("first/last delivered: %+v / %+v", res.Messages[0], res.Messages[249])
	}
}

// A parked pop's re-checks go through the re-check admission (which never
// queues); only the pop's first check goes through the queueing one.
func TestAParkedPopRechecksWithoutQueueingForAdmission(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	var firstChecks, rechecks, missedRechecks atomic.Int32
	e.cfg.AdmitPopCheck = func(context.Context) (func(), error) {
		firstChecks.Add(1)
		return func() {}, nil
	}
	e.cfg.AdmitPopRecheck = func() (func(), bool) {
		if rechecks.Add(1)%2 == 0 {
			missedRechecks.Add(1)
			return nil, false // no free slot: counts as empty, the pop keeps waiting
		}
		return func() {}, true
	}
	res, err := e.Pop(context.Background(), PopRequest{Queue: q, Batch: 1, Wait: true, Timeout: 700 * time.Millisecond})
	if err != nil || len(res.Messages) != 0 {
		t.Fatalf("pop of an empty queue: %+v %v", res, err)
	}
	if firstChecks.Load() != 1 || rechecks.Load() < 2 || missedRechecks.Load() < 1 {
		t.Fatalf("first checks %d (want 1), re-checks %d, missed %d", firstChecks.Load(), rechecks.Load(), missedRechecks.Load())
	}
}

// Parked pops of one group share their re-checks: a re-check that a peer's
// claim in the last half interval already ran empty is skipped, so thirty
// parked pops do not run thirty claims a second that find nothing (before:
// 268 re-check claims in this test, after: 10). What no wake announces is still
// found: a lease that expires while they are parked hands its message to one
// of them within about a re-check interval.
func TestParkedPopsOfAGroupShareTheirRechecks(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	mustPush(t, e, items(q, "p", "leased")...)
	if res := mustPop(t, e, PopRequest{Queue: q, Batch: 1, LeaseSeconds: 2}); len(res.Messages) != 1 {
		t.Fatalf("lease the message: %+v", res)
	}
	leaseEnds := time.Now().Add(2 * time.Second)
	var rechecks atomic.Int32
	e.cfg.AdmitPopRecheck = func() (func(), bool) {
		rechecks.Add(1)
		return func() {}, true
	}
	const pops = 30
	done := make(chan poppedAt, pops)
	for range pops {
		go func() {
			res, err := e.Pop(context.Background(), PopRequest{Queue: q, Batch: 1, Wait: true, Timeout: 4 * time.Second})
			done <- poppedAt{res, err, time.Now()}
		}()
	}
	delivered := 0
	for range pops {
		p := <-done
		if p.err != nil {
			t.Fatalf("parked pop: %v", p.err)
		}
		if len(p.res.Messages) == 0 {
			continue
		}
		delivered++
		if got := p.res.Messages[0].TransactionID; got != "leased" {
			t.Fatalf("delivered %q, want the message whose lease expired", got)
		}
		if late := p.at.Sub(leaseEnds); late > 1600*time.Millisecond {
			t.Fatalf("the message of the expired lease was delivered %v after the lease ended; a re-check should find it within about a second", late)
		}
	}
	if delivered != 1 {
		t.Fatalf("%d pops got the message of the expired lease, want 1", delivered)
	}
	if n := rechecks.Load(); n > pops {
		t.Fatalf("%d parked pops ran %d re-check claims in 4 s; peers' empty claims should spare most of them", pops, n)
	}
	t.Logf("%d parked pops ran %d re-check claims in 4 s", pops, rechecks.Load())
}

// Parked pops in more groups than ParkedRecheckRate allows re-checks a
// second space their re-checks so that together they stay within it: 40 pops
// in 40 groups at a rate of 10 re-check every 4 s, about 10 a second between
// them (before: every second once their backoff reached it, 40 a second). A
// lease that expires while they wait is still found, within that interval.
func TestParkedPopsInManyGroupsShareTheRecheckRate(t *testing.T) {
	e := newEngineWith(t, Config{ParkedRecheckRate: 10}, nil)
	q := queueName(t)
	mustPush(t, e, items(q, "p", "leased")...)
	const groups, lease = 40, 8
	// Every group leases the message, so it is claimable again, for each
	// group, only once the lease expires: no push announces that.
	for g := range groups {
		if res := mustPop(t, e, PopRequest{Queue: q, Group: fmt.Sprint("g", g), SubscriptionMode: "all", Batch: 1, LeaseSeconds: lease}); len(res.Messages) != 1 {
			t.Fatalf("group %d leases the message: %+v", g, res)
		}
	}
	leaseEnds := time.Now().Add(lease * time.Second)
	// Without the rate, the backoff (0.1, 0.2, 0.3, 0.5, 0.9, 1.7, 2.7 s)
	// re-checks every second by the second half of the lease: count the
	// re-checks there.
	steadyFrom := leaseEnds.Add(-lease * time.Second / 2)
	var rechecks, steady atomic.Int32
	e.cfg.AdmitPopRecheck = func() (func(), bool) {
		rechecks.Add(1)
		if now := time.Now(); now.After(steadyFrom) && now.Before(leaseEnds) {
			steady.Add(1)
		}
		return func() {}, true
	}
	done := make(chan poppedAt, groups)
	for g := range groups {
		go func() {
			res, err := e.Pop(context.Background(), PopRequest{Queue: q, Group: fmt.Sprint("g", g), Batch: 1, Wait: true, Timeout: 20 * time.Second})
			done <- poppedAt{res, err, time.Now()}
		}()
	}
	var latest time.Duration
	for range groups {
		p := <-done
		if p.err != nil || len(p.res.Messages) != 1 || p.res.Messages[0].TransactionID != "leased" {
			t.Fatalf("parked pop: %+v %v; want the message of its group's expired lease", p.res, p.err)
		}
		latest = max(latest, p.at.Sub(leaseEnds))
	}
	// groups ÷ rate = 4 s between re-checks, and one may land just before
	// the lease ends.
	if latest > 5*time.Second {
		t.Fatalf("the last group found its expired lease %v after it ended; its re-check interval is 4 s", latest)
	}
	// In those 4 s, pops re-checking every second run 160; within the rate, 40.
	if n := steady.Load(); n > 80 {
		t.Fatalf("%d re-checks in the 4 s before the leases end (%d in all); the rate allows about 40", n, rechecks.Load())
	}
	t.Logf("%d re-checks in the 4 s before the leases end, %d in all; the last expired lease found %v after it ended", steady.Load(), rechecks.Load(), latest)
}

// model.md: one leased batch per (partition, group), whichever broker leases
// it. Workers on two brokers pop wide under a lease and ack on the other
// broker: every message is delivered once and the cursors cover them all.
func TestLeasedPopsAcrossBrokersDeliverEveryMessageOnce(t *testing.T) {
	brokers := []*Engine{newEngine(t), newEngine(t)}
	q := queueName(t)
	const partitions, perPartition = 4, 40
	pushPartitions(t, brokers[0], q, partitions, perPartition)
	seen := drainConcurrently(t, 8, func(w int) (*PopResult, error) {
		return brokers[w%2].Pop(context.Background(), PopRequest{Queue: q, Group: "g", SubscriptionMode: "all", Batch: 3, Partitions: 2})
	}, func(b *PopResult) error {
		acks := make([]AckItem, len(b.Messages))
		for i, m := range b.Messages {
			acks[i] = ack(m, "completed")
		}
		res, err := brokers[int(time.Now().UnixNano())%2].Ack(context.Background(), acks)
		for _, r := range res {
			if !r.Success {
				t.Errorf("ack %+v", r)
			}
		}
		return err
	})
	checkEachDeliveredOnce(t, seen, partitions*perPartition)
}

// Several brokers on one database: a seek or a group delete on one broker is
// what the next pop on another sees, though that broker's pops of the group
// run on a plan it cached.
func TestASeekOrGroupDeleteOnAnotherBrokerIsSeenByItsNextPop(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	q := queueName(t)
	mustPush(t, a, items(q, "p", "a", "b")...)
	for _, want := range []string{"a", "b"} {
		res := mustPop(t, a, PopRequest{Queue: q, Group: "g", SubscriptionMode: "all", Batch: 1, AutoAck: true})
		if len(res.Messages) != 1 || res.Messages[0].TransactionID != want {
			t.Fatalf("pop: got %+v, want %s", res.Messages, want)
		}
	}
	for range 3 {
		if res := mustPop(t, a, PopRequest{Queue: q, Group: "g", Batch: 1, AutoAck: true}); len(res.Messages) != 0 {
			t.Fatalf("drained queue delivered %+v", res.Messages)
		}
	}
	past := time.Now().Add(-time.Hour)
	if _, err := b.Seek(context.Background(), SeekRequest{Queue: q, Group: "g", Timestamp: &past}); err != nil {
		t.Fatal(err)
	}
	res := mustPop(t, a, PopRequest{Queue: q, Group: "g", Batch: 10, AutoAck: true})
	if len(res.Messages) != 2 {
		t.Fatalf("after a seek on another broker: %+v", txnIDs(res.Messages))
	}
	// A group delete on b re-seeds on a.
	if _, err := b.DeleteGroup(context.Background(), "g", q, true); err != nil {
		t.Fatal(err)
	}
	mustPush(t, a, items(q, "p", "c")...)
	res = mustPop(t, a, PopRequest{Queue: q, Group: "g", SubscriptionMode: "all", Batch: 10, AutoAck: true})
	if len(res.Messages) != 3 {
		t.Fatalf("after a delete on another broker: %+v", txnIDs(res.Messages))
	}
}
