package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/lanesmq/lanes/server/internal/brokertest"
)

// TestBrokerReadsRolesThroughJSONPointers starts the real binary with a
// Keycloak pointer and an Auth0 claim name in LANES_JWT_ROLE_CLAIMS: tokens of
// both shapes carry their roles, and a top-level claim named as the pointer
// carries none.
func TestBrokerReadsRolesThroughJSONPointers(t *testing.T) {
	b := startBroker(t, newDatabase(t), freePort(t), t.TempDir(),
		"LANES_JWT_ENABLED=true", "LANES_JWT_SECRET="+testJWTSecret,
		"LANES_JWT_ROLE_CLAIMS=/resource_access/lanes/roles, https://example.com/roles")
	b.waitHealth(t, http.StatusOK, 20*time.Second)
	sign := func(claims jwt.MapClaims) string {
		claims["sub"], claims["exp"] = "svc", time.Now().Add(time.Hour).Unix()
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(testJWTSecret))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for name, c := range map[string]struct {
		claims jwt.MapClaims
		want   int
	}{
		"keycloak client roles":        {jwt.MapClaims{"resource_access": map[string]any{"lanes": map[string]any{"roles": []string{"read-only"}}}}, http.StatusOK},
		"auth0 namespaced roles":       {jwt.MapClaims{"https://example.com/roles": []string{"read-only"}}, http.StatusOK},
		"a claim named as the pointer": {jwt.MapClaims{"/resource_access/lanes/roles": []string{"read-only"}}, http.StatusForbidden},
	} {
		req, err := http.NewRequest(http.MethodGet, b.URL+"/api/v1/resources/queues", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+sign(c.claims))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", name, resp.StatusCode, c.want)
		}
	}
}

// TestBrokerRefusesAMalformedRoleClaimPointer: a pointer with a bad escape
// stops the broker at boot with an error naming the variable and the entry.
func TestBrokerRefusesAMalformedRoleClaimPointer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, brokertest.Binary(t))
	cmd.Env = append(os.Environ(), "LANES_JWT_ENABLED=true", "LANES_JWT_SECRET="+testJWTSecret,
		"LANES_JWT_ROLE_CLAIMS=roles,/realm_access~2/roles", "LANES_BIND_ADDR=127.0.0.1",
		fmt.Sprintf("LANES_PORT=%d", freePort(t)), "LANES_SPOOL_DIR="+t.TempDir(),
		"LANES_DATABASE_URL=postgres://nobody@127.0.0.1:1/none?sslmode=disable")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the broker kept running with a malformed pointer:\n%s", out)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("want a non-zero exit, got %v:\n%s", err, out)
	}
	for _, named := range []string{"LANES_JWT_ROLE_CLAIMS", `"/realm_access~2/roles"`} {
		if !strings.Contains(string(out), named) {
			t.Fatalf("the error must name %s:\n%s", named, out)
		}
	}
}
