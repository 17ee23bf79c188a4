package engine

import (
	"context"
	"fmt"
	"reflect"
	"testing"
)

// cursorCommit is one transaction that moved a cursor: from and to offsets
// and the synchronous_commit setting it committed with.
type cursorCommit struct {
	from, to int64
	mode     string
}

// recordCursorCommits installs, for the test's life, a trigger on
// lanes.consumers that records every move of group's cursors with the
// synchronous_commit setting of the transaction that made it: what PostgreSQL
// itself will wait for at that transaction's commit. The returned func reads
// the moves in order.
func recordCursorCommits(t *testing.T, e *Engine, group string) func() []cursorCommit {
	t.Helper()
	ctx := context.Background()
	trigger := fmt.Sprintf("record_cursor_commits_%d", queueSeq.Add(1))
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS public.test_cursor_commits (id bigserial PRIMARY KEY,
			consumer_group text, committed_from bigint, committed_to bigint, synchronous_commit text)`,
		`CREATE OR REPLACE FUNCTION public.test_record_cursor_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO public.test_cursor_commits (consumer_group, committed_from, committed_to, synchronous_commit)
			VALUES (NEW.consumer_group, OLD.committed, NEW.committed, current_setting('synchronous_commit'));
			RETURN NEW;
		END $$`,
		fmt.Sprintf(`CREATE TRIGGER %s AFTER UPDATE ON lanes.consumers FOR EACH ROW
			WHEN (NEW.consumer_group = '%s' AND NEW.committed IS DISTINCT FROM OLD.committed)
			EXECUTE FUNCTION public.test_record_cursor_commit()`, trigger, group),
	} {
		if _, err := e.pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = e.pool.Exec(context.Background(), "DROP TRIGGER IF EXISTS "+trigger+" ON lanes.consumers")
	})
	return func() []cursorCommit {
		t.Helper()
		rows, err := e.pool.Query(ctx, `SELECT committed_from, committed_to, synchronous_commit
			FROM public.test_cursor_commits WHERE consumer_group = $1 ORDER BY id`, group)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []cursorCommit
		for rows.Next() {
			var c cursorCommit
			if err := rows.Scan(&c.from, &c.to, &c.mode); err != nil {
				t.Fatal(err)
			}
			out = append(out, c)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// A plain ack commits without waiting for the WAL flush unless the broker
// sets AckSyncCommit; an ack that files a dead letter and a transaction
// bundle's ack always wait. Offsets: m0..m5 are 0..5, a new cursor is at -1.
func TestAckCommitWaitsForTheFlushOnlyWhereItMust(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       Config
		plainMode string
	}{
		{"default", Config{}, "off"},
		{"AckSyncCommit", Config{AckSyncCommit: true}, "on"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The test cluster runs with synchronous_commit off; the broker's
			// sessions here start from on, as on a durable cluster.
			e := newEngineWith(t, tc.cfg, map[string]string{"synchronous_commit": "on"})
			q, group := queueName(t), queueName(t)
			commits := recordCursorCommits(t, e, group)
			pushN(t, e, q, "p", 6)
			pop := func(n int) []Message {
				t.Helper()
				res := mustPop(t, e, PopRequest{Queue: q, Group: group, SubscriptionMode: "all", Batch: n})
				if len(res.Messages) != n {
					t.Fatalf("popped %v, want %d messages", txnIDs(res.Messages), n)
				}
				return res.Messages
			}
			expectAcked := func(res []AckResult) {
				t.Helper()
				for _, r := range res {
					if !r.Success {
						t.Fatalf("ack item %+v", r)
					}
				}
			}

			// The consume loop's ack: the whole lease completed (one trip).
			b := pop(2)
			expectAcked(mustAck(t, e, ack(b[0], "completed"), ack(b[1], "completed")))
			// A partial ack with a nack runs the general way: m2 completed, m3 retried.
			b = pop(2)
			expectAcked(mustAck(t, e, ack(b[0], "completed"), ack(b[1], "retry")))
			// m3 filed as a dead letter.
			b = pop(1)
			expectAcked(mustAck(t, e, ack(b[0], "dlq")))
			// m4 acked in a transaction bundle that also pushes.
			b = pop(1)
			res, err := e.Transaction(context.Background(), TransactionRequest{Ops: []TxOp{
				{Index: 0, Ack: &AckItem{TransactionID: b[0].TransactionID, PartitionID: b[0].PartitionID.String(),
					Status: "completed", Group: group, LeaseID: b[0].LeaseID}},
				{Index: 1, Push: &PushItem{Queue: q + "-out", Partition: "p", TransactionID: "out-4", Payload: raw(1)}},
			}})
			if err != nil || !res.Success {
				t.Fatalf("bundle: %+v, %v", res, err)
			}

			want := []cursorCommit{
				{-1, 1, tc.plainMode}, // m0, m1
				{1, 2, tc.plainMode},  // m2; m3 redelivers
				{2, 3, "on"},          // m3 dead-lettered
				{3, 4, "on"},          // m4 in the bundle
			}
			if got := commits(); !reflect.DeepEqual(got, want) {
				t.Fatalf("cursor commits (from, to, synchronous_commit)\n got %v\nwant %v", got, want)
			}
		})
	}
}
