package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/lanesmq/lanes/server/internal/auth"
	"github.com/lanesmq/lanes/server/internal/config"
)

// TestJWTLeewayToleratesClockSkewByDefault builds the verifier the broker
// builds from its settings: by default a token a second ahead of (iat) or
// behind (exp) the broker's clock is accepted, and LANES_JWT_LEEWAY_SECONDS=0
// turns the tolerance off.
func TestJWTLeewayToleratesClockSkewByDefault(t *testing.T) {
	const secret = "leeway-test-secret-leeway-test-secret"
	now := time.Now().Unix()
	sign := func(claims jwt.MapClaims) string {
		claims["sub"], claims["role"] = "svc", auth.RoleAdmin
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	skewed := map[string]string{
		"iat 1 s ahead":               sign(jwt.MapClaims{"iat": now + 1, "exp": now + 3600}),
		"exp 1 s past":                sign(jwt.MapClaims{"iat": now - 60, "exp": now - 1}),
		"iat 1 s ahead, exp 1 s past": sign(jwt.MapClaims{"iat": now + 1, "exp": now - 1}),
	}
	verifier := func(env map[string]string) *auth.Verifier {
		env["LANES_JWT_ENABLED"], env["LANES_JWT_SECRET"] = "true", secret
		cfg, err := config.Load(nil, func(k string) string { return env[k] }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		v, err := newVerifier(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	byDefault := verifier(map[string]string{})
	strict := verifier(map[string]string{"LANES_JWT_LEEWAY_SECONDS": "0"})
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
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, brokerBinary(t))
	cmd.Env = append(os.Environ(), "LANES_TEST_FAULTS=true", "LANES_JWT_ENABLED=true",
		"LANES_JWT_SECRET=faults-jwt-secret-faults-jwt-secret", "LANES_BIND_ADDR=127.0.0.1",
		fmt.Sprintf("LANES_PORT=%d", freePort(t)), "LANES_SPOOL_DIR="+t.TempDir(),
		"LANES_DATABASE_URL=postgres://nobody@127.0.0.1:1/none?sslmode=disable")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the broker kept running with LANES_TEST_FAULTS and JWT on:\n%s", out)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("want a non-zero exit, got %v:\n%s", err, out)
	}
	if !strings.Contains(string(out), "LANES_TEST_FAULTS") || !strings.Contains(string(out), "LANES_JWT_ENABLED") {
		t.Fatalf("the error must name both settings:\n%s", out)
	}
}
