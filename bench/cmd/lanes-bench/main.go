// Command lanes-bench is the Lanes benchmark harness. By default it starts its
// own durable PostgreSQL (scripts/pg.sh on a private port, fsync on) and its
// own broker from bin/lanes, then measures in one run:
//
//   - Lanes over HTTP: push batch 1 × 64 producers and batch 100 × 8, pop
//     batch 100 + ack in queue mode and with 10 consumer groups, open-loop
//     end-to-end latency, long-poll wake-up, partition scale with 1% busy and
//     the pipeline handoff through POST /api/v1/transaction;
//   - the ceiling: PostgreSQL alone doing the equivalent durable writes (pgx);
//   - the peer: the same produce-and-consume workload through River.
//
// Every run writes results.json, results.md and PNG charts into -out.
//
//	make build && go run ./bench/cmd/lanes-bench -short          # what `make bench` runs
//	go run ./bench/cmd/lanes-bench -out docs/benchmarks -profile  # the documented run
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/valyala/fasthttp"
)

type options struct {
	short        bool
	duration     time.Duration
	scenarios    map[string]bool
	partitions   []int
	rates        []float64
	url          string
	pgURL        string
	pgPort       int
	pgDir        string
	pgFast       bool
	brokerBin    string
	brokerPort   int
	pprofAddr    string
	out          string
	jsonOut      string
	profile      bool
	sharedN      int
	riverWorkers int
	txnBacklog   int
	analyze      bool
	settle       bool
	brokerRev    string
	dbLocale     string
	parked       int
	parkedGroups int
	rounds       int
}

// harness holds what every scenario shares.
type harness struct {
	o     options
	root  string
	http  *fasthttp.Client
	runID int64
	// round counts the rounds of the scenario running (-rounds), from 1.
	round      int
	broker     *broker
	brokerURL  string
	pgPID      int
	admin      *pgxpool.Pool
	lanesPool  *pgxpool.Pool
	lanesDB    string
	ceilingDB  string
	ceilingURL string
	riverDB    string
	riverURL   string

	serverErrors atomic.Int64
	throttled    atomic.Int64
	buffered     atomic.Int64
	errMu        sync.Mutex
	errSamples   map[string]int
}

// Run is the JSON document of one run.
type Run struct {
	Started         time.Time         `json:"started"`
	Command         string            `json:"command"`
	Short           bool              `json:"short"`
	Machine         map[string]string `json:"machine"`
	PostgreSQL      map[string]string `json:"postgresql"`
	BrokerCommit    string            `json:"brokerCommit"`
	BrokerSettings  string            `json:"brokerSettings"`
	LoadAvgStart    float64           `json:"loadAvgStart"`
	LoadAvgEnd      float64           `json:"loadAvgEnd"`
	BrokerPeakRSSMB float64           `json:"brokerPeakRssMb"`
	Hops            *HopProbe         `json:"hops,omitempty"`
	Seconds         float64           `json:"seconds"`
	Results         []Result          `json:"results"`
	// ServerErrors counts 5xx answers by route and body over the whole run.
	ServerErrors map[string]int `json:"serverErrors,omitempty"`
	Targets      []Target       `json:"targets"`
}

const allScenarios = "ceiling-b1,ceiling-b1-serial,ceiling-b100,ceiling-b1-notify,http-floor,push-b1,push-b100,consume-queue,consume-sdk-go,consume-fanout,latency,latency-parked,wake,parts,txn,shared-lanes,shared-river"

func main() {
	if serveHTTPFloorIfAsked() {
		return
	}
	var o options
	var scenarios, partitions string
	flag.BoolVar(&o.short, "short", false, "short run (3 s windows, smaller backlogs): what `make bench` runs")
	flag.DurationVar(&o.duration, "duration", 0, "length of each timed window (default 10s, 3s with -short)")
	flag.StringVar(&scenarios, "scenarios", allScenarios, "comma-separated scenarios")
	flag.StringVar(&partitions, "partitions", "1,100,10000,100000", "partition counts of the partition-scale scenario")
	var rates string
	flag.IntVar(&o.parked, "parked", 1000, "idle long polls parked beside the latency-parked scenario's open-loop load (at the first -rate)")
	flag.IntVar(&o.parkedGroups, "parked-groups", 1, "consumer groups the latency-parked scenario's idle polls are spread over (1: all in queue mode)")
	flag.StringVar(&rates, "rate", "250,1000", "offered rates (msg/s) of the open-loop latency scenario, comma-separated")
	flag.StringVar(&o.url, "url", "", "use this running broker instead of starting bin/lanes (no CPU/RSS/profiles then)")
	flag.StringVar(&o.pgURL, "pg-url", "", "use this PostgreSQL (a superuser URL) instead of starting one with scripts/pg.sh")
	flag.IntVar(&o.pgPort, "pg-port", 54339, "port of the harness's own PostgreSQL cluster")
	flag.StringVar(&o.pgDir, "pg-dir", "/tmp/lanes-bench-pg", "directory of the harness's own PostgreSQL cluster")
	flag.BoolVar(&o.pgFast, "pg-fast", false, "fsync off (NOT for reported numbers)")
	flag.StringVar(&o.brokerBin, "broker-bin", "", "broker binary (default <repo>/bin/lanes, built by `make build`)")
	flag.IntVar(&o.brokerPort, "broker-port", 6699, "HTTP port of the broker the harness starts")
	flag.StringVar(&o.pprofAddr, "pprof-addr", "127.0.0.1:6071", "pprof address of the broker the harness starts")
	flag.StringVar(&o.out, "out", "", "output directory for results.json, results.md and charts (default <repo>/bench/results/latest)")
	flag.StringVar(&o.jsonOut, "json", "", "also write the run's JSON to this file")
	flag.BoolVar(&o.profile, "profile", false, "capture broker CPU and allocation profiles, a pg_stat_activity sampler, a perf profile of PostgreSQL (where perf is installed) and the harness's own CPU profile of each Lanes throughput window into <out>/profiles")
	flag.IntVar(&o.sharedN, "shared-n", 0, "messages of the Lanes-vs-River shared workload (default 100000, 20000 with -short)")
	flag.IntVar(&o.riverWorkers, "river-workers", 200, "River MaxWorkers of the shared workload")
	flag.IntVar(&o.txnBacklog, "txn-backlog", 0, "stage-A backlog of the pipeline handoff (default 10000, 2000 with -short)")
	flag.BoolVar(&o.settle, "settle", true, "run CHECKPOINT before each scenario and between a scenario's bulk setup and its window, so the dirty buffers and WAL that earlier work leaves are written out before a window measures, not during it (-settle=false: each window inherits the writes before it)")
	flag.BoolVar(&o.analyze, "analyze", true, "run ANALYZE in the broker's database before each scenario, as autovacuum would on a running system (fresh tables have no planner statistics; -analyze=false shows the cold-start plans)")
	flag.StringVar(&o.dbLocale, "db-locale", "", "create the run's databases with this collation and character type (e.g. en_US.UTF-8, the locale most installed clusters have; default: the cluster's, C for the harness's own)")
	flag.IntVar(&o.rounds, "rounds", 1, "run every scenario this many times in a row and report its median round, with each round's figure and the losses and error answers of all rounds (profiles are the last round's)")
	flag.StringVar(&o.brokerRev, "broker-rev", "", "what the broker binary was built from, for the report (default: this checkout's HEAD and whether server/ is dirty)")
	flag.Parse()
	if o.duration == 0 {
		o.duration = 10 * time.Second
		if o.short {
			o.duration = 3 * time.Second
		}
	}
	if o.sharedN == 0 {
		o.sharedN = 100000
		if o.short {
			o.sharedN = 20000
		}
	}
	if o.txnBacklog == 0 {
		o.txnBacklog = 10000
		if o.short {
			o.txnBacklog = 2000
		}
	}
	o.scenarios = map[string]bool{}
	for _, s := range strings.Split(scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" {
			if !strings.Contains(","+allScenarios+",", ","+s+",") {
				fatalf("unknown scenario %q (known: %s)", s, allScenarios)
			}
			o.scenarios[s] = true
		}
	}
	if o.rounds < 1 {
		fatalf("-rounds must be 1 or more, not %d", o.rounds)
	}
	for _, p := range strings.Split(partitions, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 {
			fatalf("bad -partitions entry %q", p)
		}
		o.partitions = append(o.partitions, n)
	}
	for _, r := range strings.Split(rates, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
		if err != nil || v <= 0 {
			fatalf("bad -rate entry %q", r)
		}
		o.rates = append(o.rates, v)
	}
	root, err := repoRoot()
	if err != nil {
		fatalf("%v", err)
	}
	if o.brokerBin == "" {
		o.brokerBin = filepath.Join(root, "bin", "lanes")
	}
	if o.out == "" {
		o.out = filepath.Join(root, "bench", "results", "latest")
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		fatalf("%v", err)
	}
	code := newHarness(o, root).run()
	os.Exit(code)
}

// newHarness is the harness run starts from: the options, the repository
// root and the load generator's HTTP client; run fills in the rest.
func newHarness(o options, root string) *harness {
	return &harness{o: o, root: root, runID: time.Now().Unix(),
		http: &fasthttp.Client{MaxConnsPerHost: 4096, MaxIdleConnDuration: time.Minute, NoDefaultUserAgentHeader: true}}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "lanes-bench: "+format+"\n", args...)
	os.Exit(2)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s lanes-bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (h *harness) run() int {
	ctx := context.Background()
	o := h.o
	run := Run{Started: time.Now(), Command: "go run ./bench/cmd/lanes-bench " + strings.Join(os.Args[1:], " "), Short: o.short,
		Machine: machineInfo(), LoadAvgStart: loadAvg(), BrokerCommit: o.brokerRev}
	if run.BrokerCommit == "" {
		run.BrokerCommit = gitDescribe(h.root)
	}
	t0 := time.Now()

	// PostgreSQL
	adminURL := o.pgURL
	if adminURL == "" { // with -pg-url the cluster is someone else's: never stopped or restarted
		lock, err := lockClusterDir(o.pgDir)
		if err != nil {
			fatalf("%v", err)
		}
		defer lock.Close()
		logf("starting PostgreSQL (scripts/pg.sh, port %d, dir %s, fsync %v)", o.pgPort, o.pgDir, !o.pgFast)
		u, pid, err := startPostgres(h.root, o.pgPort, o.pgDir, o.pgFast)
		if err != nil {
			fatalf("%v", err)
		}
		adminURL, h.pgPID = u, pid
	}
	var err error
	if h.admin, err = newPool(ctx, adminURL, 4); err != nil {
		fatalf("postgres: %v", err)
	}
	defer h.admin.Close()
	run.PostgreSQL = pgSettings(ctx, h.admin)
	if run.PostgreSQL["fsync"] != "on" || run.PostgreSQL["synchronous_commit"] != "on" {
		logf("WARNING: fsync=%s synchronous_commit=%s: these numbers are not durable-commit numbers", run.PostgreSQL["fsync"], run.PostgreSQL["synchronous_commit"])
	}
	h.lanesDB, h.ceilingDB, h.riverDB = "lanes_bench", "lanes_bench_ceiling", "lanes_bench_river"
	for _, db := range []string{h.lanesDB, h.ceilingDB, h.riverDB} {
		if o.url != "" && db == h.lanesDB {
			continue // the external broker owns its database
		}
		if err := recreateDatabase(ctx, adminURL, db, o.dbLocale); err != nil {
			fatalf("create database %s: %v", db, err)
		}
	}
	h.ceilingURL, h.riverURL = withDatabase(adminURL, h.ceilingDB), withDatabase(adminURL, h.riverDB)
	var collation string
	if err := h.admin.QueryRow(ctx, "SELECT datcollate FROM pg_database WHERE datname = $1", h.lanesDB).Scan(&collation); err == nil {
		run.PostgreSQL["database_collation"] = collation
	}

	// broker
	if o.url != "" {
		h.brokerURL = o.url
		run.BrokerSettings = "external broker at " + o.url
	} else {
		logf("starting broker %s on :%d (pprof %s)", o.brokerBin, o.brokerPort, o.pprofAddr)
		spool := filepath.Join(os.TempDir(), fmt.Sprintf("lanes-bench-spool-%d", h.runID))
		b, err := startBroker(o.brokerBin, withDatabase(adminURL, h.lanesDB), o.brokerPort, o.pprofAddr, filepath.Join(o.out, "broker.log"), spool)
		if err != nil {
			fatalf("%v", err)
		}
		defer b.stop()
		defer os.RemoveAll(spool)
		h.broker, h.brokerURL = b, b.url
		run.BrokerSettings = brokerSettings(os.Environ())
	}
	if h.lanesPool, err = newPool(ctx, withDatabase(adminURL, h.lanesDB), 4); err != nil {
		fatalf("%v", err)
	}
	defer h.lanesPool.Close()

	logf("probing round trips (busy and idle)")
	if run.Hops, err = h.probeHops(ctx); err != nil {
		logf("hop probe: %v", err)
	}

	failed := false
	add := func(r Result, err error) {
		if err != nil {
			failed = true
			r.fail(err)
			logf("%s (%s) FAILED: %v", r.Scenario, r.System, err)
		}
		run.Results = append(run.Results, r)
		printResult(r)
	}
	// repeat runs a scenario's windows o.rounds times and adds each of its
	// results as the median of its rounds (runRounds).
	repeat := func(name string, f func() ([]Result, error)) {
		rs, err := runRounds(o.rounds, func(round int) {
			h.round = round
			if o.rounds > 1 {
				logf("scenario %s, round %d of %d (load %.2f)", name, round, o.rounds, loadAvg())
			} else {
				logf("scenario %s (load %.2f)", name, loadAvg())
			}
			h.prepareScenario(ctx)
		}, f)
		for _, r := range rs {
			add(r, err)
		}
	}
	step := func(name string, f func() (Result, error)) {
		if !o.scenarios[name] {
			return
		}
		repeat(name, func() ([]Result, error) {
			r, err := f()
			if r.Scenario == "" {
				r.Scenario, r.System = name, systemOf(name)
			}
			return []Result{r}, err
		})
	}
	step("ceiling-b100", func() (Result, error) { return h.ceilingScenario("ceiling-b100", 8, 100, false) })
	step("ceiling-b1", func() (Result, error) { return h.ceilingScenario("ceiling-b1", 64, 1, false) })
	step("ceiling-b1-serial", func() (Result, error) { return h.ceilingScenario("ceiling-b1-serial", 1, 1, false) })
	step("ceiling-b1-notify", func() (Result, error) { return h.ceilingScenario("ceiling-b1-notify", 64, 1, true) })
	step("http-floor", func() (Result, error) { return h.httpFloorScenario(64) })
	step("push-b1", func() (Result, error) { return h.pushScenario("push-b1", 64, 1) })
	step("push-b100", func() (Result, error) { return h.pushScenario("push-b100", 8, 100) })
	// Backlogs sized to drain in about one window at 100k deliveries/s, so the
	// figure spans as many seconds as the push windows' do: a fixed 256,000
	// drained in 2.5 s, and the figure moved 83–108k between runs of one build.
	per, fan := consumeBacklogs(o.duration)
	step("consume-queue", func() (Result, error) { return h.consumeScenario("consume-queue", 0, 8, 16, per) })
	step("consume-sdk-go", func() (Result, error) { return h.sdkConsumeScenario("consume-sdk-go", 8, 16, per) })
	step("consume-fanout", func() (Result, error) { return h.consumeScenario("consume-fanout", 10, 2, 8, fan) })
	for _, rate := range o.rates {
		step("latency", func() (Result, error) { return h.latencyScenario(rate, 0, 0) })
	}
	step("latency-parked", func() (Result, error) { return h.latencyScenario(o.rates[0], o.parked, o.parkedGroups) })
	if o.scenarios["wake"] {
		repeat("wake", func() ([]Result, error) {
			leased, autoAck, err := h.wakeScenarios()
			return []Result{leased, autoAck}, err
		})
	}
	if o.scenarios["parts"] {
		for _, n := range o.partitions {
			repeat(fmt.Sprintf("parts-%d", n), func() ([]Result, error) {
				r, err := h.partitionScenario(n)
				if r.Scenario == "" {
					r.Scenario, r.System, r.Partitions = fmt.Sprintf("parts-%d", n), "lanes", n
				}
				return []Result{r}, err
			})
		}
	}
	step("txn", h.txnScenario)
	step("shared-lanes", func() (Result, error) { return h.sharedLanes(o.sharedN) })
	step("shared-river", func() (Result, error) { return h.sharedRiver(o.sharedN) })

	if h.broker != nil {
		run.BrokerPeakRSSMB = float64(procStatusKB(h.broker.pid, "VmHWM")) / 1024
	}
	run.LoadAvgEnd = loadAvg()
	h.errMu.Lock()
	run.ServerErrors = h.errSamples
	h.errMu.Unlock()
	run.Seconds = time.Since(t0).Seconds()
	applyRatios(run.Results)
	run.Targets = evaluateTargets(&run)

	buf, _ := json.MarshalIndent(run, "", "  ")
	write := func(path string, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			logf("write %s: %v", path, err)
			failed = true
		}
	}
	write(filepath.Join(o.out, "results.json"), buf)
	if o.jsonOut != "" {
		write(o.jsonOut, buf)
	}
	md := markdown(&run)
	write(filepath.Join(o.out, "results.md"), []byte(md))
	if err := writeCharts(&run, o.out); err != nil {
		logf("charts: %v", err)
		failed = true
	}
	fmt.Println()
	fmt.Println(md)
	logf("done in %.0f s; results in %s", run.Seconds, o.out)
	if lossy := lossFailures(run.Results); len(lossy) > 0 {
		logf("FAILED: messages lost: %s", strings.Join(lossy, "; "))
		failed = true
	}
	if failed {
		return 1
	}
	return 0
}

// fail marks r as failed by err: its rates are not available, as a figure
// measured on a timeout or half a window would mislead.
func (r *Result) fail(err error) {
	r.Available = false
	r.MsgPerSec, r.TxPerSec, r.PushedPerSec = 0, 0, 0
	if r.Note == "" {
		r.Note = "error: " + err.Error()
	} else {
		r.Note += "; error: " + err.Error()
	}
}

// lossFailures names every result that lost a message or delivered one that
// was never pushed: either fails the run.
func lossFailures(rs []Result) []string {
	var out []string
	for _, r := range rs {
		if r.LossChecked && (r.Lost > 0 || r.Unexpected > 0) {
			out = append(out, fmt.Sprintf("%s (%s): %d lost, %d never pushed", r.Scenario, r.System, r.Lost, r.Unexpected))
		}
	}
	return out
}

func systemOf(name string) string {
	switch {
	case strings.HasPrefix(name, "ceiling"):
		return "postgres"
	case name == "shared-river":
		return "river"
	case name == "http-floor":
		return "http"
	}
	return "lanes"
}

func printResult(r Result) {
	if !r.Available {
		fmt.Printf("%-15s %-8s %s\n", r.Scenario, r.System, r.Note)
		return
	}
	fmt.Printf("%-15s %-8s %10.0f msg/s  (%d in %.1fs)  lost=%s dup=%s redelivered=%d  broker %.2f cores %.0f MB  pg %s cores %.0f write tx/s",
		r.Scenario, r.System, r.MsgPerSec, r.Messages, r.Seconds, fmtLost(r), fmtChecked(r, r.Duplicated), r.Redelivered, r.BrokerCPUCores, r.BrokerPeakRSSMB, fmtPGCPU(r), r.PGWriteXactsPerSec)
	if l := r.LatencyMs; l != nil {
		fmt.Printf("  p50=%.2fms p99=%.2fms p999=%.2fms", l["p50"], l["p99"], l["p999"])
	}
	fmt.Println()
}

// prepareScenario runs before every scenario: ANALYZE (see maintain) and,
// with -settle, a CHECKPOINT (see settle).
func (h *harness) prepareScenario(ctx context.Context) {
	h.maintain(ctx, "ANALYZE")
	h.settle(ctx)
}

// settle runs a CHECKPOINT with -settle: before every scenario, and again
// between a scenario's bulk setup (a preloaded backlog, 100,000 idle
// partitions) and its window. Without it a window inherits the writes before
// it (the ceilings write gigabytes of WAL in seconds): the checkpoint of them,
// the eviction of their dirty buffers and, once their WAL has used up the
// recycled segments, the zero-filling of new ones run during the window and
// queue with the commits it measures.
func (h *harness) settle(ctx context.Context) {
	if !h.o.settle {
		return
	}
	t := time.Now()
	if _, err := h.admin.Exec(ctx, "CHECKPOINT"); err != nil {
		logf("CHECKPOINT: %v", err)
		return
	}
	logf("CHECKPOINT took %.1f s", time.Since(t).Seconds())
}

// maintain runs command (ANALYZE, or VACUUM after a bulk setup) on every
// table of the broker's database that holds rows, as autovacuum would on a
// running system.
func (h *harness) maintain(ctx context.Context, command string) {
	if !h.o.analyze {
		return
	}
	// Autovacuum analyzes a table once 50 rows (plus 10 %) changed, never an
	// empty one: statistics saying "empty" would make every plan cached from
	// them scan what then grows (see engine/conntx.go), a state a running
	// system does not reach. So only tables holding rows are analyzed.
	rows, err := h.lanesPool.Query(ctx, `SELECT format('%I.%I', schemaname, relname) FROM pg_stat_user_tables
		WHERE n_live_tup > 0 OR n_tup_ins > 0`)
	if err != nil {
		logf("ANALYZE: %v", err)
		return
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		logf("ANALYZE: %v", err)
		return
	}
	for _, t := range tables {
		if _, err := h.lanesPool.Exec(ctx, command+" "+t); err != nil {
			logf("%s %s: %v", command, t, err)
		}
	}
}

// consumeBacklogs returns the messages per partition of consume-queue (16
// partitions) and consume-fanout (8 partitions, 10 groups) that give about
// window × 100,000 deliveries each.
func consumeBacklogs(window time.Duration) (perPartition, fanPerPartition int) {
	deliveries := 100_000 * window.Seconds()
	return int(deliveries / 16), int(deliveries / (8 * 10))
}

// harnessSetsForBroker are the broker settings startBroker sets itself.
var harnessSetsForBroker = map[string]bool{"LANES_DATABASE_URL": true, "LANES_BIND_ADDR": true, "LANES_PORT": true,
	"LANES_PPROF_ADDR": true, "LANES_LOG_LEVEL": true, "LANES_SPOOL_DIR": true}

// brokerSettings describes the broker's settings for the report: its
// defaults, and every LANES_* variable of env (the harness's environment,
// which the broker inherits) that changes one.
func brokerSettings(env []string) string {
	var set []string
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "LANES_") && !harnessSetsForBroker[k] {
			set = append(set, kv)
		}
	}
	s := "defaults (LANES_DB_POOL_SIZE=20, LANES_PUSH_COMMITTERS=1, LANES_POP_AUTOPILOT=on), LANES_LOG_LEVEL=warn"
	if len(set) > 0 {
		sort.Strings(set)
		s += "; set in the environment: " + strings.Join(set, ", ")
	}
	return s
}
