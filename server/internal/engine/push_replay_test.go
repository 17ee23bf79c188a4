package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// replayItems are items as the spool replays them: each under the message id
// its buffered answer gave.
func replayItems(queue, partition string, txns ...string) []PushItem {
	out := items(queue, partition, txns...)
	for i := range out {
		out[i].MessageID = NewMessageID()
	}
	return out
}

// storedCount is how many messages the queue's segments hold, copies included.
func storedCount(t *testing.T, e *Engine, queue string) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT coalesce(sum(s.end_offset - s.base_offset + 1), 0)
		FROM lanes.segments s JOIN lanes.partitions p ON p.id = s.partition_id
		JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $1`, queue).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A replay of records already stored (a drain run again after a crash) keeps
// one copy on a queue with dedup off, whether the broker knows the partition
// (probe by id) or not (a restarted broker: probe by name), while a replay
// reusing a transaction id under another message id, and a plain push, are
// still new messages there.
func TestReplayingStoredItemsAgainKeepsOneCopyWithDedupOff(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	ctx := context.Background()
	if _, err := e.Configure(ctx, ConfigureRequest{Queue: q, Options: map[string]json.RawMessage{"dedupWindowSeconds": json.RawMessage("0")}}); err != nil {
		t.Fatal(err)
	}
	records := replayItems(q, "p", "r-1", "r-2", "r-3")
	replay := func(eng *Engine, what string, want PushStatus) {
		t.Helper()
		res, err := eng.ReplayPush(ctx, append([]PushItem(nil), records...))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for i, r := range res {
			if r.Status != want || r.MessageID != records[i].MessageID {
				t.Fatalf("%s: item %d answered %s under %s, want %s under %s", what, i, r.Status, r.MessageID, want, records[i].MessageID)
			}
		}
	}
	replay(e, "first replay", PushQueued)
	replay(e, "replay again, partition cached", PushDuplicate)
	replay(newEngine(t), "replay again from a restarted broker", PushDuplicate)
	if n := storedCount(t, e, q); n != len(records) {
		t.Fatalf("stored %d messages after three replays of %d records, want %d", n, len(records), len(records))
	}

	other := replayItems(q, "p", "r-1")
	if res, err := e.ReplayPush(ctx, other); err != nil || res[0].Status != PushQueued {
		t.Fatalf("replay of r-1 under another message id: %+v %v, want queued (dedup off)", res, err)
	}
	if res := mustPush(t, e, items(q, "p", "r-2")...); res[0].Status != PushQueued {
		t.Fatalf("plain push of r-2: %+v, want queued (dedup off)", res[0])
	}
	if n := storedCount(t, e, q); n != len(records)+2 {
		t.Fatalf("stored %d messages, want %d", n, len(records)+2)
	}
}

// A replayed item without a message id (a record of a broker that did not keep
// it) is a plain push: nothing to recognize it by.
func TestReplayWithoutMessageIDIsAPlainPush(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	ctx := context.Background()
	if _, err := e.Configure(ctx, ConfigureRequest{Queue: q, Options: map[string]json.RawMessage{"dedupWindowSeconds": json.RawMessage("0")}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		res, err := e.ReplayPush(ctx, items(q, "p", "no-id"))
		if err != nil || res[0].Status != PushQueued || res[0].MessageID == uuid.Nil {
			t.Fatalf("replay without a message id: %+v %v, want queued under a new id", res, err)
		}
	}
	if n := storedCount(t, e, q); n != 2 {
		t.Fatalf("stored %d, want 2", n)
	}
}

// A push whose caller gave up while its request waited for a committer (a
// database stall longer than LANES_PUSH_TIMEOUT_MS) has been spooled under the
// same message ids; should a committer gather it with the drain's replay into
// one write anyway, the replay finds the message already in that write and
// only one copy is stored on a queue with dedup off.
func TestAReplayInTheWriteOfItsFirstAttemptKeepsOneCopyWithDedupOff(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	ctx := context.Background()
	configureDedupOff(t, e, q)
	mustPush(t, e, items(q, "p", "warm")...) // the partition is cached, as on a busy broker
	first := replayItems(q, "p", "b")        // the API mints message ids before the attempt
	replay := append([]PushItem(nil), first...)
	firstReq, replayReq := newPushRequest(ctx, first, false), newPushRequest(ctx, replay, true)
	if err := e.commitPushes(ctx, []*pushRequest{firstReq, replayReq}); err != nil {
		t.Fatal(err)
	}
	if n := storedCount(t, e, q); n != 2 { // warm + one copy of b
		t.Fatalf("stored %d messages, want 2: the buffered push is stored twice", n)
	}
	if r := replayReq.results[0]; r.Status != PushDuplicate || r.MessageID != first[0].MessageID {
		t.Fatalf("replay answered %s under %s, want duplicate under %s", r.Status, r.MessageID, first[0].MessageID)
	}
}

// A push whose caller gave up while its request waited behind a stalled write
// is left out of the committer's next write: the caller's answer was an error
// (the API then spools the items), so storing it too would keep a copy the
// spool's drain stores again.
func TestAPushWhoseCallerGaveUpWhileQueuedIsNotStored(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	configureDedupOff(t, e, q)
	mustPush(t, e, items(q, "p", "warm")...)
	lock := lockPartition(t, e, q, "p")

	stalled := pushInBackground(e, items(q, "p", "stalled")) // holds the committer
	lock.waitBlocked(t, 1)
	gaveUp, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := e.Push(gaveUp, items(q, "p", "gave-up")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("push behind a stalled write: %v, want its deadline", err)
	}
	lock.commit(t)
	if err := <-stalled; err != nil {
		t.Fatalf("stalled push: %v", err)
	}
	mustPush(t, e, items(q, "p", "after")...) // runs after the committer took gave-up
	got := txnIDs(mustPop(t, e, PopRequest{Queue: q, Batch: 10, AutoAck: true}).Messages)
	if want := []string{"warm", "stalled", "after"}; !slices.Equal(got, want) {
		t.Fatalf("stored %v, want %v: a push whose caller gave up was stored", got, want)
	}
}

// With several committers the drain's replay can go to another committer than
// the first attempt it repeats (a replay goes where its first item's partition
// hashes) and commit first; the first attempt, still queued behind a stalled
// write, must not then be stored as a second copy.
func TestAReplayOnAnotherCommitterIsNotFollowedByItsAbandonedFirstAttempt(t *testing.T) {
	e := newEngineWith(t, Config{PushCommitters: 2}, nil)
	q := queueName(t)
	ctx := context.Background()
	configureDedupOff(t, e, q)
	p, other := "p", committerNeighbour(e, q, "p")
	mustPush(t, e, append(items(q, p, "warm"), items(q, other, "warm")...)...)
	lock := lockPartition(t, e, q, p)

	stalled := pushInBackground(e, items(q, p, "stalled")) // holds p's committer
	lock.waitBlocked(t, 1)
	first := replayItems(q, p, "b")
	gaveUp, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := e.Push(gaveUp, append([]PushItem(nil), first...)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("push behind a stalled write: %v, want its deadline", err)
	}
	// The drain's replay: a record of the other partition, then b.
	replay := append(replayItems(q, other, "o"), first...)
	replayed := make(chan error, 1)
	go func() {
		res, err := e.ReplayPush(ctx, replay)
		if err == nil && (res[0].Status != PushQueued || res[1].Status != PushQueued) {
			err = fmt.Errorf("replay answered %+v, want both queued", res)
		}
		replayed <- err
	}()
	lock.waitBlocked(t, 2)
	lock.commit(t)
	for _, done := range []chan error{stalled, replayed} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	mustPush(t, e, items(q, p, "after")...) // runs after p's committer took b's first attempt
	// warm twice, stalled, o, b, after
	if n := storedCount(t, e, q); n != 6 {
		t.Fatalf("stored %d messages, want 6: b is stored twice", n)
	}
}

func configureDedupOff(t *testing.T, e *Engine, q string) {
	t.Helper()
	if _, err := e.Configure(context.Background(), ConfigureRequest{Queue: q,
		Options: map[string]json.RawMessage{"dedupWindowSeconds": json.RawMessage("0")}}); err != nil {
		t.Fatal(err)
	}
}

// pushInBackground pushes items and sends the error (nil when stored).
func pushInBackground(e *Engine, its []PushItem) chan error {
	done := make(chan error, 1)
	go func() {
		_, err := e.Push(context.Background(), its)
		done <- err
	}()
	return done
}

// committerNeighbour names a partition of q whose pushes go to another
// committer than partition p's.
func committerNeighbour(e *Engine, q, p string) string {
	committerOf := func(partition string) chan *pushRequest {
		return e.pusher.committerFor(&pushRequest{items: []PushItem{{Queue: q, Partition: partition}}})
	}
	for i := 0; ; i++ {
		if name := fmt.Sprintf("n%d", i); committerOf(name) != committerOf(p) {
			return name
		}
	}
}

// partitionLock is a transaction holding a partition row lock, stalling every
// push write to that partition as a stalled database would.
type partitionLock struct {
	tx   pgx.Tx
	pool *pgxpool.Pool // to watch from outside the lock's transaction, whose activity snapshot stays put
}

func lockPartition(t *testing.T, e *Engine, q, p string) *partitionLock {
	t.Helper()
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, `SELECT FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
		WHERE q.name = $1 AND p.name = $2 FOR UPDATE OF p`, q, p); err != nil {
		t.Fatal(err)
	}
	return &partitionLock{tx: tx, pool: e.pool}
}

// waitBlocked waits until n sessions of the database wait for a lock: the
// first writer waits for the holder, later ones for the writer ahead of them.
func (l *partitionLock) waitBlocked(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var blocked int
		if err := l.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND cardinality(pg_blocking_pids(pid)) > 0`).Scan(&blocked); err != nil {
			t.Fatal(err)
		}
		if blocked >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait for the partition lock after 10s, want %d", blocked, n)
		}
	}
}

func (l *partitionLock) commit(t *testing.T) {
	t.Helper()
	if err := l.tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}
