package engine

import (
	"context"
	"math"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// GroupCursor is one (partition, group) cursor with its lag, computed from the
// watermarks (last_offset, committed, log_start) and one index probe for the
// age of the oldest unconsumed segment.
type GroupCursor struct {
	Group            string
	QueueID          uuid.UUID
	Queue            string
	Partition        string
	PartitionID      uuid.UUID
	LeaseID          string // "" when no live lease
	LeaseActive      bool
	TotalConsumed    int64
	LastConsumedAt   *time.Time
	OffsetLag        int64
	OldestUnconsumed *time.Time // nil when nothing is unconsumed
	TimeLag          time.Duration
}

// GroupSummary is one (group, queue) row of the group list.
type GroupSummary struct {
	Group                 string
	Queue                 string
	Cursors               int
	PartitionsWithLag     int
	TotalLag              int64
	MaxTimeLag            time.Duration
	EverConsumed          bool
	SubscriptionMode      string
	SubscriptionTimestamp *time.Time
	SubscriptionCreatedAt *time.Time
}

// State is "Lagging" past five minutes of time lag, "Stable" once anything was
// consumed, else "Dead".
func (g GroupSummary) State() string {
	switch {
	case g.MaxTimeLag > 300*time.Second:
		return "Lagging"
	case g.EverConsumed:
		return "Stable"
	default:
		return "Dead"
	}
}

// oldestUnconsumedJoin joins o.created_at, when cursor c's oldest
// unconsumed message on partition p was written (NULL when nothing is
// unconsumed): one probe of the segments' primary key.
const oldestUnconsumedJoin = `LEFT JOIN LATERAL (SELECT sg.created_at FROM lanes.segments sg
		WHERE p.last_offset > greatest(c.committed, p.log_start - 1)
		  AND sg.partition_id = p.id AND sg.base_offset <= greatest(c.committed + 1, p.log_start)
		ORDER BY sg.base_offset DESC LIMIT 1) o ON true`

// cursorRowsSQL is every cursor with its lag, a subquery the listings filter,
// order and page in the database; $1 filters the group (empty = all).
const cursorRowsSQL = `SELECT c.consumer_group AS grp, q.id AS queue_id, q.name AS queue, p.name AS partition, p.id AS partition_id,
		CASE WHEN c.lease_expires_at > now() THEN c.lease_id::text ELSE '' END AS lease_id,
		coalesce(c.lease_expires_at > now(), false) AS lease_active, c.total_consumed, c.last_consumed_at,
		greatest(p.last_offset - greatest(c.committed, p.log_start - 1), 0) AS offset_lag, o.created_at AS oldest,
		coalesce(extract(epoch FROM now() - o.created_at), 0)::float8 AS lag_seconds
	FROM lanes.consumers c
	JOIN lanes.partitions p ON p.id = c.partition_id
	JOIN lanes.queues q ON q.id = p.queue_id
	` + oldestUnconsumedJoin + `
	WHERE ($1 = '' OR c.consumer_group = $1)`

// laggingPageSQL is one page of the cursors of cursorRowsSQL whose oldest
// unconsumed message waited at least $4 seconds, by group, queue and
// partition name; $2 is the LIMIT, $3 the OFFSET.
const laggingPageSQL = `SELECT grp, queue_id, queue, partition, partition_id, lease_id, lease_active, total_consumed,
		last_consumed_at, offset_lag, oldest, lag_seconds
	FROM (` + cursorRowsSQL + `) cr
	WHERE offset_lag > 0 AND oldest IS NOT NULL AND greatest(lag_seconds, 0) >= $4
	ORDER BY grp, queue, partition LIMIT $2 OFFSET $3`

func (e *Engine) cursorPage(ctx context.Context, sql string, page RowPage, args ...any) ([]GroupCursor, bool, error) {
	rows, err := e.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, false, err
	}
	list, err := pgx.CollectRows(rows, scanGroupCursor)
	if err != nil {
		return nil, false, err
	}
	list, more := cutPage(list, page)
	return list, more, nil
}

// scanGroupCursor reads one row of cursorRowsSQL's columns.
func scanGroupCursor(row pgx.CollectableRow) (GroupCursor, error) {
	var c GroupCursor
	var lagSeconds float64
	err := row.Scan(&c.Group, &c.QueueID, &c.Queue, &c.Partition, &c.PartitionID, &c.LeaseID, &c.LeaseActive,
		&c.TotalConsumed, &c.LastConsumedAt, &c.OffsetLag, &c.OldestUnconsumed, &lagSeconds)
	c.TimeLag = time.Duration(max(lagSeconds, 0) * float64(time.Second))
	return c, err
}

// groupCursorPageSQL is one page of cursorRowsSQL placed by the names alone,
// so the age of the oldest unconsumed message is read for the page's cursors
// only: reading it for every cursor took 0.4 s a page with 100,000 of them.
const groupCursorPageSQL = `SELECT grp, queue_id, queue, partition, partition_id, lease_id, lease_active, total_consumed,
		last_consumed_at, offset_lag, oldest, lag_seconds
	FROM (` + cursorRowsSQL + ` AND (c.partition_id, c.consumer_group) IN (
		SELECT c.partition_id, c.consumer_group FROM lanes.consumers c
		JOIN lanes.partitions p ON p.id = c.partition_id
		JOIN lanes.queues q ON q.id = p.queue_id
		WHERE ($1 = '' OR c.consumer_group = $1)
		ORDER BY c.consumer_group, q.name, p.name LIMIT $2 OFFSET $3)) cr
	ORDER BY grp, queue, partition`

// GroupCursors lists one page of the cursors of group ("" = every group), by
// group, queue and partition name, and says whether more follow. For one
// group without an offset the page starts after the key page.After (queue,
// partition) and reads only the cursors it returns: an offset page placed
// itself by sorting every cursor before it.
func (e *Engine) GroupCursors(ctx context.Context, group string, page RowPage) ([]GroupCursor, bool, error) {
	if page.Offset > 0 || group == "" {
		return e.cursorPage(ctx, groupCursorPageSQL, page, group, page.limitArg(), page.Offset)
	}
	var key []string
	if len(page.After) == 2 {
		key = []string{group, page.After[0], page.After[1]}
	}
	return e.cursorsAfter(ctx, page, group, key, false, 0)
}

// ListGroups returns one page of summaries, one per (group, queue), by group
// then queue name: groups registered by a pop and groups that only have
// cursors (placed by a seek). The cursors are summed in the database, so a
// page costs the broker its own rows, however many cursors there are. Without
// an offset the page starts after the key page.After (group, queue). Either
// way only the page's own cursors are summed: an offset page used to sum
// every cursor (rows 201-300 of 500 took PostgreSQL 3.5 s of CPU at 500,000
// cursors, and take 0.55 s).
func (e *Engine) ListGroups(ctx context.Context, page RowPage) ([]GroupSummary, bool, error) {
	var list []GroupSummary
	collect := func(rows pgx.Rows) (err error) {
		list, err = pgx.CollectRows(rows, scanGroupSummary)
		return err
	}
	var err error
	if page.Offset > 0 {
		var pairs any // the pairs walked: the offset's and the page's, nil: all
		if page.Limit > 0 {
			// Saturated: past 2^63-1 the sum wrapped to a negative LIMIT (a 500).
			pairs = page.Offset + min(page.Limit+1, math.MaxInt-page.Offset)
		}
		err = e.queryWithoutJIT(ctx, collect, groupsAtOffsetSQL, "", pairs, nil, nil, page.Offset)
	} else {
		var group, queue *string
		if len(page.After) == 2 {
			group, queue = &page.After[0], &page.After[1]
		}
		err = e.queryWithoutJIT(ctx, collect, groupsAfterSQL, "", page.limitArg(), group, queue)
	}
	if err != nil {
		return nil, false, err
	}
	list, more := cutPage(list, page)
	return list, more, nil
}

// queryWithoutJIT runs sql with JIT compilation off, in one round trip: the
// planner's estimate of groupPairsSQL's walk, ten steps of each recursion,
// passes jit_above_cost on 100,000 queues, and compiling took longer than the
// walk itself (about 100 ms against 15). The batch is one implicit
// transaction, where set_config(..., true) holds until its end.
func (e *Engine) queryWithoutJIT(ctx context.Context, read func(pgx.Rows) error, sql string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue("SELECT set_config('jit', 'off', true)")
	b.Queue(sql, args...).Query(read)
	return e.pool.SendBatch(ctx, b).Close()
}

// scanGroupSummary reads one row of groupsPageSQL.
func scanGroupSummary(row pgx.CollectableRow) (GroupSummary, error) {
	var s GroupSummary
	var mode *string
	var lagSeconds float64
	err := row.Scan(&s.Group, &s.Queue, &mode, &s.SubscriptionTimestamp, &s.SubscriptionCreatedAt,
		&s.Cursors, &s.PartitionsWithLag, &s.TotalLag, &lagSeconds, &s.EverConsumed)
	if mode != nil {
		s.SubscriptionMode = *mode
	}
	s.MaxTimeLag = time.Duration(max(lagSeconds, 0) * float64(time.Second))
	return s, err
}

// groupsPageSQL is the group list's rows of the (group, queue) keys k of
// keys (grp, queue_id, queue, from the queries of groupPairsSQL), by group
// and queue name. The registration is a lateral with LIMIT 1 so it stays a
// probe per key: as a join the planner hashed every registration. Each key's
// cursors are summed on their own, read through consumers_group_queue_idx,
// one range of the index a key (summed together they were sorted by key
// first, 500,000 of them on disk; found a partition at a time, one probe of
// the cursors' primary key each, 100 rows of 1,000 cursors read 2.3 times the
// buffers and took 1.7 times the CPU). A row's totals need every cursor of
// it, and its time lag one probe of the segments for each lagging one: those
// probes are most of a row's cost (70% of it at 100,000 cursors a row).
func groupsPageSQL(keys string) string {
	return `WITH RECURSIVE ` + groupPairsSQL(">", true) + `
	SELECT k.grp, k.queue, g.subscription_mode, g.subscription_timestamp, g.created_at,
		c.cursors, c.with_lag, c.total_lag, c.max_lag_seconds, coalesce(c.ever_consumed, false)
	FROM ` + keys + ` k
	LEFT JOIN LATERAL (SELECT g.subscription_mode, g.subscription_timestamp, g.created_at FROM lanes.consumer_groups g
		WHERE g.consumer_group = k.grp AND g.queue_id = k.queue_id LIMIT 1) g ON true
	CROSS JOIN LATERAL (SELECT count(*)::int AS cursors,
			count(*) FILTER (WHERE p.last_offset > greatest(c.committed, p.log_start - 1))::int AS with_lag,
			coalesce(sum(greatest(p.last_offset - greatest(c.committed, p.log_start - 1), 0)), 0)::int8 AS total_lag,
			coalesce(extract(epoch FROM now() - min(o.created_at)), 0)::float8 AS max_lag_seconds,
			bool_or(c.last_consumed_at IS NOT NULL) AS ever_consumed
		FROM lanes.consumers c
		JOIN lanes.partitions p ON p.id = c.partition_id
		` + oldestUnconsumedJoin + `
		WHERE c.consumer_group = k.grp AND c.queue_id = k.queue_id) c
	ORDER BY k.grp, k.queue`
}

// groupsAfterSQL is the page of the group list after (group $3, queue name
// $4) (from the first row when $3 is NULL), LIMIT $2 ($1 is groupPairsSQL's,
// always empty here). Its keys are the (group, queue) pairs with a
// registration or a cursor, walked in order by groupPairsSQL, a probe or two
// per key, so a page reads its own keys whatever the number of cursors.
var groupsAfterSQL = groupsPageSQL(`pairs`)

// groupsAtOffsetSQL is the page of the group list at OFFSET $5: the walk of
// groupsAfterSQL from the first pair ($3 and $4 NULL) through $2 pairs (the
// offset's and the page's; every pair when NULL), of which the page's alone
// are summed.
var groupsAtOffsetSQL = groupsPageSQL(`(SELECT grp, queue_id, queue FROM pairs ORDER BY grp, queue OFFSET $5)`)

// groupPairsSQL is the queries "groups" (recursive) and "pairs": the
// (group, queue) pairs from (group $3, queue name $4) on, by group and queue
// name, at most $2 of them (every one when NULL), with a cursor (or, with
// withRegistrations, a registration) there; the pair named is included when
// nameOp is ">=". $1 keeps one group's pairs (empty: every group's); $3 NULL
// starts at the first group. The groups come one index probe each (at most
// $2 + 1 of them: every group has a pair, but the first may have none after
// $4). A group's queues come from a walk of the queues by name, a stretch
// of walkSample queues at a time (walkStretch), or, once a stretch ends
// without the page full, possibly a skip scan, so a page reads about its own
// pairs, not every cursor nor every queue:
//   - the walk takes the queues' name index in order, a probe of
//     consumers_group_queue_idx each (1.5 µs a queue on 5,000 queues): it
//     costs the page's pairs and the queues without the group between them;
//   - the skip scan jumps through consumers_group_queue_idx to each of the
//     group's distinct queues (5.6 µs each, about four walked queues; and
//     reads its registrations), then sorts those after the walk by name: it
//     costs the group's queues, however many queues there are, and the sort
//     of those (few against the cursors).
//
// Each stretch's hits estimate the group's queues (hits × queues / stretch)
// and the queues still to walk for the page (every queue for every pair).
// The skip scan is tried when four times the former is less, or for every
// pair (the walk would visit every queue), up to a quarter of the queues
// still to walk; else the walk goes on with the next stretch, and if the
// group has more, on to the page's end. So a group whose queues are few
// against the queues costs its own queues, a dense one its walk (for every
// pair, at most twice its walk), and one whose queues sit in a block of
// names its block and a stretch after it: a walk that decided after its
// first stretch alone walked on through every queue after the block. The
// skip scan's names come from a subquery behind OFFSET 0, so each is read
// once, not once per condition on it.
func groupPairsSQL(nameOp string, withRegistrations bool) string {
	// Scalar subqueries, not EXISTS: the planner hashed an EXISTS, reading
	// every cursor of the group for each group.
	has := `(SELECT true FROM lanes.consumers c WHERE c.consumer_group = g.grp AND c.queue_id = q.id LIMIT 1)`
	nextGroup := func(op, bound string) string {
		next := `(SELECT min(c.consumer_group) FROM lanes.consumers c WHERE c.consumer_group ` + op + ` ` + bound + `)`
		if withRegistrations {
			next = `least(` + next + `, (SELECT min(r.consumer_group) FROM lanes.consumer_groups r
				WHERE r.consumer_group ` + op + ` ` + bound + `))`
		}
		return next
	}
	groupQueues := `SELECT queue_id FROM skip WHERE queue_id IS NOT NULL`
	registrations, registrationsFit := ``, ``
	if withRegistrations {
		has = `coalesce(` + has + `, (SELECT true FROM lanes.consumer_groups r
			WHERE r.consumer_group = g.grp AND r.queue_id = q.id))`
		registrations = `
				registered AS (SELECT r.queue_id FROM lanes.consumer_groups r
					WHERE (SELECT try FROM walked) AND r.consumer_group = g.grp
					ORDER BY r.queue_id LIMIT (SELECT skip_cap FROM walked) + 1),`
		registrationsFit = ` AND (SELECT count(*) FROM registered) <= w.skip_cap`
		groupQueues += ` UNION SELECT queue_id FROM registered`
	}
	named := `q.name >= coalesce(CASE WHEN g.rank = 1 THEN $4::text END, '')
					AND (g.rank > 1 OR $4 IS NULL OR q.name ` + nameOp + ` $4)`
	return `groups (grp, rank) AS (
			SELECT s.grp, 1 FROM (SELECT coalesce($3::text, ` + nextGroup(">=", "''") + `) AS grp) s
			WHERE s.grp IS NOT NULL
			UNION ALL
			SELECT n.grp, w.rank + 1 FROM groups w CROSS JOIN LATERAL (SELECT ` + nextGroup(">", "w.grp") + ` AS grp) n
			WHERE n.grp IS NOT NULL AND $1 = '' AND w.rank <= coalesce($2::int8, w.rank)),
		sample AS (SELECT ` + strconv.Itoa(walkSample) + `::int8 AS queues, greatest(reltuples, 1)::float8 AS of_queues
			FROM pg_class WHERE oid = 'lanes.queues'::regclass),
		pairs AS (SELECT g.grp, q.id AS queue_id, q.name AS queue
			FROM (SELECT grp, rank FROM groups ORDER BY rank) g
			CROSS JOIN sample
			CROSS JOIN LATERAL (WITH RECURSIVE walk (ids, names, last, total, cut, try, skip_cap) AS (
					` + walkStretch(``, named, has, "0") + `
					UNION ALL
					` + walkStretch(`walk w CROSS JOIN LATERAL `, named+` AND q.name > w.last`, has, "w.total") + `
					WHERE w.cut AND NOT w.try),
				walked AS (SELECT cut, last, try, skip_cap FROM walk WHERE NOT cut OR try),
				skip (queue_id, n) AS (
					(SELECT c.queue_id, 1 FROM lanes.consumers c WHERE (SELECT try FROM walked) AND c.consumer_group = g.grp
						ORDER BY c.queue_id LIMIT 1)
					UNION ALL
					SELECT (SELECT c.queue_id FROM lanes.consumers c WHERE c.consumer_group = g.grp AND c.queue_id > s.queue_id
						ORDER BY c.queue_id LIMIT 1), s.n + 1
					FROM skip s WHERE s.queue_id IS NOT NULL AND s.n <= (SELECT skip_cap FROM walked)),` + registrations + `
				way AS (SELECT w.try AND (SELECT count(*) FROM skip WHERE queue_id IS NOT NULL) <= w.skip_cap` + registrationsFit + ` AS skip,
						w.cut, w.last FROM walked w)
				(SELECT u.id, u.name FROM walk CROSS JOIN LATERAL unnest(walk.ids, walk.names) AS u(id, name))
				UNION ALL
				(SELECT q.id, q.name FROM (SELECT gq.queue_id AS id,
						(SELECT n.name FROM lanes.queues n WHERE n.id = gq.queue_id) AS name FROM (` + groupQueues + `) gq OFFSET 0) q
					WHERE (SELECT skip FROM way) AND q.name > (SELECT last FROM way) AND ` + named + `
					ORDER BY q.name LIMIT $2)
				UNION ALL
				(SELECT q.id, q.name FROM lanes.queues q
					WHERE (SELECT cut AND NOT skip FROM way) AND q.name > (SELECT last FROM way) AND ` + named + ` AND ` + has + `
					ORDER BY q.name LIMIT $2)) q
			ORDER BY g.rank, q.name LIMIT $2)`
}

// walkStretch is one step of groupPairsSQL's walk, from the step before
// (w) when from names it: the next walkSample queues (of those where holds)
// after prior hits, the group's among them (hit: has) as ids and names
// (pairs sorts them), at most the page's remaining $2 - prior. A stretch is
// cut when it visited walkSample queues and the page wants more; it then
// tries the skip scan when its own hits say the group is sparse (see
// groupPairsSQL), else the walk goes on with the next stretch. So a stretch
// with few hits after many, the end of a block of the group's queues, turns
// the walk to the skip scan rather than on through every queue after it.
func walkStretch(from, where, has, prior string) string {
	return `SELECT s.ids, s.names, s.last, d.total, d.cut,
			d.cut AND ($2 IS NULL OR 4 * s.hits * sample.of_queues / sample.queues < d.to_walk), ceil(d.to_walk / 4)::int8
		FROM ` + from + `(SELECT array_agg(x.id) FILTER (WHERE x.hit) AS ids,
				array_agg(x.name) FILTER (WHERE x.hit) AS names, max(x.name) AS last,
				count(*) FILTER (WHERE x.hit) AS hits, coalesce(max(x.visited), 0) AS visited
			FROM (SELECT x.id, x.name, x.hit, x.visited
				FROM (SELECT q.id, q.name, coalesce(` + has + `, false) AS hit, row_number() OVER (ORDER BY q.name) AS visited
					FROM lanes.queues q WHERE ` + where + `
					ORDER BY q.name LIMIT sample.queues) x
				WHERE x.hit OR x.visited = sample.queues LIMIT $2 - ` + prior + `) x) s
		CROSS JOIN LATERAL (SELECT ` + prior + ` + s.hits AS total,
				s.visited = sample.queues AND ` + prior + ` + s.hits < coalesce($2, ` + prior + ` + s.hits + 1) AS cut,
				least(sample.of_queues, coalesce(($2 - ` + prior + ` - s.hits)::float8 * sample.queues / nullif(s.hits, 0),
					sample.of_queues)) AS to_walk) d`
}

// walkSample is how many queues a stretch of a group's walk visits: after
// each, the walk may turn to a skip scan.
const walkSample = 1000

// LaggingCursors lists one page of the cursors whose oldest unconsumed message
// waited at least minLag, by group, queue and partition name, filtered in the
// database, and says whether more follow. Without an offset the page starts
// after the key page.After (group, queue, partition), so rows that come or go
// before it between two pages shift nothing, and reads the oldest message of
// the cursors it walks past only (cursorsAfter): an offset page read every
// cursor's (0.6 s a page at 500,000 cursors, 3 s near the end).
func (e *Engine) LaggingCursors(ctx context.Context, minLag time.Duration, page RowPage) ([]GroupCursor, bool, error) {
	if page.Offset > 0 {
		return e.cursorPage(ctx, laggingPageSQL, page,
			"", page.limitArg(), page.Offset, minLag.Seconds())
	}
	return e.cursorsAfter(ctx, page, "", page.After, true, minLag)
}

// pairsFromSQL and pairsAfterSQL are groupPairsSQL's pairs with a cursor,
// from the pair named on and strictly after it.
var (
	pairsFromSQL  = `WITH RECURSIVE ` + groupPairsSQL(">=", false) + ` SELECT grp, queue_id, queue FROM pairs ORDER BY grp, queue`
	pairsAfterSQL = `WITH RECURSIVE ` + groupPairsSQL(">", false) + ` SELECT grp, queue_id, queue FROM pairs ORDER BY grp, queue`
)

// pairCursorsSQL is the cursors of the (group, queue) pairs ($1 groups, $2
// queue ids, $3 queue names, in order) strictly after the key ($5, $6, $7)
// (every one when $5 is NULL), by pair then partition name, at most $4 rows.
// With $8 only the lagging ones: an unconsumed message that waited at least
// $9 seconds. Each pair's cursors come from the partitions' (queue_id, name)
// index in name order, at most a page of them, the oldest message read for
// those only; the incremental sort over the pairs in order lets LIMIT stop
// at the page's end.
const pairCursorsSQL = `SELECT pr.grp, pr.queue_id, pr.queue, cr.partition, cr.partition_id, cr.lease_id, cr.lease_active,
		cr.total_consumed, cr.last_consumed_at, cr.offset_lag, cr.oldest, cr.lag_seconds
	FROM (SELECT u.grp, u.queue_id, u.queue, u.rank
		FROM unnest($1::text[], $2::uuid[], $3::text[]) WITH ORDINALITY AS u(grp, queue_id, queue, rank)
		ORDER BY u.rank) pr
	CROSS JOIN LATERAL (SELECT p.name AS partition, p.id AS partition_id,
			CASE WHEN c.lease_expires_at > now() THEN c.lease_id::text ELSE '' END AS lease_id,
			coalesce(c.lease_expires_at > now(), false) AS lease_active, c.total_consumed, c.last_consumed_at,
			greatest(p.last_offset - greatest(c.committed, p.log_start - 1), 0) AS offset_lag, o.created_at AS oldest,
			coalesce(extract(epoch FROM now() - o.created_at), 0)::float8 AS lag_seconds
		FROM lanes.partitions p
		JOIN lanes.consumers c ON c.partition_id = p.id AND c.consumer_group = pr.grp
		` + oldestUnconsumedJoin + `
		WHERE p.queue_id = pr.queue_id
		  AND ($5::text IS NULL OR (pr.grp, pr.queue) > ($5, $6::text) OR p.name > $7::text)
		  AND (NOT $8 OR (p.last_offset > greatest(c.committed, p.log_start - 1)
			AND o.created_at IS NOT NULL AND greatest(extract(epoch FROM now() - o.created_at), 0) >= $9))
		ORDER BY p.name LIMIT $4) cr
	ORDER BY pr.rank, cr.partition LIMIT $4`

// A round of cursorsAfter walks the page's pairs (every pair has a cursor;
// the key's may have none left after the key), or for a lagging page, where
// few pairs may lag, at least minLaggingPairBatch, four times more each
// round up to maxPairBatch: walking a pair costs a few microseconds, a round
// two statements, and the pairs' cursors are read only until the page fills.
// (A variable so a test can walk in rounds over a few pairs.)
var minLaggingPairBatch = 1000

const maxPairBatch = 100_000

// cursorsAfter answers one page of onlyGroup's cursors ("" = every group's)
// after key (group, queue, partition; nil: from the first), by group, queue
// and partition name, only the lagging ones (minLag) when lagging, and says
// whether more follow. It walks the (group, queue) pairs from the key's on
// (pairsFromSQL) a page's worth at a time and reads their cursors
// (pairCursorsSQL) until the page is full or the pairs run out, so a page
// costs its own pairs and cursors, not a pass over every cursor (0.2 s at
// 500,000 of them).
func (e *Engine) cursorsAfter(ctx context.Context, page RowPage, onlyGroup string, key []string, lagging bool, minLag time.Duration) ([]GroupCursor, bool, error) {
	var group, queue, partition *string
	if len(key) == 3 {
		group, queue, partition = &key[0], &key[1], &key[2]
	}
	walkGroup, walkQueue := group, queue
	if walkGroup == nil && onlyGroup != "" {
		first := ""
		walkGroup, walkQueue = &onlyGroup, &first
	}
	var batch any // nil: every pair at once
	if page.Limit > 0 {
		batch = page.Limit + 2
		if lagging {
			batch = max(page.Limit+2, minLaggingPairBatch)
		}
	}
	pairsSQL := pairsFromSQL
	var list []GroupCursor
	for {
		groups, queueIDs, queues, err := e.groupPairs(ctx, pairsSQL, onlyGroup, batch, walkGroup, walkQueue)
		if err != nil {
			return nil, false, err
		}
		if len(groups) == 0 {
			break
		}
		var rows any // the rows still wanted, nil: all
		if page.Limit > 0 {
			rows = page.Limit + 1 - len(list)
		}
		got, _, err := e.cursorPage(ctx, pairCursorsSQL, RowPage{}, groups, queueIDs, queues, rows,
			group, queue, partition, lagging, minLag.Seconds())
		if err != nil {
			return nil, false, err
		}
		list = append(list, got...)
		size, bounded := batch.(int)
		if !bounded || len(groups) < size || len(list) > page.Limit {
			break
		}
		walkGroup, walkQueue = &groups[len(groups)-1], &queues[len(queues)-1]
		pairsSQL, batch = pairsAfterSQL, min(4*size, maxPairBatch)
	}
	list, more := cutPage(list, page)
	return list, more, nil
}

// groupPairs runs pairsFromSQL or pairsAfterSQL.
func (e *Engine) groupPairs(ctx context.Context, sql, onlyGroup string, batch any, fromGroup, fromQueue *string) (groups []string, queueIDs []uuid.UUID, queues []string, err error) {
	err = e.queryWithoutJIT(ctx, func(rows pgx.Rows) error {
		var group, queue string
		var queueID uuid.UUID
		_, err := pgx.ForEachRow(rows, []any{&group, &queueID, &queue}, func() error {
			groups, queueIDs, queues = append(groups, group), append(queueIDs, queueID), append(queues, queue)
			return nil
		})
		return err
	}, sql, onlyGroup, batch, fromGroup, fromQueue)
	return groups, queueIDs, queues, err
}

// SubscriptionUpdate reports a subscription change.
type SubscriptionUpdate struct {
	RowsUpdated int
}

// UpdateSubscription moves the instant from which the group's partitions that
// are not seeded yet start, on every queue of the group and every discovery
// scope it subscribed to (for the queues it has not met there yet). Existing
// cursors do not move (seek does that). A group subscribed with "all" becomes
// a timestamp subscription, since it now has a start instant.
func (e *Engine) UpdateSubscription(ctx context.Context, group string, ts time.Time) (SubscriptionUpdate, error) {
	if err := checkJSONYears("subscriptionTimestamp", ts); err != nil {
		return SubscriptionUpdate{}, err
	}
	const moved = `SET subscription_timestamp = $2,
			subscription_mode = CASE WHEN subscription_mode = 'all' THEN 'timestamp' ELSE subscription_mode END
		WHERE consumer_group = $1 RETURNING 1`
	var out SubscriptionUpdate
	err := e.pool.QueryRow(ctx, `WITH queues AS (UPDATE lanes.consumer_groups `+moved+`),
			scopes AS (UPDATE lanes.discovery_subscriptions `+moved+`)
		SELECT (SELECT count(*) FROM queues) + (SELECT count(*) FROM scopes)`, group, ts).Scan(&out.RowsUpdated)
	return out, err
}

// GroupDeletion reports what a group delete removed.
type GroupDeletion struct {
	DeletedPartitions int
	MetadataDeleted   bool
}

// DeleteGroup deletes the group's cursors (on queue, or on every queue when
// queue is ""), so its next pop seeds them again. With deleteMetadata the
// stored subscription goes too (for every queue: its discovery scopes' as
// well) and the next pop subscribes afresh; without it the subscription is
// kept and only re-seeding is forced.
func (e *Engine) DeleteGroup(ctx context.Context, group, queue string, deleteMetadata bool) (GroupDeletion, error) {
	var out GroupDeletion
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		// Lock order: consumer rows ascending, then the metadata rows.
		if err := tx.QueryRow(ctx, `WITH doomed AS (
				SELECT c.partition_id FROM lanes.consumers c
				JOIN lanes.partitions p ON p.id = c.partition_id
				JOIN lanes.queues q ON q.id = p.queue_id
				WHERE c.consumer_group = $1 AND ($2 = '' OR q.name = $2)
				ORDER BY c.partition_id FOR UPDATE OF c),
			gone AS (
				DELETE FROM lanes.consumers c USING doomed d
				WHERE c.partition_id = d.partition_id AND c.consumer_group = $1 RETURNING 1)
			SELECT count(*) FROM gone`, group, queue).Scan(&out.DeletedPartitions); err != nil {
			return err
		}
		if deleteMetadata {
			tag, err := tx.Exec(ctx, `DELETE FROM lanes.consumer_groups g USING lanes.queues q
				WHERE q.id = g.queue_id AND g.consumer_group = $1 AND ($2 = '' OR q.name = $2)`, group, queue)
			if err != nil {
				return err
			}
			out.MetadataDeleted = tag.RowsAffected() > 0
			if queue == "" {
				// Else a discovery pop would register the scope's queues from the old subscription.
				tag, err := tx.Exec(ctx, `DELETE FROM lanes.discovery_subscriptions WHERE consumer_group = $1`, group)
				if err != nil {
					return err
				}
				out.MetadataDeleted = out.MetadataDeleted || tag.RowsAffected() > 0
			}
			return nil
		}
		_, err := tx.Exec(ctx, `UPDATE lanes.consumer_groups g SET seeded_version = -1, claim_floor = '0', claim_epoch = claim_epoch + 1
			FROM lanes.queues q WHERE q.id = g.queue_id AND g.consumer_group = $1 AND ($2 = '' OR q.name = $2)`, group, queue)
		return err
	})
	return out, err
}
