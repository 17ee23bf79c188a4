package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/brokerproc"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat (100 on Linux).
const clockTicks = 100

// repoRoot finds the monorepo root (the directory holding go.work) from the
// working directory upwards, so the harness runs from the root or from bench/.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "scripts", "pg.sh")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (go.work + scripts/pg.sh) not found above the working directory")
		}
		dir = parent
	}
}

// startPostgres starts the harness's own durable cluster through scripts/pg.sh
// (its own port and directory, so a test cluster running with fsync off is
// never measured) and returns the admin URL (database postgres) and the
// postmaster pid.
func startPostgres(root string, port int, dir string, fast bool) (adminURL string, pid int, err error) {
	env := append(os.Environ(),
		fmt.Sprintf("LANES_PG_PORT=%d", port),
		"LANES_PG_DIR="+dir,
		"LANES_PG_DB=postgres",
	)
	if fast {
		env = append(env, "LANES_PG_FAST=1")
	} else {
		env = append(env, "LANES_PG_FAST=0")
	}
	// A cluster left running with other settings keeps them: restart so lanes.conf is rewritten.
	stop := exec.CommandContext(context.Background(), filepath.Join(root, "scripts", "pg.sh"), "stop")
	stop.Env, stop.Stderr = env, os.Stderr
	_ = stop.Run()
	cmd := exec.CommandContext(context.Background(), filepath.Join(root, "scripts", "pg.sh"), "start")
	cmd.Env, cmd.Stdout, cmd.Stderr = env, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", 0, fmt.Errorf("scripts/pg.sh start: %w", err)
	}
	raw, err := os.ReadFile(dir + "/data/postmaster.pid")
	if err == nil {
		pid, _ = strconv.Atoi(strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0]))
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port), pid, nil
}

// withDatabase returns u with its database name replaced.
func withDatabase(u, db string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	p.Path = "/" + db
	return p.String()
}

// recreateDatabase drops and creates db so every run starts from empty tables.
// A non-empty locale creates it with that collation and character type, as a
// cluster initialized with a system locale (en_US.UTF-8 on most installs)
// would; the harness's own cluster has none.
func recreateDatabase(ctx context.Context, adminURL, db, locale string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", pgx.Identifier{db}.Sanitize())); err != nil {
		return err
	}
	create := fmt.Sprintf("CREATE DATABASE %s", pgx.Identifier{db}.Sanitize())
	if locale != "" {
		create += fmt.Sprintf(" TEMPLATE template0 LC_COLLATE %[1]s LC_CTYPE %[1]s", quoteLiteral(locale))
	}
	_, err = conn.Exec(ctx, create)
	return err
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// pgSettings reads the settings a reader of the results needs (durability first).
func pgSettings(ctx context.Context, pool *pgxpool.Pool) map[string]string {
	out := map[string]string{}
	for _, name := range []string{"server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_level",
		"shared_buffers", "max_connections", "commit_delay", "wal_sync_method", "max_wal_size", "checkpoint_timeout"} {
		var v string
		if err := pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err == nil {
			out[name] = v
		}
	}
	return out
}

// broker is a lanes process the harness started (or one it was pointed at).
type broker struct {
	url       string
	pprofAddr string
	pid       int
	proc      *brokerproc.Process
	log       *os.File
}

// startBroker runs the lanes binary against dbURL with a private port (0 = a free one) and pprof.
func startBroker(bin, dbURL string, port int, pprofAddr, logPath, spoolDir string) (*broker, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("broker binary %s: %w (run `make build`)", bin, err)
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	proc, err := brokerproc.StartHealthy(ctx, brokerproc.Options{
		Binary:      bin,
		DatabaseURL: dbURL,
		Port:        port,
		SpoolDir:    spoolDir,
		Env:         []string{"LANES_PPROF_ADDR=" + pprofAddr, "LANES_LOG_LEVEL=warn"},
		OtherAddrs:  []string{pprofAddr},
		Output:      logf,
	})
	if err != nil {
		logf.Close()
		if errors.Is(err, brokerproc.ErrAddrInUse) {
			return nil, fmt.Errorf("%w; stop it or pass -broker-port/-pprof-addr", err)
		}
		return nil, err
	}
	return &broker{url: proc.URL, pprofAddr: pprofAddr, pid: proc.Pid(), proc: proc, log: logf}, nil
}

// stop ends the broker (SIGTERM, then SIGKILL after 10 s).
func (b *broker) stop() {
	if b == nil || b.proc == nil {
		return
	}
	b.proc.Stop(10 * time.Second)
	b.log.Close()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// procTicks is utime+stime of pid in clock ticks (0 when unreadable).
func procTicks(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(raw)
	// the command name may contain spaces: fields start after the last ')'
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ut + st
}

// treeTicks is utime+stime of pid and of its direct children (a postmaster and its backends).
func treeTicks(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	total := procTicks(pid)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(raw)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 2 && f[1] == strconv.Itoa(pid) {
			total += procTicks(child)
		}
	}
	return total
}

// procStatusKB reads a "Key: N kB" line of /proc/<pid>/status.
func procStatusKB(pid int, key string) int64 {
	if pid <= 0 {
		return 0
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, key+":") {
			fs := strings.Fields(line[len(key)+1:])
			if len(fs) > 0 {
				n, _ := strconv.ParseInt(fs[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// rssSampler records the largest VmRSS of pid seen every 50 ms.
type rssSampler struct {
	pid  int
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	peak int64
}

func startRSSSampler(pid int) *rssSampler {
	s := &rssSampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			kb := procStatusKB(pid, "VmRSS")
			s.mu.Lock()
			if kb > s.peak {
				s.peak = kb
			}
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) finish() int64 {
	close(s.stop)
	<-s.done
	return s.peak
}

// machineInfo describes the host for the report.
func machineInfo() map[string]string {
	out := map[string]string{"cpus": strconv.Itoa(runtime.NumCPU()), "goos": runtime.GOOS, "goarch": runtime.GOARCH, "go": runtime.Version()}
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(line, "model name") {
				out["cpu"] = strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
				break
			}
		}
	}
	if kb := memTotalKB(); kb > 0 {
		out["memory"] = fmt.Sprintf("%.1f GiB", float64(kb)/1024/1024)
	}
	if raw, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		out["kernel"] = strings.TrimSpace(string(raw))
	}
	return out
}

func memTotalKB() int64 {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "MemTotal:") {
			f := strings.Fields(line)
			if len(f) > 1 {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				return n
			}
		}
	}
	return 0
}

// loadAvg is the 1-minute load average (what `uptime` shows first).
func loadAvg() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// gitDescribe is the commit the broker binary most likely came from, with a dirty marker.
func gitDescribe(root string) string {
	out, err := exec.CommandContext(context.Background(), "git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(context.Background(), "git", "-C", root, "status", "--porcelain", "--", "server").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		rev += " (server/ has uncommitted changes)"
	}
	return rev
}

// clusterLockName is the lock file a harness holds in its -pg-dir for the
// whole run: a second harness on the same directory would restart the
// cluster under the first one's windows.
const clusterLockName = "lanes-bench.lock"

// lockClusterDir takes dir's exclusive lock (flock, released when the
// process exits) or says which harness holds it.
func lockClusterDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, clusterLockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		return nil, fmt.Errorf("another lanes-bench (pid %s) is using the cluster in %s (it holds %s): wait for it to finish, or give this run its own -pg-dir and -pg-port",
			strings.TrimSpace(string(holder)), dir, path)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
