package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/testdb"
)

// schemaOn applies the broker's schema to the database at dsn and returns a
// pool on it (closed when the test ends) with this broker's schema version.
func schemaOn(t *testing.T, dsn string) (*pgxpool.Pool, int) {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	got, err := engine.ApplySchemaOutcome(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	return pool, got.Version
}

// raiseMinBrokerVersion sets the database's minimum as a broker of schema
// version raisedBy would.
func raiseMinBrokerVersion(t *testing.T, pool *pgxpool.Pool, minimum, raisedBy int) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `UPDATE lanes.min_broker_version SET version = $1, raised_by = $2, raised_at = now()`,
		minimum, raisedBy); err != nil {
		t.Fatal(err)
	}
}

// schemaState is what a boot could change: the schema's record, the minimum
// and the lanes schema's indexes.
func schemaState(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	if err := pool.QueryRow(t.Context(), `SELECT concat_ws(' | ',
		(SELECT to_jsonb(s)::text FROM lanes.schema_applied s),
		(SELECT to_jsonb(m)::text FROM lanes.min_broker_version m),
		(SELECT string_agg(indexname, ',' ORDER BY indexname) FROM pg_indexes WHERE schemaname = 'lanes'))`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// exitedNonZero waits up to timeout for b to exit and fails unless it exited
// with a non-zero status.
func exitedNonZero(t *testing.T, b *broker, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-b.Done():
	case <-time.After(timeout):
		t.Fatalf("the broker kept running %v after %s:\n%s", timeout, what, b.logs.String())
	}
	var exit *exec.ExitError
	if !errors.As(b.Err(), &exit) || exit.ExitCode() == 0 {
		t.Fatalf("the broker exited with %v after %s, want a non-zero status:\n%s", b.Err(), what, b.logs.String())
	}
}

// TestBrokerBelowTheDatabasesMinimumVersionRefusesToStart boots the real
// binary on a database a later version declared it too old for: it exits
// non-zero with one ERROR line naming both versions and the remedy, before
// applying anything (its files would run, since the recorded schema is an
// earlier version's), with LANES_APPLY_SCHEMA on or off. Once the minimum is
// down to its own version (by hand: brokers never lower it) it starts,
// applies its files and leaves the minimum where it was.
func TestBrokerBelowTheDatabasesMinimumVersionRefusesToStart(t *testing.T) {
	dsn := newDatabase(t)
	pool, version := schemaOn(t, dsn)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `DROP INDEX lanes.consumers_group_queue_idx`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE lanes.schema_applied SET digest = 'an earlier version',
		version_digest = 'an earlier version', version = 120`); err != nil {
		t.Fatal(err)
	}
	raiseMinBrokerVersion(t, pool, version+1, version+3)
	before := schemaState(t, pool)
	want := fmt.Sprintf("this broker's schema version %d is below %d, the oldest this database admits "+
		"(raised by a broker of schema version %d): upgrade this broker to one of schema version %d or later",
		version, version+1, version+3, version+1)
	for _, env := range [][]string{nil, {"LANES_APPLY_SCHEMA=false"}} {
		what := fmt.Sprintf("the minimum above its version (%v)", env)
		out := string(refusedBootOn(t, dsn, what, env...))
		var errorLines []string
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "level=ERROR") {
				errorLines = append(errorLines, line)
			}
		}
		if len(errorLines) != 1 || !strings.Contains(errorLines[0], want) {
			t.Errorf("%s: want one ERROR line saying %q:\n%s", what, want, out)
		}
		if strings.Contains(out, "lanes listening") {
			t.Errorf("%s: the broker opened its listener:\n%s", what, out)
		}
		if after := schemaState(t, pool); after != before {
			t.Fatalf("%s changed the schema:\nbefore %s\nafter  %s", what, before, after)
		}
	}

	raiseMinBrokerVersion(t, pool, version, version+3)
	b := startBroker(t, dsn, freePort(t), t.TempDir())
	b.waitHealth(t, 200, 20*time.Second)
	var minimum, raisedBy int
	var indexed bool
	if err := pool.QueryRow(ctx, `SELECT version, raised_by, to_regclass('lanes.consumers_group_queue_idx') IS NOT NULL
		FROM lanes.min_broker_version`).Scan(&minimum, &raisedBy, &indexed); err != nil {
		t.Fatal(err)
	}
	if minimum != version || raisedBy != version+3 || !indexed {
		t.Fatalf("after the boot at the minimum: minimum %d raised by %d, files applied %v; want %d by %d, applied",
			minimum, raisedBy, indexed, version, version+3)
	}
}

// TestServingBrokerStopsWhenALaterVersionRaisesTheMinimumPastIt: a broker
// that serves while a later version raises the database's minimum past it
// (the first broker of a release that older ones would corrupt data for)
// reads it within a second or two, stops taking requests and exits non-zero,
// saying why.
func TestServingBrokerStopsWhenALaterVersionRaisesTheMinimumPastIt(t *testing.T) {
	dsn := newDatabase(t)
	b := startBroker(t, dsn, freePort(t), t.TempDir())
	b.waitHealth(t, 200, 20*time.Second)
	pool, version := schemaOn(t, dsn)
	raiseMinBrokerVersion(t, pool, version+1, version+1)
	raisedAt := time.Now()
	exitedNonZero(t, b, 10*time.Second, "the minimum was raised past it")
	t.Logf("the broker exited %v after the minimum was raised", time.Since(raisedAt).Round(time.Millisecond))
	logs := b.logs.String()
	if !strings.Contains(logs, "the database no longer admits this broker's version") ||
		!strings.Contains(logs, fmt.Sprintf("this broker's schema version %d is below %d", version, version+1)) {
		t.Fatalf("the log does not say why the broker stopped:\n%s", logs)
	}
}

// TestBrokerStopsWhenTheDatabaseItWaitedForAdmitsOnlyLaterVersions: a broker
// that booted before its database answered (it serves, /health 503, and
// retries the schema) exits non-zero, applying nothing, when the database
// that appears admits only later broker versions. PostgreSQL is unreachable
// until then (nothing listens on the broker's port): a database that does not
// exist yet would stop the boot (TestADatabaseThatRefusesTheLoginStopsTheBoot).
func TestBrokerStopsWhenTheDatabaseItWaitedForAdmitsOnlyLaterVersions(t *testing.T) {
	template := newDatabase(t)
	pool, version := schemaOn(t, template)
	raiseMinBrokerVersion(t, pool, version+1, version+1)
	if _, err := pool.Exec(t.Context(), `UPDATE lanes.schema_applied SET digest = 'an earlier version',
		version_digest = 'an earlier version', version = 120`); err != nil {
		t.Fatal(err)
	}
	before := schemaState(t, pool)
	pool.Close() // a template database must have no connections

	u, err := url.Parse(os.Getenv(testdb.EnvVar))
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("lanes_later_%d", time.Now().UnixNano()%1e9)
	u.Path = "/" + name
	postgres := u.Host
	u.Host = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	b := startBroker(t, u.String(), freePort(t), t.TempDir())
	b.waitHealth(t, 503, 20*time.Second)

	admin, err := pgx.Connect(t.Context(), os.Getenv(testdb.EnvVar))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	if _, err := admin.Exec(t.Context(), fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s",
		name, strings.TrimPrefix(mustParseURL(t, template).Path, "/"))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
	forwardTCP(t, u.Host, postgres)
	exitedNonZero(t, b, 15*time.Second, "the database appeared with a minimum above its version")
	if logs := b.logs.String(); !strings.Contains(logs, fmt.Sprintf("this broker's schema version %d is below %d", version, version+1)) ||
		strings.Contains(logs, "schema applied") {
		t.Fatalf("the broker must stop without applying its schema, saying why:\n%s", logs)
	}
	created, err := pgxpool.New(t.Context(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer created.Close()
	if after := schemaState(t, created); after != before {
		t.Fatalf("the refused broker changed the schema:\nbefore %s\nafter  %s", before, after)
	}
}

// forwardTCP listens on addr and forwards each connection to target until the test ends.
func forwardTCP(t *testing.T, addr, target string) {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			go func() { _, _ = io.Copy(server, client); _ = server.Close() }()
			go func() { _, _ = io.Copy(client, server); _ = client.Close() }()
		}
	}()
}

func mustParseURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
