package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
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
	out := refusedBoot(t, "a malformed pointer", "LANES_JWT_ENABLED=true", "LANES_JWT_SECRET="+testJWTSecret,
		"LANES_JWT_ROLE_CLAIMS=roles,/realm_access~2/roles")
	for _, named := range []string{"LANES_JWT_ROLE_CLAIMS", `"/realm_access~2/roles"`} {
		if !strings.Contains(string(out), named) {
			t.Fatalf("the error must name %s:\n%s", named, out)
		}
	}
}
