package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestLogAttrsListEverySettingWithoutSecrets: the boot "configuration" line
// names every setting, hides the database password and JWT keys, and shows
// derived defaults as they take effect.
func TestLogAttrsListEverySettingWithoutSecrets(t *testing.T) {
	c, err := Load(nil, env(map[string]string{
		"LANES_DATABASE_URL":   "postgres://lanes:hunter2@db:5432/lanes?sslmode=disable",
		"LANES_JWT_ENABLED":    "true",
		"LANES_JWT_SECRET":     "s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t",
		"LANES_PORT":           "7001",
		"LANES_MAX_BODY_BYTES": "1000",
		"LANES_JWT_JWKS_URL":   "https://lanes:idp-pw@idp.example/jwks?password=idp-q&token=idp-t, https://ops:idp-pw2@idp2.example/keys",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	attrs := c.LogAttrs()
	got := map[string]string{}
	for i := 0; i+1 < len(attrs); i += 2 {
		got[attrs[i].(string)] = fmt.Sprint(attrs[i+1])
	}
	for _, s := range settings {
		if _, ok := got[s.flag]; !ok {
			t.Errorf("setting %s missing from the configuration line", s.flag)
		}
	}
	line := fmt.Sprint(attrs...)
	if strings.Contains(line, "hunter2") || strings.Contains(line, "s3cr3t") || strings.Contains(line, "idp-") {
		t.Fatalf("a secret is logged: %s", line)
	}
	want := map[string]string{
		"database-url":            "postgres://lanes:xxxxx@db:5432/lanes?sslmode=disable",
		"jwt-secret":              "set",
		"jwt-public-key":          "",
		"jwt-jwks-url":            "https://idp.example/jwks?password=xxxxx&token=xxxxx https://idp2.example/keys",
		"port":                    "7001",
		"max-inflight-body-bytes": "2000",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if !strings.HasSuffix(got["spool-dir"], "lanes-spool-7001") {
		t.Errorf("spool-dir %q is not the effective directory", got["spool-dir"])
	}
	if red := redactDatabaseURL("host=db user=lanes password='p w' dbname=lanes"); strings.Contains(red, "p w") {
		t.Errorf("key=value password not hidden: %s", red)
	}
	// libpq and pgx also take the password, and the TLS key's, from the query string.
	queryDSN := "postgres://u@h/db?sslmode=disable&password=hunter2&sslpassword=k%20ey&PassWord=again"
	if red, want := redactDatabaseURL(queryDSN), "postgres://u@h/db?sslmode=disable&password=xxxxx&sslpassword=xxxxx&PassWord=xxxxx"; red != want {
		t.Errorf("query-string passwords: logged %s; want %s", red, want)
	}
}

// TestLogAttrsHideURLPasswordsThatNetURLMisreads: pgx reads the userinfo of a
// database URL up to the first '@' (as libpq does), so a password holding
// '#' or '?' connects; net/url cut the URL there instead, and the
// configuration line logged such a password in clear.
func TestLogAttrsHideURLPasswordsThatNetURLMisreads(t *testing.T) {
	for _, tc := range []struct{ dsn, password, want string }{
		{"postgres://lanes:se#cret@db:5432/lanes", "se#cret", "postgres://lanes:xxxxx@db:5432/lanes"},
		{"postgres://lanes:123#45@db/lanes?sslmode=disable", "123#45", "postgres://lanes:xxxxx@db/lanes?sslmode=disable"},
		{"postgresql://lanes:1?x@db/lanes?sslmode=disable", "1?x", "postgresql://lanes:xxxxx@db/lanes?sslmode=disable"},
	} {
		parsed, err := pgconn.ParseConfig(tc.dsn)
		if err != nil || parsed.Password != tc.password {
			t.Fatalf("%s: pgx reads password %q (err %v), the test expects %q", tc.dsn, parsed.Password, err, tc.password)
		}
		c, err := Load(nil, env(map[string]string{"LANES_DATABASE_URL": tc.dsn}), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprint(c.LogAttrs()...)
		if strings.Contains(line, tc.password) {
			t.Errorf("%s: the password is logged: %s", tc.dsn, line)
		}
		if got := redactDatabaseURL(tc.dsn); got != tc.want {
			t.Errorf("%s: logged as %s; want %s", tc.dsn, got, tc.want)
		}
	}
	// pgx refuses a password holding '/', after the line is logged.
	if red := redactDatabaseURL("postgres://lanes:pass/word@db/lanes"); strings.Contains(red, "word") {
		t.Errorf("a password with '/' is logged: %s", red)
	}
}

// TestLogAttrsHideKeywordPasswordsWithEscapes: in a key=value connection
// string pgx (as libpq) reads \' and \\ inside a quoted value and a
// backslash-escaped character in an unquoted one; the configuration line
// logged the part of such a password after the first escape.
func TestLogAttrsHideKeywordPasswordsWithEscapes(t *testing.T) {
	for _, tc := range []struct{ dsn, password, want string }{
		{`host=db password='it\'s a secret' dbname=lanes`, `it's a secret`, `host=db password=xxxxx dbname=lanes`},
		{`host=db password='back\\slash end' dbname=lanes`, `back\slash end`, `host=db password=xxxxx dbname=lanes`},
		{`host=db password=un\'quoted dbname=lanes`, `un'quoted`, `host=db password=xxxxx dbname=lanes`},
		{`host=db sslpassword='k\'ey pass' password = 'p w' dbname=lanes`, `p w`, `host=db sslpassword=xxxxx password = xxxxx dbname=lanes`},
	} {
		parsed, err := pgconn.ParseConfig(tc.dsn)
		if err != nil || parsed.Password != tc.password {
			t.Fatalf("%s: pgx reads password %q (err %v), the test expects %q", tc.dsn, parsed.Password, err, tc.password)
		}
		if got := redactDatabaseURL(tc.dsn); got != tc.want {
			t.Errorf("%s: logged as %s; want %s", tc.dsn, got, tc.want)
		}
	}
}

// TestLogAttrsAreTypedInJSONAndUnchangedInText: with LANES_LOG_FORMAT=json the
// configuration line writes numbers as numbers and booleans as booleans (a
// duration as the number of the unit its name ends in), so a log pipeline can
// filter pool-size > 10; every other setting, the masked secrets among them,
// stays a string, and the text format writes each value as it was given.
func TestLogAttrsAreTypedInJSONAndUnchangedInText(t *testing.T) {
	c, err := Load(nil, env(map[string]string{
		"LANES_DATABASE_URL":          "postgres://lanes:hunter2@db:5432/lanes?sslmode=disable",
		"LANES_JWT_SECRET":            "s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t",
		"LANES_DB_POOL_SIZE":          "+12",
		"LANES_RATE_LIMIT_PER_CLIENT": "1e6",
		"LANES_PARKED_RECHECK_RATE":   "0.5",
		"LANES_ACK_SYNC_COMMIT":       "TRUE",
		"LANES_JWT_LEEWAY_SECONDS":    "7",
		"LANES_GC_PERCENT":            "-1",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	slog.New(slog.NewJSONHandler(&out, nil)).Info("configuration", c.LogAttrs()...)
	jsonLine := out.String()
	dec := json.NewDecoder(&out)
	dec.UseNumber()
	var line map[string]any
	if err := dec.Decode(&line); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"pool-size":               json.Number("12"),
		"rate-limit-per-client":   json.Number("1000000"),
		"parked-recheck-rate":     json.Number("0.5"),
		"max-inflight-body-bytes": json.Number("134217728"),
		"admission-max-wait-ms":   json.Number("2000"),
		"jwt-leeway-seconds":      json.Number("7"),
		"gc-percent":              json.Number("-1"),
		"ack-sync-commit":         true,
		"jwt-enabled":             false,
		"database-url":            "postgres://lanes:xxxxx@db:5432/lanes?sslmode=disable",
		"jwt-secret":              "set",
		"jwt-public-key":          "",
		"log-level":               "info",
		"jwt-skip-paths":          "/health,/metrics/prometheus,/metrics,/",
	}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("JSON %s = %#v (%T), want %#v (%T)", k, line[k], line[k], v, v)
		}
	}
	for _, s := range settings {
		_, isText := line[s.flag].(string)
		if typed := s.set.typed != nil; typed == isText {
			t.Errorf("JSON %s = %#v: typed %v, but a string %v", s.flag, line[s.flag], typed, isText)
		}
	}

	// The text line is what it was when every value was logged as its text.
	var text, asText bytes.Buffer
	attrs := c.LogAttrs()
	plain := make([]any, len(attrs))
	for i, a := range attrs {
		plain[i] = fmt.Sprint(a)
	}
	removeTime := &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}
	slog.New(slog.NewTextHandler(&text, removeTime)).Info("configuration", attrs...)
	slog.New(slog.NewTextHandler(&asText, removeTime)).Info("configuration", plain...)
	if text.String() != asText.String() {
		t.Fatalf("the text line changed:\n%s\nwas\n%s", text.String(), asText.String())
	}
	for _, part := range []string{" pool-size=+12 ", " rate-limit-per-client=1e6 ", " ack-sync-commit=TRUE ", ` jwt-public-key="" `, " jwt-secret=set "} {
		if !strings.Contains(text.String(), part) {
			t.Errorf("the text line lacks %q:\n%s", part, text.String())
		}
	}
	if logged := text.String() + jsonLine; strings.Contains(logged, "hunter2") || strings.Contains(logged, "s3cr3t") {
		t.Fatal("a secret is logged")
	}
}
