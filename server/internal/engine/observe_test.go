package engine

import (
	"fmt"
	"maps"
	"testing"
)

// The lag gauges count, per (queue, group), every partition of the queue:
// cursors where the group has them and, where it lacks one, what its next pop
// would seed, whichever way the group came to be: registered and seeded,
// registered but unseeded with a cursor everywhere or short of some, cursors
// without a registration, a registration without cursors under mode all, and
// under mode new before and after the partitions' last writes.
func TestBacklogLagCountsEveryPartitionOfTheGroupsQueue(t *testing.T) {
	e := sparseGroups(t)
	if _, err := e.pool.Exec(t.Context(), `
		DELETE FROM lanes.consumers c USING lanes.partitions p, lanes.queues q
			WHERE p.id = c.partition_id AND q.id = p.queue_id AND c.consumer_group = 'a' AND q.name = 'q01' AND p.name = 'p2';
		UPDATE lanes.consumer_groups g SET seeded_version = q.partition_version FROM lanes.queues q
			WHERE q.id = g.queue_id AND g.consumer_group = 'a' AND q.name = 'q02';
		UPDATE lanes.partitions p SET last_write_at = now() - interval '1 hour' FROM lanes.queues q
			WHERE q.id = p.queue_id AND q.name = 'q06';
		INSERT INTO lanes.consumer_groups (consumer_group, queue_id, subscription_mode, subscription_timestamp)
			SELECT 'e', id, 'new', now() FROM lanes.queues WHERE name = 'q04'
			UNION ALL SELECT 'f', id, 'new', now() - interval '2 hours' FROM lanes.queues WHERE name = 'q06';
		ANALYZE`); err != nil {
		t.Fatal(err)
	}
	b, err := e.Backlog(t.Context(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, l := range b.Lags {
		got[l.Queue+"/"+l.Group] = l.Messages
	}
	want := map[string]int64{}
	for i := range 12 {
		want[fmt.Sprintf("q%02d/a", i)] = 0
		if i%2 == 0 {
			want[fmt.Sprintf("q%02d/b", i)] = 0
		}
	}
	// One message per partition, three partitions per queue.
	want["q01/a"] = 1 // no cursor on p2: seeded before everything retained
	want["q03/a"] = 1 // its cursor on p1 before the message
	want["q10/b"] = 3
	want["q05/c"] = 0 // cursors without a registration
	want["q07/d"] = 3 // registered, no cursor: mode all
	want["q04/e"] = 0 // mode new, nothing written since: seeded at the end
	want["q06/f"] = 3 // mode new from before the segments were written
	if !maps.Equal(got, want) {
		t.Errorf("lags\n got %v\nwant %v", got, want)
	}
	if len(b.Lags) > 0 && (b.Lags[0].Messages != 3 || b.Lags[len(b.Lags)-1].Messages != 0) {
		t.Errorf("lags not largest first: %+v", b.Lags)
	}
}
