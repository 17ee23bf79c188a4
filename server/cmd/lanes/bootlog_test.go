package main

import (
	"context"
	"fmt"
	"net/http"
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
