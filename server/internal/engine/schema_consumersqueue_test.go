package engine

import (
	"testing"

	"github.com/lanesmq/lanes/server/internal/testdb"
)

// 180_consumers_queue_id.sql gives the cursors of a database from before it
// their queue, replaces consumers_group_idx by consumers_group_queue_idx, has
// an older broker's insert (which names no queue) filled in, refuses a cursor
// on a partition that does not exist as the foreign key did, and applied
// again takes no lock on lanes.consumers.
func TestConsumersQueueIDIsBackfilledAndFilledForOlderBrokers(t *testing.T) {
	ctx := t.Context()
	pool := testdb.Pool(t)
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DROP TRIGGER consumers_fill_queue_id ON lanes.consumers;
		DROP INDEX lanes.consumers_group_queue_idx; ALTER TABLE lanes.consumers DROP COLUMN queue_id;
		CREATE INDEX consumers_group_idx ON lanes.consumers (consumer_group); DROP TABLE lanes.schema_applied`); err != nil {
		t.Fatalf("rebuilding the old layout: %v", err)
	}
	// An older broker's cursors: two queues of 50 partitions, two groups.
	const olderBrokersInsert = `INSERT INTO lanes.consumers (partition_id, consumer_group, committed, batch_end)
		SELECT p.id, g, -1, -1 FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id,
			unnest(ARRAY['ga', 'gb']) g WHERE q.name = $1`
	for _, queue := range []string{"qa", "qb"} {
		if _, err := pool.Exec(ctx, `WITH q AS (INSERT INTO lanes.queues (name) VALUES ($1) RETURNING id)
			INSERT INTO lanes.partitions (queue_id, name) SELECT q.id, 'p' || i FROM q, generate_series(1, 50) i`, queue); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, olderBrokersInsert, queue); err != nil {
			t.Fatal(err)
		}
	}
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	var rows, wrong int
	var notNull, newIndex, oldIndex bool
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE c.queue_id IS DISTINCT FROM p.queue_id),
			(SELECT attnotnull FROM pg_attribute WHERE attrelid = 'lanes.consumers'::regclass AND attname = 'queue_id'),
			to_regclass('lanes.consumers_group_queue_idx') IS NOT NULL, to_regclass('lanes.consumers_group_idx') IS NOT NULL
		FROM lanes.consumers c JOIN lanes.partitions p ON p.id = c.partition_id`).Scan(&rows, &wrong, &notNull, &newIndex, &oldIndex); err != nil {
		t.Fatal(err)
	}
	if rows != 200 || wrong != 0 || !notNull || !newIndex || oldIndex {
		t.Fatalf("after the upgrade: %d cursors, %d without their queue, NOT NULL %v, consumers_group_queue_idx %v, consumers_group_idx %v",
			rows, wrong, notNull, newIndex, oldIndex)
	}

	// An older broker still running beside the upgraded schema.
	if _, err := pool.Exec(ctx, `WITH q AS (INSERT INTO lanes.queues (name) VALUES ('qc') RETURNING id)
		INSERT INTO lanes.partitions (queue_id, name) SELECT q.id, 'p1' FROM q`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, olderBrokersInsert, "qc"); err != nil {
		t.Fatalf("an older broker's insert: %v", err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM lanes.consumers c JOIN lanes.partitions p ON p.id = c.partition_id
		JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = 'qc' AND c.queue_id = q.id`).Scan(&rows); err != nil || rows != 2 {
		t.Fatalf("an older broker's cursors on qc that carry its queue: %d %v, want 2", rows, err)
	}
	_, err := pool.Exec(ctx, `INSERT INTO lanes.consumers (partition_id, consumer_group) VALUES (gen_random_uuid(), 'ga')`)
	if !hasSQLState(err, "23503") {
		t.Fatalf("an older broker's cursor on a partition that does not exist: %v, want foreign_key_violation (23503)", err)
	}

	reapplyBesideAWriter(t, pool, "180_consumers_queue_id.sql", `UPDATE lanes.consumers SET committed = committed WHERE false`)
}
