package testdb

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// StallNextClaim makes the next claim that leases a message to group sleep for
// pause inside PostgreSQL, between the claim's update of the cursor row and
// its COMMIT: a real database stall, for tests of what happens to a claim
// whose client or broker goes away meanwhile. It fires once (the claim it
// slows deletes its marker) and only for group; the trigger is dropped when
// the test ends. A cancel request ends the pause and fails the claim.
func StallNextClaim(t testing.TB, exec func(ctx context.Context, sql string) error, group string, pause time.Duration) {
	t.Helper()
	stallClaim(t, exec, group, pause, `PERFORM pg_sleep(ms / 1000.0);`)
}

// StallNextClaimPastCancel is StallNextClaim with a pause that a cancel
// request cannot cut short: the claim then commits whatever the broker does
// meanwhile, as one does whose statement had finished in PostgreSQL before the
// broker gave up on it (its answer still on the way, or its COMMIT running).
// It is how a test puts a claim's outcome out of the broker's hands.
func StallNextClaimPastCancel(t testing.TB, exec func(ctx context.Context, sql string) error, group string, pause time.Duration) {
	t.Helper()
	stallClaim(t, exec, group, pause, `DECLARE until timestamptz := clock_timestamp() + ms * interval '1 millisecond';
			BEGIN
				WHILE clock_timestamp() < until LOOP
					BEGIN
						PERFORM pg_sleep(least(0.02, extract(epoch FROM until - clock_timestamp())));
					EXCEPTION WHEN query_canceled THEN NULL; -- the pause outlasts a cancel
					END;
				END LOOP;
			END;`)
}

// stallClaim installs a trigger that runs sleep (PL/pgSQL reading the pause
// in ms) in the next claim that leases a message to group.
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
