package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Result is one scenario's figures; every run writes a list of them as JSON.
type Result struct {
	Scenario    string `json:"scenario"`
	System      string `json:"system"` // lanes, postgres (the ceiling) or river (the peer)
	Description string `json:"description"`
	Available   bool   `json:"available"`
	Note        string `json:"note,omitempty"`
	// Partitions is set by the partition-scale scenarios.
	Partitions int     `json:"partitions,omitempty"`
	Messages   int64   `json:"messages"`
	Seconds    float64 `json:"seconds"`
	MsgPerSec  float64 `json:"msgPerSec"`
	// PushedPerSec is the producer side of mixed scenarios (partition scale, shared workload).
	PushedPerSec float64 `json:"pushedPerSec,omitempty"`
	// TxPerSec is set where the unit of work is a transaction (pipeline handoff, ceilings).
	TxPerSec float64 `json:"txPerSec,omitempty"`
	// LatencyMs holds p50/p99/p999/max; AltLatencyMs a second view (see the
	// description); AckLatencyMs, of the open-loop scenario, runs to the
	// commit of the delivery's ack.
	LatencyMs    map[string]float64 `json:"latencyMs,omitempty"`
	AltLatencyMs map[string]float64 `json:"altLatencyMs,omitempty"`
	AckLatencyMs map[string]float64 `json:"ackLatencyMs,omitempty"`
	OfferedRate  float64            `json:"offeredRate,omitempty"`
	// LossChecked says the scenario compared what was accepted with what
	// arrived; Lost, Unexpected and Duplicated mean nothing without it.
	LossChecked bool `json:"lossChecked"`
	// Lost: accepted, never arrived. Unexpected: arrived, never pushed.
	// Duplicated: a message whose ack took effect twice (or stored twice).
	Lost       int64 `json:"lost"`
	Unexpected int64 `json:"unexpected"`
	Duplicated int64 `json:"duplicated"`
	// Redelivered counts deliveries whose ack was a noop or refused for an
	// expired lease: the message went to another consumer after its lease
	// expired, as at-least-once delivery allows.
	Redelivered int64 `json:"redelivered"`
	// Resource use over the measured window.
	BrokerCPUCores  float64 `json:"brokerCpuCores"`
	BrokerPeakRSSMB float64 `json:"brokerPeakRssMb"`
	PGCPUCores      float64 `json:"pgCpuCores"`
	// PGCPUKnown is false when the postmaster's pid is unknown (-pg-url).
	PGCPUKnown bool `json:"pgCpuKnown"`
	// HarnessCPUCores is this load generator's own CPU: it shares the machine.
	HarnessCPUCores    float64 `json:"harnessCpuCores"`
	PGCommitsPerSec    float64 `json:"pgCommitsPerSec"`
	PGWriteXactsPerSec float64 `json:"pgWriteXactsPerSec"`
	LoadAvg            float64 `json:"loadAvg1m"`
	// Checkpoints started during the window (timed or requested) and the
	// buffers checkpoints wrote: a checkpoint's writes and fsyncs share the
	// disk with the commits measured.
	Checkpoints       int64 `json:"checkpoints"`
	CheckpointBuffers int64 `json:"checkpointBuffers"`
	// WAL written by the whole cluster over the window (pg_current_wal_lsn()
	// at its start and end, exact; autovacuum and the harness's own queries
	// included), and the range itself, for pg_waldump --stats=record.
	WALBytes    int64  `json:"walBytes"`
	WALStartLSN string `json:"walStartLsn,omitempty"`
	WALEndLSN   string `json:"walEndLsn,omitempty"`
	// PopClaims counts the claims the broker ran for pops during the window
	// (lanes_pop_transactions_total: a pop's own, parked re-checks included)
	// and PopHandOffs those a push ran for a parked pop in its own round trip
	// (lanes_pop_hand_offs_total); claims per delivered batch show how many
	// found nothing.
	PopClaims   int64 `json:"popClaims"`
	PopHandOffs int64 `json:"popHandOffs"`
	// PushCommits counts the broker's push group commits during the window
	// (lanes_push_commit_duration_seconds_count), PushCommitMessages the
	// messages they took, PushCommitSeconds their durations summed (over the
	// window's length: how busy the committers were) and PushWaitSeconds the
	// pushes' waits for their commits, of which there were PushWaits.
	PushCommits        int64   `json:"pushCommits,omitempty"`
	PushCommitMessages int64   `json:"pushCommitMessages,omitempty"`
	PushCommitSeconds  float64 `json:"pushCommitSeconds,omitempty"`
	PushWaits          int64   `json:"pushWaits,omitempty"`
	PushWaitSeconds    float64 `json:"pushWaitSeconds,omitempty"`
	// ServerErrors counts 5xx answers during the window (retried up to 3 times each).
	ServerErrors int64 `json:"serverErrors"`
	// Throttled counts 429 answers (retried after Retry-After); Buffered counts pushes answered "buffered" (spooled).
	Throttled int64 `json:"throttled"`
	Buffered  int64 `json:"buffered"`
	// Ratio to the yardstick named in RatioTo.
	RatioTo string  `json:"ratioTo,omitempty"`
	Ratio   float64 `json:"ratio,omitempty"`
	// Profiles are the files of the broker's CPU and allocation profiles over the window.
	Profiles []string `json:"profiles,omitempty"`
	// Rounds holds each round's figures when the scenario ran more than once
	// (-rounds); the result is then the median round (combineRounds).
	Rounds []RoundFigure `json:"rounds,omitempty"`
}

// window measures resource use between begin and end: broker and PostgreSQL
// CPU from /proc, broker RSS sampled every 50 ms, pg_stat_database commits of
// the scenario's database and write transactions (xid delta, exact and immediate).
type window struct {
	h          *harness
	db         string
	brokerPID  int
	start      time.Time
	brokerT0   int64
	pgT0       int64
	commits0   int64
	xid0       int64
	ckpt0      int64
	ckptBufs0  int64
	walLSN0    string
	rss        *rssSampler
	profile    string
	profDone   chan []string
	profCancel context.CancelFunc
	pgSampler  *activitySampler
	pgPerf     *pgPerf
	selfProf   *os.File
	errors0    int64
	counters0  brokerCounters
	countersOK bool
	throttled0 int64
	buffered0  int64
	selfT0     int64
}

func (h *harness) begin(db string, profileName string) *window {
	w := &window{h: h, db: db}
	if db == h.lanesDB && h.broker != nil {
		w.brokerPID = h.broker.pid
	}
	w.commits0, w.xid0 = h.pgCounters(db)
	w.ckpt0, w.ckptBufs0 = h.checkpointCounters()
	w.walLSN0 = h.walLSN()
	w.brokerT0 = procTicks(w.brokerPID)
	w.pgT0 = treeTicks(h.pgPID)
	if w.brokerPID > 0 {
		w.rss = startRSSSampler(w.brokerPID)
	}
	if h.o.profile && profileName != "" && h.broker != nil && h.broker.pprofAddr != "" && w.brokerPID > 0 {
		w.profile = profileName
		ctx, cancel := context.WithCancel(context.Background())
		w.profCancel = cancel
		w.profDone = make(chan []string, 1)
		go func() { w.profDone <- h.captureProfiles(ctx, profileName) }()
		w.pgSampler = startActivitySampler(h.admin, db)
		dir := filepath.Join(h.o.out, "profiles")
		if err := os.MkdirAll(dir, 0o755); err == nil {
			w.pgPerf = startPGPerf(dir, profileName)
			w.selfProf = startHarnessProfile(dir, profileName)
		}
	}
	w.errors0 = h.serverErrors.Load()
	if db == h.lanesDB {
		w.counters0, w.countersOK = h.brokerCounters()
	}
	w.throttled0, w.buffered0 = h.throttled.Load(), h.buffered.Load()
	w.selfT0 = procTicks(os.Getpid())
	w.start = time.Now()
	return w
}

// end fills r's resource fields; seconds is the length of the measured phase.
func (w *window) end(r *Result) {
	secs := time.Since(w.start).Seconds()
	if r.Seconds == 0 {
		r.Seconds = secs
	}
	if w.brokerPID > 0 {
		r.BrokerCPUCores = float64(procTicks(w.brokerPID)-w.brokerT0) / clockTicks / secs
		r.BrokerPeakRSSMB = float64(w.rss.finish()) / 1024
	}
	if w.h.pgPID > 0 {
		r.PGCPUCores, r.PGCPUKnown = float64(treeTicks(w.h.pgPID)-w.pgT0)/clockTicks/secs, true
	}
	r.HarnessCPUCores = float64(procTicks(os.Getpid())-w.selfT0) / clockTicks / secs
	c1, x1 := w.h.pgCounters(w.db)
	r.PGCommitsPerSec = float64(c1-w.commits0) / secs
	r.PGWriteXactsPerSec = float64(x1-w.xid0) / secs
	k1, b1 := w.h.checkpointCounters()
	r.Checkpoints, r.CheckpointBuffers = k1-w.ckpt0, b1-w.ckptBufs0
	if w.walLSN0 != "" {
		r.WALStartLSN, r.WALEndLSN = w.walLSN0, w.h.walLSN()
		r.WALBytes = w.h.walBytesBetween(r.WALStartLSN, r.WALEndLSN)
	}
	r.LoadAvg = loadAvg()
	r.ServerErrors = w.h.serverErrors.Load() - w.errors0
	if c, ok := w.h.brokerCounters(); ok && w.countersOK {
		r.PopClaims, r.PopHandOffs = c.claims-w.counters0.claims, c.handOffs-w.counters0.handOffs
		r.PushCommits = int64(c.pushCommits - w.counters0.pushCommits)
		r.PushCommitMessages = int64(c.pushCommitMessages - w.counters0.pushCommitMessages)
		r.PushCommitSeconds = c.pushCommitSeconds - w.counters0.pushCommitSeconds
		r.PushWaits = int64(c.pushWaits - w.counters0.pushWaits)
		r.PushWaitSeconds = c.pushWaitSeconds - w.counters0.pushWaitSeconds
	}
	r.Throttled = w.h.throttled.Load() - w.throttled0
	r.Buffered = w.h.buffered.Load() - w.buffered0
	if w.profDone != nil {
		r.Profiles = <-w.profDone
		w.profCancel()
		file := filepath.Join(w.h.o.out, "profiles", w.profile+"-pg.txt")
		if err := os.WriteFile(file, []byte(w.pgSampler.finish()), 0o644); err == nil {
			r.Profiles = append(r.Profiles, file)
		}
		if w.pgPerf != nil {
			if file := w.pgPerf.finish(); file != "" {
				r.Profiles = append(r.Profiles, file)
			}
		}
		if file := finishHarnessProfile(w.selfProf); file != "" {
			r.Profiles = append(r.Profiles, file)
		}
	}
}

func (h *harness) pgCounters(db string) (commits, xid int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.admin.QueryRow(ctx, "SELECT coalesce((SELECT xact_commit FROM pg_stat_database WHERE datname = $1), 0), pg_snapshot_xmax(pg_current_snapshot())::text::bigint", db).Scan(&commits, &xid)
	return commits, xid
}

// brokerCounters is what a window reads from the broker's Prometheus
// exposition: pop claims summed over both paths, hand-offs, and the push
// group commit histograms' counts and sums.
type brokerCounters struct {
	claims, handOffs                                   int64
	pushCommits, pushCommitMessages, pushCommitSeconds float64
	pushWaits, pushWaitSeconds                         float64
}

// brokerCounters reads the broker's counters; ok is false when the broker did
// not answer (a window then reports none of them).
func (h *harness) brokerCounters() (c brokerCounters, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.brokerURL+"/metrics/prometheus", nil)
	if err != nil {
		return c, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return c, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return c, false
	}
	for _, line := range strings.Split(string(body), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(value, &v); err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(name, "lanes_pop_transactions_total{"):
			c.claims += int64(v)
		case name == "lanes_pop_hand_offs_total":
			c.handOffs += int64(v)
		case name == "lanes_push_commit_duration_seconds_count":
			c.pushCommits = v
		case name == "lanes_push_commit_duration_seconds_sum":
			c.pushCommitSeconds = v
		case name == "lanes_push_commit_messages_sum":
			c.pushCommitMessages = v
		case name == "lanes_push_commit_wait_seconds_count":
			c.pushWaits = v
		case name == "lanes_push_commit_wait_seconds_sum":
			c.pushWaitSeconds = v
		}
	}
	return c, true
}

func (h *harness) checkpointCounters() (checkpoints, buffers int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.admin.QueryRow(ctx, "SELECT checkpoints_timed + checkpoints_req, buffers_checkpoint FROM pg_stat_bgwriter").Scan(&checkpoints, &buffers)
	return checkpoints, buffers
}

// walLSN is the cluster's current WAL insert position ("" when it cannot be read).
func (h *harness) walLSN() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var lsn string
	_ = h.admin.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn)
	return lsn
}

// walBytesBetween is the WAL written from one position to the other (0 when
// either is unknown).
func (h *harness) walBytesBetween(from, to string) int64 {
	if from == "" || to == "" {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n int64
	_ = h.admin.QueryRow(ctx, "SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::bigint", from, to).Scan(&n)
	return n
}

// captureProfiles fetches a CPU profile and a delta allocation profile of the
// broker over the profile length and renders their top entries next to them.
func (h *harness) captureProfiles(ctx context.Context, name string) []string {
	secs := int(h.o.duration.Seconds())
	if secs < 1 {
		secs = 1
	}
	dir := filepath.Join(h.o.out, "profiles")
	_ = os.MkdirAll(dir, 0o755)
	var files []string
	type prof struct{ kind, path string }
	profs := []prof{{"cpu", fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs)}, {"alloc", fmt.Sprintf("/debug/pprof/allocs?seconds=%d", secs)}}
	done := make(chan string, len(profs))
	for _, p := range profs {
		go func(p prof) {
			file := filepath.Join(dir, fmt.Sprintf("%s-%s.pprof", name, p.kind))
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.broker.pprofAddr+p.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- ""
				return
			}
			defer resp.Body.Close()
			f, err := os.Create(file)
			if err != nil {
				done <- ""
				return
			}
			_, err = io.Copy(f, resp.Body)
			f.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				done <- ""
				return
			}
			args := []string{"tool", "pprof", "-top", "-nodecount=25"}
			if p.kind == "alloc" {
				args = append(args, "-sample_index=alloc_space")
			}
			args = append(args, h.o.brokerBin, file)
			out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput()
			if err == nil {
				_ = os.WriteFile(strings.TrimSuffix(file, ".pprof")+".txt", out, 0o644)
			}
			done <- file
		}(p)
	}
	for range profs {
		if f := <-done; f != "" {
			files = append(files, f)
		}
	}
	return files
}

// startHarnessProfile starts a CPU profile of the harness itself (the load
// generator shares the cores with what it measures, so its CPU per request
// is part of every figure); nil when one cannot be started.
func startHarnessProfile(dir, name string) *os.File {
	f, err := os.Create(filepath.Join(dir, name+"-harness-cpu.pprof"))
	if err != nil {
		return nil
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil
	}
	return f
}

// finishHarnessProfile stops the harness's CPU profile and renders its top
// entries beside it; it returns the profile's file, or "" without one.
func finishHarnessProfile(f *os.File) string {
	if f == nil {
		return ""
	}
	pprof.StopCPUProfile()
	f.Close()
	self, _ := os.Executable()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=25", self, f.Name()).CombinedOutput()
	if err == nil {
		_ = os.WriteFile(strings.TrimSuffix(f.Name(), ".pprof")+".txt", out, 0o644)
	}
	return f.Name()
}

// newPool opens a pgx pool of at most size connections.
func newPool(ctx context.Context, url string, size int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = size
	return pgxpool.NewWithConfig(ctx, cfg)
}

// activitySampler is a poor man's PostgreSQL profiler: every 20 ms it samples
// pg_stat_activity of one database and counts (query, wait event) of the
// active backends, so the report can say where PostgreSQL's time goes.
type activitySampler struct {
	stop   chan struct{}
	done   chan struct{}
	counts map[string]int
	total  int
}

func startActivitySampler(pool *pgxpool.Pool, db string) *activitySampler {
	s := &activitySampler{stop: make(chan struct{}), done: make(chan struct{}), counts: map[string]int{}}
	go func() {
		defer close(s.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
			rows, err := pool.Query(context.Background(), `SELECT left(regexp_replace(query, '\s+', ' ', 'g'), 110),
				coalesce(wait_event_type || ':' || wait_event, 'CPU')
				FROM pg_stat_activity WHERE state = 'active' AND datname = $1 AND pid <> pg_backend_pid()`, db)
			if err != nil {
				continue
			}
			s.total++
			for rows.Next() {
				var q, wait string
				if rows.Scan(&q, &wait) == nil {
					s.counts[wait+"  "+q]++
				}
			}
			rows.Close()
		}
	}()
	return s
}

// finish stops sampling and renders the top entries (mean active backends each).
func (s *activitySampler) finish() string {
	close(s.stop)
	<-s.done
	type kv struct {
		k string
		n int
	}
	var all []kv
	sum := 0
	for k, n := range s.counts {
		all = append(all, kv{k, n})
		sum += n
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n })
	var b strings.Builder
	fmt.Fprintf(&b, "pg_stat_activity samples: %d (every 20 ms); mean active backends %.2f\n", s.total, float64(sum)/float64(max(s.total, 1)))
	b.WriteString("mean-active  wait-event  query\n")
	for i, e := range all {
		if i == 20 {
			break
		}
		fmt.Fprintf(&b, "%10.2f  %s\n", float64(e.n)/float64(max(s.total, 1)), e.k)
	}
	return b.String()
}
