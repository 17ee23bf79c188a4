package engine

import (
	"context"
	"testing"
	"time"
)

// Benchmarks of the retention sweeper over many partitions (real PostgreSQL):
//
//	cd server && go test ./internal/engine -run '^$' -bench RetentionPass -benchtime 5x
//
// Each reports its first pass (the one that deletes) beside ns/op, the cost
// of each pass after it (ResetTimer drops metrics, so they are reported last).

// BenchmarkRetentionPassOver100kPartitions: 100,000 partitions, 100 of them
// holding an expired segment.
func BenchmarkRetentionPassOver100kPartitions(b *testing.B) {
	e := newEngine(b)
	q := queueName(b)
	configure(b, e, q, map[string]any{"retentionEnabled": true, "retentionSeconds": 3600})
	const partitions, expired = 100_000, 100
	insertOneSegmentPartitions(b, e, q, partitions, expired)
	start := time.Now()
	if st := sweep(b, e); st.Segments < expired {
		b.Fatalf("the first pass deleted %d segments, want at least %d", st.Segments, expired)
	}
	firstPass := time.Since(start)
	b.ResetTimer()
	for b.Loop() {
		if st := sweep(b, e); st.Segments != 0 {
			b.Fatalf("a later pass deleted %d segments", st.Segments)
		}
	}
	b.ReportMetric(float64(firstPass.Microseconds())/1000, "first-pass-ms")
}

// BenchmarkRetentionPassOver20kHeldPartitions: 20,000 partitions whose expired
// head completedRetentionSeconds keeps (no group read them) beside another
// queue with one expired segment, which the first pass must still delete.
func BenchmarkRetentionPassOver20kHeldPartitions(b *testing.B) {
	e := newEngine(b)
	ctx := context.Background()
	held, other := queueName(b), queueName(b)
	configure(b, e, held, map[string]any{"retentionEnabled": true, "completedRetentionSeconds": 1})
	configure(b, e, other, map[string]any{"retentionEnabled": true, "retentionSeconds": 1})
	const partitions = 20_000
	insertOneSegmentPartitions(b, e, held, partitions, partitions)
	pushSegments(b, e, other, "p", "o")
	otherID := partitionOf(b, e, other, "p").id
	if _, err := e.pool.Exec(ctx, `WITH s AS (UPDATE lanes.segments SET created_at = created_at - interval '1 hour'
			WHERE partition_id = $1)
		UPDATE lanes.partitions SET oldest_segment_at = oldest_segment_at - interval '1 hour' WHERE id = $1`, otherID); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	sweep(b, e)
	firstPass := time.Since(start)
	if left := partitionOf(b, e, other, "p").segments; left != 0 {
		b.Fatalf("the other queue's expired segment is still there after the first pass (%d left)", left)
	}
	// As if the recheck delay had passed: every held partition is due again.
	if _, err := e.pool.Exec(ctx, `UPDATE lanes.partitions p SET oldest_segment_at = oldest_segment_at - interval '1 minute'
		FROM lanes.queues q WHERE q.id = p.queue_id AND q.name = $1`, held); err != nil {
		b.Fatal(err)
	}
	start = time.Now()
	if st := sweep(b, e); st.Segments != 0 {
		b.Fatalf("the recheck pass deleted %d held segments", st.Segments)
	}
	recheckPass := time.Since(start)
	b.ResetTimer()
	for b.Loop() {
		sweep(b, e)
	}
	b.ReportMetric(float64(firstPass.Microseconds())/1000, "first-pass-ms")
	b.ReportMetric(float64(recheckPass.Microseconds())/1000, "recheck-pass-ms")
}

// insertOneSegmentPartitions creates n partitions of q with one one-message
// segment each, the first expired of them two hours old, the rest new.
func insertOneSegmentPartitions(b testing.TB, e *Engine, q string, n, expired int) {
	b.Helper()
	ctx := context.Background()
	blob := appendFrame(nil, &Frame{MessageID: NewMessageID(), TransactionID: "x", Payload: raw(map[string]int{"n": 1})})
	if _, err := e.pool.Exec(ctx, `WITH p AS (
			INSERT INTO lanes.partitions (queue_id, name, last_offset, oldest_segment_at, last_write_at)
			SELECT q.id, 'p' || g, 0, CASE WHEN g <= $2 THEN now() - interval '2 hours' ELSE now() END, now()
			FROM lanes.queues q, generate_series(1, $3) g WHERE q.name = $1
			RETURNING id, oldest_segment_at)
		INSERT INTO lanes.segments (partition_id, base_offset, end_offset, created_at, frames)
		SELECT id, 0, 0, oldest_segment_at, $4 FROM p`, q, expired, n, blob); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = e.DeleteQueue(context.Background(), q) })
	if _, err := e.pool.Exec(ctx, `ANALYZE lanes.partitions`); err != nil {
		b.Fatal(err)
	}
}
