package main

import (
	"encoding/json"
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

// TestBrokerReadsARoleClaimNamedWithAComma: a LANES_JWT_ROLE_CLAIMS value
// starting with "[" is a JSON array, so a claim whose name holds a comma can
// be named; the part of that name before the comma is no claim of its own.
func TestBrokerReadsARoleClaimNamedWithAComma(t *testing.T) {
	b := startBroker(t, newDatabase(t), freePort(t), t.TempDir(),
		"LANES_JWT_ENABLED=true", "LANES_JWT_SECRET="+testJWTSecret,
		`LANES_JWT_ROLE_CLAIMS=["https://example.com/roles,v2", "/realm_access/roles"]`)
	b.waitHealth(t, http.StatusOK, 20*time.Second)
	for name, c := range map[string]struct {
		claims jwt.MapClaims
		want   int
	}{
		"the claim named with a comma":        {jwt.MapClaims{"https://example.com/roles,v2": []string{"read-only"}}, http.StatusOK},
		"the pointer beside it":               {jwt.MapClaims{"realm_access": map[string]any{"roles": []string{"read-only"}}}, http.StatusOK},
		"the name's part before the comma":    {jwt.MapClaims{"https://example.com/roles": []string{"read-only"}}, http.StatusForbidden},
		"the default claim is no longer read": {jwt.MapClaims{"roles": []string{"read-only"}}, http.StatusForbidden},
	} {
		if status, _ := readQueuesAs(t, b, signHS256(t, c.claims)); status != c.want {
			t.Errorf("%s: %d, want %d", name, status, c.want)
		}
	}
}

// TestBrokerRefusesAMalformedRoleClaimArray: a value starting with "[" that is
// not a JSON array of claims stops the broker at boot naming the variable,
// rather than being read as claim names.
func TestBrokerRefusesAMalformedRoleClaimArray(t *testing.T) {
	out := refusedBoot(t, "a malformed JSON array", "LANES_JWT_ENABLED=true", "LANES_JWT_SECRET="+testJWTSecret,
		`LANES_JWT_ROLE_CLAIMS=["https://example.com/roles,v2"`)
	for _, named := range []string{"LANES_JWT_ROLE_CLAIMS", "JSON array"} {
		if !strings.Contains(string(out), named) {
			t.Fatalf("the error must name %s:\n%s", named, out)
		}
	}
}

func signHS256(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	claims["sub"], claims["exp"] = "svc", time.Now().Add(time.Hour).Unix()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(testJWTSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// readQueuesAs lists the queues with token and returns the status and, for
// an error, its message.
func readQueuesAs(t *testing.T, b *broker, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.URL+"/api/v1/resources/queues", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct{ Error string }
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, e.Error
}
