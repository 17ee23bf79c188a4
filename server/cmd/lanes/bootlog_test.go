package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lanesmq/lanes/server/internal/engine"
)

// TestTheBootLogNamesTheSchemaVersion: an operator reads from the boot's
// configuration line which schema version the broker runs, on a second boot
// (schema=unchanged) as on the first, without querying /health. The first
// boot on a new database logs no raise of the minimum broker version: no
// broker ran there to be shut out. A boot that raises it over an earlier
// minimum still says so.
func TestTheBootLogNamesTheSchemaVersion(t *testing.T) {
	version, err := engine.SchemaVersion()
	if err != nil {
		t.Fatal(err)
	}
	const raised = "raised the oldest broker schema version"
	dsn := newDatabase(t)
	boot := func(which string) string {
		b := startBroker(t, dsn, freePort(t), t.TempDir())
		b.waitHealth(t, http.StatusOK, 30*time.Second)
		b.Stop(0)
		logs := b.logs.String()
		var line string
		for l := range strings.Lines(logs) {
			if strings.Contains(l, "msg=configuration ") {
				line = l
			}
		}
		if want := fmt.Sprintf(" schemaVersion=%d ", version); !strings.Contains(line, want) {
			t.Fatalf("%s boot: the configuration line lacks %q:\n%s", which, want, line)
		}
		return logs
	}
	if logs := boot("first"); strings.Contains(logs, raised) {
		t.Fatalf("the first boot on a new database logs a raise of the minimum broker version:\n%s", logs)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE lanes.min_broker_version SET version = 0`); err != nil {
		t.Fatal(err)
	}
	if logs := boot("second"); !strings.Contains(logs, raised) {
		t.Fatalf("a boot that raised the minimum broker version over an earlier one does not say so:\n%s", logs)
	}
}

// TestTheJSONBootLogTypesTheSettings: a broker logging JSON writes the
// configuration line's numbers as JSON numbers and booleans as booleans, so
// a log pipeline can filter on pool-size > 10, and still masks the database
// password.
func TestTheJSONBootLogTypesTheSettings(t *testing.T) {
	dsn := newDatabase(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "hunter2") // the test cluster trusts every login
	port := freePort(t)
	b := startBroker(t, u.String(), port, t.TempDir(), "LANES_LOG_FORMAT=json", "LANES_DB_POOL_SIZE=12", "LANES_ACK_SYNC_COMMIT=true")
	b.waitHealth(t, http.StatusOK, 30*time.Second)
	b.Stop(0)
	var line map[string]any
	for l := range strings.Lines(b.logs.String()) {
		if !strings.Contains(l, `"msg":"configuration"`) {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(l))
		dec.UseNumber()
		if err := dec.Decode(&line); err != nil {
			t.Fatalf("the configuration line is not JSON: %v\n%s", err, l)
		}
	}
	if line == nil {
		t.Fatalf("no configuration line:\n%s", b.logs.String())
	}
	want := map[string]any{
		"pool-size":             json.Number("12"),
		"port":                  json.Number(strconv.Itoa(port)),
		"retention-interval-ms": json.Number("5000"),
		"ack-sync-commit":       true,
		"apply-schema":          true,
		"jwt-enabled":           false,
		"database-url":          strings.Replace(u.String(), "hunter2", "xxxxx", 1),
		"log-format":            "json",
	}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("%s = %#v (%T), want %#v (%T)", k, line[k], line[k], v, v)
		}
	}
	if strings.Contains(b.logs.String(), "hunter2") {
		t.Errorf("the database password is logged:\n%s", b.logs.String())
	}
}
