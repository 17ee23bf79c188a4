package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/internal/testdb"
)

// pageStatementTracer runs then once, when the first statement whose SQL
// holds reads has ended: a change another broker makes just then.
type pageStatementTracer struct {
	reads string
	then  func()
	ran   bool
}

type tracedSQL struct{}

func (p *pageStatementTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, tracedSQL{}, d.SQL)
}

func (p *pageStatementTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if sql, _ := ctx.Value(tracedSQL{}).(string); !p.ran && strings.Contains(sql, p.reads) {
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

	tracer := &pageStatementTracer{reads: "WITH page AS", then: func() {
		if _, err := other.DeleteQueue(context.Background(), q); err != nil {
			t.Error(err)
		}
	}}
	e := newTracedEngine(t, tracer)

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

// newTracedEngine is an engine whose connections report to tracer.
func newTracedEngine(t *testing.T, tracer pgx.QueryTracer) *Engine {
	cfg, err := pgxpool.ParseConfig(testDSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := New(pool, Config{})
	t.Cleanup(func() { e.Close(); pool.Close() })
	return e
}

// A queue's depth totals count the partitions its page shows: read in a
// statement before the page's, they missed a partition another broker
// created in between (a page pending 2 of a total pending 1).
func TestQueueDepthTotalsCountWhatTheirPageShows(t *testing.T) {
	ctx := t.Context()
	other := newEngine(t)
	q := queueName(t)
	pushN(t, other, q, "b", 1)

	tracer := &pageStatementTracer{reads: "pending", then: func() {
		pushN(t, other, q, "a", 1)
	}}
	e := newTracedEngine(t, tracer)

	depth, err := e.QueueDepth(ctx, q, "", RowPage{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !tracer.ran {
		t.Fatal("no partition was created after the totals' statement")
	}
	var pending int64
	for _, p := range depth.Partitions {
		pending += p.Pending
	}
	if depth.More || pending != depth.Pending || len(depth.Partitions) != depth.PartitionsPending {
		t.Fatalf("a page of %d partitions pending %d (more %v) of totals %d partitions pending %d; want them equal, as one read sees them",
			len(depth.Partitions), pending, depth.More, depth.PartitionsPending, depth.Pending)
	}
}

// An unknown queue's depth is ErrNotFound, and an empty page of a known one
// still carries the queue's totals.
func TestQueueDepthOfAnUnknownQueueAndOfAnEmptyPage(t *testing.T) {
	ctx := t.Context()
	e := newEngine(t)
	if _, err := e.QueueDepth(ctx, queueName(t), "", RowPage{Limit: 10}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown queue: %v, want ErrNotFound", err)
	}
	q := queueName(t)
	pushN(t, e, q, "a", 2)
	depth, err := e.QueueDepth(ctx, q, "", RowPage{Limit: 10, After: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(depth.Partitions) != 0 || depth.More || depth.Pending != 2 || depth.PartitionsPending != 1 {
		t.Fatalf("page after the last partition: %+v, want no partitions of totals pending 2 on 1 partition", depth)
	}
}

// A queue's status summary counts the partitions its page shows: read in a
// statement before the page's, it missed a partition another broker created
// in between (a page of 2 partitions of a queue of 1).
func TestQueueStatusSummaryCountsWhatItsPageShows(t *testing.T) {
	ctx := t.Context()
	other := newEngine(t)
	q := queueName(t)
	pushN(t, other, q, "b", 1)

	tracer := &pageStatementTracer{reads: "lanes.partitions", then: func() {
		pushN(t, other, q, "a", 1)
	}}
	e := newTracedEngine(t, tracer)

	summary, parts, more, err := e.QueueStatus(ctx, q, true, RowPage{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !tracer.ran {
		t.Fatal("no partition was created after the summary's statement")
	}
	var total int64
	for _, p := range parts {
		total += p.Messages.Total
	}
	if more || len(parts) != summary.Partitions || total != summary.Messages.Total {
		t.Fatalf("a page of %d partitions of %d messages (more %v) of a queue of %d partitions of %d messages; want them equal, as one read sees them",
			len(parts), total, more, summary.Partitions, summary.Messages.Total)
	}
}

// An unknown queue's status is ErrNotFound, and an empty page of a known one
// still carries the queue's summary.
func TestQueueStatusOfAnUnknownQueueAndOfAnEmptyPage(t *testing.T) {
	ctx := t.Context()
	e := newEngine(t)
	if _, _, _, err := e.QueueStatus(ctx, queueName(t), true, RowPage{Limit: 10}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown queue: %v, want ErrNotFound", err)
	}
	q := queueName(t)
	pushN(t, e, q, "a", 2)
	summary, parts, more, err := e.QueueStatus(ctx, q, true, RowPage{Limit: 10, After: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	if parts == nil || len(parts) != 0 || more || summary.Name != q || summary.Partitions != 1 || summary.Messages.Total != 2 {
		t.Fatalf("page after the last partition: %+v %v (more %v), want an empty page of a queue of 1 partition of 2 messages", summary, parts, more)
	}
}

// A queue's detail lists the partitions of the queue it describes: read in a
// statement after the queue's, its page came out empty when another broker
// deleted the queue in between (a queue of no partitions that held one).
func TestQueueDetailListsThePartitionsOfTheQueueItDescribes(t *testing.T) {
	ctx := t.Context()
	other := newEngine(t)
	q := queueName(t)
	pushN(t, other, q, "p", 1)

	tracer := &pageStatementTracer{reads: "FROM lanes.queues WHERE name = $1", then: func() {
		if _, err := other.DeleteQueue(context.Background(), q); err != nil {
			t.Error(err)
		}
	}}
	e := newTracedEngine(t, tracer)

	detail, parts, more, err := e.QueueDetail(ctx, q, RowPage{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !tracer.ran {
		t.Fatal("the queue was not deleted after the queue's statement")
	}
	if detail.Name != q || len(parts) != 1 || parts[0].Name != "p" || more {
		t.Fatalf("queue %q with partitions %+v (more %v); want %q with its partition p, as one read sees them", detail.Name, parts, more, q)
	}
}

// An unknown queue's detail is ErrNotFound, and an empty page of a known one
// still carries the queue.
func TestQueueDetailOfAnUnknownQueueAndOfAnEmptyPage(t *testing.T) {
	ctx := t.Context()
	e := newEngine(t)
	if _, _, _, err := e.QueueDetail(ctx, queueName(t), RowPage{Limit: 10}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown queue: %v, want ErrNotFound", err)
	}
	q := queueName(t)
	pushN(t, e, q, "a", 1)
	detail, parts, more, err := e.QueueDetail(ctx, q, RowPage{Limit: 10, After: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	if detail.Name != q || parts == nil || len(parts) != 0 || more {
		t.Fatalf("page after the last partition: %+v %v (more %v), want queue %q with an empty page", detail, parts, more, q)
	}
}

// An empty page of the queue list carries its total in the page's statement
// as a full one does: past the end (by offset or by key), on a broker
// without queues and under a filter no queue matches. It took a second
// statement to count the total, which could disagree with the page's.
func TestAnEmptyQueueListPageIsOneStatement(t *testing.T) {
	dsn, cleanup, err := testdb.NewDatabase(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	var counter tripCounter
	empty := newCountedEngineOn(t, dsn, &counter)
	if err := ApplySchema(t.Context(), empty.pool); err != nil {
		t.Fatal(err)
	}
	e := newCountedEngine(t, &counter)
	q := queueName(t)
	pushN(t, e, q, "p", 1)

	for _, c := range []struct {
		name       string
		e          *Engine
		filter     QueueListFilter
		rows, want int
	}{
		{"a page of one", e, QueueListFilter{Queue: q}, 1, 1},
		{"past the end by offset", e, QueueListFilter{Queue: q, Offset: 1}, 0, 1},
		{"past the end by key", e, QueueListFilter{Queue: q, After: []string{q}}, 0, 1},
		{"a broker without queues", empty, QueueListFilter{}, 0, 0},
		{"a filter no queue matches", e, QueueListFilter{Namespace: q + "-nothing"}, 0, 0},
	} {
		counter.take()
		list, total, more, err := c.e.ListQueues(t.Context(), c.filter)
		if err != nil {
			t.Fatal(err)
		}
		if trips, statements := counter.take(); trips != 1 || statements != 1 {
			t.Errorf("%s: %d round trips, %d statements; want 1 and 1", c.name, trips, statements)
		}
		if list == nil || len(list) != c.rows || total != c.want || more {
			t.Errorf("%s: a page of %d queues (more %v) of a total of %d; want %d of %d", c.name, len(list), more, total, c.rows, c.want)
		}
	}
}
