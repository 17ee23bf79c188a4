package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/engine"
)

// TestTheBootLogNamesTheSchemaVersion: an operator reads from the boot's
// configuration line which schema version the broker runs, on a second boot
// (schema=unchanged) as on the first, without querying /health.
func TestTheBootLogNamesTheSchemaVersion(t *testing.T) {
	version, err := engine.SchemaVersion()
	if err != nil {
		t.Fatal(err)
	}
	dsn := newDatabase(t)
	for _, boot := range []string{"first", "second"} {
		b := startBroker(t, dsn, freePort(t), t.TempDir())
		b.waitHealth(t, http.StatusOK, 30*time.Second)
		var line string
		for l := range strings.Lines(b.logs.String()) {
			if strings.Contains(l, "msg=configuration ") {
				line = l
			}
		}
		if want := fmt.Sprintf(" schemaVersion=%d ", version); !strings.Contains(line, want) {
			t.Fatalf("%s boot: the configuration line lacks %q:\n%s", boot, want, line)
		}
		b.Stop(0)
	}
}
