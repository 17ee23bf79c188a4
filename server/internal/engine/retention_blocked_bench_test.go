package engine

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestRetentionPassOver20kBlockedPartitions measures passes over 20,000
// partitions whose expired head the completed rule cannot delete (no group),
// next to another queue holding one expired segment. Opt-in:
// LANES_RETENTION_BENCH=1.
func TestRetentionPassOver20kBlockedPartitions(t *testing.T) {
	if os.Getenv("LANES_RETENTION_BENCH") == "" {
		t.Skip("set LANES_RETENTION_BENCH=1 to measure")
	}
	e := newEngine(t)
	ctx := context.Background()
	blocked, other := queueName(t), queueName(t)
	configure(t, e, blocked, map[string]any{"retentionEnabled": true, "completedRetentionSeconds": 1})
	configure(t, e, other, map[string]any{"retentionEnabled": true, "retentionSeconds": 1})
	blob := appendFrame(nil, &Frame{MessageID: NewMessageID(), TransactionID: "x", Payload: raw(map[string]int{"n": 1})})
	const partitions = 20_000
	start := time.Now()
	if _, err := e.pool.Exec(ctx, `WITH p AS (
			INSERT INTO lanes.partitions (queue_id, name, last_offset, oldest_segment_at, last_write_at)
			SELECT q.id, 'p' || g, 0, now() - interval '2 hours', now()
			FROM lanes.queues q, generate_series(1, $2) g WHERE q.name = $1
			RETURNING id, oldest_segment_at)
		INSERT INTO lanes.segments (partition_id, base_offset, end_offset, created_at, frames)
		SELECT id, 0, 0, oldest_segment_at, $3 FROM p`, blocked, partitions, blob); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.DeleteQueue(context.Background(), blocked) })
	pushSegments(t, e, other, "p", "o")
	// The other queue's segment is an hour old.
	otherID := partitionOf(t, e, other, "p").id
	if _, err := e.pool.Exec(ctx, `UPDATE lanes.segments SET created_at = created_at - interval '1 hour'
		WHERE partition_id = $1`, otherID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE lanes.partitions SET oldest_segment_at = oldest_segment_at - interval '1 hour'
		WHERE id = $1`, otherID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `ANALYZE lanes.partitions`); err != nil {
		t.Fatal(err)
	}
	t.Logf("setup: %d blocked partitions in %v", partitions, time.Since(start))
	pass := func(label string) {
		start := time.Now()
		st := sweep(t, e)
		t.Logf("%s: %v — candidates %d, partitions %d, segments %d, other queue's segments left %d",
			label, time.Since(start), st.Candidates, st.Partitions, st.Segments, partitionOf(t, e, other, "p").segments)
	}
	for round := range 4 {
		pass(fmt.Sprintf("pass %d", round))
	}
	// As if retentionRecheckDelay had passed: every held partition is due again.
	if _, err := e.pool.Exec(ctx, `UPDATE lanes.partitions p SET oldest_segment_at = oldest_segment_at - interval '1 minute'
		FROM lanes.queues q WHERE q.id = p.queue_id AND q.name = $1`, blocked); err != nil {
		t.Fatal(err)
	}
	pass("pass after the recheck delay")
	pass("the pass after it")
}
