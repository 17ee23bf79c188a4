package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lanesmq/lanes/server/internal/testdb"
)

// sparseGroups fills a database of its own with twelve queues of three
// partitions, each partition holding one message an hour old, and cursors
// inserted as an older broker would (no queue): group "a" on every queue,
// caught up but for one partition of q03; "b" on the even queues, lagging on
// q10 only; "c" on q05 only and never registered (a seek's); "d" registered
// on q07 without a cursor. Queue names sort apart from their ids.
func sparseGroups(t *testing.T) *Engine {
	t.Helper()
	e := newIsolatedEngine(t)
	ctx := t.Context()
	if _, err := e.pool.Exec(ctx, `
		INSERT INTO lanes.queues (name) SELECT 'q' || lpad(i::text, 2, '0') FROM generate_series(0, 11) i;
		INSERT INTO lanes.partitions (queue_id, name, last_offset) SELECT q.id, 'p' || i, 0 FROM lanes.queues q, generate_series(0, 2) i;
		INSERT INTO lanes.segments (partition_id, base_offset, end_offset, created_at, frames)
			SELECT id, 0, 0, now() - interval '1 hour', '\x00'::bytea FROM lanes.partitions;
		INSERT INTO lanes.consumers (partition_id, consumer_group, committed, batch_end)
			SELECT p.id, g.name, CASE WHEN (g.name = 'a' AND q.name = 'q03' AND p.name = 'p1') OR (g.name = 'b' AND q.name = 'q10')
				THEN -1 ELSE 0 END, -1
			FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id, (VALUES ('a'), ('b'), ('c')) g(name)
			WHERE g.name = 'a' OR (g.name = 'b' AND right(q.name, 1)::int % 2 = 0) OR (g.name = 'c' AND q.name = 'q05');
		INSERT INTO lanes.consumer_groups (consumer_group, queue_id, subscription_mode, subscription_timestamp)
			SELECT g.name, q.id, 'all', now() FROM lanes.queues q, (VALUES ('a'), ('b'), ('d')) g(name)
			WHERE g.name = 'a' OR (g.name = 'b' AND right(q.name, 1)::int % 2 = 0) OR (g.name = 'd' AND q.name = 'q07');
		ANALYZE`); err != nil {
		t.Fatal(err)
	}
	return e
}

// newIsolatedEngine is newEngine on a database of its own.
func newIsolatedEngine(t *testing.T) *Engine {
	t.Helper()
	pool := testdb.Pool(t)
	if err := ApplySchema(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	e := New(pool, Config{})
	t.Cleanup(e.Close)
	return e
}

// The listings by key, which walk the (group, queue) pairs through
// consumers_group_queue_idx, answer the rows the offset pages (a pass over
// every cursor) answer, whatever the page size: groups sparse over the
// queues, a group with cursors and no registration, one registered without
// cursors, and lagging pages that walk on past pairs with nothing lagging.
func TestTheListingsByKeyAnswerTheRowsOfThePassOverEveryCursor(t *testing.T) {
	e := sparseGroups(t)

	wantGroups := groupRows(t, e, groupsByOffsetSQL, "", nil, 0)
	wantLagging := cursorRows(t, e, laggingPageSQL, "", nil, 0, 0.0)
	wantOfB := cursorRows(t, e, groupCursorPageSQL, "b", nil, 0)
	if len(wantGroups) != 20 || len(wantLagging) != 4 || len(wantOfB) != 18 {
		t.Fatalf("the fill: %d group rows, %d lagging, %d of b; want 20, 4, 18", len(wantGroups), len(wantLagging), len(wantOfB))
	}
	defer func(was int) { minLaggingPairBatch = was }(minLaggingPairBatch)
	minLaggingPairBatch = 1 // lagging pages walk on in rounds
	for _, limit := range []int{0, 1, 2, 3, 5, 19, 20, 100} {
		wantListingsByKey(t, e, limit, "b", wantGroups, wantLagging, wantOfB)
	}
}

// wantListingsByKey pages the group list, the lagging cursors and group's
// cursors by key, limit rows a page, and wants each to join to the rows the
// offset pages gave.
func wantListingsByKey(t *testing.T, e *Engine, limit int, group string, wantGroups, wantLagging, wantOfGroup []string) {
	t.Helper()
	if groups := groupListByKey(t, e, limit); !slices.Equal(groups, wantGroups) {
		t.Fatalf("limit %d: the group list by key (%d rows)\n%v\nby offset (%d)\n%v", limit, len(groups), groups, len(wantGroups), wantGroups)
	}
	lagging := pageCursorsByKey(t, limit, func(page RowPage) ([]GroupCursor, bool, error) {
		return e.LaggingCursors(t.Context(), 0, page)
	}, true)
	if !slices.Equal(lagging, wantLagging) {
		t.Fatalf("limit %d: lagging by key\n%v\nby offset\n%v", limit, lagging, wantLagging)
	}
	ofGroup := pageCursorsByKey(t, limit, func(page RowPage) ([]GroupCursor, bool, error) {
		return e.GroupCursors(t.Context(), group, page)
	}, false)
	if !slices.Equal(ofGroup, wantOfGroup) {
		t.Fatalf("limit %d: %s's cursors by key\n%v\nby offset\n%v", limit, group, ofGroup, wantOfGroup)
	}
}

// pageCursorsByKey pages through list by key with limit (the key of one
// group's page names no group) and returns the rows.
func pageCursorsByKey(t *testing.T, limit int, list func(RowPage) ([]GroupCursor, bool, error), keyHasGroup bool) []string {
	t.Helper()
	var rows []string
	page := RowPage{Limit: limit}
	for {
		got, more, err := list(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range got {
			rows = append(rows, cursorRow(c))
		}
		if !more {
			return rows
		}
		last := got[len(got)-1]
		page.After = []string{last.Queue, last.Partition}
		if keyHasGroup {
			page.After = []string{last.Group, last.Queue, last.Partition}
		}
	}
}

func groupRow(s GroupSummary) string {
	return fmt.Sprintf("%s/%s cursors=%d lagging=%d lag=%d consumed=%v mode=%q state=%s",
		s.Group, s.Queue, s.Cursors, s.PartitionsWithLag, s.TotalLag, s.EverConsumed, s.SubscriptionMode, s.State())
}

func cursorRow(c GroupCursor) string {
	return fmt.Sprintf("%s/%s/%s lag=%d consumed=%d", c.Group, c.Queue, c.Partition, c.OffsetLag, c.TotalConsumed)
}

func groupRows(t *testing.T, e *Engine, sql string, args ...any) []string {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (string, error) {
		s, err := scanGroupSummary(row)
		return groupRow(s), err
	})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// groupListByKey pages the group list by key, limit rows a page, and joins
// the pages' rows.
func groupListByKey(t *testing.T, e *Engine, limit int) []string {
	t.Helper()
	var groups []string
	page := RowPage{Limit: limit}
	for {
		list, more, err := e.ListGroups(context.Background(), page)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list {
			groups = append(groups, groupRow(s))
		}
		if !more {
			return groups
		}
		page.After = []string{list[len(list)-1].Group, list[len(list)-1].Queue}
	}
}

func cursorRows(t *testing.T, e *Engine, sql string, args ...any) []string {
	t.Helper()
	list, _, err := e.cursorPage(context.Background(), sql, RowPage{}, args...)
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, c := range list {
		rows = append(rows, cursorRow(c))
	}
	return rows
}

// A page by key reads its own pairs and cursors, however many cursors there
// are: over 1,500 one-partition queues with two groups each (3,000 cursors,
// every one lagging), the first page of 10 and a page from the middle read a
// few dozen cursor index entries and rows, where the pass over every cursor
// read all 3,000.
func TestAPageByKeyReadsItsOwnCursorsOnly(t *testing.T) {
	e := newIsolatedEngine(t)
	ctx := t.Context()
	seedTwoGroupsOnEachOf1500Queues(t, e)
	const limit = 11 // a page of 10 and the row that says more follow
	group, queue := "ga", "q0700"
	for _, c := range []struct {
		what         string
		group, queue *string
	}{{"the first page", nil, nil}, {"a page from the middle", &group, &queue}} {
		if n := consumerRowsRead(t, e, groupsAfterSQL, "", limit, c.group, c.queue); n > 60 {
			t.Errorf("%s of the group list read %d cursors", c.what, n)
		}
		groups, queueIDs, queues, err := e.groupPairs(ctx, pairsFromSQL, "", limit, c.group, c.queue)
		if err != nil || len(groups) != limit {
			t.Fatalf("%s: %d pairs, %v", c.what, len(groups), err)
		}
		pairsRead := consumerRowsRead(t, e, pairsFromSQL, "", limit, c.group, c.queue)
		cursorsRead := consumerRowsRead(t, e, pairCursorsSQL, groups, queueIDs, queues, limit, c.group, c.queue, "", true, 0.0)
		if pairsRead+cursorsRead > 60 {
			t.Errorf("%s of the lagging listing read %d cursors for its pairs and %d for their rows", c.what, pairsRead, cursorsRead)
		}
	}
}

// consumerRowsRead runs sql under EXPLAIN ANALYZE and sums the rows its
// scans of lanes.consumers returned, over all their loops.
func consumerRowsRead(t *testing.T, e *Engine, sql string, args ...any) int {
	t.Helper()
	var plan []struct{ Plan planNode }
	if err := e.pool.QueryRow(t.Context(), "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var sum func(n planNode) int
	sum = func(n planNode) int {
		read := 0
		if n.Relation == "consumers" {
			read = int(n.Rows * n.Loops)
		}
		for _, child := range n.Plans {
			read += sum(child)
		}
		return read
	}
	return sum(plan[0].Plan)
}

type planNode struct {
	Relation string     `json:"Relation Name"`
	Rows     float64    `json:"Actual Rows"`
	Loops    float64    `json:"Actual Loops"`
	Plans    []planNode `json:"Plans"`
}

// A group with cursors on a few of many queues reads about its own pairs,
// not every queue: over 20,000 one-partition queues, "gs" has a cursor
// (lagging) on three, "ga" a cursor on each of the first 1,500 (caught up;
// after them the walk finds none), and "gr" a registration alone on two.
// A page of gs, of the group list from gs on and of the lagging listing after
// ga reads the walk's sample and the group's queues (the walk over every
// queue read 20,000 queues and probed the cursors 20,000 times), and every
// listing by key still answers the offset pages' rows.
func TestASparseGroupReadsItsOwnQueuesNotEveryQueue(t *testing.T) {
	e := newIsolatedEngine(t)
	ctx := t.Context()
	if _, err := e.pool.Exec(ctx, `
		INSERT INTO lanes.queues (name) SELECT 'q' || lpad(i::text, 5, '0') FROM generate_series(0, 19999) i;
		INSERT INTO lanes.partitions (queue_id, name, last_offset) SELECT id, 'Default', 0 FROM lanes.queues;
		INSERT INTO lanes.segments (partition_id, base_offset, end_offset, created_at, frames)
			SELECT id, 0, 0, now() - interval '1 hour', '\x00'::bytea FROM lanes.partitions;
		INSERT INTO lanes.consumers (partition_id, consumer_group, queue_id, committed, batch_end)
			SELECT p.id, 'gs', p.queue_id, -1, -1 FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
			WHERE q.name IN ('q00007', 'q10000', 'q19999');
		INSERT INTO lanes.consumers (partition_id, consumer_group, queue_id, committed, batch_end)
			SELECT p.id, 'ga', p.queue_id, 0, 0 FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
			WHERE q.name < 'q01500';
		INSERT INTO lanes.consumer_groups (consumer_group, queue_id, subscription_mode, subscription_timestamp)
			SELECT 'gr', id, 'all', now() FROM lanes.queues WHERE name IN ('q00500', 'q15000')`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		t.Fatal(err)
	}
	const limit = 11
	const allowed = 2*walkSample + 200 // the sample's queues and probes, and the group's own
	gs, ga, empty, last := "gs", "ga", "", "q01499"
	if n := queueRowsRead(t, e, groupsAfterSQL, "", limit, &gs, &empty); n > allowed {
		t.Errorf("a page of the group list from gs read %d queues and cursor probes", n)
	}
	if n := queueRowsRead(t, e, pairsFromSQL, "gs", limit, &gs, &empty); n > allowed {
		t.Errorf("a page of gs's cursors read %d queues and cursor probes for its pairs", n)
	}
	// ga's sample and queues (skipped to, then named), and gs's sample
	if n := queueRowsRead(t, e, pairsAfterSQL, "", 4*limit, &ga, &last); n > 2*allowed+2*1500 {
		t.Errorf("the lagging listing's pairs after ga's last read %d queues and cursor probes", n)
	}

	wantGroups := groupRows(t, e, groupsByOffsetSQL, "", nil, 0)
	wantLagging := cursorRows(t, e, laggingPageSQL, "", nil, 0, 0.0)
	wantOfGS := cursorRows(t, e, groupCursorPageSQL, "gs", nil, 0)
	if len(wantGroups) != 1505 || len(wantLagging) != 3 || len(wantOfGS) != 3 {
		t.Fatalf("the fill: %d group rows, %d lagging, %d of gs; want 1505, 3, 3", len(wantGroups), len(wantLagging), len(wantOfGS))
	}
	for _, limit := range []int{0, 1, 7, 1000} {
		wantListingsByKey(t, e, limit, "gs", wantGroups, wantLagging, wantOfGS)
	}
}

// queueRowsRead runs sql under EXPLAIN ANALYZE and sums the rows its scans
// of lanes.queues returned and the times it probed lanes.consumers, over all
// their loops.
func queueRowsRead(t *testing.T, e *Engine, sql string, args ...any) int {
	t.Helper()
	var plan []struct{ Plan planNode }
	if err := e.pool.QueryRow(t.Context(), "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var sum func(n planNode) int
	sum = func(n planNode) int {
		read := 0
		switch n.Relation {
		case "queues":
			read = int(n.Rows * n.Loops)
		case "consumers":
			read = int(n.Loops)
		}
		for _, child := range n.Plans {
			read += sum(child)
		}
		return read
	}
	return sum(plan[0].Plan)
}

// A group whose queues sit in one block of names turns to the skip scan at
// the block's end, not only after its first stretch: over 30,000
// one-partition queues, "ga" has a cursor on each of the first 1,500 and "gb"
// on each of q10000 to q11999 (lagging on its last), nothing after. A walk
// that decided once, after a first stretch full of the group's queues, went
// on through every queue after the block (30,001 and 20,001 queues and
// cursor probes read for the two rounds below); one that decides after each
// stretch reads two stretches and the group's own queues (7,003 and 8,003).
func TestAGroupsWalkTurnsToTheSkipScanWhereItsBlockOfQueuesEnds(t *testing.T) {
	e := newIsolatedEngine(t)
	ctx := t.Context()
	if _, err := e.pool.Exec(ctx, `
		INSERT INTO lanes.queues (name) SELECT 'q' || lpad(i::text, 5, '0') FROM generate_series(0, 29999) i;
		INSERT INTO lanes.partitions (queue_id, name, last_offset) SELECT id, 'Default', 0 FROM lanes.queues;
		INSERT INTO lanes.segments (partition_id, base_offset, end_offset, created_at, frames)
			SELECT id, 0, 0, now() - interval '1 hour', '\x00'::bytea FROM lanes.partitions;
		INSERT INTO lanes.consumers (partition_id, consumer_group, queue_id, committed, batch_end)
			SELECT p.id, 'ga', p.queue_id, 0, 0 FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
			WHERE q.name < 'q01500';
		INSERT INTO lanes.consumers (partition_id, consumer_group, queue_id, committed, batch_end)
			SELECT p.id, 'gb', p.queue_id, CASE WHEN q.name = 'q11999' THEN -1 ELSE 0 END, 0
			FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
			WHERE q.name BETWEEN 'q10000' AND 'q11999'`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		t.Fatal(err)
	}
	// The lagging listing's second round of pairs (4,000) after the first
	// (1,000): from inside each block, a stretch of the group's queues, then
	// one without.
	for _, c := range []struct{ group, after string }{{"ga", "q00999"}, {"gb", "q10999"}} {
		group, after := c.group, c.after
		ofGroup := len(cursorRows(t, e, groupCursorPageSQL, group, nil, 0))
		// two stretches' queues and probes, and the group's queues skipped to and named
		allowed := 2*2*walkSample + 2*ofGroup + 200
		if n := queueRowsRead(t, e, pairsAfterSQL, group, 4000, &group, &after); n > allowed {
			t.Errorf("%s's pairs after %s read %d queues and cursor probes, want at most %d", group, after, n, allowed)
		}
	}

	wantGroups := groupRows(t, e, groupsByOffsetSQL, "", nil, 0)
	wantLagging := cursorRows(t, e, laggingPageSQL, "", nil, 0, 0.0)
	wantOfGB := cursorRows(t, e, groupCursorPageSQL, "gb", nil, 0)
	if len(wantGroups) != 3500 || len(wantLagging) != 1 || len(wantOfGB) != 2000 {
		t.Fatalf("the fill: %d group rows, %d lagging, %d of gb; want 3500, 1, 2000", len(wantGroups), len(wantLagging), len(wantOfGB))
	}
	for _, limit := range []int{0, 7, 1000} {
		wantListingsByKey(t, e, limit, "gb", wantGroups, wantLagging, wantOfGB)
	}
}

// seedTwoGroupsOnEachOf1500Queues writes 1,500 one-partition queues (q0000..q1499), each holding
// one message an hour old, with groups ga and gb registered and cursored on every one of them
// (3,000 cursors, every one lagging), and analyzes them so the planner sees the real sizes.
func seedTwoGroupsOnEachOf1500Queues(t *testing.T, e *Engine) {
	t.Helper()
	ctx := t.Context()
	if _, err := e.pool.Exec(ctx, `
		INSERT INTO lanes.queues (name) SELECT 'q' || lpad(i::text, 4, '0') FROM generate_series(0, 1499) i;
		INSERT INTO lanes.partitions (queue_id, name, last_offset) SELECT id, 'Default', 0 FROM lanes.queues;
		INSERT INTO lanes.segments (partition_id, base_offset, end_offset, created_at, frames)
			SELECT id, 0, 0, now() - interval '1 hour', '\x00'::bytea FROM lanes.partitions;
		INSERT INTO lanes.consumers (partition_id, consumer_group, queue_id)
			SELECT p.id, g, p.queue_id FROM lanes.partitions p, unnest(ARRAY['ga', 'gb']) g;
		INSERT INTO lanes.consumer_groups (consumer_group, queue_id, subscription_mode, subscription_timestamp)
			SELECT g, id, 'all', now() FROM lanes.queues, unnest(ARRAY['ga', 'gb']) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		t.Fatal(err)
	}
}
