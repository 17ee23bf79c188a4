package engine

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// groupSumsSQL and groupsByOffsetSQL are the group list by offset as it was
// before a page summed its own rows alone: one pass over every cursor
// (cursorRowsSQL) summed per (group, queue), then the page at OFFSET $3,
// LIMIT $2. The listings' tests keep it as the rows every way of paging the
// group list must answer.
const groupSumsSQL = `SELECT grp, queue_id, count(*)::int AS cursors, count(*) FILTER (WHERE offset_lag > 0)::int AS with_lag,
		coalesce(sum(offset_lag), 0)::int8 AS total_lag,
		coalesce(max(lag_seconds) FILTER (WHERE offset_lag > 0), 0)::float8 AS max_lag_seconds,
		bool_or(last_consumed_at IS NOT NULL) AS ever_consumed
	FROM (` + cursorRowsSQL + `) cr GROUP BY grp, queue_id`

const groupsByOffsetSQL = `WITH cursors AS (` + groupSumsSQL + `),
		keys AS (SELECT consumer_group AS grp, queue_id FROM lanes.consumer_groups
			UNION SELECT grp, queue_id FROM cursors)
	SELECT k.grp, q.name, g.subscription_mode, g.subscription_timestamp, g.created_at,
		coalesce(c.cursors, 0), coalesce(c.with_lag, 0), coalesce(c.total_lag, 0),
		coalesce(c.max_lag_seconds, 0), coalesce(c.ever_consumed, false)
	FROM keys k JOIN lanes.queues q ON q.id = k.queue_id
	LEFT JOIN lanes.consumer_groups g ON g.consumer_group = k.grp AND g.queue_id = k.queue_id
	LEFT JOIN cursors c ON c.grp = k.grp AND c.queue_id = k.queue_id
	ORDER BY k.grp, q.name LIMIT $2 OFFSET $3`

// The group list's totals, paged by offset and by key at several page sizes,
// are those the test adds up itself from the raw rows of the cursors,
// partitions, segments and registrations: with cursors caught up, lagging,
// holding a live lease (a real pop's) or a lapsed one, below a trimmed log,
// on several groups and queues, a group with cursors and no registration (a
// seek's) and one registered without cursors.
func TestTheGroupListTotalsAreThoseOfItsRawRows(t *testing.T) {
	e := newIsolatedEngine(t)
	ctx := t.Context()
	for _, q := range []string{"qa", "qb", "qc"} {
		for p := range 3 {
			for push := range 3 { // three segments of two messages
				mustPush(t, e, items(q, fmt.Sprintf("p%d", p), fmt.Sprintf("%s-%d-%d-a", q, p, push), fmt.Sprintf("%s-%d-%d-b", q, p, push))...)
			}
		}
	}
	// Segments minutes apart, so a cursor read against the wrong segment
	// shows in its row's time lag.
	if _, err := e.pool.Exec(ctx, `UPDATE lanes.segments s SET created_at = now() - make_interval(mins => (10 * (20 - s.base_offset)
			- (SELECT count(*) FROM lanes.partitions o WHERE o.id < s.partition_id))::int)`); err != nil {
		t.Fatal(err)
	}
	// g1 acks the first batch it takes on each queue and keeps the second
	// leased; g2 takes qa, and one partition of qb, with autoAck; the queue
	// mode (no group) holds a lease on qb.
	for _, q := range []string{"qa", "qb", "qc"} {
		first := mustPop(t, e, PopRequest{Queue: q, Group: "g1", Batch: 3, Partitions: 2, SubscriptionMode: "all"})
		acks := make([]AckItem, len(first.Messages))
		for i, m := range first.Messages {
			acks[i] = AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID.String(), Group: "g1", LeaseID: m.LeaseID}
		}
		mustAck(t, e, acks...)
		if second := mustPop(t, e, PopRequest{Queue: q, Group: "g1", Batch: 2, Partitions: 1}); len(second.Messages) == 0 {
			t.Fatalf("g1 found nothing more on %s", q)
		}
	}
	mustPop(t, e, PopRequest{Queue: "qa", Group: "g2", Batch: 100, AutoAck: true, SubscriptionMode: "all"})
	mustPop(t, e, PopRequest{Queue: "qb", Group: "g2", Batch: 100, Partitions: 1, AutoAck: true, SubscriptionMode: "all"})
	mustPop(t, e, PopRequest{Queue: "qb", Batch: 1, SubscriptionMode: "all"})
	if _, err := e.Seek(ctx, SeekRequest{Group: "g0-seek", Queue: "qb", Partition: "p1", ToEnd: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `
		-- One g1 lease on qc has lapsed.
		UPDATE lanes.consumers c SET lease_expires_at = now() - interval '1 minute'
			FROM lanes.queues q WHERE q.id = c.queue_id AND q.name = 'qc' AND c.consumer_group = 'g1' AND c.lease_id IS NOT NULL;
		-- qa's p0 lost its first segment to retention: g1 and g2 committed below it.
		DELETE FROM lanes.segments s USING lanes.partitions p, lanes.queues q
			WHERE p.id = s.partition_id AND q.id = p.queue_id AND q.name = 'qa' AND p.name = 'p0' AND s.base_offset = 0;
		UPDATE lanes.partitions p SET log_start = 2 FROM lanes.queues q WHERE q.id = p.queue_id AND q.name = 'qa' AND p.name = 'p0';
		UPDATE lanes.consumers c SET committed = -1, total_consumed = 0, last_consumed_at = NULL
			FROM lanes.partitions p, lanes.queues q
			WHERE p.id = c.partition_id AND q.id = p.queue_id AND q.name = 'qa' AND p.name = 'p0' AND c.consumer_group = 'g1';
		INSERT INTO lanes.consumer_groups (consumer_group, queue_id, subscription_mode, subscription_timestamp)
			SELECT 'g3-registered', id, 'new', now() - interval '1 day' FROM lanes.queues WHERE name = 'qb';
		ANALYZE`); err != nil {
		t.Fatal(err)
	}

	var leased, lapsed, trimmed int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE lease_expires_at > now()), count(*) FILTER (WHERE lease_expires_at <= now()),
			count(*) FILTER (WHERE committed < p.log_start - 1)
		FROM lanes.consumers c JOIN lanes.partitions p ON p.id = c.partition_id`).Scan(&leased, &lapsed, &trimmed); err != nil {
		t.Fatal(err)
	}
	want := groupTotalsFromRawRows(t, e)
	if len(want) != 8 || leased == 0 || lapsed == 0 || trimmed == 0 {
		t.Fatalf("the fill: %d rows, %d live leases, %d lapsed, %d below the log; want 8 rows and some of each:\n%v",
			len(want), leased, lapsed, trimmed, want)
	}
	for _, limit := range []int{0, 1, 2, 4, 8, 9, 100} {
		byOffset := pageGroupList(t, e, limit, func(page *RowPage, got []GroupSummary) { page.Offset += len(got) })
		wantGroupTotals(t, fmt.Sprintf("by offset, %d a page", limit), byOffset, want)
		byKey := pageGroupList(t, e, limit, func(page *RowPage, got []GroupSummary) {
			page.After = []string{got[len(got)-1].Group, got[len(got)-1].Queue}
		})
		wantGroupTotals(t, fmt.Sprintf("by key, %d a page", limit), byKey, want)
	}
}

// listedGroup is one row of the group list and the database's clock just
// before and after the page that held it was read.
type listedGroup struct {
	GroupSummary
	before, after time.Time
}

// pageGroupList pages through the group list, limit rows a page, next
// placing each following page.
func pageGroupList(t *testing.T, e *Engine, limit int, next func(*RowPage, []GroupSummary)) []listedGroup {
	t.Helper()
	clock := func() (now time.Time) {
		if err := e.pool.QueryRow(t.Context(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now
	}
	var rows []listedGroup
	page := RowPage{Limit: limit}
	for {
		before := clock()
		got, more, err := e.ListGroups(t.Context(), page)
		if err != nil {
			t.Fatal(err)
		}
		after := clock()
		for _, s := range got {
			rows = append(rows, listedGroup{s, before, after})
		}
		if !more {
			return rows
		}
		if len(got) == 0 || len(rows) > 100 {
			t.Fatalf("page %+v: %d rows and more to follow", page, len(got))
		}
		next(&page, got)
	}
}

// groupTotals is one (group, queue) row added up from the raw rows: oldest is
// when the oldest message unconsumed by a lagging cursor was written.
type groupTotals struct {
	group, queue             string
	cursors, lagging         int
	lag                      int64
	oldest                   *time.Time
	everConsumed             bool
	mode                     string
	subscribedAt, registered *time.Time
}

// groupTotalsFromRawRows reads the cursors, partitions, segments and
// registrations as they are stored and adds them up in Go, by group and
// queue name: a cursor has consumed through committed or the offset before
// the log's start, whichever is later; it lags by what its partition holds
// past that, and its oldest unconsumed message is in the last segment
// starting at or before the offset after it.
func groupTotalsFromRawRows(t *testing.T, e *Engine) []groupTotals {
	t.Helper()
	ctx := t.Context()
	type partition struct {
		queue             string
		lastOffset, start int64
		segments          map[int64]time.Time // by base offset
	}
	partitions := map[uuid.UUID]*partition{}
	queueNames := map[uuid.UUID]string{}
	read := func(sql string, scan func(pgx.Rows) error) {
		rows, err := e.pool.Query(ctx, sql)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				t.Fatal(err)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	read(`SELECT id, name FROM lanes.queues`, func(r pgx.Rows) error {
		var id uuid.UUID
		var name string
		err := r.Scan(&id, &name)
		queueNames[id] = name
		return err
	})
	read(`SELECT id, queue_id, last_offset, log_start FROM lanes.partitions`, func(r pgx.Rows) error {
		var id, queue uuid.UUID
		p := &partition{segments: map[int64]time.Time{}}
		err := r.Scan(&id, &queue, &p.lastOffset, &p.start)
		p.queue = queueNames[queue]
		partitions[id] = p
		return err
	})
	read(`SELECT partition_id, base_offset, created_at FROM lanes.segments`, func(r pgx.Rows) error {
		var id uuid.UUID
		var base int64
		var at time.Time
		err := r.Scan(&id, &base, &at)
		partitions[id].segments[base] = at
		return err
	})
	totals := map[[2]string]*groupTotals{}
	row := func(group, queue string) *groupTotals {
		key := [2]string{group, queue}
		if totals[key] == nil {
			totals[key] = &groupTotals{group: group, queue: queue}
		}
		return totals[key]
	}
	read(`SELECT partition_id, consumer_group, committed, last_consumed_at IS NOT NULL FROM lanes.consumers`, func(r pgx.Rows) error {
		var id uuid.UUID
		var group string
		var committed int64
		var consumed bool
		if err := r.Scan(&id, &group, &committed, &consumed); err != nil {
			return err
		}
		p := partitions[id]
		s := row(group, p.queue)
		s.cursors++
		s.everConsumed = s.everConsumed || consumed
		through := max(committed, p.start-1)
		if p.lastOffset <= through {
			return nil
		}
		s.lagging++
		s.lag += p.lastOffset - through
		base := int64(-1)
		for b := range p.segments {
			if b <= through+1 && b > base {
				base = b
			}
		}
		if at, ok := p.segments[base]; ok && (s.oldest == nil || at.Before(*s.oldest)) {
			s.oldest = &at
		}
		return nil
	})
	read(`SELECT consumer_group, queue_id, subscription_mode, subscription_timestamp, created_at FROM lanes.consumer_groups`, func(r pgx.Rows) error {
		var group, mode string
		var queue uuid.UUID
		var subscribedAt, registered time.Time
		err := r.Scan(&group, &queue, &mode, &subscribedAt, &registered)
		s := row(group, queueNames[queue])
		s.mode, s.subscribedAt, s.registered = mode, &subscribedAt, &registered
		return err
	})
	list := make([]groupTotals, 0, len(totals))
	for _, s := range totals {
		list = append(list, *s)
	}
	slices.SortFunc(list, func(a, b groupTotals) int {
		return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.queue, b.queue))
	})
	return list
}

// wantGroupTotals wants the listed rows to be want's, in its order, each
// time lag that of its oldest unconsumed message at some instant while its
// page was read.
func wantGroupTotals(t *testing.T, how string, got []listedGroup, want []groupTotals) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d", how, len(got), len(want))
	}
	equalTimes := func(a, b *time.Time) bool { return (a == nil) == (b == nil) && (a == nil || a.Equal(*b)) }
	for i, w := range want {
		g := got[i]
		same := g.Group == w.group && g.Queue == w.queue && g.Cursors == w.cursors && g.PartitionsWithLag == w.lagging &&
			g.TotalLag == w.lag && g.EverConsumed == w.everConsumed && g.SubscriptionMode == w.mode &&
			equalTimes(g.SubscriptionTimestamp, w.subscribedAt) && equalTimes(g.SubscriptionCreatedAt, w.registered)
		lagFits := g.MaxTimeLag == 0 && w.oldest == nil
		if w.oldest != nil {
			// The clocks are read to the microsecond around the page.
			lagFits = g.MaxTimeLag >= g.before.Sub(*w.oldest)-time.Microsecond && g.MaxTimeLag <= g.after.Sub(*w.oldest)+time.Microsecond
		}
		if !same || !lagFits {
			t.Errorf("%s, row %d: listed %s/%s cursors=%d lagging=%d lag=%d consumed=%v mode=%q time lag %v (read %v to %v)\n"+
				"want %s/%s cursors=%d lagging=%d lag=%d consumed=%v mode=%q oldest unconsumed %v",
				how, i, g.Group, g.Queue, g.Cursors, g.PartitionsWithLag, g.TotalLag, g.EverConsumed, g.SubscriptionMode, g.MaxTimeLag,
				g.before, g.after, w.group, w.queue, w.cursors, w.lagging, w.lag, w.everConsumed, w.mode, w.oldest)
		}
	}
}

// A page by offset sums its own rows' cursors only, as a page by key does:
// over 1,500 one-partition queues with two groups each (3,000 cursors), a page
// of 10 at offset 20 and one at offset 700 read their own cursors and those
// the walk probes on its way to the page's end (at most twice the pairs
// there: to see the first group end, the walk reads a stretch of the next),
// where the pass over every cursor read all 3,000.
func TestAPageByOffsetSumsItsOwnCursorsOnly(t *testing.T) {
	e := newIsolatedEngine(t)
	ctx := t.Context()
	seedTwoGroupsOnEachOf1500Queues(t, e)
	for _, offset := range []int{20, 700} {
		page := RowPage{Limit: 10, Offset: offset}
		list, more, err := e.ListGroups(ctx, page)
		if err != nil || len(list) != 10 || !more || list[0].Queue != fmt.Sprintf("q%04d", offset) {
			t.Fatalf("offset %d: %d rows from %+v, more %v, %v", offset, len(list), list[:min(len(list), 1)], more, err)
		}
		read := consumerRowsRead(t, e, groupsAtOffsetSQL, "", offset+page.Limit+1, nil, nil, offset)
		if read > 2*(offset+page.Limit+1)+60 {
			t.Errorf("a page of %d at offset %d read %d cursors", page.Limit, offset, read)
		}
	}
}
