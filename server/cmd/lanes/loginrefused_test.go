package main

import (
	"net/url"
	"os"
	"strings"
	"testing"

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
		t.Skipf("%s is not set", testdb.EnvVar)
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
		var line string
		for l := range strings.Lines(string(out)) {
			if strings.Contains(l, "LANES_DATABASE_URL") && strings.Contains(l, c.sqlstate) {
				line = l
			}
		}
		if code != 2 || line == "" || !strings.Contains(line, "level=ERROR") || !strings.Contains(line, c.database) ||
			!strings.Contains(line, ":xxxxx@") || strings.Contains(string(out), password) {
			t.Errorf("%s: want exit status 2 and an ERROR line naming LANES_DATABASE_URL (password hidden) and SQLSTATE %s; got status %d:\n%s",
				c.what, c.sqlstate, code, out)
		}
	}
}
