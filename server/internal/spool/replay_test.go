package spool

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/lanesmq/lanes/server/internal/engine"
)

// A broker killed mid-drain keeps its drain progress only in memory, so the
// next broker replays the partly drained file from its start. On a queue with
// dedup off the batches stored before the kill were stored again (61,500
// duplicated ids out of 200,000 in the faults audit). Replays now recognize
// their own messages, so every record is stored once.
func TestDrainRunAgainAfterACrashStoresEachRecordOnce(t *testing.T) {
	eng, pool := newEngine(t)
	ctx := context.Background()
	const queue, records, batch = "spool-replayed-after-crash", 250, 100
	if _, err := eng.Configure(ctx, engine.ConfigureRequest{Queue: queue,
		Options: map[string]json.RawMessage{"dedupWindowSeconds": json.RawMessage("0")}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	calls := 0
	// The second batch commits, then the broker "dies" before its drain
	// records any progress on disk.
	crashing := func(ctx context.Context, items []engine.PushItem) ([]engine.PushResult, error) {
		calls++
		res, err := eng.ReplayPush(ctx, items)
		if calls == 2 && err == nil {
			return nil, errors.New("simulated crash after the commit")
		}
		return res, err
	}
	s, err := Open(Options{Dir: dir, Push: crashing, MaxBatch: batch})
	if err != nil {
		t.Fatal(err)
	}
	withIDs := items(queue, "p", 0, records)
	for i := range withIDs {
		withIDs[i].MessageID = engine.NewMessageID() // as the buffered answers gave them
	}
	if err := s.Append(withIDs); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DrainOnce(ctx); err == nil || n != batch {
		t.Fatalf("first drain: %d drained, err %v; want %d and the crash", n, err, batch)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	restarted, err := Open(Options{Dir: dir, Push: eng.ReplayPush, MaxBatch: batch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = restarted.Close() })
	if n, err := restarted.DrainOnce(ctx); err != nil || n != records || restarted.Pending() != 0 {
		t.Fatalf("drain after the restart: %d drained, %d pending, err %v; want all %d", n, restarted.Pending(), err, records)
	}
	var stored, distinct int
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(s.end_offset - s.base_offset + 1), 0),
			(SELECT count(*) FROM lanes.txns t WHERE t.partition_id = p.id)
		FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
		LEFT JOIN lanes.segments s ON s.partition_id = p.id
		WHERE q.name = $1 AND p.name = 'p' GROUP BY p.id`, queue).Scan(&stored, &distinct); err != nil {
		t.Fatal(err)
	}
	if stored != records || distinct != records {
		t.Fatalf("stored %d messages under %d transaction ids; want each of the %d records once", stored, distinct, records)
	}
}
