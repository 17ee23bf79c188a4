package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestWithDatabaseReplacesOnlyTheDatabaseName(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://postgres@127.0.0.1:54329/lanes?sslmode=disable": "postgres://postgres@127.0.0.1:54329/lanes_bench?sslmode=disable",
		"postgres://u:secret@db.example:5432/postgres":              "postgres://u:secret@db.example:5432/lanes_bench",
		"postgres://postgres@127.0.0.1:54339?sslmode=disable":       "postgres://postgres@127.0.0.1:54339/lanes_bench?sslmode=disable",
		"postgresql://h/a/b?application_name=x&sslmode=require":     "postgresql://h/lanes_bench?application_name=x&sslmode=require",
	} {
		if got := withDatabase(in, "lanes_bench"); got != want {
			t.Errorf("withDatabase(%q)\n got %q\nwant %q", in, got, want)
		}
	}
}

func TestWithDatabaseLeavesAnUnparsableURLAlone(t *testing.T) {
	const bad = "postgres://[::1"
	if got := withDatabase(bad, "x"); got != bad {
		t.Fatalf("withDatabase(%q) = %q, want it unchanged", bad, got)
	}
}

func TestLastLinesKeepsTheTail(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\nd\n", 2, "c\nd"},
		{"a\nb\n", 5, "a\nb"},
		{"only", 1, "only"},
		{"", 3, ""},
	} {
		if got := lastLines(c.in, c.n); got != c.want {
			t.Errorf("lastLines(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

func TestRepoRootFindsTheMonorepoFromThePackageDirectory(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"go.work", "scripts/pg.sh", "bench/cmd/lanes-bench/main.go"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("root %s lacks %s: %v", root, f, err)
		}
	}
}

func TestRepoRootFailsOutsideTheRepository(t *testing.T) {
	t.Chdir(t.TempDir())
	if root, err := repoRoot(); err == nil {
		t.Fatalf("repoRoot outside the repository = %q, want an error", root)
	}
}

func TestProcStatusKBReadsThisProcessRSS(t *testing.T) {
	rss := procStatusKB(os.Getpid(), "VmRSS")
	if rss <= 0 {
		t.Fatalf("VmRSS of the test process = %d kB", rss)
	}
	// the peak is at least the current size
	if hwm := procStatusKB(os.Getpid(), "VmHWM"); hwm < rss {
		t.Errorf("VmHWM %d kB < VmRSS %d kB", hwm, rss)
	}
	if n := procStatusKB(os.Getpid(), "NoSuchKey"); n != 0 {
		t.Errorf("unknown key read as %d", n)
	}
	if n := procStatusKB(0, "VmRSS"); n != 0 {
		t.Errorf("pid 0 read as %d", n)
	}
}

func TestProcTicksCountsThisProcessCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	// spin until the kernel has charged a tick (10 ms) to the process
	deadline := time.Now().Add(3 * time.Second)
	x := 0
	for procTicks(os.Getpid()) == 0 && time.Now().Before(deadline) {
		for i := range 1_000_000 {
			x += i
		}
	}
	if procTicks(os.Getpid()) == 0 {
		t.Fatalf("no CPU ticks read for the test process after spinning (%d)", x)
	}
	if procTicks(0) != 0 || procTicks(-1) != 0 {
		t.Error("procTicks of pid ≤ 0 is not 0")
	}
}

func TestGitDescribeNamesTheCheckoutsCommit(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		t.Skip("not a git checkout")
	}
	rev := gitDescribe(root)
	if rev == "unknown" || len(strings.Fields(rev)[0]) < 7 {
		t.Fatalf("gitDescribe = %q, want a short commit hash", rev)
	}
	if got := gitDescribe(t.TempDir()); got != "unknown" {
		t.Errorf("gitDescribe outside a repository = %q, want unknown", got)
	}
}

// testClusterURL is the test cluster's admin URL, or skips t without one.
func testClusterURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("LANES_TEST_DATABASE_URL")
	if u == "" {
		t.Skip("LANES_TEST_DATABASE_URL is not set (make test-go sets it; start the cluster with LANES_PG_FAST=1 scripts/pg.sh start)")
	}
	// the harness's own durable cluster holds the reported numbers' history: never test against it
	if strings.Contains(u, ":54339/") || strings.Contains(u, "lanes-bench-pg") {
		t.Fatalf("LANES_TEST_DATABASE_URL %s names the benchmark's own cluster, not the test cluster", u)
	}
	return u
}

// freshDatabase names a database for t on the test cluster and drops it when t ends.
func freshDatabase(t *testing.T, adminURL, prefix string) string {
	t.Helper()
	db := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), time.Now().UnixNano()%1e9)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			t.Logf("drop %s: %v", db, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Logf("drop %s: %v", db, err)
		}
	})
	return db
}

func TestRecreateDatabaseStartsFromEmptyTables(t *testing.T) {
	admin := testClusterURL(t)
	ctx := t.Context()
	db := freshDatabase(t, admin, "lanes_bench_t_recreate")
	if err := recreateDatabase(ctx, admin, db, ""); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, withDatabase(admin, db))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE leftover (id int)"); err != nil {
		t.Fatal(err)
	}
	// an open connection must not keep the old database alive (WITH (FORCE))
	defer conn.Close(context.Background())
	if err := recreateDatabase(ctx, admin, db, ""); err != nil {
		t.Fatal(err)
	}
	conn2, err := pgx.Connect(ctx, withDatabase(admin, db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close(context.Background())
	var n int
	if err := conn2.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'leftover'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("the table of the dropped database survived recreateDatabase")
	}
}

// A second harness on the same -pg-dir is refused while the first holds it,
// and may run once the first is done.
func TestLockClusterDirRefusesASecondHarness(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pg")
	first, err := lockClusterDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockClusterDir(dir)
	if err == nil {
		t.Fatal("a second lock on the same -pg-dir was granted")
	}
	if want := fmt.Sprintf("another lanes-bench (pid %d) is using the cluster in %s", os.Getpid(), dir); !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
	first.Close()
	again, err := lockClusterDir(dir)
	if err != nil {
		t.Fatalf("lock after the first harness ended: %v", err)
	}
	again.Close()
}
