package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/brokertest"
)

// TestAPortInUseNamesTheSettings: a broker whose port is taken (another
// broker, a second make run) stops with a line that names LANES_PORT and
// LANES_BIND_ADDR, the settings to change, not only the socket error.
func TestAPortInUseNamesTheSettings(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, brokertest.Binary(t))
	cmd.Env = append(os.Environ(), "LANES_BIND_ADDR=127.0.0.1", fmt.Sprintf("LANES_PORT=%d", taken.Addr().(*net.TCPAddr).Port),
		"LANES_SPOOL_DIR="+t.TempDir(), "LANES_DATABASE_URL=postgres://nobody@127.0.0.1:1/none?sslmode=disable")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if ctx.Err() != nil || !errors.As(err, &exit) {
		t.Fatalf("want the broker to stop, got %v:\n%s", err, out)
	}
	var line string
	for l := range strings.Lines(string(out)) {
		if strings.Contains(l, "address already in use") {
			line = l
		}
	}
	if !strings.Contains(line, "LANES_PORT") || !strings.Contains(line, "LANES_BIND_ADDR") {
		t.Fatalf("the refusal does not name LANES_PORT and LANES_BIND_ADDR:\n%s", out)
	}
}

// TestAPprofAddressInUseStopsTheBoot: a broker asked to serve profiles on an
// address it cannot bind stops, naming LANES_PPROF_ADDR, as for its own port,
// rather than serve without them after a line that says they are served.
func TestAPprofAddressInUseStopsTheBoot(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, brokertest.Binary(t))
	cmd.Env = append(os.Environ(), "LANES_BIND_ADDR=127.0.0.1", fmt.Sprintf("LANES_PORT=%d", freePort(t)),
		"LANES_PPROF_ADDR="+taken.Addr().String(),
		"LANES_SPOOL_DIR="+t.TempDir(), "LANES_DATABASE_URL=postgres://nobody@127.0.0.1:1/none?sslmode=disable")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if ctx.Err() != nil || !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("want the broker to stop with status 1, got %v:\n%s", err, out)
	}
	if strings.Contains(string(out), "pprof listening") || strings.Contains(string(out), "lanes listening") {
		t.Fatalf("the broker said it listens before it stopped:\n%s", out)
	}
	var line string
	for l := range strings.Lines(string(out)) {
		if strings.Contains(l, "address already in use") {
			line = l
		}
	}
	if !strings.Contains(line, "LANES_PPROF_ADDR") {
		t.Fatalf("the refusal does not name LANES_PPROF_ADDR:\n%s", out)
	}
}
