package api

import (
	"context"
	"net/http"
	"testing"
	"time"
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

// TestHealthStaysConnectedWhileThePoolIsBusy: every pool connection held by
// work (here: acquired and kept) leaves /health answering 200 at once, since
// it pings on its own connection; it reads "disconnected" only when that ping fails.
func TestHealthStaysConnectedWhileThePoolIsBusy(t *testing.T) {
	b := newBrokerWith(t, testDSN+"&pool_max_conns=2", Options{}, "")
	for range 2 {
		conn, err := b.Pool.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Release)
	}
	if stat := b.Pool.Stat(); stat.AcquiredConns() != stat.MaxConns() {
		t.Fatalf("the pool should be exhausted: %d of %d acquired", stat.AcquiredConns(), stat.MaxConns())
	}
	for range 3 {
		start := time.Now()
		var health struct {
			Database string `json:"database"`
		}
		status, _ := b.call(t, "GET", "/health", nil, &health)
		if status != http.StatusOK || health.Database != "connected" || time.Since(start) > time.Second {
			t.Fatalf("/health with the pool busy: %d %+v after %v; want 200 connected at once", status, health, time.Since(start))
		}
	}
}
