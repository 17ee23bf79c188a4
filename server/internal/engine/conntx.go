package engine

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// connTx runs statements on a pooled connection inside a transaction that is
// begun and committed inside pipelined batches, so push, pop and ack pay a
// couple of round trips instead of one per statement.
type connTx struct {
	conn *pgxpool.Conn
	open bool
	// hotSession: the session holds the hot planner settings (acquireHotTx).
	hotSession bool
}

// acquireTx takes a pooled connection for a transaction begun and committed
// inside pipelined batches, under PostgreSQL's default planner settings; done
// rolls back what an error left open and hands the connection back.
func (e *Engine) acquireTx(ctx context.Context) (tx *connTx, done func(), err error) {
	return e.acquireTxIn(ctx, sessionPlain)
}

// acquireHotTx is acquireTx for a push, pop or ack transaction (beginHot): on
// a pool set up by ConfigurePool its session holds the hot planner settings
// already, so the transaction need not send them.
func (e *Engine) acquireHotTx(ctx context.Context) (tx *connTx, done func(), err error) {
	return e.acquireTxIn(ctx, sessionHot)
}

func (e *Engine) acquireTxIn(ctx context.Context, mode sessionMode) (tx *connTx, done func(), err error) {
	conn, err := e.pool.Acquire(withSessionMode(ctx, mode))
	if err != nil {
		return nil, nil, err
	}
	tx = &connTx{conn: conn, hotSession: mode == sessionHot && e.cfg.PoolWatch != nil}
	return tx, func() { tx.rollbackUnlessDone(); conn.Release() }, nil
}

func (t *connTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.conn.SendBatch(ctx, b)
}

func (t *connTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.conn.Exec(ctx, sql, args...)
}

func (t *connTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.conn.Query(ctx, sql, args...)
}

func (t *connTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.conn.QueryRow(ctx, sql, args...)
}

func (t *connTx) Commit(ctx context.Context) error {
	_, err := t.conn.Exec(ctx, "COMMIT")
	if err == nil {
		t.open = false
	}
	return err
}

// rollbackUnlessDone ends a transaction left open by an error, so the
// connection goes back to the pool idle (the pool would otherwise discard it).
func (t *connTx) rollbackUnlessDone() {
	if t.open || t.conn.Conn().PgConn().TxStatus() != 'I' {
		_, _ = t.conn.Exec(context.Background(), "ROLLBACK")
	}
}

// beginHot opens a push, pop or ack transaction with plans that do not
// depend on statistics (hotPlanSettingList), and says how many statements it
// queued. Every statement of those paths reads by primary key or index through
// per-row probes (LATERAL subqueries, ANY, TID), so:
//   - one generic plan serves every call (PostgreSQL's default re-plans per
//     execution whenever it estimates a custom plan cheaper; planning the claim
//     costs ~1.2 ms against ~0.5 ms to run it);
//   - sequential scans and hash and merge joins are ruled out: a plan built
//     while a table is empty (or ANALYZEd empty) would otherwise scan it, and a
//     generic plan stays cached on its connection while the table grows;
//   - no bitmap scans: a bitmap scan returns its rows in page order, so the
//     claim's walk of partition_writes in write order (an index range cut
//     short by LIMIT) became "fetch every partition written since the floor,
//     sort, keep 16" whenever the generic plan estimated the range small;
//   - no memoize: every probe has a key of its own, so its cache only misses
//     (on the claim it made each cursor probe ~10× slower at 100,000 partitions);
//   - no JIT: a generic plan cannot see how selective the claim floor is, and
//     its cost estimate on a queue with many partitions triggers ~100 ms of
//     JIT compilation for a sub-millisecond query.
//
// A session that holds them already (acquireHotTx) gets a bare BEGIN.
func (t *connTx) beginHot(b *pgx.Batch) int {
	b.Queue("BEGIN")
	if t.hotSession {
		return 1
	}
	b.Queue(hotPlanSettings)
	return 2
}

// beginHotNoFlushWait is beginHot for a transaction whose commit need not wait
// for the WAL flush (synchronous_commit off): one a database crash may undo
// because at-least-once allows it (a leased pop's, a plain ack's).
func (t *connTx) beginHotNoFlushWait(b *pgx.Batch) {
	b.Queue("BEGIN")
	if t.hotSession {
		b.Queue("SET LOCAL synchronous_commit = off")
		return
	}
	b.Queue(hotPlanSettings + `, set_config('synchronous_commit', 'off', true)`)
}

// syncCommitOn makes the transaction's commit wait for the WAL flush again.
const syncCommitOn = "SELECT set_config('synchronous_commit', 'on', true)"

// dbtx is what the pop helpers need from a transaction.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// batchTx is what the kv and timer riders need from a transaction: a
// pipelined connTx (transaction bundles) or a pgx.Tx.
type batchTx interface {
	dbtx
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}
