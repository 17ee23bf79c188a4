package engine

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestRetentionPassOver100kPartitions measures one pass over 100,000 partitions
// of which 100 hold an expired segment. Opt-in: LANES_RETENTION_BENCH=1.
func TestRetentionPassOver100kPartitions(t *testing.T) {
	if os.Getenv("LANES_RETENTION_BENCH") == "" {
		t.Skip("set LANES_RETENTION_BENCH=1 to measure")
	}
	e := newEngine(t)
	ctx := context.Background()
	q := queueName(t)
	configure(t, e, q, map[string]any{"retentionEnabled": true, "retentionSeconds": 3600})
	blob := appendFrame(nil, &Frame{MessageID: NewMessageID(), TransactionID: "x", Payload: raw(map[string]int{"n": 1})})
	const partitions, expired = 100_000, 100
	start := time.Now()
	if _, err := e.pool.Exec(ctx, `WITH p AS (
			INSERT INTO lanes.partitions (queue_id, name, last_offset, oldest_segment_at, last_write_at)
			SELECT q.id, 'p' || g, 0, CASE WHEN g <= $2 THEN now() - interval '2 hours' ELSE now() END, now()
			FROM lanes.queues q, generate_series(1, $3) g WHERE q.name = $1
			RETURNING id, oldest_segment_at)
		INSERT INTO lanes.segments (partition_id, base_offset, end_offset, created_at, frames)
		SELECT id, 0, 0, oldest_segment_at, $4 FROM p`, q, expired, partitions, blob); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `ANALYZE lanes.partitions`); err != nil {
		t.Fatal(err)
	}
	t.Logf("setup: %d partitions in %v", partitions, time.Since(start))
	for round := 0; round < 5; round++ {
		start = time.Now()
		st := sweep(t, e)
		t.Logf("pass %d: %v — candidates %d, partitions %d, segments %d", round, time.Since(start), st.Candidates, st.Partitions, st.Segments)
		if round == 0 && st.Segments < expired {
			t.Fatalf("deleted %d segments, want at least %d", st.Segments, expired)
		}
	}
	start = time.Now()
	if _, err := e.acquireRetentionLease(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("lease alone: %v", time.Since(start))
	start = time.Now()
	if _, err := e.retentionCandidates(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("candidate query alone: %v", time.Since(start))
	start = time.Now()
	if _, _, err := e.purgeExpiredTxns(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("txns purge step alone: %v", time.Since(start))
	var plan string
	rows, _ := e.pool.Query(ctx, `EXPLAIN SELECT p.id FROM lanes.queues q
		CROSS JOIN LATERAL (SELECT LEAST(NULLIF(q.max_wait_time_seconds, 0),
			CASE WHEN q.retention_enabled THEN NULLIF(q.retention_seconds, 0) END,
			CASE WHEN q.retention_enabled THEN NULLIF(q.completed_retention_seconds, 0) END) AS secs) w
		CROSS JOIN LATERAL (SELECT p.id FROM lanes.partitions p
			WHERE p.queue_id = q.id AND p.oldest_segment_at < now() - make_interval(secs => w.secs)
			ORDER BY p.oldest_segment_at LIMIT 20000) p
		WHERE w.secs IS NOT NULL LIMIT 20000`)
	for rows.Next() {
		_ = rows.Scan(&plan)
		t.Log(plan)
	}
	rows.Close()
	_, _ = e.DeleteQueue(ctx, q)
}
