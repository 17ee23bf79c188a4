package engine

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// stallSegmentWrite makes the next write of a segment into the partition named
// partition of queue sleep for pause inside PostgreSQL, after the segment row
// is written and before the push commits: the window in which a push has
// stamped its segment but nobody can see it yet.
func stallSegmentWrite(t *testing.T, e *Engine, queue, partition string, pause time.Duration) {
	t.Helper()
	suffix := time.Now().UnixNano()
	trigger, function := fmt.Sprintf("test_stall_segment_%d", suffix), fmt.Sprintf("public.test_stall_segment_%d", suffix)
	ctx := context.Background()
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS public.test_stalled_segments (queue text, partition text, pause_ms int NOT NULL, PRIMARY KEY (queue, partition))`,
		fmt.Sprintf(`CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE ms int;
		BEGIN
			DELETE FROM public.test_stalled_segments s USING lanes.partitions p, lanes.queues q
				WHERE p.id = NEW.partition_id AND q.id = p.queue_id AND s.queue = q.name AND s.partition = p.name
				RETURNING s.pause_ms INTO ms;
			IF ms IS NOT NULL THEN
				PERFORM pg_sleep(ms / 1000.0);
			END IF;
			RETURN NULL;
		END $$`, function),
		fmt.Sprintf(`INSERT INTO public.test_stalled_segments VALUES ('%s', '%s', %d)`, queue, partition, pause.Milliseconds()),
		fmt.Sprintf(`CREATE TRIGGER %s AFTER INSERT ON lanes.segments FOR EACH ROW EXECUTE FUNCTION %s()`, trigger, function),
	} {
		if _, err := e.pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		_, _ = e.pool.Exec(context.Background(), `DROP TRIGGER IF EXISTS `+trigger+` ON lanes.segments`)
		_, _ = e.pool.Exec(context.Background(), `DROP FUNCTION IF EXISTS `+function+`()`)
	})
}

// model.md: a named group's `new` skips the backlog of its first contact. A
// message into a new partition that commits after that contact is not backlog,
// even when its push stamped the segment before the contact began: the group
// must receive it.
func TestANewGroupReceivesAMessageCommittedAfterItsFirstContact(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	mustPush(t, e, items(q, "old", "backlog")...)
	const stall = 1500 * time.Millisecond
	stallSegmentWrite(t, e, q, "fresh", stall)
	pushed := make(chan []PushResult, 1)
	start := time.Now()
	go func() {
		res, err := e.Push(context.Background(), items(q, "fresh", "n1"))
		if err != nil {
			t.Error(err)
		}
		pushed <- res
	}()
	time.Sleep(300 * time.Millisecond) // the push is inside its stall
	if b := mustPop(t, e, PopRequest{Queue: q, Group: "late", SubscriptionMode: "new"}); len(b.Messages) != 0 {
		t.Fatalf("first contact: %v, want nothing (the backlog is skipped)", txnIDs(b.Messages))
	}
	if time.Since(start) >= stall {
		t.Fatalf("the first contact waited for the stalled push (%v): the test shows nothing", time.Since(start))
	}
	if res := <-pushed; len(res) != 1 || res[0].Status != PushQueued {
		t.Fatalf("push: %+v", res)
	}
	b := mustPop(t, e, PopRequest{Queue: q, Group: "late", Partitions: 10, Batch: 10})
	if got := txnIDs(b.Messages); len(got) != 1 || got[0] != "n1" {
		t.Fatalf("after the push committed: %v, want [n1] (it committed after the group subscribed)", got)
	}
}
