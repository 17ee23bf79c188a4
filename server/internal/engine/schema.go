package engine

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schemaFiles are applied in name order at every boot; each must be idempotent.
// A feature that needs tables adds its own numbered file.
//
//go:embed schema/*.sql
var schemaFiles embed.FS

// schemaLockKey is the advisory lock taken while the schema is applied, so
// several brokers booting at once apply it one after the other.
const schemaLockKey = 7781200100

// ApplySchema creates or upgrades the schema idempotently under an advisory
// lock. It runs at every boot, and the files' DDL waits for locks on hot tables
// even when there is nothing to change (CREATE INDEX IF NOT EXISTS takes a
// share lock, ADD COLUMN IF NOT EXISTS an exclusive one): a broker restarting
// under load would stall pushes and pops behind them. So the digest and the
// version of the files applied are stored, and a boot that finds its own, or a
// later version (files only add, so an older broker's schema is part of it),
// applies nothing. A database whose minimum broker version
// (lanes.min_broker_version) is above this broker's version is left alone
// altogether: the answer is a *BrokerTooOldError, before any write.
func ApplySchema(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := ApplySchemaOutcome(ctx, pool)
	return err
}

// SchemaOutcome is what a boot's ApplySchema found and did.
type SchemaOutcome struct {
	// Applied says the files ran; false means the database held them already.
	Applied bool
	// Version is this broker's schema version (its highest file number);
	// Recorded the one the database held before (0 when none).
	Version, Recorded int
	// MinBrokerVersion is the oldest broker schema version the database
	// admits after the boot; MinBrokerVersionWas the one before (0 when none).
	MinBrokerVersion, MinBrokerVersionWas int
	// State is what the database holds after a boot that succeeded.
	State SchemaState
}

// SchemaState is what a read of the database found of its schema: at boot,
// and every second after (ReadSchemaState), for the minimum's check and /health.
type SchemaState struct {
	// Recorded is the schema version lanes.schema_applied records (0: none).
	Recorded int
	// MinBrokerVersion is the oldest broker schema version the database admits
	// (0: none recorded), as raised last by a broker of schema version
	// MinBrokerVersionRaisedBy.
	MinBrokerVersion, MinBrokerVersionRaisedBy int
	// ReadAt is when the read ended.
	ReadAt time.Time
}

// RaisedMinBrokerVersion reports a boot that raised the database's minimum.
func (o SchemaOutcome) RaisedMinBrokerVersion() bool {
	return o.MinBrokerVersion > o.MinBrokerVersionWas
}

// Newer reports a database whose schema a later version applied, so this
// broker applied nothing.
func (o SchemaOutcome) Newer() bool { return o.Recorded > o.Version }

// schemaLockTimeout bounds each wait of a schema statement for a table lock:
// while it waits, every later request for that table (pushes and pops too)
// queues behind it. One that gives up lets them through, and its file runs
// again schemaLockRetryPause later, until ctx ends.
const (
	schemaLockTimeout    = 500 * time.Millisecond
	schemaLockRetryPause = 500 * time.Millisecond
)

// ApplySchemaOutcome is ApplySchema, saying what it did.
func ApplySchemaOutcome(ctx context.Context, pool *pgxpool.Pool) (SchemaOutcome, error) {
	files, digest, version, err := schemaSources()
	if err != nil {
		return SchemaOutcome{}, err
	}
	out := SchemaOutcome{Version: version}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return out, fmt.Errorf("acquire: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(schemaLockKey)); err != nil {
		return out, fmt.Errorf("schema lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", int64(schemaLockKey))
	}()
	// Before anything is written: a later version's schema that this broker
	// would misuse must stay as it is.
	minimum, err := readMinBrokerVersion(ctx, conn.Conn())
	if err != nil {
		return out, err
	}
	out.MinBrokerVersion, out.MinBrokerVersionWas = minimum.Version, minimum.Version
	if version < minimum.Version {
		return out, &BrokerTooOldError{Version: version, Minimum: minimum.Version, RaisedBy: minimum.RaisedBy}
	}
	var recorded bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('lanes.schema_applied') IS NOT NULL`).Scan(&recorded); err != nil {
		return out, fmt.Errorf("schema digest: %w", err)
	}
	if recorded {
		// Read through to_jsonb: a database from before 130_schema_version.sql
		// has no version columns yet.
		var applied, versionDigest string
		err := conn.QueryRow(ctx, `SELECT digest, coalesce((to_jsonb(s) ->> 'version')::int, 0),
				coalesce(to_jsonb(s) ->> 'version_digest', '')
			FROM lanes.schema_applied s WHERE id = 1`).Scan(&applied, &out.Recorded, &versionDigest)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return out, fmt.Errorf("schema digest: %w", err)
		}
		if applied == digest || out.Newer() || (out.Recorded == version && versionDigest == digest) {
			if minimum.tableExists {
				err = raiseMinBrokerVersion(ctx, conn.Conn(), version, &out)
			}
			out.State = SchemaState{Recorded: out.Recorded, MinBrokerVersion: out.MinBrokerVersion,
				MinBrokerVersionRaisedBy: minimum.raisedByAfter(out), ReadAt: time.Now()}
			return out, err
		}
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("SET lock_timeout = %d", schemaLockTimeout.Milliseconds())); err != nil {
		return out, fmt.Errorf("schema lock_timeout: %w", err)
	}
	defer func() { _, _ = conn.Exec(context.Background(), "RESET lock_timeout") }()
	for _, f := range files {
		if err := applySchemaFile(ctx, conn, f); err != nil {
			return out, err
		}
	}
	if _, err := conn.Exec(ctx, `INSERT INTO lanes.schema_applied (id, digest, version, version_digest, applied_at)
		VALUES (1, $1, $2, $1, now())
		ON CONFLICT (id) DO UPDATE SET digest = EXCLUDED.digest, version = EXCLUDED.version,
			version_digest = EXCLUDED.version_digest, applied_at = EXCLUDED.applied_at`, digest, version); err != nil {
		return out, fmt.Errorf("record schema digest: %w", err)
	}
	out.Applied = true
	err = raiseMinBrokerVersion(ctx, conn.Conn(), version, &out)
	out.State = SchemaState{Recorded: version, MinBrokerVersion: out.MinBrokerVersion,
		MinBrokerVersionRaisedBy: minimum.raisedByAfter(out), ReadAt: time.Now()}
	return out, err
}

// MinPeerSchemaVersion is the oldest broker schema version this broker lets
// run on its database: its boot raises lanes.min_broker_version to it, never
// lowers it, and brokers from 140 on below it refuse to start or stop. Raise
// it in the release whose schema change an older broker would misuse (a
// column it does not fill, a meaning it does not know); brokers older than
// 140 never read it. 60 is the oldest version the upgrade audit found safe
// on this schema (docs/operations.md, "Checked against real old brokers").
const MinPeerSchemaVersion = 60

// BrokerTooOldError is a database that admits only brokers of a later schema
// version than this one: a later version's schema this broker would misuse.
type BrokerTooOldError struct {
	// Version is this broker's schema version; Minimum the oldest the
	// database admits, raised by a broker of schema version RaisedBy.
	Version, Minimum, RaisedBy int
}

func (e *BrokerTooOldError) Error() string {
	return fmt.Sprintf("this broker's schema version %d is below %d, the oldest this database admits "+
		"(raised by a broker of schema version %d): upgrade this broker to one of schema version %d or later",
		e.Version, e.Minimum, e.RaisedBy, e.Minimum)
}

// minBrokerVersion is lanes.min_broker_version as read: zeros when the row or
// the table (a database from before 140_min_broker_version.sql) is missing.
type minBrokerVersion struct {
	Version, RaisedBy int
	tableExists       bool
}

// raisedByAfter is the version that raised the minimum after the boot out.
func (m minBrokerVersion) raisedByAfter(out SchemaOutcome) int {
	if out.RaisedMinBrokerVersion() {
		return out.Version
	}
	return m.RaisedBy
}

func readMinBrokerVersion(ctx context.Context, conn *pgx.Conn) (minBrokerVersion, error) {
	got := minBrokerVersion{tableExists: true}
	err := conn.QueryRow(ctx, `SELECT version, raised_by FROM lanes.min_broker_version WHERE id = 1`).
		Scan(&got.Version, &got.RaisedBy)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return got, nil
	case hasSQLState(err, sqlstateUndefinedTable):
		return minBrokerVersion{}, nil
	case err != nil:
		return got, fmt.Errorf("read the minimum broker version: %w", err)
	}
	return got, nil
}

// raiseMinBrokerVersion raises the database's minimum to MinPeerSchemaVersion
// if it is lower, recording this broker's version as the one that raised it.
// The caller holds the schema lock, so out.MinBrokerVersionWas is current.
func raiseMinBrokerVersion(ctx context.Context, conn *pgx.Conn, version int, out *SchemaOutcome) error {
	if out.MinBrokerVersion >= MinPeerSchemaVersion {
		return nil
	}
	// The WHERE keeps it monotonic even for a writer outside the lock.
	if _, err := conn.Exec(ctx, `INSERT INTO lanes.min_broker_version AS m (id, version, raised_by, raised_at)
		VALUES (1, $1, $2, now())
		ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, raised_by = EXCLUDED.raised_by,
			raised_at = EXCLUDED.raised_at
		WHERE m.version < EXCLUDED.version`, MinPeerSchemaVersion, version); err != nil {
		return fmt.Errorf("raise the minimum broker version: %w", err)
	}
	out.MinBrokerVersion = MinPeerSchemaVersion
	return nil
}

// CheckMinBrokerVersion returns a *BrokerTooOldError when the database no
// longer admits a broker of this schema version (a later version raised the
// minimum); it reads, never writes.
func CheckMinBrokerVersion(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := ReadSchemaState(ctx, pool)
	return err
}

// ReadSchemaState reads the database's schema record and minimum broker
// version, in one round trip, and returns a *BrokerTooOldError beside them
// when the minimum is above this broker's schema version. It never writes.
func ReadSchemaState(ctx context.Context, pool *pgxpool.Pool) (SchemaState, error) {
	version, err := SchemaVersion()
	if err != nil {
		return SchemaState{}, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return SchemaState{}, fmt.Errorf("acquire: %w", err)
	}
	defer conn.Release()
	var state SchemaState
	// Read through to_jsonb: a database from before 130_schema_version.sql
	// has no version column.
	err = conn.QueryRow(ctx, `SELECT coalesce((SELECT (to_jsonb(s) ->> 'version')::int FROM lanes.schema_applied s WHERE id = 1), 0),
			coalesce(m.version, 0), coalesce(m.raised_by, 0)
		FROM (SELECT) one LEFT JOIN lanes.min_broker_version m ON m.id = 1`).
		Scan(&state.Recorded, &state.MinBrokerVersion, &state.MinBrokerVersionRaisedBy)
	if hasSQLState(err, sqlstateUndefinedTable) {
		state, err = readOlderSchemaState(ctx, conn.Conn())
	}
	if err != nil {
		return SchemaState{}, fmt.Errorf("read the schema's state: %w", err)
	}
	state.ReadAt = time.Now()
	if version < state.MinBrokerVersion {
		return state, &BrokerTooOldError{Version: version, Minimum: state.MinBrokerVersion, RaisedBy: state.MinBrokerVersionRaisedBy}
	}
	return state, nil
}

// readOlderSchemaState is ReadSchemaState on a database that lacks a table
// (no lanes schema yet, or one from before 140_min_broker_version.sql run by
// a broker with LANES_APPLY_SCHEMA off): what it has, a table at a time.
func readOlderSchemaState(ctx context.Context, conn *pgx.Conn) (SchemaState, error) {
	minimum, err := readMinBrokerVersion(ctx, conn)
	if err != nil {
		return SchemaState{}, err
	}
	state := SchemaState{MinBrokerVersion: minimum.Version, MinBrokerVersionRaisedBy: minimum.RaisedBy}
	err = conn.QueryRow(ctx, `SELECT coalesce((to_jsonb(s) ->> 'version')::int, 0) FROM lanes.schema_applied s WHERE id = 1`).
		Scan(&state.Recorded)
	if errors.Is(err, pgx.ErrNoRows) || hasSQLState(err, sqlstateUndefinedTable) {
		err = nil
	}
	return state, err
}

// SchemaVersion is this broker's schema version, the highest file number.
var SchemaVersion = sync.OnceValues(func() (int, error) {
	_, _, version, err := schemaSources()
	return version, err
})

// applySchemaFile runs one file (one implicit transaction: a failure leaves
// nothing of it), again after a pause whenever a lock wait timed out.
func applySchemaFile(ctx context.Context, conn *pgxpool.Conn, f schemaFile) error {
	for {
		_, err := conn.Exec(ctx, f.sql)
		if err == nil {
			return nil
		}
		if !hasSQLState(err, sqlstateLockNotAvailable) {
			return fmt.Errorf("apply schema %s: %w", f.name, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("apply schema %s: tables stayed locked: %w", f.name, err)
		case <-time.After(schemaLockRetryPause):
		}
	}
}

type schemaFile struct{ name, sql string }

// schemaSources reads the schema files in name order with their SHA-256
// digest and the schema's version, the highest file number (NNN_name.sql).
func schemaSources() (files []schemaFile, digest string, version int, err error) {
	entries, err := fs.ReadDir(schemaFiles, "schema")
	if err != nil {
		return nil, "", 0, err
	}
	h := sha256.New()
	for _, entry := range entries { // ReadDir sorts by name
		number, _, ok := strings.Cut(entry.Name(), "_")
		n, err := strconv.Atoi(number)
		if !ok || err != nil {
			return nil, "", 0, fmt.Errorf("schema file %s: the name must start with its number and _", entry.Name())
		}
		version = max(version, n)
		sql, err := fs.ReadFile(schemaFiles, "schema/"+entry.Name())
		if err != nil {
			return nil, "", 0, err
		}
		h.Write([]byte(entry.Name()))
		h.Write([]byte{0})
		h.Write(sql)
		h.Write([]byte{0})
		files = append(files, schemaFile{entry.Name(), string(sql)})
	}
	return files, hex.EncodeToString(h.Sum(nil)), version, nil
}
