package api

import (
	"net/http"
	"testing"
)

// /health names why the broker is not ready: a database that does not answer
// is "disconnected" whether or not the schema was applied; one that answers
// before the schema is applied is "schema not applied".
func TestHealthNamesWhyTheBrokerIsNotReady(t *testing.T) {
	schemaPending := func() bool { return false }
	cases := []struct {
		name, dsn, database string
	}{
		{"database down at boot", "postgres://lanes@127.0.0.1:1/lanes?sslmode=disable&connect_timeout=1", "disconnected"},
		{"database up, schema pending", testDSN, "schema not applied"},
	}
	for _, c := range cases {
		b := newBrokerWith(t, c.dsn, Options{SchemaReady: schemaPending}, "")
		var health struct {
			Status   string `json:"status"`
			Database string `json:"database"`
		}
		if status, _ := b.call(t, "GET", "/health", nil, &health); status != http.StatusServiceUnavailable ||
			health.Status != "unhealthy" || health.Database != c.database {
			t.Errorf("%s: /health %d %+v; want 503 unhealthy, database %q", c.name, status, health, c.database)
		}
	}
}
