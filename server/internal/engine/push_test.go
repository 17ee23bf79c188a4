package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

func TestPushCreatesQueueAndDefaultPartition(t *testing.T) {
	e := newEngine(t)
	q := "billing.invoices." + queueName(t)
	res := mustPush(t, e, PushItem{Queue: q, Payload: raw(map[string]int{"n": 1})})
	if res[0].Status != PushQueued || res[0].MessageID == uuid.Nil || res[0].Queue != q || res[0].TransactionID == "" {
		t.Fatalf("unexpected result %+v", res[0])
	}
	// Without a transaction id the broker uses the minted message id as one.
	if res[0].TransactionID != res[0].MessageID.String() {
		t.Fatalf("minted transaction id %s, message id %s", res[0].TransactionID, res[0].MessageID)
	}
	popped := mustPop(t, e, PopRequest{Queue: q, AutoAck: true})
	if len(popped.Messages) != 1 || popped.Messages[0].ID != res[0].MessageID || popped.Messages[0].TransactionID != res[0].TransactionID {
		t.Fatalf("stored message %+v, push answered %+v", popped.Messages, res[0])
	}
	var partition, ns, task string
	err := e.pool.QueryRow(context.Background(), `SELECT p.name, q.namespace, q.task FROM lanes.partitions p
		JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $1`, q).Scan(&partition, &ns, &task)
	if err != nil {
		t.Fatal(err)
	}
	if partition != "Default" || ns != "billing" || task != "invoices" {
		t.Fatalf("partition=%q namespace=%q task=%q", partition, ns, task)
	}
}

func TestPushDeduplicatesWithinPartition(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	first := mustPush(t, e, items(q, "p1", "order-1")...)
	again := mustPush(t, e, items(q, "p1", "order-1", "order-2", "order-2")...)
	if again[0].Status != PushDuplicate || again[0].MessageID != first[0].MessageID {
		t.Fatalf("retry should be a duplicate of %s, got %+v", first[0].MessageID, again[0])
	}
	if again[1].Status != PushQueued || again[2].Status != PushDuplicate || again[2].MessageID != again[1].MessageID {
		t.Fatalf("in-request duplicate not detected: %+v", again)
	}
	// Scope is one partition: the same id in another partition is new.
	other := mustPush(t, e, items(q, "p2", "order-1")...)
	if other[0].Status != PushQueued {
		t.Fatalf("other partition: %+v", other[0])
	}
	var stored int
	if err := e.pool.QueryRow(context.Background(), `SELECT coalesce(sum(s.end_offset - s.base_offset + 1), 0)
		FROM lanes.segments s JOIN lanes.partitions p ON p.id = s.partition_id
		JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $1`, q).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != 3 {
		t.Fatalf("stored %d messages, want 3 (duplicates write nothing)", stored)
	}
}

func TestPushDedupWindowZeroTurnsDedupOff(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	if _, err := e.Configure(context.Background(), ConfigureRequest{Queue: q, Options: map[string]json.RawMessage{"dedupWindowSeconds": json.RawMessage("0")}}); err != nil {
		t.Fatal(err)
	}
	res := mustPush(t, e, items(q, "", "same", "same")...)
	again := mustPush(t, e, items(q, "", "same")...)
	if res[0].Status != PushQueued || res[1].Status != PushQueued || again[0].Status != PushQueued {
		t.Fatalf("dedup off should queue every copy: %+v %+v", res, again)
	}
}

func TestConcurrentPushesOfOneTransactionIDQueueExactlyOnce(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	const n = 20
	statuses := make([]PushStatus, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res, err := e.Push(context.Background(), items(q, "p", "the-one"))
			if err != nil {
				t.Error(err)
				return
			}
			statuses[i] = res[0].Status
		}(i)
	}
	wg.Wait()
	queued := 0
	for _, s := range statuses {
		if s == PushQueued {
			queued++
		} else if s != PushDuplicate {
			t.Fatalf("unexpected status %q", s)
		}
	}
	if queued != 1 {
		t.Fatalf("%d pushes queued, want exactly 1", queued)
	}
}

func TestConcurrentPushesFromTwoBrokersQueueExactlyOnce(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	q := queueName(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	queued := 0
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(e *Engine) {
			defer wg.Done()
			res, err := e.Push(context.Background(), items(q, "p", "x1", "x2"))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			for _, r := range res {
				if r.Status == PushQueued {
					queued++
				}
			}
			mu.Unlock()
		}([]*Engine{a, b}[i%2])
	}
	wg.Wait()
	if queued != 2 {
		t.Fatalf("%d queued, want 2", queued)
	}
}

func TestPushRejectsBadItemsWithoutWriting(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	_, err := e.Push(context.Background(), []PushItem{{Queue: q, Payload: raw(1)}, {Queue: q}})
	if err == nil {
		t.Fatal("missing payload accepted")
	}
	var n int
	_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM lanes.queues WHERE name = $1`, q).Scan(&n)
	if n != 0 {
		t.Fatal("a rejected push created the queue")
	}
}

func TestPushAfterTheQueueWasDeletedRecreatesIt(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	q := queueName(t)
	mustPush(t, a, items(q, "p", "before")...) // a now knows the partition exists
	if deleted, err := b.DeleteQueue(context.Background(), q); err != nil || !deleted {
		t.Fatalf("delete through another broker: %v %v", deleted, err)
	}
	before := a.HotPathStats()
	res := mustPush(t, a, items(q, "p", "after")...)
	if res[0].Status != PushQueued {
		t.Fatalf("push after the delete: %+v", res[0])
	}
	// The one-trip write found its cached partition gone and committed nothing;
	// the write ran again the general way, provisioning the queue.
	if after := a.HotPathStats(); after.PushCommitsOneTrip != before.PushCommitsOneTrip || after.PushCommitsGeneral != before.PushCommitsGeneral+1 {
		t.Fatalf("paths: before %+v, after %+v", before, after)
	}
	got := mustPop(t, a, PopRequest{Queue: q, Batch: 10})
	if ids := txnIDs(got.Messages); len(ids) != 1 || ids[0] != "after" {
		t.Fatalf("recreated queue holds %v", ids)
	}
}

// Segments and transaction-index rows have no foreign key to cascade from, so
// a queue deleted while pushes keep writing to it must still take every row
// of its partitions along: a push either commits before the delete locks its
// partition (and its rows are deleted) or after it (into a recreated queue).
func TestDeleteQueueUnderPushesLeavesNoRowsOfDeletedPartitions(t *testing.T) {
	pusher, deleter := newEngine(t), newEngine(t)
	q := queueName(t)
	ctx := context.Background()
	var stop atomic.Bool
	var stored atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				res, err := pusher.Push(ctx, items(q, fmt.Sprintf("p%d", w), fmt.Sprintf("w%d-%d", w, i))) // errors: the partition went mid-push
				if err == nil && res[0].Status == PushQueued {
					stored.Add(1)
				}
			}
		}()
	}
	deletes := 0
	for round := 0; round < 5; round++ {
		time.Sleep(40 * time.Millisecond)
		deleted, err := deleter.DeleteQueue(ctx, q)
		if err != nil {
			t.Fatalf("delete %d: %v", round, err)
		}
		if deleted {
			deletes++
		}
	}
	time.Sleep(40 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if deletes < 2 || stored.Load() == 0 {
		t.Fatalf("%d deletes, %d pushes stored: the race did not run", deletes, stored.Load())
	}
	var orphans int
	if err := deleter.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM lanes.segments s WHERE NOT EXISTS (SELECT 1 FROM lanes.partitions p WHERE p.id = s.partition_id))
		+ (SELECT count(*) FROM lanes.txns t WHERE NOT EXISTS (SELECT 1 FROM lanes.partitions p WHERE p.id = t.partition_id))`).Scan(&orphans); err != nil {
		t.Fatal(err)
	}
	if orphans != 0 {
		t.Fatalf("%d segment or transaction-index rows outlived their partitions (%d deletes, %d pushes)", orphans, deletes, stored.Load())
	}
}

func TestDuplicateOutsideTheWindowIsANewMessage(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	if _, err := e.Configure(context.Background(), ConfigureRequest{Queue: q, Options: map[string]json.RawMessage{"dedupWindowSeconds": json.RawMessage("1")}}); err != nil {
		t.Fatal(err)
	}
	first := mustPush(t, e, items(q, "p", "late-retry")...)
	if again := mustPush(t, e, items(q, "p", "late-retry")...); again[0].Status != PushDuplicate || again[0].MessageID != first[0].MessageID {
		t.Fatalf("inside the window: %+v", again[0])
	}
	time.Sleep(1200 * time.Millisecond)
	later := mustPush(t, e, items(q, "p", "late-retry")...)
	if later[0].Status != PushQueued || later[0].MessageID == first[0].MessageID {
		t.Fatalf("after the window a retry writes a new message: %+v", later[0])
	}
	if dup := mustPush(t, e, items(q, "p", "late-retry")...); dup[0].Status != PushDuplicate || dup[0].MessageID != later[0].MessageID {
		t.Fatalf("the new message is what later retries match: %+v", dup[0])
	}
}

// A push to known partitions skips the dedup probe and bets every id is new;
// an id already stored fails that bet on txns_pkey and the write runs again
// probed. The verdicts are the probed path's, nothing is written twice, and
// pushes go back to unprobed once the pause is over.
func TestUnprobedPushFallsBackToTheProbeOnAStoredID(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	first := mustPush(t, e, items(q, "p", "a", "b")...) // provisions: probed
	if e.unprobedPausedUntil.Load() != 0 {
		t.Fatal("a provisioning push paused unprobed writes")
	}
	fresh := mustPush(t, e, items(q, "p", "c")...) // known partition, new id: unprobed, no conflict
	if fresh[0].Status != PushQueued || e.unprobedPausedUntil.Load() != 0 {
		t.Fatalf("unprobed push of a new id: %+v, paused %v", fresh[0], e.unprobedPausedUntil.Load() != 0)
	}
	mixed := mustPush(t, e, items(q, "p", "d", "b")...) // b is stored: the unprobed bet fails
	if mixed[0].Status != PushQueued || mixed[1].Status != PushDuplicate || mixed[1].MessageID != first[1].MessageID {
		t.Fatalf("after the fallback: %+v", mixed)
	}
	if time.Until(time.Unix(0, e.unprobedPausedUntil.Load())) <= 0 || e.HotPathStats().UnprobedPushConflicts != 1 {
		t.Fatalf("a failed bet did not pause unprobed writes (%+v)", e.HotPathStats())
	}
	b := mustPop(t, e, PopRequest{Queue: q, Batch: 10, AutoAck: true})
	if got := txnIDs(b.Messages); !reflect.DeepEqual(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("log holds %v", got)
	}
	e.unprobedPausedUntil.Store(0)
	if again := mustPush(t, e, items(q, "p", "e")...); again[0].Status != PushQueued || e.unprobedPausedUntil.Load() != 0 {
		t.Fatalf("after the pause: %+v", again[0])
	}
}

// With dedup off an id may come back: the unprobed write meets the stored row,
// runs again probed, queues the copy and points the id at the newest offset.
func TestUnprobedPushReusingAnIDWithDedupOff(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	if _, err := e.Configure(context.Background(), ConfigureRequest{Queue: q, Options: map[string]json.RawMessage{"dedupWindowSeconds": json.RawMessage("0")}}); err != nil {
		t.Fatal(err)
	}
	mustPush(t, e, items(q, "p", "same")...)
	again := mustPush(t, e, items(q, "p", "same")...)
	if again[0].Status != PushQueued {
		t.Fatalf("dedup off queues the copy: %+v", again[0])
	}
	var offset int64
	if err := e.pool.QueryRow(context.Background(), `SELECT t.message_offset FROM lanes.txns t
		JOIN lanes.partitions p ON p.id = t.partition_id JOIN lanes.queues q ON q.id = p.queue_id
		WHERE q.name = $1 AND t.transaction_id = 'same'`, q).Scan(&offset); err != nil || offset != 1 {
		t.Fatalf("txns points at offset %d (%v), want the newest, 1", offset, err)
	}
}

func TestMessageIDsAreDistinctTimeOrderedV7(t *testing.T) {
	seen := map[uuid.UUID]bool{}
	var prev uuid.UUID
	for i := 0; i < 20000; i++ {
		id := NewMessageID()
		if id.Version() != 7 || seen[id] {
			t.Fatalf("id %d: %s (version %d, repeated %v)", i, id, id.Version(), seen[id])
		}
		if i > 0 && bytes.Compare(id[:6], prev[:6]) < 0 {
			t.Fatalf("id %s minted after %s carries an earlier time", id, prev)
		}
		seen[id], prev = true, id
	}
}

// Pushes to partitions the broker knows go as one statement that takes each
// partition's offsets from its own UPDATE. From two brokers at once, every
// partition's log must stay gapless and every txns row must point at the frame
// holding its message.
func TestOneTripPushesKeepEveryLogGaplessAcrossBrokers(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	q := queueName(t)
	ctx := context.Background()
	parts := []string{"p0", "p1", "p2"}
	for _, e := range []*Engine{a, b} {
		mustPush(t, e, PushItem{Queue: q, Partition: "p0", TransactionID: "warm-" + fmt.Sprint(e == a), Payload: raw(0)},
			PushItem{Queue: q, Partition: "p1", TransactionID: "warm-" + fmt.Sprint(e == a), Payload: raw(0)},
			PushItem{Queue: q, Partition: "p2", TransactionID: "warm-" + fmt.Sprint(e == a), Payload: raw(0)})
	}
	oneTripBefore := a.HotPathStats().PushCommitsOneTrip + b.HotPathStats().PushCommitsOneTrip
	want := 2 * len(parts) // the warm-up pushes
	for w := 0; w < 8; w++ {
		for i := 0; i < 25; i++ {
			want += 1 + (w+i)%len(parts)
		}
	}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(e *Engine) {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				var batch []PushItem
				for j, p := range parts[:1+(w+i)%len(parts)] {
					batch = append(batch, PushItem{Queue: q, Partition: p, TransactionID: fmt.Sprintf("w%d-%d-%d", w, i, j), Payload: raw(i)})
				}
				if _, err := e.Push(ctx, batch); err != nil {
					t.Error(err)
					return
				}
			}
		}([]*Engine{a, b}[w%2])
	}
	wg.Wait()
	if oneTrip := a.HotPathStats().PushCommitsOneTrip + b.HotPathStats().PushCommitsOneTrip - oneTripBefore; oneTrip == 0 {
		t.Fatal("no push went in one trip")
	}
	total := 0
	for _, p := range parts {
		total += checkGaplessLog(t, a, q, p)
	}
	if total != want {
		t.Fatalf("%d messages stored, want %d", total, want)
	}
}

// checkGaplessLog fails t unless partition p of queue holds a gapless log
// ending at its last_offset (its partition_writes copy included), with one
// txns row per message pointing at the frame that holds it; it returns the
// number of messages.
func checkGaplessLog(t *testing.T, e *Engine, queue, p string) int {
	t.Helper()
	ctx := context.Background()
	var pid uuid.UUID
	var last, tracked int64
	if err := e.pool.QueryRow(ctx, `SELECT p.id, p.last_offset, w.last_offset FROM lanes.partitions p
		JOIN lanes.queues qq ON qq.id = p.queue_id JOIN lanes.partition_writes w ON w.partition_id = p.id
		WHERE qq.name = $1 AND p.name = $2`, queue, p).Scan(&pid, &last, &tracked); err != nil {
		t.Fatal(err)
	}
	if tracked != last {
		t.Fatalf("%s: partition_writes says last offset %d, partitions %d", p, tracked, last)
	}
	type segmentRow struct {
		Base, End int64
		Frames    []byte
	}
	rows, _ := e.pool.Query(ctx, `SELECT base_offset, end_offset, frames FROM lanes.segments WHERE partition_id = $1 ORDER BY base_offset`, pid)
	segs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[segmentRow])
	if err != nil {
		t.Fatal(err)
	}
	byOffset := map[int64]Frame{}
	next := int64(0)
	for _, sg := range segs {
		if sg.Base != next {
			t.Fatalf("%s: segment starts at %d, want %d", p, sg.Base, next)
		}
		frames, err := decodeFrames(sg.Frames, int(sg.End-sg.Base+1))
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(frames)) != sg.End-sg.Base+1 {
			t.Fatalf("%s: segment %d..%d holds %d frames", p, sg.Base, sg.End, len(frames))
		}
		for i, f := range frames {
			byOffset[sg.Base+int64(i)] = f
		}
		next = sg.End + 1
	}
	if next != last+1 {
		t.Fatalf("%s: segments end at %d, last_offset is %d", p, next-1, last)
	}
	type txnRow struct {
		Txn       string
		Offset    int64
		MessageID uuid.UUID
	}
	rows, _ = e.pool.Query(ctx, `SELECT transaction_id, message_offset, message_id FROM lanes.txns WHERE partition_id = $1`, pid)
	txns, err := pgx.CollectRows(rows, pgx.RowToStructByPos[txnRow])
	if err != nil {
		t.Fatal(err)
	}
	for _, tx := range txns {
		if f, ok := byOffset[tx.Offset]; !ok || f.TransactionID != tx.Txn || f.MessageID != tx.MessageID {
			t.Fatalf("%s: txns maps %s to offset %d, whose frame is %+v", p, tx.Txn, tx.Offset, f)
		}
	}
	n := len(txns)
	if n != len(byOffset) {
		t.Fatalf("%s: %d txns rows for %d messages", p, n, len(byOffset))
	}
	return n
}

// segmentSizes lists the message count of each segment of partition p of queue, in offset order.
func segmentSizes(t *testing.T, e *Engine, queue, p string) []int {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT (s.end_offset - s.base_offset + 1)::int FROM lanes.segments s
		JOIN lanes.partitions pp ON pp.id = s.partition_id JOIN lanes.queues q ON q.id = pp.queue_id
		WHERE q.name = $1 AND pp.name = $2 ORDER BY s.base_offset`, queue, p)
	if err != nil {
		t.Fatal(err)
	}
	sizes, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return sizes
}

// A write cuts a partition's messages into segments of at most
// segmentMaxMessages (or segmentMaxBytes), on the general path and the
// one-trip path alike, and pops whose spans start and end inside segments get
// exactly their offsets, in order.
func TestAWriteCutsAPartitionsMessagesIntoBoundedSegments(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	ids := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s%03d", prefix, i)
		}
		return out
	}
	first, second := ids("a", 250), ids("b", 250)
	before := e.HotPathStats()
	mustPush(t, e, items(q, "p", first...)...) // a new partition: the general path
	afterFirst := e.HotPathStats()
	mustPush(t, e, items(q, "p", second...)...) // its id is cached now: one trip
	afterSecond := e.HotPathStats()
	if afterFirst.PushCommitsGeneral != before.PushCommitsGeneral+1 || afterSecond.PushCommitsOneTrip != afterFirst.PushCommitsOneTrip+1 {
		t.Fatalf("paths: general %d → %d, one-trip %d → %d; want the first push general and the second one-trip",
			before.PushCommitsGeneral, afterFirst.PushCommitsGeneral, afterFirst.PushCommitsOneTrip, afterSecond.PushCommitsOneTrip)
	}
	big := bytes.Repeat([]byte("y"), 12<<10)
	var large []PushItem
	for i := range 5 {
		large = append(large, PushItem{Queue: q, Partition: "p", TransactionID: fmt.Sprintf("c%d", i), Payload: raw(map[string]string{"body": string(big)})})
	}
	mustPush(t, e, large...)
	if got, want := segmentSizes(t, e, q, "p"), []int{100, 100, 50, 100, 100, 50, 3, 2}; !slices.Equal(got, want) {
		t.Fatalf("segment sizes %v, want %v", got, want)
	}
	if n := checkGaplessLog(t, e, q, "p"); n != 505 {
		t.Fatalf("log holds %d messages, want 505", n)
	}

	// Spans of 150 start and end inside segments.
	all := append(append(append([]string{}, first...), second...), "c0", "c1", "c2", "c3", "c4")
	for from := 0; from < len(all); from += 150 {
		got := mustPop(t, e, PopRequest{Queue: q, Partition: "p", Group: "workers", Batch: 150, LeaseSeconds: 60, SubscriptionMode: "all"})
		want := all[from:min(from+150, len(all))]
		if !slices.Equal(txnIDs(got.Messages), want) {
			t.Fatalf("pop from offset %d: %v, want %v", from, txnIDs(got.Messages), want)
		}
		for i, m := range got.Messages {
			if m.Offset != int64(from+i) {
				t.Fatalf("message %s at offset %d, want %d", m.TransactionID, m.Offset, from+i)
			}
		}
		acks := make([]AckItem, len(got.Messages))
		for i, m := range got.Messages {
			acks[i] = ack(m, "completed")
		}
		mustAck(t, e, acks...)
	}
}

// The dedup window counts from when the first copy was stored, not from when
// its write began: a write that waited for the partition lock must not open
// the window early by that wait (found under contention: copies stored 27 ms
// inside a 2 s window).
func TestDedupWindowCountsFromTheStoredCopy(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	q := queueName(t)
	if _, err := e.Configure(ctx, ConfigureRequest{Queue: q, Options: map[string]json.RawMessage{"dedupWindowSeconds": json.RawMessage("2")}}); err != nil {
		t.Fatal(err)
	}
	mustPush(t, e, items(q, "p", "provision")...)
	for _, oneTrip := range []bool{false, true} {
		id := fmt.Sprintf("contended-%v", oneTrip)
		if !oneTrip {
			// Keeps the next push on the probed two-trip path.
			e.unprobedPausedUntil.Store(time.Now().Add(time.Minute).UnixNano())
		} else {
			e.unprobedPausedUntil.Store(0)
		}
		// Hold the partition row so the first copy's write waits 1.5 s for it.
		holder, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := holder.Exec(ctx, `SELECT 1 FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
			WHERE q.name = $1 AND p.name = 'p' FOR UPDATE OF p`, q); err != nil {
			t.Fatal(err)
		}
		first := make(chan PushResult, 1)
		go func() {
			res, err := e.Push(ctx, items(q, "p", id))
			if err != nil {
				t.Error(err)
			}
			first <- res[0]
		}()
		time.Sleep(1500 * time.Millisecond)
		if err := holder.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		stored := <-first
		if stored.Status != PushQueued {
			t.Fatalf("first copy: %+v", stored)
		}
		// 0.7 s after it was stored, 2.2 s after its write began: inside the window.
		time.Sleep(700 * time.Millisecond)
		if again := mustPush(t, e, items(q, "p", id)...); again[0].Status != PushDuplicate {
			t.Fatalf("one trip %v: a copy 0.7 s after the stored one is %q, want duplicate", oneTrip, again[0].Status)
		}
	}
}

// A queue deleted while it does not exist yet, with a push creating it
// meanwhile, keeps that push: the delete removes only the queue it found. It
// used to delete the queue the push created by name at its end, and so its
// partition by cascade, leaving the push's segment and transaction-index rows
// behind with no partition (and the acknowledged message gone).
func TestDeleteQueueKeepsAQueueAPushCreatedWhileItRan(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	ctx := context.Background()
	// A timer row of the queue, held locked, stops the delete between its
	// partitions (none yet) and its queue row.
	if _, err := e.pool.Exec(ctx, `INSERT INTO lanes.timers (queue, timer_key, deliver_at, transaction_id, message_id, payload)
		VALUES ($1, 'k', now() + interval '1 hour', 't', gen_random_uuid(), '1')`, q); err != nil {
		t.Fatal(err)
	}
	blocker, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(ctx) }()
	if _, err := blocker.Exec(ctx, `SELECT 1 FROM lanes.timers WHERE queue = $1 FOR UPDATE`, q); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		deleted bool
		err     error
	}
	done := make(chan outcome, 1)
	go func() {
		deleted, err := e.DeleteQueue(ctx, q)
		done <- outcome{deleted, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		if err := e.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'DELETE FROM lanes.timers%')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the delete never reached the timers")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if res := mustPush(t, e, items(q, "p", "kept")...); res[0].Status != PushQueued {
		t.Fatalf("push: %+v", res[0])
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	out := <-done
	if out.err != nil || out.deleted {
		t.Fatalf("delete of a queue that did not exist: deleted %v, err %v", out.deleted, out.err)
	}
	var orphans int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM lanes.segments s
		WHERE NOT EXISTS (SELECT 1 FROM lanes.partitions p WHERE p.id = s.partition_id)`).Scan(&orphans); err != nil {
		t.Fatal(err)
	}
	if orphans != 0 {
		t.Fatalf("%d segments outlived their partition", orphans)
	}
	got := mustPop(t, e, PopRequest{Queue: q, Batch: 10})
	if ids := txnIDs(got.Messages); len(ids) != 1 || ids[0] != "kept" {
		t.Fatalf("the queue the push created holds %v", ids)
	}
}

// model.md: deduplication is exact because the probe runs under the lock that
// allocates offsets. Plain pushes and transaction bundles of one transaction id,
// on two brokers at once, store it once: a bundle that loses answers duplicate
// and rolls back.
func TestConcurrentPushesAndBundlesOfOneTransactionIDStoreItOnce(t *testing.T) {
	brokers := []*Engine{newEngine(t), newEngine(t)}
	q := queueName(t)
	mustPush(t, brokers[0], items(q, "p", "seed")...) // the partition exists: every writer races on one row
	for round := 0; round < 5; round++ {
		id := fmt.Sprintf("the-one-%d", round)
		var wg sync.WaitGroup
		var mu sync.Mutex
		stored := 0
		for i := 0; i < 12; i++ {
			wg.Add(1)
			go func(e *Engine, bundle bool) {
				defer wg.Done()
				if bundle {
					it := items(q, "p", id)[0]
					res, err := e.Transaction(context.Background(), TransactionRequest{Ops: []TxOp{{Push: &it}}})
					if err != nil {
						t.Error(err)
						return
					}
					if res.Success {
						mu.Lock()
						stored++
						mu.Unlock()
					} else if res.Reason != TxReasonDuplicate {
						t.Errorf("bundle rolled back for %q: %s", res.Reason, res.Error)
					}
					return
				}
				res, err := e.Push(context.Background(), items(q, "p", id))
				if err != nil {
					t.Error(err)
					return
				}
				if res[0].Status == PushQueued {
					mu.Lock()
					stored++
					mu.Unlock()
				}
			}(brokers[i%2], i%3 == 0)
		}
		wg.Wait()
		if stored != 1 {
			t.Fatalf("round %d: %d writers stored %s, want exactly 1", round, stored, id)
		}
	}
	var copies int
	if err := brokers[0].pool.QueryRow(context.Background(), `SELECT coalesce(sum(s.end_offset - s.base_offset + 1), 0)
		FROM lanes.segments s JOIN lanes.partitions p ON p.id = s.partition_id
		JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $1`, q).Scan(&copies); err != nil {
		t.Fatal(err)
	}
	if copies != 6 {
		t.Fatalf("stored %d messages, want 6 (the seed and one per round)", copies)
	}
}
