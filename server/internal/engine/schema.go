package engine

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"

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
// under load would stall pushes and pops behind them. So the digest of the
// files applied is stored, and a boot that finds the same one applies nothing.
func ApplySchema(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := ApplySchemaChanged(ctx, pool)
	return err
}

// ApplySchemaChanged is ApplySchema; changed says whether the schema was
// (re)applied rather than found up to date.
func ApplySchemaChanged(ctx context.Context, pool *pgxpool.Pool) (changed bool, err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("acquire: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(schemaLockKey)); err != nil {
		return false, fmt.Errorf("schema lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", int64(schemaLockKey))
	}()
	files, digest, err := schemaSources()
	if err != nil {
		return false, err
	}
	var recorded bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('lanes.schema_applied') IS NOT NULL`).Scan(&recorded); err != nil {
		return false, fmt.Errorf("schema digest: %w", err)
	}
	if recorded {
		var applied string
		err := conn.QueryRow(ctx, `SELECT digest FROM lanes.schema_applied WHERE id = 1`).Scan(&applied)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return false, fmt.Errorf("schema digest: %w", err)
		}
		if applied == digest {
			return false, nil
		}
	}
	for _, f := range files {
		if _, err := conn.Exec(ctx, f.sql); err != nil {
			return false, fmt.Errorf("apply schema %s: %w", f.name, err)
		}
	}
	if _, err := conn.Exec(ctx, `INSERT INTO lanes.schema_applied (id, digest, applied_at) VALUES (1, $1, now())
		ON CONFLICT (id) DO UPDATE SET digest = EXCLUDED.digest, applied_at = EXCLUDED.applied_at`, digest); err != nil {
		return false, fmt.Errorf("record schema digest: %w", err)
	}
	return true, nil
}

type schemaFile struct{ name, sql string }

// schemaSources reads the schema files in name order with their SHA-256 digest.
func schemaSources() ([]schemaFile, string, error) {
	entries, err := fs.ReadDir(schemaFiles, "schema")
	if err != nil {
		return nil, "", err
	}
	h := sha256.New()
	var files []schemaFile
	for _, entry := range entries { // ReadDir sorts by name
		sql, err := fs.ReadFile(schemaFiles, "schema/"+entry.Name())
		if err != nil {
			return nil, "", err
		}
		h.Write([]byte(entry.Name()))
		h.Write([]byte{0})
		h.Write(sql)
		h.Write([]byte{0})
		files = append(files, schemaFile{entry.Name(), string(sql)})
	}
	return files, hex.EncodeToString(h.Sum(nil)), nil
}
