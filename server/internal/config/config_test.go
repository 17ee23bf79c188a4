package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestSpoolDirIsPerBrokerUnlessSet(t *testing.T) {
	c, err := Load(nil, env(map[string]string{"LANES_PORT": "7001"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(c.SpoolDir, "lanes-spool-7001") {
		t.Fatalf("default spool dir %q does not name the port", c.SpoolDir)
	}
	c, err = Load([]string{"--spool-dir", "/var/spool/lanes"}, env(map[string]string{"LANES_SPOOL_DIR": "/elsewhere"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.SpoolDir != "/var/spool/lanes" {
		t.Fatalf("flag should win over the variable: %q", c.SpoolDir)
	}
}

func TestSpoolLimitsDefaultToOneGiBAndTenSecondsAndRefuseNegatives(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.SpoolMaxBytes != 1<<30 || c.SpoolReplayTimeout != 10*time.Second {
		t.Fatalf("defaults: max bytes %d, replay timeout %v", c.SpoolMaxBytes, c.SpoolReplayTimeout)
	}
	c, err = Load(nil, env(map[string]string{"LANES_SPOOL_MAX_BYTES": "0", "LANES_SPOOL_REPLAY_TIMEOUT_MS": "2500"}), io.Discard)
	if err != nil || c.SpoolMaxBytes != 0 || c.SpoolReplayTimeout != 2500*time.Millisecond {
		t.Fatalf("unbounded and 2.5 s: max bytes %d, replay timeout %v, err %v", c.SpoolMaxBytes, c.SpoolReplayTimeout, err)
	}
	for _, name := range []string{"LANES_SPOOL_MAX_BYTES", "LANES_SPOOL_REPLAY_TIMEOUT_MS"} {
		if _, err := Load(nil, env(map[string]string{name: "-1"}), io.Discard); err == nil || !strings.Contains(err.Error(), name) {
			t.Fatalf("%s=-1: want an error naming it, got %v", name, err)
		}
	}
}

func TestBadSettingNamesItsVariable(t *testing.T) {
	_, err := Load(nil, env(map[string]string{"LANES_PORT": "http"}), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "LANES_PORT") {
		t.Fatalf("want an error naming LANES_PORT, got %v", err)
	}
}

func TestJWTLeewayDefaultsToFiveSecondsAndIsListedByHelp(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.JWTLeeway != 5*time.Second {
		t.Fatalf("default leeway %v, want 5s", c.JWTLeeway)
	}
	c, err = Load([]string{"--jwt-leeway-seconds", "0"}, env(map[string]string{"LANES_JWT_LEEWAY_SECONDS": "30"}), io.Discard)
	if err != nil || c.JWTLeeway != 0 {
		t.Fatalf("the flag should win and 0 turn it off: %v %v", c, err)
	}
	if _, err := Load(nil, env(map[string]string{"LANES_JWT_LEEWAY_SECONDS": "-1"}), io.Discard); err == nil || !strings.Contains(err.Error(), "LANES_JWT_LEEWAY_SECONDS") {
		t.Fatalf("a negative leeway must be refused naming its variable: %v", err)
	}
	var help strings.Builder
	if _, err := Load([]string{"--help"}, env(nil), &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if !strings.Contains(help.String(), "--jwt-leeway-seconds") || !strings.Contains(help.String(), "LANES_JWT_LEEWAY_SECONDS") {
		t.Fatalf("--help does not list the leeway:\n%s", help.String())
	}
}

func TestTestFaultsAndJWTTogetherAreRefused(t *testing.T) {
	_, err := Load(nil, env(map[string]string{"LANES_TEST_FAULTS": "true", "LANES_JWT_ENABLED": "true", "LANES_JWT_SECRET": "s"}), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "LANES_TEST_FAULTS") || !strings.Contains(err.Error(), "LANES_JWT_ENABLED") {
		t.Fatalf("want an error naming both settings, got %v", err)
	}
	for _, vars := range []map[string]string{{"LANES_TEST_FAULTS": "true"}, {"LANES_JWT_ENABLED": "true"}} {
		if _, err := Load(nil, env(vars), io.Discard); err != nil {
			t.Fatalf("%v alone must load: %v", vars, err)
		}
	}
}

func TestJWTRequireExpIsOnByDefaultAndListedByHelp(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil || !c.JWTRequireExp {
		t.Fatalf("tokens without exp must be refused by default: %v %v", c.JWTRequireExp, err)
	}
	c, err = Load(nil, env(map[string]string{"LANES_JWT_REQUIRE_EXP": "false"}), io.Discard)
	if err != nil || c.JWTRequireExp {
		t.Fatalf("LANES_JWT_REQUIRE_EXP=false: %v %v", c.JWTRequireExp, err)
	}
	if _, err := Load(nil, env(map[string]string{"LANES_JWT_REQUIRE_EXP": "maybe"}), io.Discard); err == nil || !strings.Contains(err.Error(), "LANES_JWT_REQUIRE_EXP") {
		t.Fatalf("a non-boolean must be refused naming its variable: %v", err)
	}
	var help strings.Builder
	if _, err := Load([]string{"--help"}, env(nil), &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if !strings.Contains(help.String(), "--jwt-require-exp") || !strings.Contains(help.String(), "LANES_JWT_REQUIRE_EXP") {
		t.Fatalf("--help does not list the exp requirement:\n%s", help.String())
	}
}

func TestLogSettingsRefuseTyposAndIgnoreCase(t *testing.T) {
	c, err := Load([]string{"--log-level", "DEBUG"}, env(map[string]string{"LANES_LOG_FORMAT": "JSON"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.LogLevel != "debug" || c.LogFormat != "json" {
		t.Fatalf("got level %q format %q, want debug and json", c.LogLevel, c.LogFormat)
	}
	for name, vars := range map[string]map[string]string{
		"LANES_LOG_LEVEL":  {"LANES_LOG_LEVEL": "debg"},
		"LANES_LOG_FORMAT": {"LANES_LOG_FORMAT": "jsn"},
	} {
		_, err := Load(nil, env(vars), io.Discard)
		if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "must be") {
			t.Errorf("%s=%s: want an error naming the variable and the choices, got %v", name, vars[name], err)
		}
	}
}

func TestApplySchemaRefusesANonBooleanNamingIt(t *testing.T) {
	_, err := Load(nil, env(map[string]string{"LANES_APPLY_SCHEMA": "yes"}), io.Discard)
	if err == nil || !strings.Contains(err.Error(), `LANES_APPLY_SCHEMA (--apply-schema): must be true or false: "yes"`) {
		t.Fatalf("want a clear error for LANES_APPLY_SCHEMA=yes, got %v", err)
	}
}

func TestBodyBudgetDefaultsToTwoLargestBodiesAndHoldsAtLeastOne(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil || c.MaxInflightBodyBytes != 2*c.MaxBodyBytes {
		t.Fatalf("default body budget %d (max body %d), %v; want 2 × the max body", c.MaxInflightBodyBytes, c.MaxBodyBytes, err)
	}
	c, err = Load(nil, env(map[string]string{"LANES_MAX_BODY_BYTES": "1000", "LANES_MAX_INFLIGHT_BODY_BYTES": "1000"}), io.Discard)
	if err != nil || c.MaxInflightBodyBytes != 1000 {
		t.Fatalf("a budget of exactly one body: %+v, %v", c, err)
	}
	_, err = Load(nil, env(map[string]string{"LANES_MAX_BODY_BYTES": "1000", "LANES_MAX_INFLIGHT_BODY_BYTES": "999"}), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "LANES_MAX_INFLIGHT_BODY_BYTES") || !strings.Contains(err.Error(), "LANES_MAX_BODY_BYTES") {
		t.Fatalf("a budget smaller than one body: %v; want a refusal naming both settings", err)
	}
}

// The default shutdown timeout plus the 5 s give-back fits Kubernetes'
// default 30 s grace period.
func TestShutdownTimeoutDefaultsTo25Seconds(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil || c.ShutdownTimeout != 25*time.Second {
		t.Fatalf("default shutdown timeout %v, %v; want 25s", c.ShutdownTimeout, err)
	}
}

// TestJWTKeySetRolesAndSkipPathsSettings: the JWKS, role and skip-path settings
// default to the reference's values, and a value that cannot work stops the
// broker with the variable named.
func TestJWTKeySetRolesAndSkipPathsSettings(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.JWTJWKSURLs) != 0 || c.JWTJWKSRefresh != time.Hour || c.JWTJWKSUnknownKIDRefresh != 10*time.Second || c.JWTJWKSTimeout != 5*time.Second {
		t.Errorf("JWKS defaults: %q %v %v %v", c.JWTJWKSURLs, c.JWTJWKSRefresh, c.JWTJWKSUnknownKIDRefresh, c.JWTJWKSTimeout)
	}
	if !slices.Equal(c.JWTRoleClaims, []string{"role", "roles"}) || !slices.Equal(c.JWTSkipPaths, []string{"/health", "/metrics/prometheus", "/metrics", "/"}) {
		t.Errorf("role claims %q, skip paths %q", c.JWTRoleClaims, c.JWTSkipPaths)
	}
	if want := map[string]string{"read-only": "read-only", "write-only": "write-only", "read-write": "read-write", "admin": "admin"}; !maps.Equal(c.JWTRoleNames, want) {
		t.Errorf("role names %v", c.JWTRoleNames)
	}
	c, err = Load(nil, env(map[string]string{"LANES_JWT_ROLE_CLAIMS": " groups , https://x.example/roles ", "LANES_JWT_ROLE_ADMIN": "ops", "LANES_JWT_SKIP_PATHS": "/, /docs/"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.JWTRoleClaims, []string{"groups", "https://x.example/roles"}) || c.JWTRoleNames["admin"] != "ops" || !slices.Equal(c.JWTSkipPaths, []string{"/", "/docs/"}) {
		t.Errorf("role claims %q, names %v, skip paths %q", c.JWTRoleClaims, c.JWTRoleNames, c.JWTSkipPaths)
	}
	// A JSON Pointer is taken as written; a malformed one stops the broker.
	c, err = Load(nil, env(map[string]string{"LANES_JWT_ROLE_CLAIMS": "/realm_access/roles,/resource_access/lanes/roles,/~1a~0b"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.JWTRoleClaims, []string{"/realm_access/roles", "/resource_access/lanes/roles", "/~1a~0b"}) {
		t.Errorf("role claims %q", c.JWTRoleClaims)
	}
	for _, bad := range []struct{ variable, value string }{
		{"LANES_JWT_JWKS_URL", "idp.example/jwks"},
		{"LANES_JWT_JWKS_REFRESH_MS", "999"},
		{"LANES_JWT_JWKS_UNKNOWN_KID_REFRESH_MS", "0"},
		{"LANES_JWT_ROLE_CLAIMS", ","},
		{"LANES_JWT_ROLE_CLAIMS", "roles,/"},
		{"LANES_JWT_ROLE_CLAIMS", "/realm_access/roles/"},
		{"LANES_JWT_ROLE_CLAIMS", "/realm_access~2/roles"},
		{"LANES_JWT_ROLE_CLAIMS", "/roles~"},
		{"LANES_JWT_SKIP_PATHS", "/health,docs/"},
	} {
		if _, err := Load(nil, env(map[string]string{bad.variable: bad.value}), io.Discard); err == nil || !strings.Contains(err.Error(), bad.variable) {
			t.Errorf("%s=%q: %v, want an error naming it", bad.variable, bad.value, err)
		}
	}
}

// TestJWKSURLsAreSeparatedByCommasOrWhitespace: LANES_JWT_JWKS_URL takes one
// or more key sets, separated by commas, spaces or newlines (a URL holds no
// whitespace, and a comma inside one is written %2C); the same set twice,
// or two sets /health would show alike, stop the broker naming the variable.
func TestJWKSURLsAreSeparatedByCommasOrWhitespace(t *testing.T) {
	for value, want := range map[string][]string{
		"https://a.example/jwks":                                      {"https://a.example/jwks"},
		"https://a.example/jwks,https://b.example/keys":               {"https://a.example/jwks", "https://b.example/keys"},
		" https://a.example/jwks , https://b.example/keys ":           {"https://a.example/jwks", "https://b.example/keys"},
		"https://a.example/jwks\n\thttps://b.example/keys\n":          {"https://a.example/jwks", "https://b.example/keys"},
		"https://a.example/jwks https://b.example/a%2Cb?tenant=x%2Cy": {"https://a.example/jwks", "https://b.example/a%2Cb?tenant=x%2Cy"},
	} {
		c, err := Load(nil, env(map[string]string{"LANES_JWT_JWKS_URL": value}), io.Discard)
		if err != nil {
			t.Errorf("%q: %v", value, err)
			continue
		}
		if !slices.Equal(c.JWTJWKSURLs, want) {
			t.Errorf("%q: %q, want %q", value, c.JWTJWKSURLs, want)
		}
	}
	for _, bad := range []string{
		"https://a.example/jwks idp.example/jwks",
		"https://a.example/jwks,ftp://b.example/jwks",
		"https://a.example/jwks https://a.example/jwks",
		"https://a.example/jwks?tenant=1 https://a.example/jwks?tenant=2",
		"https://u:p@a.example/jwks https://a.example/jwks",
	} {
		if _, err := Load(nil, env(map[string]string{"LANES_JWT_JWKS_URL": bad}), io.Discard); err == nil || !strings.Contains(err.Error(), "LANES_JWT_JWKS_URL") {
			t.Errorf("%q: %v, want an error naming LANES_JWT_JWKS_URL", bad, err)
		}
	}
}

// TestRoleClaimsAsAJSONArray: a LANES_JWT_ROLE_CLAIMS value starting with "["
// is a JSON array of entries, so a claim name holding a comma can be named;
// entries are taken as written. The comma form is unchanged, and an array that
// does not parse, or holds an entry that cannot be a claim, stops the broker
// naming the variable.
func TestRoleClaimsAsAJSONArray(t *testing.T) {
	for value, want := range map[string][]string{
		`["https://example.com/roles,v2"]`:                             {"https://example.com/roles,v2"},
		` ["groups", "/realm_access/roles", "a claim, with spaces "] `: {"groups", "/realm_access/roles", "a claim, with spaces "},
		`["[bracketed]"]`:                   {"[bracketed]"},
		"groups, https://example.com/roles": {"groups", "https://example.com/roles"},
	} {
		c, err := Load(nil, env(map[string]string{"LANES_JWT_ROLE_CLAIMS": value}), io.Discard)
		if err != nil {
			t.Errorf("%q: %v", value, err)
			continue
		}
		if !slices.Equal(c.JWTRoleClaims, want) {
			t.Errorf("%q: %q, want %q", value, c.JWTRoleClaims, want)
		}
	}
	for _, bad := range []string{
		`["https://example.com/roles,v2"`,
		`["groups",]`,
		`[groups]`,
		`["groups"] trailing`,
		`["groups", 7]`,
		`[{"claim": "groups"}]`,
		`["groups", ""]`,
		`[null]`,
		`["/realm_access//roles"]`,
		`[]`,
	} {
		if _, err := Load(nil, env(map[string]string{"LANES_JWT_ROLE_CLAIMS": bad}), io.Discard); err == nil || !strings.Contains(err.Error(), "LANES_JWT_ROLE_CLAIMS") {
			t.Errorf("%q: %v, want an error naming LANES_JWT_ROLE_CLAIMS", bad, err)
		}
	}
}

// TestUnusedJWTSettingsAreNamedWhileJWTIsOff: a key or claim set without
// LANES_JWT_ENABLED is ignored, and the broker warns naming it.
func TestUnusedJWTSettingsAreNamedWhileJWTIsOff(t *testing.T) {
	for _, tc := range []struct {
		what string
		vars map[string]string
		want []string
	}{
		{"nothing set", nil, nil},
		{"defaults written out", map[string]string{"LANES_JWT_ROLE_CLAIMS": "role,roles", "LANES_JWT_ALGORITHM": "auto"}, nil},
		{"a secret and an issuer", map[string]string{"LANES_JWT_SECRET": "s", "LANES_JWT_ISSUER": "https://sso.example.com/"},
			[]string{"LANES_JWT_SECRET", "LANES_JWT_ISSUER"}},
		{"JWT on", map[string]string{"LANES_JWT_ENABLED": "true", "LANES_JWT_SECRET": "s"}, nil},
	} {
		c, err := Load(nil, env(tc.vars), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.UnusedJWTSettings(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: unused %v, want %v", tc.what, got, tc.want)
		}
	}
}

// TestUnknownVariablesAreNamed: a LANES_* variable that is no setting (a
// typo) is ignored, and the broker warns naming it; an empty variable counts
// as unset, so its default applies.
func TestUnknownVariablesAreNamed(t *testing.T) {
	environ := []string{"LANES_POOL_SIZE=50", "LANES_DB_POOL_SIZE=40", "PATH=/bin", "LANES_JWT_SECRETS=x", "LANES_PORT=",
		// read by the SDKs and the repository's scripts, not by the broker
		"LANES_URL=http://b:6632", "LANES_TOKEN=t", "LANES_SDK_POP_AUTOPILOT=off", "LANES_PG_PORT=5433", "LANES_TEST_URL=x", "LANES_URLS=x"}
	if got, want := UnknownVariables(environ), []string{"LANES_JWT_SECRETS", "LANES_POOL_SIZE", "LANES_URLS"}; !slices.Equal(got, want) {
		t.Fatalf("unknown %v, want %v", got, want)
	}
	c, err := Load(nil, env(map[string]string{"LANES_PORT": ""}), io.Discard)
	if err != nil || c.Port != 6632 {
		t.Fatalf("an empty LANES_PORT: port %d, %v; want the default 6632", c.Port, err)
	}
}

// A pop's byte budget defaults to 16 MiB; 0 turns it off; below 0 is refused.
func TestPopMaxBytesDefaultsTo16MiBAndZeroTurnsItOff(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil || c.PopMaxBytes != 16<<20 {
		t.Fatalf("default pop byte budget %d, %v; want 16 MiB", c.PopMaxBytes, err)
	}
	c, err = Load(nil, env(map[string]string{"LANES_POP_MAX_BYTES": "0"}), io.Discard)
	if err != nil || c.PopMaxBytes != 0 {
		t.Fatalf("LANES_POP_MAX_BYTES=0: %d, %v; want 0 (no bound)", c.PopMaxBytes, err)
	}
	if _, err = Load(nil, env(map[string]string{"LANES_POP_MAX_BYTES": "-1"}), io.Discard); err == nil ||
		!strings.Contains(err.Error(), "LANES_POP_MAX_BYTES") {
		t.Fatalf("LANES_POP_MAX_BYTES=-1: %v; want a refusal naming the setting", err)
	}
}

func TestListByteBudgetDefaultsToFourMiBTakesZeroForUnboundedAndRefusesNegatives(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil || c.ListMaxBytes != 4<<20 {
		t.Fatalf("default: %d, err %v", c.ListMaxBytes, err)
	}
	for v, want := range map[string]int64{"0": 0, "1": 1, "1048576": 1 << 20} {
		c, err := Load(nil, env(map[string]string{"LANES_LIST_MAX_BYTES": v}), io.Discard)
		if err != nil {
			t.Fatalf("LANES_LIST_MAX_BYTES=%s: %v", v, err)
		}
		if c.ListMaxBytes != want {
			t.Fatalf("LANES_LIST_MAX_BYTES=%s: %d", v, c.ListMaxBytes)
		}
	}
	for _, v := range []string{"-1", "4MiB", "1.5"} {
		if _, err := Load(nil, env(map[string]string{"LANES_LIST_MAX_BYTES": v}), io.Discard); err == nil || !strings.Contains(err.Error(), "LANES_LIST_MAX_BYTES") {
			t.Fatalf("LANES_LIST_MAX_BYTES=%s: want an error naming it, got %v", v, err)
		}
	}
}

// TestAnArgumentThatIsNoFlagIsRefused: "lanes version" or a flag value split
// off by a stray space ("--port 7000 0") must not start a broker on defaults.
func TestAnArgumentThatIsNoFlagIsRefused(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--port", "7000", "serve"}} {
		_, err := Load(args, env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("unexpected argument %q", args[len(args)-1])) ||
			!strings.Contains(err.Error(), "lanes --help") {
			t.Errorf("lanes %s: got %v, want a refusal naming the argument", strings.Join(args, " "), err)
		}
	}
}
