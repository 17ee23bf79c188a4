package engine

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/internal/testdb"
)

// partitionKeyExempt are the lanes tables with a partition_id column that the
// scale-out decision does not ask to be distributable, each with the reason.
// Every other such table is checked by the test below, so a new per-partition
// table is checked unless it is added here with its reason.
var partitionKeyExempt = map[string]string{
	// Written only by the retention sweeper (one broker holds its lease),
	// never by a push, pop or ack, and read by due time across every
	// partition: it can stay a table of the coordinator.
	"txns_expiry": "written by the retention sweeper alone",
}

// The pinned scale-out decision keeps every hot table (segments, the
// transaction index, consumer rows, dead letters) keyed by partition id first,
// so a distributed PostgreSQL could distribute it by that column: Citus needs
// the distribution column in the primary key and in every unique index. So
// each lanes table with a partition_id column must have a primary key that
// starts with it and no unique index without it. lanes.partitions itself is
// the directory of partitions (its id is the partition id) and has no such
// column.
func TestHotTablesAreKeyedByPartitionIDFirst(t *testing.T) {
	ctx := t.Context()
	pool := testdb.Pool(t)
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	tables := perPartitionTables(t, pool)
	for _, hot := range []string{"segments", "txns", "consumers", "partition_writes", "dlq"} {
		if !slices.Contains(tables, hot) {
			t.Errorf("lanes.%s has no partition_id column", hot)
		}
	}
	for _, table := range tables {
		if _, exempt := partitionKeyExempt[table]; exempt {
			continue
		}
		indexes := uniqueIndexes(t, pool, table)
		for _, index := range indexes {
			if index.primary && (len(index.columns) == 0 || index.columns[0] != "partition_id") {
				t.Errorf("lanes.%s: primary key %s is (%s), want partition_id first",
					table, index.name, strings.Join(index.columns, ", "))
			}
			if !slices.Contains(index.columns, "partition_id") {
				t.Errorf("lanes.%s: unique index %s on (%s) lacks partition_id, so the table could not be distributed by it",
					table, index.name, strings.Join(index.columns, ", "))
			}
		}
		if !hasPrimaryKey(indexes) {
			t.Errorf("lanes.%s has no primary key", table)
		}
	}
}

// perPartitionTables are the lanes tables with a partition_id column.
func perPartitionTables(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT c.relname FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_attribute a ON a.attrelid = c.oid
		WHERE n.nspname = 'lanes' AND c.relkind = 'r' AND a.attname = 'partition_id' AND NOT a.attisdropped
		ORDER BY c.relname`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return tables
}

type uniqueIndex struct {
	name    string
	primary bool
	// columns in key order; an expression reads as its text
	columns []string
}

func hasPrimaryKey(indexes []uniqueIndex) bool {
	return slices.ContainsFunc(indexes, func(i uniqueIndex) bool { return i.primary })
}

// uniqueIndexes reads lanes.table's unique indexes, its primary key's included,
// from the catalog.
func uniqueIndexes(t *testing.T, pool *pgxpool.Pool, table string) []uniqueIndex {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT i.indexrelid::regclass::text, i.indisprimary,
			array(SELECT pg_get_indexdef(i.indexrelid, k, true) FROM generate_series(1, i.indnkeyatts) k ORDER BY k)
		FROM pg_index i
		WHERE i.indrelid = ('lanes.' || quote_ident($1))::regclass AND i.indisunique
		ORDER BY 1`, table)
	if err != nil {
		t.Fatal(err)
	}
	var out []uniqueIndex
	for rows.Next() {
		var index uniqueIndex
		if err := rows.Scan(&index.name, &index.primary, &index.columns); err != nil {
			t.Fatal(err)
		}
		out = append(out, index)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// 170_dead_letters_keyed_by_partition.sql rekeys a database whose dead letters
// are keyed by id alone: the rows stay where they are (the table is not
// rewritten), an id alone still finds its row through an index, the
// statements of older brokers (a filing that names no id, a replay by id)
// still work, and applied again beside a writer of lanes.dlq it takes no lock.
func TestDeadLettersKeyedByIDAreRekeyedByPartitionOnUpgrade(t *testing.T) {
	ctx := t.Context()
	pool := testdb.Pool(t)
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	e := New(pool, Config{})
	t.Cleanup(e.Close)
	q := queueName(t)
	mustPush(t, e, items(q, "p", "a", "b")...)
	var popped *PopResult
	for range 2 {
		popped = mustPop(t, e, PopRequest{Queue: q, Batch: 1})
		if len(popped.Messages) != 1 {
			t.Fatalf("pop: %+v", popped.Messages)
		}
		if r := mustAck(t, e, ack(popped.Messages[0], "dlq")); !r[0].DLQ {
			t.Fatalf("dlq ack: %+v", r[0])
		}
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE lanes.dlq DROP CONSTRAINT dlq_pkey;
		DROP INDEX IF EXISTS lanes.dlq_id_idx;
		ALTER TABLE lanes.dlq ADD PRIMARY KEY (id);
		DROP TABLE lanes.schema_applied`); err != nil {
		t.Fatalf("rebuilding the old layout: %v", err)
	}
	deadLetters := func() (rows map[string]string, file uint32) {
		t.Helper()
		got, err := pool.Query(ctx, `SELECT id::text, transaction_id FROM lanes.dlq`)
		if err != nil {
			t.Fatal(err)
		}
		rows = map[string]string{}
		for got.Next() {
			var id, txn string
			if err := got.Scan(&id, &txn); err != nil {
				t.Fatal(err)
			}
			rows[id] = txn
		}
		if err := got.Err(); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `SELECT pg_relation_filenode('lanes.dlq')::int8`).Scan(&file); err != nil {
			t.Fatal(err)
		}
		return rows, file
	}
	rowsBefore, fileBefore := deadLetters()

	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	rowsAfter, fileAfter := deadLetters()
	if !maps.Equal(rowsAfter, rowsBefore) || fileAfter != fileBefore {
		t.Fatalf("dead letters after the upgrade %v in file %d, before %v in file %d: want the same rows, not rewritten",
			rowsAfter, fileAfter, rowsBefore, fileBefore)
	}
	var key []string
	for _, index := range uniqueIndexes(t, pool, "dlq") {
		if index.primary {
			key = index.columns
		}
	}
	if !slices.Equal(key, []string{"partition_id", "id"}) {
		t.Fatalf("lanes.dlq primary key after the upgrade: %v, want (partition_id, id)", key)
	}

	var anyID string
	for id := range rowsAfter {
		anyID = id
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var plan strings.Builder
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	planRows, err := tx.Query(ctx, `EXPLAIN SELECT * FROM lanes.dlq WHERE id = $1`, anyID)
	if err != nil {
		t.Fatal(err)
	}
	for planRows.Next() {
		var line string
		if err := planRows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	_ = tx.Rollback(ctx)
	if !strings.Contains(plan.String(), "dlq_id_idx") {
		t.Fatalf("a dead letter looked up by id alone is not found through dlq_id_idx:\n%s", plan.String())
	}

	// An older broker files a dead letter naming no id, and replays by id.
	var olderID uuid.UUID
	if err := pool.QueryRow(ctx, `INSERT INTO lanes.dlq (partition_id, consumer_group, message_offset, message_id,
			transaction_id, payload, error, retry_count, created_at)
		VALUES ($1, $2, 5, $3, 'older', '{"n": 1}', 'boom', 1, now()) RETURNING id`,
		popped.PartitionID, QueueModeGroup, NewMessageID()).Scan(&olderID); err != nil {
		t.Fatalf("an older broker's filing: %v", err)
	}
	if res, err := e.ReplayDeadLetter(ctx, olderID, ReplayTarget{}); err != nil || res.Outcome != ReplayMoved {
		t.Fatalf("replay of an older broker's dead letter after the upgrade: %+v %v", res, err)
	}
	oldReplay, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = oldReplay.Rollback(ctx) }()
	if _, err := oldReplay.Exec(ctx, `SELECT d.id FROM lanes.dlq d WHERE d.id = $1 FOR UPDATE OF d`, anyID); err != nil {
		t.Fatalf("an older broker's replay, locking by id: %v", err)
	}
	if tag, err := oldReplay.Exec(ctx, `DELETE FROM lanes.dlq WHERE id = $1`, anyID); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("an older broker's replay, deleting by id: %v %v", tag, err)
	}
	if err := oldReplay.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := dlqRows(t, e, popped.PartitionID); n != 1 {
		t.Fatalf("%d dead letters left after replaying two of three, want 1", n)
	}
	reapplyBesideAWriter(t, pool, "170_dead_letters_keyed_by_partition.sql", `UPDATE lanes.dlq SET retry_count = retry_count WHERE false`)
}
