package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// broker is a lanes process on a database of its own, started by the runner.
type broker struct {
	URL     string
	cmd     *exec.Cmd
	db      string
	repo    string
	logPath string
	done    chan struct{} // closed when the process has exited
	waitErr error
}

func pgsh(repo string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(context.Background(), filepath.Join(repo, "scripts", "pg.sh"), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("scripts/pg.sh %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String()), nil
}

// startBroker creates a fresh database on the local cluster (scripts/pg.sh) and starts the
// lanes binary on it with the test-only fault scripts on, on port (0 = a free one).
func startBroker(repo, lanesBin, tmp string, port int) (*broker, error) {
	if _, err := pgsh(repo, nil, "start"); err != nil {
		return nil, err
	}
	db := fmt.Sprintf("lanes_conformance_%d", os.Getpid())
	if _, err := pgsh(repo, []string{"PGOPTIONS=-c client_min_messages=warning"}, "psql", "-d", "postgres", "-c", fmt.Sprintf(`drop database if exists "%s" with (force)`, db)); err != nil {
		return nil, err
	}
	if _, err := pgsh(repo, nil, "psql", "-d", "postgres", "-c", fmt.Sprintf(`create database "%s"`, db)); err != nil {
		return nil, err
	}
	dbURL, err := pgsh(repo, []string{"LANES_PG_DB=" + db}, "url")
	if err != nil {
		return nil, err
	}
	if port == 0 {
		if port, err = freePort(); err != nil {
			return nil, err
		}
	}
	b := &broker{URL: fmt.Sprintf("http://127.0.0.1:%d", port), db: db, repo: repo, logPath: filepath.Join(tmp, "lanes.log")}
	logf, err := os.Create(b.logPath)
	if err != nil {
		return nil, err
	}
	b.cmd = exec.CommandContext(context.Background(), lanesBin)
	b.cmd.Env = append(os.Environ(),
		"LANES_DATABASE_URL="+dbURL,
		"LANES_BIND_ADDR=127.0.0.1",
		fmt.Sprintf("LANES_PORT=%d", port),
		"LANES_TEST_FAULTS=true",
		"LANES_SPOOL_DIR="+filepath.Join(tmp, "spool"),
		"LANES_LOG_LEVEL=warn",
	)
	b.cmd.Stdout, b.cmd.Stderr = logf, logf
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		return nil, err
	}
	b.done = make(chan struct{})
	go func() { b.waitErr = b.cmd.Wait(); _ = logf.Close(); close(b.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-b.done:
			log, _ := os.ReadFile(b.logPath)
			return nil, fmt.Errorf("lanes exited during startup (%w):\n%s", b.waitErr, log)
		default:
		}
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, b.URL+"/health", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return b, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Stop()
	return nil, fmt.Errorf("lanes did not answer GET /health within 30 s (log %s)", b.logPath)
}

// Stop ends the broker (SIGTERM, then SIGKILL) and drops its database.
func (b *broker) Stop() {
	if b.cmd != nil && b.cmd.Process != nil {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(10 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.done
		}
	}
	if b.db != "" {
		_, _ = pgsh(b.repo, []string{"PGOPTIONS=-c client_min_messages=warning"}, "psql", "-d", "postgres", "-c", fmt.Sprintf(`drop database if exists "%s" with (force)`, b.db))
	}
}

// envInt reads a port from the environment (0 when unset or not a number).
func envInt(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}

func freePort() (int, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// faultControl talks to the broker's test-only /__test/faults/{run} route (never through the
// validating proxy: it is not part of the API).
type faultControl struct{ base string }

func (f faultControl) do(ctx context.Context, method, run string, body any) ([]byte, error) {
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(ctx, method, f.base+"/__test/faults/"+run, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	if resp.StatusCode == http.StatusNotFound {
		return nil, fmt.Errorf("the broker has no /__test/faults route: start it with LANES_TEST_FAULTS=true")
	}
	if resp.StatusCode >= 300 {
		return nil, fmt.Errorf("%s /__test/faults/%s: %d %s", method, run, resp.StatusCode, buf.String())
	}
	return buf.Bytes(), nil
}

func (f faultControl) set(ctx context.Context, run string, rules []faultSpec) error {
	_, err := f.do(ctx, http.MethodPut, run, map[string]any{"rules": rules})
	return err
}

func (f faultControl) counts(ctx context.Context, run string) ([]any, error) {
	b, err := f.do(ctx, http.MethodGet, run, nil)
	if err != nil {
		return nil, err
	}
	var out struct {
		Rules []any `json:"rules"`
	}
	err = json.Unmarshal(b, &out)
	return out.Rules, err
}

func (f faultControl) clear(ctx context.Context, run string) {
	_, _ = f.do(ctx, http.MethodDelete, run, nil)
}
