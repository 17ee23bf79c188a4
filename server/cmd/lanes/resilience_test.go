package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/lanesmq/lanes/server/internal/auth"
	"github.com/lanesmq/lanes/server/internal/brokertest"
	"github.com/lanesmq/lanes/server/internal/config"
)

const testJWTSecret = "leeway-test-secret-leeway-test-secret"

// signTestToken signs claims for an admin "svc" with testJWTSecret.
func signTestToken(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	claims["sub"], claims["role"] = "svc", auth.RoleAdmin
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(testJWTSecret))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// brokerVerifier builds the verifier the broker builds from its settings (env),
// with JWT on and testJWTSecret.
func brokerVerifier(t *testing.T, env map[string]string) *auth.Verifier {
	t.Helper()
	env["LANES_JWT_ENABLED"], env["LANES_JWT_SECRET"] = "true", testJWTSecret
	cfg, err := config.Load(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	v, err := newVerifier(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestJWTWithoutExpiryFollowsLanesJWTRequireExp: the broker's verifier refuses
// a token without exp by default and accepts it with LANES_JWT_REQUIRE_EXP=false.
func TestJWTWithoutExpiryFollowsLanesJWTRequireExp(t *testing.T) {
	forever := signTestToken(t, jwt.MapClaims{"iat": time.Now().Unix()})
	if _, aerr := brokerVerifier(t, map[string]string{}).Verify("Bearer " + forever); aerr == nil || aerr.Message != auth.MsgNoExpiry {
		t.Errorf("a token without exp by default: %v, want %q", aerr, auth.MsgNoExpiry)
	}
	if _, aerr := brokerVerifier(t, map[string]string{"LANES_JWT_REQUIRE_EXP": "false"}).Verify("Bearer " + forever); aerr != nil {
		t.Errorf("a token without exp with LANES_JWT_REQUIRE_EXP=false: %q", aerr.Message)
	}
}

// TestJWTLeewayToleratesClockSkewByDefault builds the verifier the broker
// builds from its settings: by default a token a second ahead of (iat) or
// behind (exp) the broker's clock is accepted, and LANES_JWT_LEEWAY_SECONDS=0
// turns the tolerance off.
func TestJWTLeewayToleratesClockSkewByDefault(t *testing.T) {
	now := time.Now().Unix()
	sign := func(claims jwt.MapClaims) string { return signTestToken(t, claims) }
	skewed := map[string]string{
		"iat 1 s ahead":               sign(jwt.MapClaims{"iat": now + 1, "exp": now + 3600}),
		"exp 1 s past":                sign(jwt.MapClaims{"iat": now - 60, "exp": now - 1}),
		"iat 1 s ahead, exp 1 s past": sign(jwt.MapClaims{"iat": now + 1, "exp": now - 1}),
	}
	byDefault := brokerVerifier(t, map[string]string{})
	strict := brokerVerifier(t, map[string]string{"LANES_JWT_LEEWAY_SECONDS": "0"})
	for name, tok := range skewed {
		if _, aerr := byDefault.Verify("Bearer " + tok); aerr != nil {
			t.Errorf("%s with the default leeway: refused with %q", name, aerr.Message)
		}
		if _, aerr := strict.Verify("Bearer " + tok); aerr == nil {
			t.Errorf("%s with LANES_JWT_LEEWAY_SECONDS=0: accepted", name)
		}
	}
	if _, aerr := byDefault.Verify("Bearer " + sign(jwt.MapClaims{"exp": now - 30})); aerr == nil || aerr.Message != auth.MsgExpired {
		t.Errorf("a token expired 30 s ago must stay refused: %v", aerr)
	}
}

// TestBrokerRefusesTestFaultsWithJWT starts the real binary with the test-only
// fault scripts and JWT authentication both on: the scripts would bypass
// authentication, so it must exit at once with an error naming both settings.
func TestBrokerRefusesTestFaultsWithJWT(t *testing.T) {
	out := refusedBoot(t, "LANES_TEST_FAULTS and JWT on", "LANES_TEST_FAULTS=true", "LANES_JWT_ENABLED=true",
		"LANES_JWT_SECRET=faults-jwt-secret-faults-jwt-secret")
	if !strings.Contains(string(out), "LANES_TEST_FAULTS") || !strings.Contains(string(out), "LANES_JWT_ENABLED") {
		t.Fatalf("the error must name both settings:\n%s", out)
	}
}

func TestShortJWTSecretIsWarnedAboutNotRefused(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		warn bool
	}{
		{"31-byte secret", map[string]string{"LANES_JWT_ENABLED": "true", "LANES_JWT_SECRET": strings.Repeat("s", 31)}, true},
		{"32-byte secret", map[string]string{"LANES_JWT_ENABLED": "true", "LANES_JWT_SECRET": strings.Repeat("s", 32)}, false},
		{"auth off", map[string]string{"LANES_JWT_SECRET": "short"}, false},
	}
	for _, c := range cases {
		cfg, err := config.Load(nil, func(k string) string { return c.env[k] }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := newVerifier(cfg, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatalf("%s: a short secret must not be refused: %v", c.name, err)
		}
		var logs bytes.Buffer
		warnShortJWTSecret(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
		warned := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "LANES_JWT_SECRET is shorter than 32 bytes")
		if warned != c.warn {
			t.Errorf("%s: warned %v, want %v: %q", c.name, warned, c.warn, logs.String())
		}
		if strings.Contains(logs.String(), c.env["LANES_JWT_SECRET"]) {
			t.Errorf("%s: the warning shows the secret: %q", c.name, logs.String())
		}
	}
}

// TestJWTKeysSetWithJWTOffAreWarnedAbout: a secret set without
// LANES_JWT_ENABLED leaves every route open; the broker says so at startup,
// naming the setting and not its value.
func TestJWTKeysSetWithJWTOffAreWarnedAbout(t *testing.T) {
	cfg, err := config.Load(nil, func(k string) string {
		return map[string]string{"LANES_JWT_SECRET": testJWTSecret}[k]
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	warnUnusedJWTSettings(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "settings=LANES_JWT_SECRET") ||
		!strings.Contains(logs.String(), "LANES_JWT_ENABLED is false") || strings.Contains(logs.String(), testJWTSecret) {
		t.Fatalf("want a warning naming LANES_JWT_SECRET without its value: %q", logs.String())
	}
}

// TestBrokerWarnsAtStartupAboutAShortJWTSecret starts the real binary (its
// database unreachable, which it tolerates) with a short secret: it logs the
// warning and keeps running.
func TestBrokerWarnsAtStartupAboutAShortJWTSecret(t *testing.T) {
	b := startBroker(t, "postgres://nobody@127.0.0.1:1/none?sslmode=disable", freePort(t), t.TempDir(),
		"LANES_JWT_ENABLED=true", "LANES_JWT_SECRET=short-secret")
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(b.logs.String(), "LANES_JWT_SECRET is shorter than 32 bytes") {
		select {
		case <-b.Done():
			t.Fatalf("the broker exited:\n%s", b.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warning about the short secret:\n%s", b.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if strings.Contains(b.logs.String(), "short-secret") {
		t.Fatalf("the warning shows the secret:\n%s", b.logs.String())
	}
}

// TestBrokerWarnsAboutAnUnknownLanesVariable starts the real binary with a
// misspelled setting: it names the variable in a warning and keeps running.
func TestBrokerWarnsAboutAnUnknownLanesVariable(t *testing.T) {
	b := startBroker(t, "postgres://nobody@127.0.0.1:1/none?sslmode=disable", freePort(t), t.TempDir(), "LANES_POOL_SIZE=50")
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(b.logs.String(), "no setting are ignored") {
		if time.Now().After(deadline) {
			t.Fatalf("no warning about LANES_POOL_SIZE:\n%s", b.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, line := range strings.Split(b.logs.String(), "\n") {
		if strings.Contains(line, "no setting are ignored") && (!strings.Contains(line, "level=WARN") || !strings.Contains(line, "LANES_POOL_SIZE")) {
			t.Fatalf("the warning must be at WARN and name LANES_POOL_SIZE: %s", line)
		}
	}
}

// TestBrokerDoesNotLogAMistakenJWTPublicKey starts the real binary with a
// LANES_JWT_PUBLIC_KEY that is neither PEM text nor a file, as when an HMAC
// secret lands in the wrong setting: the boot error says so without the value,
// which the configuration line also only shows as "set".
func TestBrokerDoesNotLogAMistakenJWTPublicKey(t *testing.T) {
	const secret = "an-hmac-secret-in-the-wrong-setting-0123456789"
	out := refusedBoot(t, "an unusable LANES_JWT_PUBLIC_KEY", "LANES_JWT_ENABLED=true", "LANES_JWT_PUBLIC_KEY="+secret)
	if strings.Contains(string(out), secret) {
		t.Fatalf("the boot output shows the LANES_JWT_PUBLIC_KEY value:\n%s", out)
	}
	if !strings.Contains(string(out), "jwt public key") {
		t.Fatalf("the error must name the setting:\n%s", out)
	}
}

// refusedBoot starts the real binary with env (on a database it never
// reaches) and returns its output once it has exited non-zero, as a broker
// refusing its settings at boot must, within 15 s; what names the settings
// in the failure when it keeps running.
func refusedBoot(t *testing.T, what string, env ...string) []byte {
	t.Helper()
	return refusedBootOn(t, "postgres://nobody@127.0.0.1:1/none?sslmode=disable", what, env...)
}

// refusedBootOn is refusedBoot on the database at dsn.
func refusedBootOn(t *testing.T, dsn, what string, env ...string) []byte {
	t.Helper()
	out, _ := refusedBootStatus(t, dsn, what, env...)
	return out
}

// refusedBootStatus is refusedBootOn that also returns the exit status.
func refusedBootStatus(t *testing.T, dsn, what string, env ...string) ([]byte, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, brokertest.Binary(t))
	cmd.Env = append(append(os.Environ(), env...), "LANES_BIND_ADDR=127.0.0.1",
		fmt.Sprintf("LANES_PORT=%d", freePort(t)), "LANES_SPOOL_DIR="+t.TempDir(), "LANES_DATABASE_URL="+dsn)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the broker kept running with %s:\n%s", what, out)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("want a non-zero exit, got %v:\n%s", err, out)
	}
	return out, exit.ExitCode()
}

// docs/operations.md: a setting the broker cannot use stops it with exit
// status 2 and a message naming the variable, before any database work. The
// settings checked once the parts they configure are built (the JWT keys, the
// database URL) exited 1, the status of a broker refused by its database.
func TestUnusableSettingsExitWithStatus2NamingTheVariable(t *testing.T) {
	unreachable := "postgres://nobody@127.0.0.1:1/none?sslmode=disable"
	for _, c := range []struct {
		what, dsn string
		env       []string
		names     []string
	}{
		{"JWT on without a key", unreachable, []string{"LANES_JWT_ENABLED=true"}, []string{"LANES_JWT_SECRET"}},
		{"an algorithm the key cannot use", unreachable, []string{"LANES_JWT_ENABLED=true", "LANES_JWT_SECRET=" + testJWTSecret, "LANES_JWT_ALGORITHM=RS256"},
			[]string{"LANES_JWT_ALGORITHM"}},
		{"two roles named alike", unreachable, []string{"LANES_JWT_ENABLED=true", "LANES_JWT_SECRET=" + testJWTSecret, "LANES_JWT_ROLE_ADMIN=read-only"},
			[]string{"LANES_JWT_ROLE_READ_ONLY", "LANES_JWT_ROLE_ADMIN"}},
		{"a database URL that does not parse", "garbage://x", nil, []string{"LANES_DATABASE_URL"}},
	} {
		out, code := refusedBootStatus(t, c.dsn, c.what, c.env...)
		for _, name := range c.names {
			if !bytes.Contains(out, []byte(name)) {
				t.Errorf("%s: the refusal does not name %s:\n%s", c.what, name, out)
			}
		}
		if code != 2 {
			t.Errorf("%s: exit status %d, want 2:\n%s", c.what, code, out)
		}
	}
}
