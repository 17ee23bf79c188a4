package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// privateCluster is a PostgreSQL cluster of the test's own (scripts/pg.sh on
// another port and directory), started and stopped by the test.
type privateCluster struct {
	env  []string
	sh   string
	dir  string
	port int
}

// newPrivateCluster describes the cluster; run("start") starts it. fast turns
// fsync and synchronous_commit off (LANES_PG_FAST).
func newPrivateCluster(t *testing.T, fast bool) *privateCluster {
	t.Helper()
	sh, err := filepath.Abs("../../../scripts/pg.sh")
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	// Under /tmp: as root the cluster runs as the postgres user, which must reach it.
	dir := fmt.Sprintf("/tmp/lanes-boot-pg-%d-%d", port, os.Getpid())
	pgFast := "LANES_PG_FAST=0"
	if fast {
		pgFast = "LANES_PG_FAST=1"
	}
	c := &privateCluster{sh: sh, dir: dir, port: port, env: append(os.Environ(),
		fmt.Sprintf("LANES_PG_PORT=%d", port), "LANES_PG_DIR="+dir, pgFast)}
	t.Cleanup(func() {
		_ = c.run("stop")
		_ = os.RemoveAll(dir)
	})
	return c
}

func (c *privateCluster) run(action string) error {
	cmd := exec.Command("bash", c.sh, action)
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg.sh %s: %w: %s", action, err, out)
	}
	return nil
}

// url is what `pg.sh url` prints for the cluster, known before it exists.
func (c *privateCluster) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/lanes?sslmode=disable", c.port)
}

// TestBrokerStartsWhilePostgresIsDown boots the real binary with no database:
// it listens, /health answers 503, pushes are answered buffered from the
// spool; once PostgreSQL starts the schema is applied in the background, the
// spool drains, and every push is stored exactly once, in order per partition.
func TestBrokerStartsWhilePostgresIsDown(t *testing.T) {
	pg := newPrivateCluster(t, true)
	port := freePort(t)
	b := startBroker(t, pg.url(), port, t.TempDir(), "LANES_SCHEMA_RETRY_MAX_MS=500")
	bootStart := time.Now()
	b.waitHealth(t, http.StatusServiceUnavailable, 20*time.Second)
	listening := time.Since(bootStart)

	const partitions, perPartition = 2, 25
	want := map[string][]string{}
	for i := 0; i < perPartition; i++ {
		for p := 0; p < partitions; p++ {
			part, txn := fmt.Sprintf("p%d", p), fmt.Sprintf("p%d-%03d", p, i)
			var res []struct {
				Status string `json:"status"`
			}
			status, err := b.do("POST", "/api/v1/push", map[string]any{"items": []map[string]any{
				{"queue": "boot", "partition": part, "transactionId": txn, "payload": i}}}, &res)
			if err != nil || status != http.StatusCreated || len(res) != 1 || res[0].Status != "buffered" {
				t.Fatalf("push %s with PostgreSQL down: %d %+v %v\n%s", txn, status, res, err, b.logs.String())
			}
			want[part] = append(want[part], txn)
		}
	}
	var buffers struct {
		Pending   int  `json:"pending"`
		DBHealthy bool `json:"dbHealthy"`
	}
	if status, err := b.do("GET", "/api/v1/status/buffers", nil, &buffers); err != nil || status != 200 || buffers.Pending != partitions*perPartition || buffers.DBHealthy {
		t.Fatalf("buffers with PostgreSQL down: %d %+v %v", status, buffers, err)
	}

	pgStart := time.Now()
	if err := pg.run("start"); err != nil {
		t.Fatal(err)
	}
	pgUp := time.Since(pgStart)
	b.waitHealth(t, http.StatusOK, 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if status, err := b.do("GET", "/api/v1/status/buffers", nil, &buffers); err == nil && status == 200 && buffers.Pending == 0 && buffers.DBHealthy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spool did not drain: %+v\n%s", buffers, b.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	drained := time.Since(pgStart)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.url())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for part, txns := range want {
		rows, err := conn.Query(ctx, `SELECT t.transaction_id FROM lanes.txns t
			JOIN lanes.partitions p ON p.id = t.partition_id JOIN lanes.queues q ON q.id = p.queue_id
			WHERE q.name = 'boot' AND p.name = $1 ORDER BY t.message_offset`, part)
		if err != nil {
			t.Fatal(err)
		}
		stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(stored, ",") != strings.Join(txns, ",") {
			t.Fatalf("partition %s: stored %v, pushed %v", part, stored, txns)
		}
	}
	// Pushes go straight to PostgreSQL again.
	var res []struct {
		Status string `json:"status"`
	}
	if status, err := b.do("POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": "boot", "payload": 1}}}, &res); err != nil || status != 201 || res[0].Status != "queued" {
		t.Fatalf("push after recovery: %d %+v %v", status, res, err)
	}
	t.Logf("load: broker booted with PostgreSQL down (listening, /health 503 after %v), %d pushes over %d partitions answered buffered; "+
		"PostgreSQL start took %v; schema applied, spool drained %v after it was started; stored exactly once in order: %d; lost: 0",
		listening.Round(time.Millisecond), partitions*perPartition, partitions, pgUp.Round(time.Millisecond), drained.Round(time.Millisecond), partitions*perPartition)
}

// TestBrokerBootedWithoutPostgresReportsTheDatabaseDown: before any push, a
// broker booted while PostgreSQL is down says so — /health names the database
// disconnected (not a schema that is merely unapplied), and dbHealthy is false
// in /api/v1/status/buffers, /metrics and /metrics/prometheus — and says
// healthy once PostgreSQL is back, still without a push.
func TestBrokerBootedWithoutPostgresReportsTheDatabaseDown(t *testing.T) {
	pg := newPrivateCluster(t, true)
	b := startBroker(t, pg.url(), freePort(t), t.TempDir(), "LANES_SCHEMA_RETRY_MAX_MS=500")
	b.waitHealth(t, http.StatusServiceUnavailable, 20*time.Second)
	dbReport := func() (database string, buffersHealthy, metricsHealthy bool, prometheus string) {
		t.Helper()
		var health struct {
			Database string `json:"database"`
		}
		var buffers struct {
			DBHealthy bool `json:"dbHealthy"`
		}
		var metrics struct {
			Spool struct {
				DBHealthy bool `json:"dbHealthy"`
			} `json:"spool"`
		}
		for path, out := range map[string]any{"/health": &health, "/api/v1/status/buffers": &buffers, "/metrics": &metrics} {
			if _, err := b.do("GET", path, nil, out); err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
		}
		resp, err := http.Get(b.URL + "/metrics/prometheus")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		for line := range strings.Lines(string(raw)) {
			if strings.HasPrefix(line, "lanes_spool_db_healthy ") {
				prometheus = strings.TrimSpace(line)
			}
		}
		return health.Database, buffers.DBHealthy, metrics.Spool.DBHealthy, prometheus
	}
	database, buffersHealthy, metricsHealthy, prometheus := dbReport()
	if database != "disconnected" || buffersHealthy || metricsHealthy || prometheus != "lanes_spool_db_healthy 0" {
		t.Fatalf("booted with PostgreSQL down, before any push: /health database %q, buffers dbHealthy %v, /metrics dbHealthy %v, %q; "+
			"want disconnected, false, false, lanes_spool_db_healthy 0\n%s", database, buffersHealthy, metricsHealthy, prometheus, b.logs.String())
	}
	if err := pg.run("start"); err != nil {
		t.Fatal(err)
	}
	b.waitHealth(t, http.StatusOK, 30*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for {
		database, buffersHealthy, metricsHealthy, prometheus = dbReport()
		if database == "connected" && buffersHealthy && metricsHealthy && prometheus == "lanes_spool_db_healthy 1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PostgreSQL back, schema applied: /health database %q, buffers dbHealthy %v, /metrics dbHealthy %v, %q; want all healthy",
				database, buffersHealthy, metricsHealthy, prometheus)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestABootOutageLogsItsRetriesOnceAMinute: a broker booted while PostgreSQL
// is down retries the schema every LANES_SCHEMA_RETRY_MAX_MS, but logs the
// failed retries as every other repeating failure: the first at once, then at
// most one line a minute with the count, so an outage at boot does not write
// a line per attempt.
func TestABootOutageLogsItsRetriesOnceAMinute(t *testing.T) {
	closedPort := freePort(t) // nothing listens there: every attempt is refused
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/lanes?sslmode=disable", closedPort)
	b := startBroker(t, dsn, freePort(t), t.TempDir(), "LANES_SCHEMA_RETRY_MAX_MS=250")
	b.waitHealth(t, http.StatusServiceUnavailable, 20*time.Second)
	// About a dozen attempts, 250 ms apart.
	time.Sleep(3 * time.Second)
	logs := b.logs.String()
	if !strings.Contains(logs, "database not ready; serving without it") {
		t.Fatalf("no boot outage line:\n%s", logs)
	}
	if n := strings.Count(logs, "database still not ready; retrying"); n != 1 {
		t.Fatalf("%d retry lines in 3 s of schema attempts every 250 ms; want the first only (failures=1), then one a minute:\n%s", n, logs)
	}
	for line := range strings.Lines(logs) {
		if strings.Contains(line, "database still not ready; retrying") && !strings.Contains(line, "failures=1") {
			t.Fatalf("the first retry line does not carry failures=1: %s", line)
		}
	}
}
