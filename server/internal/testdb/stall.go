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
// the test ends.
func StallNextClaim(t testing.TB, exec func(ctx context.Context, sql string) error, group string, pause time.Duration) {
	t.Helper()
	trigger := fmt.Sprintf("test_stall_claim_%d", time.Now().UnixNano())
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS public.test_stalled_claims (consumer_group text PRIMARY KEY, pause_ms int NOT NULL)`,
		`CREATE OR REPLACE FUNCTION public.test_stall_claim() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE ms int;
		BEGIN
			DELETE FROM public.test_stalled_claims WHERE consumer_group = NEW.consumer_group RETURNING pause_ms INTO ms;
			IF ms IS NOT NULL THEN PERFORM pg_sleep(ms / 1000.0); END IF;
			RETURN NEW;
		END $$`,
		fmt.Sprintf(`INSERT INTO public.test_stalled_claims VALUES ('%s', %d)`, group, pause.Milliseconds()),
		fmt.Sprintf(`CREATE TRIGGER %s BEFORE UPDATE ON lanes.consumers FOR EACH ROW
			WHEN (NEW.consumer_group = '%s' AND NEW.lease_id IS NOT NULL AND NEW.lease_id IS DISTINCT FROM OLD.lease_id)
			EXECUTE FUNCTION public.test_stall_claim()`, trigger, group),
	} {
		if err := exec(context.Background(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() { _ = exec(context.Background(), `DROP TRIGGER IF EXISTS `+trigger+` ON lanes.consumers`) })
}
