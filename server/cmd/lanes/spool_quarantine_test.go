package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestQuarantinedSpoolFilesSurviveARestart spools pushes that PostgreSQL
// refuses for good (a trigger on lanes.segments), so the drain quarantines
// their file in failed/; the broker restarts on the same spool directory and
// the same happens to other pushes. Both files must be kept: the restarted
// broker numbers its spool files after the quarantined ones instead of
// starting again at 1 and renaming its file over the first one.
func TestQuarantinedSpoolFilesSurviveARestart(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	port, spoolDir := freePort(t), t.TempDir()
	b := startBroker(t, dsn, port, spoolDir, "LANES_LOG_LEVEL=warn")
	b.waitHealth(t, http.StatusOK, 30*time.Second)

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `
CREATE FUNCTION public.refuse_segments() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$;
CREATE TRIGGER refuse_segments BEFORE INSERT ON lanes.segments FOR EACH ROW EXECUTE FUNCTION public.refuse_segments()`); err != nil {
		t.Fatal(err)
	}

	// spoolAndQuarantine spools n pushes (push maintenance) and waits until
	// the drain has quarantined them, want items in failed/ in all.
	spoolAndQuarantine := func(b *broker, first, n, want int) {
		t.Helper()
		if status, err := b.do("POST", "/api/v1/system/maintenance", map[string]any{"enabled": true}, nil); err != nil || status != http.StatusOK {
			t.Fatalf("maintenance on: %d %v", status, err)
		}
		for i := first; i < first+n; i++ {
			var res []struct {
				Status string `json:"status"`
			}
			item := map[string]any{"queue": "quarantine", "transactionId": fmt.Sprintf("t%d", i), "payload": i}
			if status, err := b.do("POST", "/api/v1/push", map[string]any{"items": []any{item}}, &res); err != nil || status != http.StatusCreated || res[0].Status != "buffered" {
				t.Fatalf("push %d: %d %v %+v", i, status, err, res)
			}
		}
		if status, err := b.do("POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}, nil); err != nil || status != http.StatusOK {
			t.Fatalf("maintenance off: %d %v", status, err)
		}
		var buffers struct {
			Pending int `json:"pending"`
			Failed  int `json:"failed"`
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if _, err := b.do("GET", "/api/v1/status/buffers", nil, &buffers); err == nil && buffers.Pending == 0 && buffers.Failed > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("spool not quarantined: %+v\n%s", buffers, b.logs.String())
			}
		}
		if buffers.Failed != want {
			files, _ := filepath.Glob(filepath.Join(spoolDir, "failed", "*"))
			t.Fatalf("failed/ holds %d items in %v, want %d: a quarantined file was overwritten\n%s", buffers.Failed, files, want, b.logs.String())
		}
	}

	spoolAndQuarantine(b, 0, 3, 3)
	if err := b.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-b.Done()
	b = startBroker(t, dsn, port, spoolDir, "LANES_LOG_LEVEL=warn")
	b.waitHealth(t, http.StatusOK, 30*time.Second)
	spoolAndQuarantine(b, 3, 2, 5)
}
