package api

import (
	"log/slog"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/testlog"
)

// TestShutdownDuringAMaintenanceReadLogsNoOutage: a request reads the
// maintenance switches, which starts a background read once the cached ones
// are stale; a broker shut down while that read waits for the database (as
// main and the tests do: engine, then pool) used to log WARN "database
// unreachable" err="…context canceled" or "closed pool", an outage that never
// was. The engine's shutdown now cancels that read and waits for it before
// the pool closes.
func TestShutdownDuringAMaintenanceReadLogsNoOutage(t *testing.T) {
	// A database that takes connections and does not answer yet holds the read
	// in flight for as long as the test needs.
	silent := silentListener(t)
	u, err := url.Parse(testDSN)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = silent
	out := &testlog.Buffer{}
	logger := slog.New(slog.NewTextHandler(out, nil))
	pool := newEnginePool(t, u.String())
	eng := engine.New(pool, engine.Config{Logger: logger})
	s := NewServer(eng, Options{Version: "test", MaxBodyBytes: 1 << 20, Logger: logger})
	s.PushMaintenance() // starts the background read (none has run yet)
	time.Sleep(200 * time.Millisecond)
	eng.Close()
	pool.Close()
	time.Sleep(200 * time.Millisecond) // a read that outlived the engine has logged by now
	if got := out.String(); strings.Contains(got, "database unreachable") {
		t.Fatalf("a clean shutdown logged an outage:\n%s", got)
	}
}

// silentListener is the address of a listener that accepts connections and
// never answers on them, until the test ends.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	return l.Addr().String()
}
