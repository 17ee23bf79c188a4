package main

import (
	"io"
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
