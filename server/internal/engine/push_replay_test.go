package engine

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
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
