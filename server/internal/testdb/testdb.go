// Package testdb gives integration tests a fresh PostgreSQL database on the
// cluster named by LANES_TEST_DATABASE_URL (`make test` starts one).
package testdb

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvVar names the server tests read.
const EnvVar = "LANES_TEST_DATABASE_URL"

// NewDatabase creates an empty database and returns its URL. It is dropped
// when the test (or TestMain via the returned cleanup) ends.
func NewDatabase(ctx context.Context) (dsn string, cleanup func(), err error) {
	base := os.Getenv(EnvVar)
	if base == "" {
		return "", nil, fmt.Errorf("%s is not set: run the tests with `make test`, which starts PostgreSQL", EnvVar)
	}
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", nil, fmt.Errorf("connect %s: %w", base, err)
	}
	defer admin.Close(ctx)
	name := fmt.Sprintf("lanes_t_%d_%d", time.Now().UnixNano()%1e9, rand.IntN(1e6))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, err
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	cleanup = func() {
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	return u.String(), cleanup, nil
}

// Pool opens a pool on a fresh database for t.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	dsn, cleanup, err := NewDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		cleanup()
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close(); cleanup() })
	return pool
}

// Main runs a package's tests against one fresh database prepared by setup
// (typically the schema) and returns the exit code for os.Exit. The database
// is dropped afterwards; dsn receives its URL before the tests run.
func Main(m *testing.M, dsn *string, setup func(ctx context.Context, pool *pgxpool.Pool) error) int {
	ctx := context.Background()
	url, cleanup, err := NewDatabase(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	*dsn = url
	pool, err := pgxpool.New(ctx, url)
	if err == nil {
		err = setup(ctx, pool)
		pool.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "test database setup:", err)
		return 1
	}
	return m.Run()
}
