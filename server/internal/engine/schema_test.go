package engine

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/internal/testdb"
)

// A push moves last_offset and last_write_at on the partition row. While an
// index covered a column a push writes (the last-write xid lived there once),
// every push wrote a new row version with an entry in each of the table's
// indexes; now the update must stay in place (HOT). Stats reach
// pg_stat_user_tables when the backends that did the updates exit.
func TestPushUpdatesThePartitionRowInPlace(t *testing.T) {
	ctx := t.Context()
	pool := testdb.Pool(t)
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	cfg := pool.Config()
	writerPool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := New(writerPool, Config{})
	q := queueName(t)
	const pushes = 20
	for i := 0; i < pushes; i++ {
		mustPush(t, e, PushItem{Queue: q, Partition: "p", TransactionID: fmt.Sprint(i), Payload: raw(i)})
	}
	e.Close()
	writerPool.Close()
	var drifted int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM lanes.partitions p JOIN lanes.partition_writes w ON w.partition_id = p.id
		WHERE w.last_offset <> p.last_offset OR w.last_write_at IS DISTINCT FROM p.last_write_at OR w.last_offset <> $1`, pushes-1).Scan(&drifted); err != nil || drifted != 0 {
		t.Fatalf("%d partition_writes rows disagree with their partition after %d pushes (%v)", drifted, pushes, err)
	}

	var updates, hot int64
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
			WHERE relid = 'lanes.partitions'::regclass`).Scan(&updates, &hot); err != nil {
			t.Fatal(err)
		}
		if updates >= pushes || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if updates < pushes {
		t.Fatalf("statistics show %d partition updates after %d pushes", updates, pushes)
	}
	// A HOT update needs room on the row's page; fillfactor 70 leaves it, and a
	// page is pruned before it fills, so all but a few stay in place.
	if hot < updates-2 {
		t.Fatalf("%d of %d partition updates were in place (HOT)", hot, updates)
	}
}

// Databases created before lanes.partition_writes kept the last-write xid on
// the partition row (indexed, stamped by a trigger) and a foreign key on
// segments. Applying the schema moves the xids over, drops the old column,
// trigger and key, and the backlog stays claimable.
func TestSchemaUpgradeMovesLastWriteXidsToPartitionWrites(t *testing.T) {
	ctx := t.Context()
	pool := testdb.Pool(t)
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	e := New(pool, Config{})
	t.Cleanup(e.Close)
	q := queueName(t)
	mustPush(t, e, PushItem{Queue: q, Partition: "a", TransactionID: "a1", Payload: raw(1)},
		PushItem{Queue: q, Partition: "b", TransactionID: "b1", Payload: raw(2)},
		PushItem{Queue: q, Partition: "b", TransactionID: "b2", Payload: raw(3)})

	var before map[string]string
	readXids := func() map[string]string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT partition_id::text, last_write_xid::text || '/' || last_offset FROM lanes.partition_writes`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var id, xid string
			if err := rows.Scan(&id, &xid); err != nil {
				t.Fatal(err)
			}
			out[id] = xid
		}
		return out
	}
	before = readXids()
	if len(before) != 2 {
		t.Fatalf("partition_writes rows after pushing to two partitions: %v", before)
	}
	if _, err := pool.Exec(ctx, `
		ALTER TABLE lanes.partitions ADD COLUMN last_write_xid xid8 NOT NULL DEFAULT '0';
		UPDATE lanes.partitions p SET last_write_xid = w.last_write_xid FROM lanes.partition_writes w WHERE w.partition_id = p.id;
		CREATE INDEX partitions_queue_write_xid_idx ON lanes.partitions (queue_id, last_write_xid);
		CREATE FUNCTION lanes.stamp_partition_write() RETURNS trigger LANGUAGE plpgsql AS
			$$ BEGIN NEW.last_write_xid := pg_current_xact_id(); RETURN NEW; END $$;
		CREATE TRIGGER partitions_stamp_write BEFORE UPDATE OF last_offset ON lanes.partitions
			FOR EACH ROW EXECUTE FUNCTION lanes.stamp_partition_write();
		DROP TRIGGER partitions_track_insert ON lanes.partitions;
		DELETE FROM lanes.partition_writes;
		ALTER TABLE lanes.segments ADD CONSTRAINT segments_partition_id_fkey
			FOREIGN KEY (partition_id) REFERENCES lanes.partitions (id) ON DELETE CASCADE;
		DROP TABLE lanes.schema_applied`); err != nil {
		t.Fatalf("rebuilding the old layout: %v", err)
	}

	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	after := readXids()
	if len(after) != len(before) {
		t.Fatalf("partition_writes after the upgrade: %v, before: %v", after, before)
	}
	for id, xid := range before {
		if after[id] != xid {
			t.Errorf("partition %s: last_write_xid/last_offset %s after the upgrade, %s before", id, after[id], xid)
		}
	}
	var leftovers int
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM information_schema.columns WHERE table_schema = 'lanes' AND table_name = 'partitions' AND column_name = 'last_write_xid')
		+ (SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'partitions_stamp_%')
		+ (SELECT count(*) FROM pg_constraint WHERE conname = 'segments_partition_id_fkey')`).Scan(&leftovers); err != nil {
		t.Fatal(err)
	}
	if leftovers != 0 {
		t.Fatalf("%d pieces of the old layout survived the upgrade", leftovers)
	}

	upgraded := New(pool, Config{})
	t.Cleanup(upgraded.Close)
	got := mustPop(t, upgraded, PopRequest{Queue: q, Batch: 10, Partitions: 2, AutoAck: true})
	if len(got.Messages) != 3 {
		t.Fatalf("after the upgrade a pop found %d of 3 messages", len(got.Messages))
	}
	mustPush(t, upgraded, PushItem{Queue: q, Partition: "c", TransactionID: "c1", Payload: raw(4)})
	if got := mustPop(t, upgraded, PopRequest{Queue: q, Batch: 10, AutoAck: true}); len(got.Messages) != 1 {
		t.Fatalf("a partition created after the upgrade: pop found %d of 1 messages", len(got.Messages))
	}
}

// Segments are compressed with lz4 where the server has it (pglz took several
// times the CPU per 100-message segment on push and pop).
func TestSegmentFramesAreCompressedWithLZ4(t *testing.T) {
	e := newEngine(t)
	ctx := t.Context()
	probe, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = probe.Exec(ctx, `SET LOCAL default_toast_compression = 'lz4'`)
	_ = probe.Rollback(ctx)
	if err != nil {
		t.Skipf("this PostgreSQL has no lz4: %v", err)
	}
	q := queueName(t)
	batch := make([]PushItem, 100)
	for i := range batch {
		batch[i] = PushItem{Queue: q, TransactionID: fmt.Sprint(i), Payload: raw(map[string]any{"seq": i, "body": "lorem ipsum dolor sit amet, consectetur adipiscing elit"})}
	}
	mustPush(t, e, batch...)
	var method string
	if err := e.pool.QueryRow(ctx, `SELECT coalesce(pg_column_compression(s.frames), 'none') FROM lanes.segments s
		JOIN lanes.partitions p ON p.id = s.partition_id JOIN lanes.queues q ON q.id = p.queue_id
		WHERE q.name = $1`, q).Scan(&method); err != nil {
		t.Fatal(err)
	}
	if method != "lz4" {
		t.Fatalf("a 100-message segment is stored with compression %q, want lz4", method)
	}
}

// Every broker applies the schema at boot, and DDL waits for table locks even
// when it changes nothing (CREATE INDEX IF NOT EXISTS needs a share lock, which
// an open push or ack holds off, and every later writer then queues behind
// it). A boot that finds its files' digest recorded applies nothing: it
// completes beside open readers and writers of the hot tables.
func TestApplyingTheSchemaAgainWaitsForNoTableLock(t *testing.T) {
	e := newEngine(t)
	ctx := t.Context()
	q := queueName(t)
	mustPush(t, e, PushItem{Queue: q, TransactionID: "a", Payload: raw(1)})
	popped := mustPop(t, e, PopRequest{Queue: q, Batch: 1})
	if len(popped.Messages) != 1 {
		t.Fatalf("pop: %+v", popped)
	}
	open, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = open.Rollback(ctx) }()
	if _, err := open.Exec(ctx, `SELECT count(*) FROM lanes.segments`); err != nil {
		t.Fatal(err)
	}
	for _, write := range []string{
		`UPDATE lanes.partitions SET last_write_at = last_write_at WHERE id = $1`,
		`UPDATE lanes.partition_writes SET last_write_at = last_write_at WHERE partition_id = $1`,
		`UPDATE lanes.consumers SET committed = committed WHERE partition_id = $1`,
		`UPDATE lanes.txns SET created_at = created_at WHERE partition_id = $1`,
		`UPDATE lanes.segments SET created_at = created_at WHERE partition_id = $1`,
	} {
		if _, err := open.Exec(ctx, write, popped.Messages[0].PartitionID); err != nil {
			t.Fatalf("%s: %v", write, err)
		}
	}
	applyCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := ApplySchema(applyCtx, e.pool); err != nil {
		t.Fatalf("applying the schema beside open writers of the hot tables: %v", err)
	}
}

// A recorded digest that differs from the files' at the same version (a file
// edited) applies them again; the same digest applies nothing, even what a
// file would restore.
func TestSchemaIsReappliedOnlyWhenItsFilesChange(t *testing.T) {
	ctx := t.Context()
	pool := testdb.Pool(t)
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	indexExists := func() bool { return consumersGroupIndexExists(t, pool) }
	if _, err := pool.Exec(ctx, `DROP INDEX lanes.consumers_group_queue_idx`); err != nil {
		t.Fatal(err)
	}
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if indexExists() {
		t.Fatal("the schema was applied again although its files had not changed")
	}
	if _, err := pool.Exec(ctx, `UPDATE lanes.schema_applied SET digest = 'edited files', version_digest = 'edited files'`); err != nil {
		t.Fatal(err)
	}
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if !indexExists() {
		t.Fatal("a changed digest did not apply the schema files")
	}
}

// Transaction ids compare byte by byte (COLLATE "C") in txns and dlq, and a
// database whose columns still have the default collation gets them
// converted: dedup probes and acks by transaction id work across the change.
func TestTransactionIdColumnsAreConvertedToByteOrder(t *testing.T) {
	ctx := t.Context()
	pool := testdb.Pool(t)
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	collations := func() map[string]string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT c.relname, coll.collname FROM pg_attribute a
			JOIN pg_class c ON c.oid = a.attrelid JOIN pg_collation coll ON coll.oid = a.attcollation
			WHERE c.relnamespace = 'lanes'::regnamespace AND c.relname IN ('txns', 'dlq') AND a.attname = 'transaction_id'`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var table, collation string
			if err := rows.Scan(&table, &collation); err != nil {
				t.Fatal(err)
			}
			out[table] = collation
		}
		return out
	}
	if got := collations(); got["txns"] != "C" || got["dlq"] != "C" {
		t.Fatalf("transaction_id collations of a new database: %v", got)
	}

	e := New(pool, Config{})
	t.Cleanup(e.Close)
	q := queueName(t)
	mustPush(t, e, PushItem{Queue: q, Partition: "p", TransactionID: "Order-2", Payload: raw(1)},
		PushItem{Queue: q, Partition: "p", TransactionID: "order-10", Payload: raw(2)})
	if _, err := pool.Exec(ctx, `
		ALTER TABLE lanes.txns ALTER COLUMN transaction_id TYPE text COLLATE "default";
		ALTER TABLE lanes.dlq ALTER COLUMN transaction_id TYPE text COLLATE "default";
		DROP TABLE lanes.schema_applied`); err != nil {
		t.Fatalf("rebuilding the old columns: %v", err)
	}
	if got := collations(); got["txns"] != "default" || got["dlq"] != "default" {
		t.Fatalf("transaction_id collations of the old layout: %v", got)
	}
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	if got := collations(); got["txns"] != "C" || got["dlq"] != "C" {
		t.Fatalf("transaction_id collations after the upgrade: %v", got)
	}

	upgraded := New(pool, Config{})
	t.Cleanup(upgraded.Close)
	again := mustPush(t, upgraded, PushItem{Queue: q, Partition: "p", TransactionID: "Order-2", Payload: raw(1)},
		PushItem{Queue: q, Partition: "p", TransactionID: "order-2", Payload: raw(3)})
	if again[0].Status != PushDuplicate || again[1].Status != PushQueued {
		t.Fatalf("after the upgrade: Order-2 answered %s (want duplicate), order-2 answered %s (want queued)", again[0].Status, again[1].Status)
	}
	got := mustPop(t, upgraded, PopRequest{Queue: q, Batch: 10})
	if ids := txnIDs(got.Messages); len(ids) != 3 {
		t.Fatalf("pop after the upgrade: %v, want Order-2, order-10, order-2", ids)
	}
	acked := mustAck(t, upgraded, AckItem{TransactionID: "order-10", PartitionID: got.Messages[1].PartitionID.String(), Status: "completed", LeaseID: got.LeaseID})
	if !acked[0].Success {
		t.Fatalf("ack by transaction id after the upgrade: %+v", acked[0])
	}
}

// Partitions get UUIDv7 ids: partitions created later sort after earlier ones,
// so a burst of new partitions shares index pages (080_time_ordered_partition_ids.sql).
// A database from before that file gets the new default at its next boot.
func TestPartitionIdsAreVersion7AndFollowCreationTime(t *testing.T) {
	ctx := t.Context()
	e := newEngine(t)
	if _, err := e.pool.Exec(ctx, `ALTER TABLE lanes.partitions ALTER COLUMN id SET DEFAULT gen_random_uuid();
		DROP TABLE lanes.schema_applied`); err != nil {
		t.Fatalf("restoring the old default: %v", err)
	}
	if err := ApplySchema(ctx, e.pool); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	q := queueName(t)
	var ids []uuid.UUID
	for i := range 3 {
		before := time.Now().UnixMilli()
		name := fmt.Sprintf("p%d", i)
		mustPush(t, e, PushItem{Queue: q, Partition: name, Payload: raw(i)})
		after := time.Now().UnixMilli()
		var id uuid.UUID
		if err := e.pool.QueryRow(ctx, `SELECT p.id FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
			WHERE q.name = $1 AND p.name = $2`, q, name).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if id.Version() != 7 || id.Variant() != uuid.RFC4122 {
			t.Fatalf("partition %s: id %s is version %d variant %v, want 7 RFC4122", name, id, id.Version(), id.Variant())
		}
		var ms int64
		for _, b := range id[:6] {
			ms = ms<<8 | int64(b)
		}
		if ms < before || ms > after {
			t.Fatalf("partition %s: id %s carries %d ms, want within [%d, %d]", name, id, ms, before, after)
		}
		ids = append(ids, id)
		time.Sleep(2 * time.Millisecond)
	}
	for i := 1; i < len(ids); i++ {
		if bytes.Compare(ids[i-1][:], ids[i][:]) >= 0 {
			t.Fatalf("ids %v do not follow creation order", ids)
		}
	}
}

// 100_timer_producer_sub.sql adds timers.producer_sub to a database from before
// it, and on a database that has the column it takes no lock on lanes.timers
// (the firing loop and every schedule write it). A timer scheduled with a
// subject keeps it until it fires, and the fired message carries it.
func TestTimerProducerSubColumnIsAddedOnceAndCarriedToTheFiredMessage(t *testing.T) {
	ctx := t.Context()
	pool := testdb.Pool(t)
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE lanes.timers DROP COLUMN producer_sub; DROP TABLE lanes.schema_applied`); err != nil {
		t.Fatalf("rebuilding the old layout: %v", err)
	}
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatalf("upgrade: %v", err)
	}

	reapplyBesideAWriter(t, pool, "100_timer_producer_sub.sql", `UPDATE lanes.timers SET attempts = attempts WHERE false`)

	e := New(pool, Config{})
	t.Cleanup(e.Close)
	q := queueName(t)
	if _, err := e.ScheduleTimers(ctx, []TimerOp{
		{Op: TimerSchedule, Queue: q, TimerKey: "signed", ProducerSub: "scheduler-1", Payload: raw(1)},
		{Op: TimerSchedule, Queue: q, TimerKey: "anonymous", Payload: raw(2)},
	}); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"signed": "scheduler-1", "anonymous": ""} {
		tm, err := e.GetTimer(ctx, q, key)
		if err != nil || tm == nil || tm.ProducerSub != want {
			t.Fatalf("timer %s: %+v %v, want producerSub %q", key, tm, err, want)
		}
	}
	if n, err := e.FireDueTimers(ctx); err != nil || n != 2 {
		t.Fatalf("fire: %d %v", n, err)
	}
	got := map[string]string{}
	for _, m := range mustPop(t, e, PopRequest{Queue: q, Batch: 10}).Messages {
		got[string(m.Data)] = m.ProducerSub
	}
	if len(got) != 2 || got["1"] != "scheduler-1" || got["2"] != "" {
		t.Fatalf("fired messages' producerSub by payload: %v", got)
	}
}

// reapplyBesideAWriter applies the embedded schema file again while another
// transaction holds a write lock taken by writer: a file that checks the
// catalog before its ALTER must not wait for that lock.
func reapplyBesideAWriter(t *testing.T, pool *pgxpool.Pool, name, writer string) {
	t.Helper()
	ctx := t.Context()
	files, _, _, err := schemaSources()
	if err != nil {
		t.Fatal(err)
	}
	var file string
	for _, f := range files {
		if f.name == name {
			file = f.sql
		}
	}
	if file == "" {
		t.Fatalf("%s is not embedded", name)
	}
	open, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = open.Rollback(ctx) }()
	if _, err := open.Exec(ctx, writer); err != nil {
		t.Fatal(err)
	}
	applyCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := pool.Exec(applyCtx, file); err != nil {
		t.Fatalf("applying %s again beside an open writer (%s): %v", name, writer, err)
	}
}

// 110_dead_letter_producer_sub.sql adds dlq.producer_sub to a database from
// before it, and on a database that has it takes no lock on lanes.dlq.
func TestDeadLetterProducerSubColumnIsAddedOnce(t *testing.T) {
	ctx := t.Context()
	pool := testdb.Pool(t)
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE lanes.dlq DROP COLUMN producer_sub; DROP TABLE lanes.schema_applied`); err != nil {
		t.Fatalf("rebuilding the old layout: %v", err)
	}
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	var has bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'lanes.dlq'::regclass
		AND attname = 'producer_sub' AND NOT attisdropped)`).Scan(&has); err != nil || !has {
		t.Fatalf("lanes.dlq.producer_sub after the upgrade: %v %v", has, err)
	}
	reapplyBesideAWriter(t, pool, "110_dead_letter_producer_sub.sql", `UPDATE lanes.dlq SET retry_count = retry_count WHERE false`)
}

// 150_first_contact_snapshots.sql adds lanes.queues.created_xid and
// lanes.discovery_subscriptions.first_contact_snapshot to a database from
// before it without touching the rows there (NULL: they decide by time, as
// before), stamps every later insert, a broker's that names neither column
// too, and applied again takes no lock on either table.
func TestFirstContactColumnsAreAddedOnceAndStampEveryInsert(t *testing.T) {
	ctx := t.Context()
	pool := testdb.Pool(t)
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	const (
		insertQueue = `INSERT INTO lanes.queues (name, namespace, task) VALUES ($1, 'ns', 't')`
		insertScope = `INSERT INTO lanes.discovery_subscriptions (consumer_group, namespace, task, subscription_mode, subscription_timestamp)
			VALUES ($1, 'ns', '', 'new', now())`
	)
	if _, err := pool.Exec(ctx, `ALTER TABLE lanes.queues DROP COLUMN created_xid;
		ALTER TABLE lanes.discovery_subscriptions DROP COLUMN first_contact_snapshot; DROP TABLE lanes.schema_applied`); err != nil {
		t.Fatalf("rebuilding the old layout: %v", err)
	}
	for _, stmt := range []string{insertQueue, insertScope} {
		if _, err := pool.Exec(ctx, stmt, "before"); err != nil {
			t.Fatal(err)
		}
	}
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, stmt := range []string{insertQueue, insertScope} {
		if _, err := tx.Exec(ctx, stmt, "after"); err != nil {
			t.Fatal(err)
		}
	}
	var inserter string
	if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&inserter); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT q.name, coalesce(q.created_xid::text, ''), ds.first_contact_snapshot IS NOT NULL
		FROM lanes.queues q JOIN lanes.discovery_subscriptions ds ON ds.consumer_group = q.name ORDER BY q.name`)
	if err != nil {
		t.Fatal(err)
	}
	type stamps struct {
		creator  string
		snapshot bool
	}
	got := map[string]stamps{}
	for rows.Next() {
		var name string
		var s stamps
		if err := rows.Scan(&name, &s.creator, &s.snapshot); err != nil {
			t.Fatal(err)
		}
		got[name] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := map[string]stamps{"before": {}, "after": {inserter, true}}; !maps.Equal(got, want) {
		t.Fatalf("stamps by row: %+v, want %+v (rows from before the file unstamped, later inserts stamped)", got, want)
	}
	reapplyBesideAWriter(t, pool, "150_first_contact_snapshots.sql", `UPDATE lanes.queues SET updated_at = updated_at WHERE false`)
	reapplyBesideAWriter(t, pool, "150_first_contact_snapshots.sql",
		`UPDATE lanes.discovery_subscriptions SET created_at = created_at WHERE false`)
}

// 160_partition_created_xid.sql adds lanes.partitions.created_xid to a
// database from before it without touching the rows there (NULL: they decide by
// time, as before), stamps every later insert, a broker's that does not name the
// column too, and applied again takes no lock on the table.
func TestPartitionCreatedXIDIsAddedOnceAndStampsEveryInsert(t *testing.T) {
	ctx := t.Context()
	pool := testdb.Pool(t)
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	const insertPartition = `INSERT INTO lanes.partitions (queue_id, name) SELECT id, $1 FROM lanes.queues WHERE name = 'q'`
	if _, err := pool.Exec(ctx, `INSERT INTO lanes.queues (name, namespace, task) VALUES ('q', '', '')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE lanes.partitions DROP COLUMN created_xid; DROP TABLE lanes.schema_applied`); err != nil {
		t.Fatalf("rebuilding the old layout: %v", err)
	}
	if _, err := pool.Exec(ctx, insertPartition, "before"); err != nil {
		t.Fatal(err)
	}
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, insertPartition, "after"); err != nil {
		t.Fatal(err)
	}
	var inserter string
	if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&inserter); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	rows, err := pool.Query(ctx, `SELECT name, coalesce(created_xid::text, '') FROM lanes.partitions`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, creator string
		if err := rows.Scan(&name, &creator); err != nil {
			t.Fatal(err)
		}
		got[name] = creator
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"before": "", "after": inserter}; !maps.Equal(got, want) {
		t.Fatalf("creators by partition: %v, want %v (rows from before the file unstamped, later inserts stamped)", got, want)
	}
	reapplyBesideAWriter(t, pool, "160_partition_created_xid.sql", `UPDATE lanes.partitions SET last_offset = last_offset WHERE false`)
}

// 050_retention.sql and 040_groups.sql check the catalog before their ALTERs
// of lanes.partitions and lanes.consumer_groups: applied again (a boot of
// another version), they do not wait for an open reader of those tables, and
// so do not hold back the pushes and pops queued behind such a wait.
func TestRetentionAndGroupColumnsAreReappliedBesideAReader(t *testing.T) {
	ctx := t.Context()
	pool := testdb.Pool(t)
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	reapplyBesideAWriter(t, pool, "050_retention.sql", `SELECT count(*) FROM lanes.partitions`)
	reapplyBesideAWriter(t, pool, "040_groups.sql", `SELECT count(*) FROM lanes.consumer_groups`)
	var column, def string
	if err := pool.QueryRow(ctx, `SELECT a.attname, pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute a
		JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = 'lanes.partitions'::regclass AND a.attname = 'oldest_segment_at'`).Scan(&column, &def); err != nil || def != "now()" {
		t.Fatalf("lanes.partitions.oldest_segment_at default %q (%v), want now()", def, err)
	}
}

// schemaRecord reads the recorded digest and version.
func schemaRecord(t *testing.T, pool *pgxpool.Pool) (digest string, version int) {
	t.Helper()
	if err := pool.QueryRow(t.Context(), `SELECT digest, version FROM lanes.schema_applied`).Scan(&digest, &version); err != nil {
		t.Fatal(err)
	}
	return digest, version
}

// In a mixed fleet a broker whose files are older than the recorded version
// (a later version applied its schema, which holds the older one) applies
// nothing and leaves the record alone; one of a later version applies its
// files. A record whose digest an older broker (one from before the version
// was recorded) rewrote still counts for the version it names.
func TestABrokerOlderThanTheRecordedSchemaAppliesNothing(t *testing.T) {
	ctx := t.Context()
	pool := testdb.Pool(t)
	first, err := ApplySchemaOutcome(ctx, pool)
	if err != nil || !first.Applied || first.Version != 180 {
		t.Fatalf("first boot: %+v %v, want the files applied at version 180", first, err)
	}
	digest, version := schemaRecord(t, pool)
	dropIndex := func() {
		t.Helper()
		if _, err := pool.Exec(ctx, `DROP INDEX lanes.consumers_group_queue_idx`); err != nil {
			t.Fatal(err)
		}
	}
	indexExists := func() bool { return consumersGroupIndexExists(t, pool) }

	dropIndex()
	if _, err := pool.Exec(ctx, `UPDATE lanes.schema_applied SET digest = 'a later version', version = $1,
		version_digest = 'a later version'`, version+10); err != nil {
		t.Fatal(err)
	}
	got, err := ApplySchemaOutcome(ctx, pool)
	if err != nil || got.Applied || !got.Newer() || got.Recorded != version+10 {
		t.Fatalf("boot beside a later version's schema: %+v %v, want nothing applied", got, err)
	}
	if indexExists() {
		t.Fatal("a broker older than the recorded schema applied its files")
	}
	if d, v := schemaRecord(t, pool); d != "a later version" || v != version+10 {
		t.Fatalf("the record became %q version %d; the later version's must stay", d, v)
	}

	if _, err := pool.Exec(ctx, `UPDATE lanes.schema_applied SET digest = 'an older broker', version = $1,
		version_digest = $2`, version, digest); err != nil {
		t.Fatal(err)
	}
	if got, err := ApplySchemaOutcome(ctx, pool); err != nil || got.Applied {
		t.Fatalf("boot after an older broker rewrote the digest: %+v %v, want nothing applied", got, err)
	}

	if _, err := pool.Exec(ctx, `UPDATE lanes.schema_applied SET digest = 'an earlier version', version = $1,
		version_digest = 'an earlier version'`, version-10); err != nil {
		t.Fatal(err)
	}
	if got, err := ApplySchemaOutcome(ctx, pool); err != nil || !got.Applied {
		t.Fatalf("boot over an earlier version's schema: %+v %v, want the files applied", got, err)
	}
	if !indexExists() {
		t.Fatal("a later version's files were not applied")
	}
	if d, v := schemaRecord(t, pool); d != digest || v != version {
		t.Fatalf("the record is %q version %d after the upgrade, want %q version %d", d, v, digest, version)
	}
}

// A schema statement that waits for a table lock gives up after a short
// lock_timeout and runs again later, so the requests queued behind its wait
// (here a write of lanes.consumers behind CREATE INDEX, which waits for an open
// writer) go through meanwhile instead of waiting for as long as that writer.
func TestApplyingTheSchemaGivesWayToRequestsQueuedBehindItsLockWait(t *testing.T) {
	ctx := t.Context()
	pool := testdb.Pool(t)
	if err := ApplySchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DROP INDEX lanes.consumers_group_queue_idx; UPDATE lanes.schema_applied SET digest = 'an earlier version', version = 0`); err != nil {
		t.Fatal(err)
	}
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	const write = `UPDATE lanes.consumers SET committed = committed WHERE false`
	if _, err := holder.Exec(ctx, write); err != nil {
		t.Fatal(err)
	}
	applied := make(chan error, 1)
	go func() {
		applyCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		applied <- ApplySchema(applyCtx, pool)
	}()
	time.Sleep(200 * time.Millisecond) // the apply waits for the holder's lock
	writeCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := pool.Exec(writeCtx, write); err != nil {
		t.Fatalf("a write of lanes.consumers queued behind the schema's lock wait: %v after %v", err, time.Since(start))
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-applied; err != nil {
		t.Fatalf("the schema was not applied once the lock was free: %v", err)
	}
	var ok bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('lanes.consumers_group_queue_idx') IS NOT NULL`).Scan(&ok); err != nil || !ok {
		t.Fatalf("consumers_group_queue_idx after the apply: %v %v", ok, err)
	}
}

// consumersGroupIndexExists reports whether lanes.consumers_group_queue_idx, which
// the schema tests drop to see whether a boot applies the files again, exists.
func consumersGroupIndexExists(t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(), `SELECT to_regclass('lanes.consumers_group_queue_idx') IS NOT NULL`).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}
