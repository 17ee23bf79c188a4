package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lanesmq/lanes/server/brokerproc"
)

// broker is a lanes process on a database of its own, started by the runner.
type broker struct {
	*brokerproc.Process
	db      string
	repo    string
	logPath string
	log     *os.File
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
	b := &broker{db: db, repo: repo, logPath: filepath.Join(tmp, "lanes.log")}
	dbURL, err := pgsh(repo, []string{"LANES_PG_DB=" + db}, "url")
	if err != nil {
		b.dropDatabase()
		return nil, err
	}
	if b.log, err = os.Create(b.logPath); err != nil {
		b.dropDatabase()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b.Process, err = brokerproc.StartHealthy(ctx, brokerproc.Options{
		Binary:      lanesBin,
		DatabaseURL: dbURL,
		Port:        port,
		SpoolDir:    filepath.Join(tmp, "spool"),
		// Every one of brokerNeeds: no KV sweeper (a case lists an expired key a sweep would delete).
		Env:    []string{"LANES_TEST_FAULTS=true", "LANES_LOG_LEVEL=warn", "LANES_KV_SWEEP_INTERVAL_MS=0"},
		Output: b.log,
	})
	if err != nil {
		_ = b.log.Close()
		b.dropDatabase()
		return nil, fmt.Errorf("starting lanes: %w", err)
	}
	return b, nil
}

// Stop ends the broker (SIGTERM, then SIGKILL after 10 s) and drops its database.
func (b *broker) Stop() {
	b.Process.Stop(10 * time.Second)
	_ = b.log.Close()
	b.dropDatabase()
}

func (b *broker) dropDatabase() {
	_, _ = pgsh(b.repo, []string{"PGOPTIONS=-c client_min_messages=warning"}, "psql", "-d", "postgres", "-c", fmt.Sprintf(`drop database if exists "%s" with (force)`, b.db))
}

// envInt reads a port from the environment (0 when unset or not a number).
func envInt(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
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
