package main

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lanesmq/lanes/server/internal/testdb"
)

// TestADatabaseThatRefusesTheLoginStopsTheBoot: a wrong database name or role
// in LANES_DATABASE_URL is answered by PostgreSQL at once and waiting cannot
// fix it, so the broker exits with status 2 and one line naming the setting
// (its password hidden) and the SQLSTATE, instead of serving and spooling
// pushes as if the database were down. An unreachable database still boots
// (TestBrokerWarnsAtStartupAboutAShortJWTSecret and the pgdown tests).
func TestADatabaseThatRefusesTheLoginStopsTheBoot(t *testing.T) {
	base, err := url.Parse(os.Getenv(testdb.EnvVar))
	if err != nil || base.Host == "" {
		t.Fatalf("%s is not set: run the tests with `make test`, which starts PostgreSQL", testdb.EnvVar)
	}
	const password = "hunter2-not-logged"
	for _, c := range []struct {
		what, user, database, sqlstate string
		env                            []string
	}{
		{"no such database", base.User.Username(), "lanes_no_such_db", "3D000", nil},
		{"no such role", "lanes_no_such_role", strings.TrimPrefix(base.Path, "/"), "28000", nil},
		{"no such database, schema not applied by the broker", base.User.Username(), "lanes_no_such_db", "3D000", []string{"LANES_APPLY_SCHEMA=false"}},
	} {
		u := *base
		u.User = url.UserPassword(c.user, password)
		u.Path = "/" + c.database
		out, code := refusedBootStatus(t, u.String(), c.what, c.env...)
		line := onlyLine(out)
		if code != 2 || !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "LANES_DATABASE_URL") ||
			!strings.Contains(line, c.sqlstate) || !strings.Contains(line, c.database) ||
			!strings.Contains(line, ":xxxxx@") || strings.Contains(string(out), password) {
			t.Errorf("%s: want exit status 2 and only an ERROR line naming LANES_DATABASE_URL (password hidden) and SQLSTATE %s; got status %d:\n%s",
				c.what, c.sqlstate, code, out)
		}
	}
}

// onlyLine is out's one line, or "" when it has none or more: a refused boot
// says what to fix in its one line, with no warning ahead of it (the
// notification listener's about the same refusal came first in most boots).
func onlyLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1 {
		return ""
	}
	return lines[0]
}

// passwordRole is the one role scripts/pg.sh makes give its password
// (scram-sha-256); the test cluster trusts every other login.
const passwordRole = "lanes_password_login"

// TestAWrongPasswordStopsTheBoot: PostgreSQL answering a wrong password
// (SQLSTATE 28P01) is a setting to fix like a wrong database or role, so the
// broker exits with status 2 and one line naming the cause, without either
// password. The same role with its password boots and serves, so the refusal
// is the password's.
func TestAWrongPasswordStopsTheBoot(t *testing.T) {
	rightPassword, wrongPassword := "right-"+rand.Text(), "wrong-"+rand.Text()
	right := passwordRoleDatabase(t, rightPassword)
	u, _ := url.Parse(right)
	u.User = url.UserPassword(passwordRole, wrongPassword)
	wrong := u.String()

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, wrong)
	if err == nil {
		_ = conn.Close(ctx)
		t.Fatalf("PostgreSQL admits %s with a wrong password: start the test cluster with scripts/pg.sh, which makes that role give its password", passwordRole)
	}
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "28P01" {
		t.Fatalf("want SQLSTATE 28P01 for a wrong password, got %v", err)
	}

	// Three boots: a warning racing the boot's own line showed in most, not all.
	for range 3 {
		out, code := refusedBootStatus(t, wrong, "a wrong password")
		line := onlyLine(out)
		if code != 2 || !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "LANES_DATABASE_URL") ||
			!strings.Contains(line, "28P01") || !strings.Contains(line, "password authentication failed for user") ||
			!strings.Contains(line, passwordRole+":xxxxx@") {
			t.Fatalf("want exit status 2 and only an ERROR line naming LANES_DATABASE_URL (password hidden), SQLSTATE 28P01 and the failed password authentication; got status %d:\n%s",
				code, out)
		}
		if strings.Contains(string(out), wrongPassword) || strings.Contains(string(out), rightPassword) {
			t.Fatalf("the boot output shows a password:\n%s", out)
		}
	}

	b := startBroker(t, right, freePort(t), t.TempDir())
	b.waitHealth(t, http.StatusOK, 30*time.Second)
}

// passwordRoleDatabase gives passwordRole the password and a new database of
// its own (so the broker can apply its schema there), and returns its URL;
// the database and the role are dropped when the test ends.
func passwordRoleDatabase(t *testing.T, password string) string {
	t.Helper()
	ctx := context.Background()
	base := os.Getenv(testdb.EnvVar)
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	// A run killed before its cleanup leaves the role behind (42710), perhaps
	// owning its database still.
	if _, err := admin.Exec(ctx, "CREATE ROLE "+passwordRole+" LOGIN"); err != nil {
		if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "42710" {
			t.Fatal(err)
		}
	}
	// rand.Text is base32: nothing to quote in the literal.
	if _, err := admin.Exec(ctx, "ALTER ROLE "+passwordRole+" LOGIN PASSWORD '"+password+"'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP ROLE IF EXISTS "+passwordRole)
	})
	dsn := newDatabase(t)
	u, _ := url.Parse(dsn)
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+strings.TrimPrefix(u.Path, "/")+" OWNER TO "+passwordRole); err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(passwordRole, password)
	return u.String()
}

// TestARunningBrokerLogsALoginRefusalOncePerEpisode: once serving, a database
// dropped under the broker (its new connections get SQLSTATE 3D000) is left
// to retry, as an outage, but the broker says at ERROR, once and not per
// attempt, that LANES_DATABASE_URL is refused.
func TestARunningBrokerLogsALoginRefusalOncePerEpisode(t *testing.T) {
	dsn := newDatabase(t)
	b := startBroker(t, dsn, freePort(t), t.TempDir())
	b.waitHealth(t, http.StatusOK, 30*time.Second)

	ctx := context.Background()
	admin, err := pgx.Connect(ctx, os.Getenv(testdb.EnvVar))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	u, _ := url.Parse(dsn)
	if _, err := admin.Exec(ctx, "DROP DATABASE "+strings.TrimPrefix(u.Path, "/")+" WITH (FORCE)"); err != nil {
		t.Fatal(err)
	}
	refusals := func() int {
		n := 0
		for l := range strings.Lines(b.logs.String()) {
			if strings.Contains(l, "level=ERROR") && strings.Contains(l, "LANES_DATABASE_URL") && strings.Contains(l, "3D000") {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(10 * time.Second)
	for refusals() == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // several more failed attempts
	select {
	case <-b.Done():
		t.Fatalf("the broker stopped:\n%s", b.logs.String())
	default:
	}
	if n := refusals(); n != 1 {
		t.Fatalf("want one ERROR line naming LANES_DATABASE_URL and SQLSTATE 3D000, got %d:\n%s", n, b.logs.String())
	}
}
