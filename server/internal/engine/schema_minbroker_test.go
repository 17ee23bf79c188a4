package engine

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/internal/testdb"
)

// minBrokerRecord is lanes.min_broker_version's row, or -1s when it has none.
func minBrokerRecord(t *testing.T, pool *pgxpool.Pool) (version, raisedBy int) {
	t.Helper()
	version, raisedBy = -1, -1
	_ = pool.QueryRow(t.Context(), `SELECT version, raised_by FROM lanes.min_broker_version`).Scan(&version, &raisedBy)
	return version, raisedBy
}

// schemaSnapshot is everything a boot could change about the schema: its
// record and the lanes schema's tables, columns and indexes.
func schemaSnapshot(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	if err := pool.QueryRow(t.Context(), `SELECT concat_ws(' | ',
		(SELECT to_jsonb(s)::text FROM lanes.schema_applied s),
		(SELECT to_jsonb(m)::text FROM lanes.min_broker_version m),
		(SELECT string_agg(table_name || '.' || column_name, ',' ORDER BY table_name, column_name)
			FROM information_schema.columns WHERE table_schema = 'lanes'),
		(SELECT string_agg(indexname, ',' ORDER BY indexname) FROM pg_indexes WHERE schemaname = 'lanes'))`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// A database whose minimum broker version is above this broker's (a later
// version raised it) refuses the boot before anything is written: files the
// broker would otherwise apply again (the recorded schema is an earlier
// version's) stay unapplied, and the record and the minimum stay as they were.
func TestABrokerBelowTheMinimumVersionRefusesAndChangesNothing(t *testing.T) {
	ctx := t.Context()
	pool := testdb.Pool(t)
	first, err := ApplySchemaOutcome(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf(`DROP INDEX lanes.consumers_group_queue_idx;
		UPDATE lanes.schema_applied SET digest = 'an earlier version', version_digest = 'an earlier version', version = 120;
		UPDATE lanes.min_broker_version SET version = %d, raised_by = %d`, first.Version+1, first.Version+5)); err != nil {
		t.Fatal(err)
	}
	before := schemaSnapshot(t, pool)

	got, err := ApplySchemaOutcome(ctx, pool)
	var tooOld *BrokerTooOldError
	if !errors.As(err, &tooOld) || got.Applied {
		t.Fatalf("boot below the minimum: %+v %v, want a BrokerTooOldError and nothing applied", got, err)
	}
	if *tooOld != (BrokerTooOldError{Version: first.Version, Minimum: first.Version + 1, RaisedBy: first.Version + 5}) {
		t.Errorf("the error names %+v", *tooOld)
	}
	if after := schemaSnapshot(t, pool); after != before {
		t.Fatalf("the refused boot changed the schema:\nbefore %s\nafter  %s", before, after)
	}
	if err := CheckMinBrokerVersion(ctx, pool); !errors.As(err, &tooOld) {
		t.Fatalf("the periodic check: %v, want a BrokerTooOldError", err)
	}
}

// The minimum broker version is raised to MinPeerSchemaVersion by the first
// boot and never lowered: not by a boot whose MinPeerSchemaVersion is lower
// than the recorded minimum (as an older broker's is), whether it applies its
// files or not, nor by deleting the schema record to have the files applied
// again. A minimum the broker's version reaches exactly lets it boot.
func TestTheMinimumBrokerVersionIsRaisedAndNeverLowered(t *testing.T) {
	ctx := t.Context()
	pool := testdb.Pool(t)
	if err := CheckMinBrokerVersion(ctx, pool); err != nil {
		t.Fatalf("the check on an empty database (no lanes schema): %v", err)
	}
	first, err := ApplySchemaOutcome(ctx, pool)
	if err != nil || !first.RaisedMinBrokerVersion() || first.MinBrokerVersion != MinPeerSchemaVersion {
		t.Fatalf("first boot: %+v %v, want the minimum raised to %d", first, err, MinPeerSchemaVersion)
	}
	if v, by := minBrokerRecord(t, pool); v != MinPeerSchemaVersion || by != first.Version {
		t.Fatalf("recorded minimum %d raised by %d, want %d by %d", v, by, MinPeerSchemaVersion, first.Version)
	}
	if got, err := ApplySchemaOutcome(ctx, pool); err != nil || got.RaisedMinBrokerVersion() {
		t.Fatalf("second boot: %+v %v, want nothing raised", got, err)
	}

	// A later version of schema version+10 raised it to this broker's own version.
	if _, err := pool.Exec(ctx, `UPDATE lanes.min_broker_version SET version = $1, raised_by = $2`,
		first.Version, first.Version+10); err != nil {
		t.Fatal(err)
	}
	for _, boot := range []struct{ what, sql string }{
		{"a boot that applies nothing", `SELECT 1`},
		{"a boot that applies its files again", `UPDATE lanes.schema_applied SET digest = 'edited', version_digest = 'edited'`},
		{"a boot after the schema record was deleted", `DELETE FROM lanes.schema_applied`},
	} {
		if _, err := pool.Exec(ctx, boot.sql); err != nil {
			t.Fatal(err)
		}
		got, err := ApplySchemaOutcome(ctx, pool)
		if err != nil {
			t.Fatalf("%s: %v (a minimum equal to the broker's version admits it)", boot.what, err)
		}
		if v, by := minBrokerRecord(t, pool); v != first.Version || by != first.Version+10 || got.MinBrokerVersion != first.Version {
			t.Fatalf("%s: the minimum became %d raised by %d (outcome %+v), want %d by %d",
				boot.what, v, by, got, first.Version, first.Version+10)
		}
	}
	if err := CheckMinBrokerVersion(ctx, pool); err != nil {
		t.Fatalf("the periodic check at a minimum equal to the broker's version: %v", err)
	}
}

// ReadSchemaState reads what /health shows of the database's schema: the
// recorded version and the minimum with who raised it, after each kind of
// boot, and zeros for what an older database lacks (no lanes schema, no
// minimum's table, no version column) without failing. The state after a
// boot is what a read finds.
func TestReadSchemaStateFollowsBootsAndOlderDatabases(t *testing.T) {
	ctx := t.Context()
	pool := testdb.Pool(t)
	read := func(what string) SchemaState {
		t.Helper()
		state, err := ReadSchemaState(ctx, pool)
		if err != nil || state.ReadAt.IsZero() {
			t.Fatalf("%s: %+v %v", what, state, err)
		}
		state.ReadAt = time.Time{}
		return state
	}
	if got := read("no lanes schema"); got != (SchemaState{}) {
		t.Fatalf("no lanes schema: %+v, want zeros", got)
	}
	first, err := ApplySchemaOutcome(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	want := SchemaState{Recorded: first.Version, MinBrokerVersion: MinPeerSchemaVersion, MinBrokerVersionRaisedBy: first.Version}
	afterBoot := first.State
	afterBoot.ReadAt = time.Time{}
	if got := read("after the first boot"); got != want || afterBoot != want {
		t.Fatalf("after the first boot: read %+v, the boot's state %+v, want %+v", got, afterBoot, want)
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf(`UPDATE lanes.schema_applied SET version = %d;
		UPDATE lanes.min_broker_version SET version = %d, raised_by = %d`, first.Version+10, first.Version, first.Version+10)); err != nil {
		t.Fatal(err)
	}
	want = SchemaState{Recorded: first.Version + 10, MinBrokerVersion: first.Version, MinBrokerVersionRaisedBy: first.Version + 10}
	again, err := ApplySchemaOutcome(ctx, pool)
	if err != nil || !again.Newer() {
		t.Fatalf("a boot under a later version's schema: %+v %v", again, err)
	}
	again.State.ReadAt = time.Time{}
	if got := read("a later version wrote"); got != want || again.State != want {
		t.Fatalf("after a later version wrote: read %+v, the boot's state %+v, want %+v", got, again.State, want)
	}

	if _, err := pool.Exec(ctx, `DROP TABLE lanes.min_broker_version`); err != nil {
		t.Fatal(err)
	}
	if got := read("a database from before 140"); got != (SchemaState{Recorded: first.Version + 10}) {
		t.Fatalf("a database from before 140: %+v, want the recorded version alone", got)
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE lanes.schema_applied DROP COLUMN version, DROP COLUMN version_digest`); err != nil {
		t.Fatal(err)
	}
	if got := read("a database from before 130"); got != (SchemaState{}) {
		t.Fatalf("a database from before 130: %+v, want zeros", got)
	}
}
