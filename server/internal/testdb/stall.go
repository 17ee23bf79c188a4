package testdb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The pauses of the stall triggers: PL/pgSQL reading the pause in ms.
const (
	// sleepMs ends at a cancel request, which fails the stalled statement.
	sleepMs = `PERFORM pg_sleep(ms / 1000.0);`
	// sleepMsPastCancel outlasts a cancel request: the stalled statement then
	// commits whatever becomes of its client. A client sends one cancel for a
	// statement it gives up on (pgx, for a broken connection or a passed
	// deadline), so the pause ends cancelAbsorbed after absorbing it: a cancel
	// arriving after the pause would fail the statement, so a test gives a
	// pause long enough to contain the cancel without waiting all of it out.
	sleepMsPastCancel = `DECLARE until timestamptz := clock_timestamp() + ms * interval '1 millisecond';
			BEGIN
				WHILE clock_timestamp() < until LOOP
					BEGIN
						PERFORM pg_sleep(least(0.02, extract(epoch FROM until - clock_timestamp())));
					EXCEPTION WHEN query_canceled THEN
						until := least(until, clock_timestamp() + interval '` + cancelAbsorbed + `');
					END;
				END LOOP;
			END;`
	// cancelAbsorbed is how long a pause past a cancel goes on after it.
	cancelAbsorbed = "100 milliseconds"
)

// DB runs the stall helpers' statements: a *pgx.Conn or a *pgxpool.Pool, not
// through the connections a test stalls.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// StallNextClaim makes the next claim that leases a message to group sleep for
// pause inside PostgreSQL, between the claim's update of the cursor row and
// its COMMIT: a real database stall, for tests of what happens to a claim
// whose client or broker goes away meanwhile. It fires once (the claim it
// slows deletes its marker) and only for group; the trigger is dropped when
// the test ends. A cancel request ends the pause and fails the claim.
func StallNextClaim(t testing.TB, exec func(ctx context.Context, sql string) error, group string, pause time.Duration) {
	t.Helper()
	stallClaim(t, exec, group, pause, sleepMs)
}

// StallNextClaimPastCancel is StallNextClaim with a pause that a cancel
// request cannot cut short: the claim then commits whatever the broker does
// meanwhile, as one does whose statement had finished in PostgreSQL before the
// broker gave up on it (its answer still on the way, or its COMMIT running).
// It is how a test puts a claim's outcome out of the broker's hands.
func StallNextClaimPastCancel(t testing.TB, exec func(ctx context.Context, sql string) error, group string, pause time.Duration) {
	t.Helper()
	stallClaim(t, exec, group, pause, sleepMsPastCancel)
}

// stallClaim installs a trigger that runs sleep (sleepMs or
// sleepMsPastCancel) in the next claim that leases a message to group.
func stallClaim(t testing.TB, exec func(ctx context.Context, sql string) error, group string, pause time.Duration, sleep string) {
	t.Helper()
	suffix := time.Now().UnixNano()
	trigger, function := fmt.Sprintf("test_stall_claim_%d", suffix), fmt.Sprintf("public.test_stall_claim_%d", suffix)
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS public.test_stalled_claims (consumer_group text PRIMARY KEY, pause_ms int NOT NULL)`,
		fmt.Sprintf(`CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE ms int;
		BEGIN
			DELETE FROM public.test_stalled_claims WHERE consumer_group = NEW.consumer_group RETURNING pause_ms INTO ms;
			IF ms IS NOT NULL THEN
				%s
			END IF;
			RETURN NEW;
		END $$`, function, sleep),
		fmt.Sprintf(`INSERT INTO public.test_stalled_claims VALUES ('%s', %d)`, group, pause.Milliseconds()),
		fmt.Sprintf(`CREATE TRIGGER %s BEFORE UPDATE ON lanes.consumers FOR EACH ROW
			WHEN (NEW.consumer_group = '%s' AND NEW.lease_id IS NOT NULL AND NEW.lease_id IS DISTINCT FROM OLD.lease_id)
			EXECUTE FUNCTION %s()`, trigger, group, function),
	} {
		if err := exec(context.Background(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		_ = exec(context.Background(), `DROP TRIGGER IF EXISTS `+trigger+` ON lanes.consumers`)
		_ = exec(context.Background(), `DROP FUNCTION IF EXISTS `+function+`()`)
	})
}

// StallNextSegmentWrite makes the next write of a segment into the partition
// named partition of queue sleep for pause inside PostgreSQL, after the
// segment row is written and before the push commits: the window in which a
// push has stamped its segment but nobody can see it yet. The function it
// returns waits until that write is in its pause. A cancel request ends the
// pause and fails the push.
func StallNextSegmentWrite(t testing.TB, db DB, queue, partition string, pause time.Duration) (awaitStall func()) {
	t.Helper()
	return stallSegmentWrite(t, db, queue, partition, pause, sleepMs)
}

// StallNextSegmentWritePastCancel is StallNextSegmentWrite with a pause that
// a cancel request cannot cut short: the push then commits whatever becomes
// of its connection, as one whose COMMIT reached PostgreSQL before the
// broker lost the connection.
func StallNextSegmentWritePastCancel(t testing.TB, db DB, queue, partition string, pause time.Duration) (awaitStall func()) {
	t.Helper()
	return stallSegmentWrite(t, db, queue, partition, pause, sleepMsPastCancel)
}

// stallSegmentWrite installs a trigger that runs sleep (sleepMs or
// sleepMsPastCancel) in the next segment write into queue/partition; the
// stalled statement names itself by the trigger's name meanwhile.
func stallSegmentWrite(t testing.TB, db DB, queue, partition string, pause time.Duration, sleep string) (awaitStall func()) {
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
				PERFORM set_config('application_name', '%s', true);
				%s
			END IF;
			RETURN NULL;
		END $$`, function, trigger, sleep),
		fmt.Sprintf(`INSERT INTO public.test_stalled_segments VALUES ('%s', '%s', %d)`, queue, partition, pause.Milliseconds()),
		fmt.Sprintf(`CREATE TRIGGER %s AFTER INSERT ON lanes.segments FOR EACH ROW EXECUTE FUNCTION %s()`, trigger, function),
	} {
		if _, err := db.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		_, _ = db.Exec(context.Background(), `DROP TRIGGER IF EXISTS `+trigger+` ON lanes.segments`)
		_, _ = db.Exec(context.Background(), `DROP FUNCTION IF EXISTS `+function+`()`)
	})
	return func() {
		t.Helper()
		for deadline := time.Now().Add(pause); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			var stalled bool
			if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
				WHERE application_name = $1 AND wait_event = 'PgSleep')`, trigger).Scan(&stalled); err != nil {
				t.Fatal(err)
			}
			if stalled {
				return
			}
		}
		t.Fatalf("no segment write into %s/%s stalled within %v", queue, partition, pause)
	}
}

// AwaitSleepingStatement waits until a statement of db's database sleeps in
// pg_sleep (a stall trigger's).
func AwaitSleepingStatement(t testing.TB, db DB) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var sleeping bool
		if err := db.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event = 'PgSleep')`).Scan(&sleeping); err != nil {
			t.Fatal(err)
		}
		if sleeping {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no statement slept in the database within 5 s")
		}
	}
}
