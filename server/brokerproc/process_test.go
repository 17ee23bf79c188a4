package brokerproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/brokertest"
)

// helperEnv makes the test binary act as a harness that starts a broker, prints its pid and
// waits to be killed (TestBrokerDiesWithTheProcessThatStartedIt).
const (
	helperEnv      = "BROKERPROC_TEST_HELPER_BIN"
	helperSpoolEnv = "BROKERPROC_TEST_HELPER_SPOOL"
)

func TestMain(m *testing.M) {
	if bin := os.Getenv(helperEnv); bin != "" {
		os.Exit(runHarnessHelper(bin))
	}
	os.Exit(brokertest.Main(m))
}

func runHarnessHelper(bin string) int {
	o := unreachableDatabase(bin, os.Getenv(helperSpoolEnv))
	// Quiet, so a broken output pipe cannot end the broker before the parent-death signal does.
	o.Env = append(o.Env, "LANES_LOG_LEVEL=error")
	p, err := Start(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(p.Pid())
	time.Sleep(time.Minute)
	return 0
}

// unreachableDatabase points the broker at a port nothing listens on: it keeps serving and
// /health answers 503 while it retries, so no PostgreSQL is needed.
func unreachableDatabase(bin, spool string) Options {
	return Options{
		Binary:      bin,
		DatabaseURL: "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1",
		SpoolDir:    spool,
		Env:         []string{"LANES_SCHEMA_RETRY_MAX_MS=500", "LANES_LOG_LEVEL=warn"},
	}
}

func TestStartRefusesAPortAnotherProcessAnswersOn(t *testing.T) {
	bin := brokertest.Binary(t)
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	other := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = other.Serve(ln) }()
	t.Cleanup(func() { _ = other.Close() })

	o := unreachableDatabase(bin, t.TempDir())
	o.Port = ln.Addr().(*net.TCPAddr).Port
	p, err := StartHealthy(context.Background(), o)
	if err == nil {
		p.Stop(0)
		t.Fatalf("the broker was reported healthy on port %d, which another process answers on", o.Port)
	}
	if !errors.Is(err, ErrAddrInUse) {
		t.Fatalf("want ErrAddrInUse, got %v", err)
	}
}

func TestStartHealthyReportsABrokerThatExitsWithItsOutput(t *testing.T) {
	o := unreachableDatabase(brokertest.Binary(t), t.TempDir())
	// The fault scripts would bypass authentication, so the broker refuses to start.
	o.Env = append(o.Env, "LANES_TEST_FAULTS=true", "LANES_JWT_ENABLED=true", "LANES_JWT_SECRET=brokerproc-secret-brokerproc-secret")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := StartHealthy(ctx, o)
	if err == nil {
		p.Stop(0)
		t.Fatal("a broker that refuses its settings was reported healthy")
	}
	if ctx.Err() != nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "LANES_TEST_FAULTS") {
		t.Fatalf("want an exit error carrying the broker's own message, got %v", err)
	}
}

func TestWaitHealthAnswersTheAskedStatus(t *testing.T) {
	p, err := Start(unreachableDatabase(brokertest.Binary(t), t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(0) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.WaitHealth(ctx, http.StatusServiceUnavailable); err != nil {
		t.Fatal(err)
	}
	p.Stop(5 * time.Second)
	if err := p.Err(); err != nil {
		t.Fatalf("SIGTERM should end the broker cleanly: %v\n%s", err, p.Output())
	}
}

func TestBrokerDiesWithTheProcessThatStartedIt(t *testing.T) {
	bin := brokertest.Binary(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	harness := exec.CommandContext(context.Background(), self)
	harness.Env = append(os.Environ(), helperEnv+"="+bin, helperSpoolEnv+"="+t.TempDir())
	out, err := harness.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = harness.Process.Kill()
		t.Fatalf("the helper harness printed no broker pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })

	if err := harness.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = harness.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("broker %d still runs 10 s after the harness that started it was killed", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alive reports whether pid runs (a zombie waiting for PID 1 to reap it counts as gone).
func alive(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if state, ok := strings.CutPrefix(line, "State:"); ok {
			return !strings.HasPrefix(strings.TrimSpace(state), "Z")
		}
	}
	return true
}
