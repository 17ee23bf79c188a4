package engine

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// tripCounter counts what an engine sends PostgreSQL: round trips (a batch or
// a lone query) and the statements in them.
type tripCounter struct{ trips, statements atomic.Int64 }

type tripCounterInBatch struct{}

// background tells the engine's own loops (the notification listener, the
// coalescing notifier) from the request being measured.
func background(sql string) bool {
	return strings.HasPrefix(sql, "LISTEN") || strings.HasPrefix(sql, "SELECT pg_notify")
}

func (c *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if ctx.Value(tripCounterInBatch{}) == nil && !background(d.SQL) {
		c.trips.Add(1)
		c.statements.Add(1)
	}
	return ctx
}

func (c *tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.trips.Add(1)
	return context.WithValue(ctx, tripCounterInBatch{}, true)
}

func (c *tripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.statements.Add(1)
}

func (c *tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *tripCounter) take() (trips, statements int64) {
	return c.trips.Swap(0), c.statements.Swap(0)
}

// newCountedEngine is an engine whose round trips and statements c counts.
func newCountedEngine(t *testing.T, c *tripCounter) *Engine {
	t.Helper()
	return newCountedEngineOn(t, testDSN, c)
}

// newCountedEngineOn is newCountedEngine on the database of dsn.
func newCountedEngineOn(t *testing.T, dsn string, c *tripCounter) *Engine {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = c
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := New(pool, Config{})
	t.Cleanup(func() { e.Close(); pool.Close() })
	return e
}

// What an ack costs: resolving ids within a leased span adds nothing to the
// common acks (ids unique, deduplication on), one round trip on the broker
// that granted the lease and two elsewhere, and one read of the span where
// neither the lease index nor lanes.txns can place a repeated id. A lease on
// a queue without deduplication is indexed too, so its acks take one trip.
func TestAckRoundTrips(t *testing.T) {
	var granting, other tripCounter
	g, o := newCountedEngine(t, &granting), newCountedEngine(t, &other)
	// Each broker's pool opens its connection first: its set-up is no ack's cost.
	mustAck(t, g)
	mustAck(t, o, AckItem{TransactionID: "none", PartitionID: "00000000-0000-0000-0000-000000000000"})
	costs := func(c *tripCounter, what string, wantTrips, wantStatements int64) {
		t.Helper()
		if trips, statements := c.take(); trips != wantTrips || statements != wantStatements {
			t.Errorf("%s: %d round trips, %d statements; want %d, %d", what, trips, statements, wantTrips, wantStatements)
		}
	}

	q := queueName(t)
	pushN(t, g, q, "p", 4)
	b := mustPop(t, g, PopRequest{Queue: q, Batch: 4})
	granting.take()
	other.take()
	mustAck(t, g, ack(b.Messages[0], "completed"))
	costs(&granting, "indexed ack on the granting broker", 1, 4)
	mustAck(t, o, ack(b.Messages[1], "completed"))
	costs(&other, "ack on another broker", 2, 6)
	mustAck(t, g, ack(b.Messages[2], "failed"))
	costs(&granting, "indexed nack on the granting broker", 2, 5)

	repeated := pushRepeated(t, g)
	granting.take()
	mustAck(t, g, ack(repeated.Messages[0], "completed"))
	costs(&granting, "indexed ack on a queue without deduplication", 1, 4)
	mustAck(t, o, ack(repeated.Messages[2], "completed"))
	costs(&other, "ack of a repeated id on another broker", 3, 7)
}
