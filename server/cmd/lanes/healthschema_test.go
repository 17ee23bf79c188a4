package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/internal/engine"
)

// healthSchemaVersions is /health's schemaVersions, nulls as nil.
type healthSchemaVersions struct {
	Broker            int        `json:"broker"`
	Recorded          *int       `json:"recorded"`
	MinBroker         *int       `json:"minBroker"`
	MinBrokerRaisedBy *int       `json:"minBrokerRaisedBy"`
	ReadAt            *time.Time `json:"readAt"`
}

func (v healthSchemaVersions) String() string {
	show := func(n *int) string {
		if n == nil {
			return "null"
		}
		return fmt.Sprint(*n)
	}
	readAt := "null"
	if v.ReadAt != nil {
		readAt = v.ReadAt.Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("broker %d, recorded %s, minBroker %s raised by %s, readAt %s",
		v.Broker, show(v.Recorded), show(v.MinBroker), show(v.MinBrokerRaisedBy), readAt)
}

// schemaVersionsOf reads b's /health: its status and schemaVersions.
func schemaVersionsOf(t *testing.T, b *broker) (int, healthSchemaVersions) {
	t.Helper()
	var health struct {
		SchemaVersions *healthSchemaVersions `json:"schemaVersions"`
	}
	status, err := b.do("GET", "/health", nil, &health)
	if err != nil {
		t.Fatal(err)
	}
	if health.SchemaVersions == nil {
		t.Fatalf("/health (%d) has no schemaVersions", status)
	}
	return status, *health.SchemaVersions
}

// TestHealthShowsTheSchemaVersions: during a rolling upgrade an operator
// reads from each broker's /health its schema version, the one the database
// records and the database's minimum broker version, as the boot and the
// once-a-second check last read them: nulls before PostgreSQL first answers,
// a later version's writes within the check's interval, and the last figures
// read (with their time) while PostgreSQL is down.
func TestHealthShowsTheSchemaVersions(t *testing.T) {
	version, err := engine.SchemaVersion()
	if err != nil {
		t.Fatal(err)
	}
	pg := newPrivateCluster(t, true)
	b := startBroker(t, pg.url(), freePort(t), t.TempDir(), "LANES_SCHEMA_RETRY_MAX_MS=500")
	b.waitHealth(t, http.StatusServiceUnavailable, 20*time.Second)
	status, got := schemaVersionsOf(t, b)
	if status != http.StatusServiceUnavailable || got.Broker != version || got.Recorded != nil || got.MinBroker != nil ||
		got.MinBrokerRaisedBy != nil || got.ReadAt != nil {
		t.Fatalf("before PostgreSQL answered: %d %v; want 503, broker %d and nulls", status, got, version)
	}
	if raw := getHealthText(t, b); !strings.Contains(raw, `"recorded":null`) || !strings.Contains(raw, `"readAt":null`) {
		t.Fatalf("the nulls are not sent: %s", raw)
	}

	if err := pg.run("start"); err != nil {
		t.Fatal(err)
	}
	b.waitHealth(t, http.StatusOK, 30*time.Second)
	_, got = schemaVersionsOf(t, b)
	if got.Broker != version || got.Recorded == nil || *got.Recorded != version || got.MinBroker == nil ||
		*got.MinBroker != engine.MinPeerSchemaVersion || got.MinBrokerRaisedBy == nil || *got.MinBrokerRaisedBy != version ||
		got.ReadAt == nil || time.Since(*got.ReadAt) > 10*time.Second {
		t.Fatalf("after the boot applied the schema: %v; want %d recorded, minimum %d raised by %d, read just now",
			got, version, engine.MinPeerSchemaVersion, version)
	}

	// A later version boots elsewhere: it records its schema and raises the
	// minimum, to this broker's own version so that this one keeps running.
	pool, err := pgxpool.New(t.Context(), pg.url())
	if err != nil {
		t.Fatal(err)
	}
	later := version + 10
	if _, err := pool.Exec(t.Context(), fmt.Sprintf(`UPDATE lanes.schema_applied SET version = %d;
		UPDATE lanes.min_broker_version SET version = %d, raised_by = %d, raised_at = now()`, later, version, later)); err != nil {
		t.Fatal(err)
	}
	wrote := time.Now()
	for {
		_, got = schemaVersionsOf(t, b)
		if got.Recorded != nil && *got.Recorded == later && *got.MinBroker == version && *got.MinBrokerRaisedBy == later {
			break
		}
		// The check reads every second; allow for a busy machine.
		if time.Since(wrote) > minVersionCheckInterval+2*time.Second {
			t.Fatalf("/health %v after %v, want recorded %d, minimum %d raised by %d", got, time.Since(wrote), later, version, later)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("/health showed the later version's writes %v after them", time.Since(wrote).Round(time.Millisecond))
	if !got.ReadAt.After(wrote) {
		t.Errorf("readAt %v is not after the writes at %v", got.ReadAt, wrote)
	}
	pool.Close()

	if err := pg.run("stop"); err != nil {
		t.Fatal(err)
	}
	b.waitHealth(t, http.StatusServiceUnavailable, 10*time.Second)
	_, down := schemaVersionsOf(t, b)
	time.Sleep(2 * minVersionCheckInterval)
	status, stillDown := schemaVersionsOf(t, b)
	if status != http.StatusServiceUnavailable || stillDown.String() != down.String() ||
		*down.Recorded != later || *down.MinBroker != version || *down.MinBrokerRaisedBy != later || down.ReadAt.Before(*got.ReadAt) {
		t.Fatalf("PostgreSQL down: %d %v, then %v; want 503 and the last figures read (%v), unchanged", status, down, stillDown, got)
	}
}

// getHealthText is the body of b's /health.
func getHealthText(t *testing.T, b *broker) string {
	t.Helper()
	resp, err := http.Get(b.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}
