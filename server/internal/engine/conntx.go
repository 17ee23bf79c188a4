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

// beginHot opens a push, pop or ack transaction. Their statements are shaped
// so that one generic plan serves every call (per-row index probes through
// LATERAL and unnest), and PostgreSQL's default would otherwise re-plan them
// per execution whenever it estimates a custom plan cheaper: planning the
// claim statement costs ~1.2 ms against ~0.5 ms to run it.
func beginHot(b *pgx.Batch) {
	b.Queue("BEGIN")
	b.Queue("SET LOCAL plan_cache_mode = force_generic_plan")
}

// dbtx is what the pop helpers need from a transaction.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
