package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pageStatementTracer runs then once, when the first statement that reads a
// queue-list page has ended: a change another broker makes just then.
type pageStatementTracer struct {
	then func()
	ran  bool
}

type tracedSQL struct{}

func (p *pageStatementTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, tracedSQL{}, d.SQL)
}

func (p *pageStatementTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if sql, _ := ctx.Value(tracedSQL{}).(string); !p.ran && strings.HasPrefix(sql, "WITH page AS") {
		p.ran = true
		p.then()
	}
}

// The queue list's total counts what its page shows: a queue deleted by
// another broker between the page's read and the count's showed on the page
// while the total, read in a second statement, no longer counted it (a page
// of one queue of a total of 0).
func TestQueueListTotalCountsWhatItsPageShows(t *testing.T) {
	ctx := t.Context()
	other := newEngine(t)
	q := queueName(t)
	pushN(t, other, q, "p", 1)

	tracer := &pageStatementTracer{then: func() {
		if _, err := other.DeleteQueue(context.Background(), q); err != nil {
			t.Error(err)
		}
	}}
	cfg, err := pgxpool.ParseConfig(testDSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := New(pool, Config{})
	t.Cleanup(func() { e.Close(); pool.Close() })

	list, total, more, err := e.ListQueues(ctx, QueueListFilter{Queue: q})
	if err != nil {
		t.Fatal(err)
	}
	if !tracer.ran {
		t.Fatal("the queue was not deleted after the page's statement")
	}
	if len(list) != 1 || total != 1 || more {
		t.Fatalf("a page of %d queues (more %v) of a total of %d; want 1 of 1, as one read sees them", len(list), more, total)
	}
}
