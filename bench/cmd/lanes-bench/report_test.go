package main

import (
	"strings"
	"testing"
	"time"
)

// yardsticks are the ceiling and River results the Lanes figures are compared with.
func yardsticks() []Result {
	return []Result{
		{Scenario: "ceiling-b100", System: "postgres", Available: true, MsgPerSec: 100000},
		// TxPerSec differs from MsgPerSec on purpose: txn must be compared with transactions
		{Scenario: "ceiling-b1", System: "postgres", Available: true, MsgPerSec: 1000, TxPerSec: 800},
		{Scenario: "ceiling-b1-serial", System: "postgres", Available: true, MsgPerSec: 500},
		{Scenario: "shared", System: "river", Available: true, MsgPerSec: 5000},
	}
}

func byScenario(t *testing.T, rs []Result, scenario, system string) Result {
	t.Helper()
	for _, r := range rs {
		if r.Scenario == scenario && r.System == system {
			return r
		}
	}
	t.Fatalf("no result %s/%s", scenario, system)
	return Result{}
}

func TestApplyRatiosComparesEachLanesFigureWithItsYardstick(t *testing.T) {
	rs := append(yardsticks(),
		Result{Scenario: "push-b100", System: "lanes", Available: true, MsgPerSec: 40000},
		Result{Scenario: "push-b1", System: "lanes", Available: true, MsgPerSec: 6000},
		Result{Scenario: "consume-queue", System: "lanes", Available: true, MsgPerSec: 30000},
		Result{Scenario: "parts-100", System: "lanes", Available: true, Partitions: 100, MsgPerSec: 20000},
		Result{Scenario: "shared", System: "lanes", Available: true, MsgPerSec: 6000},
	)
	applyRatios(rs)
	for _, c := range []struct {
		scenario string
		to       string
		ratio    float64
	}{
		{"push-b100", "ceiling-b100", 0.4},
		{"push-b1", "ceiling-b1", 6},
		{"consume-queue", "ceiling-b100", 0.3},
		{"parts-100", "ceiling-b100", 0.2},
		{"shared", "river", 1.2},
	} {
		r := byScenario(t, rs, c.scenario, "lanes")
		if r.RatioTo != c.to || !near(r.Ratio, c.ratio) {
			t.Errorf("%s: ratio %.3f× %q, want %.3f× %q", c.scenario, r.Ratio, r.RatioTo, c.ratio, c.to)
		}
	}
	// the yardsticks themselves get no ratio
	if r := byScenario(t, rs, "ceiling-b100", "postgres"); r.Ratio != 0 || r.RatioTo != "" {
		t.Errorf("ceiling-b100 got a ratio: %.2f× %q", r.Ratio, r.RatioTo)
	}
}

// Fan-out counts ten deliveries per stored message and a handoff is a pop,
// an ack and a push: no ceiling is their yardstick, so they get no ratio.
func TestApplyRatiosLeavesLatencyWakeFanoutTxnAndFailedResultsAlone(t *testing.T) {
	rs := append(yardsticks(),
		Result{Scenario: "latency-250", System: "lanes", Available: true, MsgPerSec: 250},
		Result{Scenario: "wake", System: "lanes", Available: true, MsgPerSec: 10},
		Result{Scenario: "wake-autoack", System: "lanes", Available: true, MsgPerSec: 10},
		Result{Scenario: "consume-fanout", System: "lanes", Available: true, MsgPerSec: 50000},
		Result{Scenario: "txn", System: "lanes", Available: true, MsgPerSec: 2000, TxPerSec: 2000},
		Result{Scenario: "consume-queue", System: "lanes", Available: false, MsgPerSec: 50000},
	)
	applyRatios(rs)
	for _, s := range []string{"latency-250", "wake", "wake-autoack", "consume-fanout", "txn", "consume-queue"} {
		if r := byScenario(t, rs, s, "lanes"); r.Ratio != 0 || r.RatioTo != "" {
			t.Errorf("%s got a ratio: %.2f× %q", s, r.Ratio, r.RatioTo)
		}
	}
}

func TestApplyRatiosNeedsAnAvailableYardstick(t *testing.T) {
	rs := []Result{
		{Scenario: "ceiling-b100", System: "postgres", Available: false, MsgPerSec: 100000}, // failed
		{Scenario: "ceiling-b1", System: "postgres", Available: true, MsgPerSec: 0},         // measured nothing
		{Scenario: "push-b100", System: "lanes", Available: true, MsgPerSec: 40000},
		{Scenario: "push-b1", System: "lanes", Available: true, MsgPerSec: 6000},
		{Scenario: "shared", System: "lanes", Available: true, MsgPerSec: 6000},
	}
	applyRatios(rs)
	for _, r := range rs {
		if r.Ratio != 0 || r.RatioTo != "" {
			t.Errorf("%s/%s got a ratio %.2f× %q without a usable yardstick", r.Scenario, r.System, r.Ratio, r.RatioTo)
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func targetsByName(ts []Target) map[string]Target {
	m := map[string]Target{}
	for _, t := range ts {
		m[t.Name] = t
	}
	return m
}

// targetNames are evaluateTargets' targets in the order it lists them.
var targetNames = []string{
	"push batch 100 vs ceiling",
	"push batch 1 × 64 vs one message per commit",
	"pop+ack vs push ceiling",
	"parked long-poll wake-up p99",
	"flat throughput 100 → 100,000 partitions",
	"ahead of River on the shared workload",
	"broker RSS under load",
	"messages lost",
}

// goodRun meets every target.
func goodRun() *Run {
	rs := append(yardsticks(),
		Result{Scenario: "push-b100", System: "lanes", Available: true, MsgPerSec: 40000, LossChecked: true},
		Result{Scenario: "push-b1", System: "lanes", Available: true, MsgPerSec: 6000, LossChecked: true},
		Result{Scenario: "consume-queue", System: "lanes", Available: true, MsgPerSec: 31000, LossChecked: true, Redelivered: 4},
		Result{Scenario: "wake", System: "lanes", Available: true, LatencyMs: map[string]float64{"p50": 2, "p99": 5, "p999": 8}, AltLatencyMs: map[string]float64{"p99": 3}},
		Result{Scenario: "wake-autoack", System: "lanes", Available: true, LatencyMs: map[string]float64{"p99": 7}},
		Result{Scenario: "parts-1", System: "lanes", Available: true, Partitions: 1, MsgPerSec: 1000}, // below 100: not in the flatness check
		Result{Scenario: "parts-100", System: "lanes", Available: true, Partitions: 100, MsgPerSec: 20000},
		Result{Scenario: "parts-10000", System: "lanes", Available: true, Partitions: 10000, MsgPerSec: 19000},
		Result{Scenario: "parts-100000", System: "lanes", Available: true, Partitions: 100000, MsgPerSec: 17000},
		Result{Scenario: "shared", System: "lanes", Available: true, MsgPerSec: 6000},
		// the ceiling's "lost" is not a broker's loss
		Result{Scenario: "ceiling-b1-notify", System: "postgres", Available: true, MsgPerSec: 900, Lost: 7},
	)
	applyRatios(rs)
	return &Run{Results: rs, BrokerPeakRSSMB: 60}
}

func TestEvaluateTargetsMeetsEveryTargetOfAGoodRun(t *testing.T) {
	ts := evaluateTargets(goodRun())
	if len(ts) != len(targetNames) {
		t.Fatalf("%d targets, want %d: %+v", len(ts), len(targetNames), ts)
	}
	for i, name := range targetNames {
		if ts[i].Name != name {
			t.Errorf("target %d is %q, want %q", i, ts[i].Name, name)
		}
		if !ts[i].Known || !ts[i].Met || ts[i].Margin < 1 {
			t.Errorf("%q: known %v met %v margin %.2f (%s), want met with margin ≥ 1", ts[i].Name, ts[i].Known, ts[i].Met, ts[i].Margin, ts[i].Value)
		}
	}
	m := targetsByName(ts)
	for name, want := range map[string]string{
		"push batch 100 vs ceiling":                   "40000 msg/s = 0.40× ceiling-b100",
		"push batch 1 × 64 vs one message per commit": "6000 msg/s = 6.00× ceiling-b1; 12.0× ceiling-b1-serial (one connection, 500 msg/s)",
		"pop+ack vs push ceiling":                     "31000 msg/s = 0.31× ceiling-b100",
		"parked long-poll wake-up p99":                "p99 5.00 ms push sent → delivered (3.00 ms push answered → delivered); autoAck pop 7.00 ms",
		"flat throughput 100 → 100,000 partitions":    "min/max = 0.85 (100: 20000, 10,000: 19000, 100,000: 17000 msg/s)",
		"ahead of River on the shared workload":       "6000 vs 5000 msg/s = 1.20×",
		"broker RSS under load":                       "peak 60 MB (VmHWM over the whole run)",
		"messages lost":                               "lanes: 0 lost, 0 duplicated, 4 redelivered after lease expiry",
	} {
		if got := m[name].Value; got != want {
			t.Errorf("%q value\n got %q\nwant %q", name, got, want)
		}
	}
	if got := m["push batch 100 vs ceiling"].Margin; !near(got, 0.4/0.35) {
		t.Errorf("push-b100 margin = %v, want 0.4/0.35", got)
	}
}

func TestEvaluateTargetsMissesEveryTargetOfABadRun(t *testing.T) {
	rs := append(yardsticks(),
		Result{Scenario: "push-b100", System: "lanes", Available: true, MsgPerSec: 30000},                                                // 0.30 < 0.35
		Result{Scenario: "push-b1", System: "lanes", Available: true, MsgPerSec: 4000},                                                   // 4 < 5
		Result{Scenario: "consume-queue", System: "lanes", Available: true, MsgPerSec: 20000, LossChecked: true, Lost: 3, Duplicated: 2}, // 0.2 < 0.3
		Result{Scenario: "wake", System: "lanes", Available: true, LatencyMs: map[string]float64{"p99": 12}},
		Result{Scenario: "parts-100", System: "lanes", Available: true, Partitions: 100, MsgPerSec: 20000},
		Result{Scenario: "parts-10000", System: "lanes", Available: true, Partitions: 10000, MsgPerSec: 10000}, // 0.5 < 0.8
		Result{Scenario: "shared", System: "lanes", Available: true, MsgPerSec: 4000},                          // 0.8 × River
	)
	applyRatios(rs)
	run := &Run{Results: rs, BrokerPeakRSSMB: 150}
	m := targetsByName(evaluateTargets(run))
	for _, name := range targetNames {
		tg := m[name]
		if !tg.Known || tg.Met {
			t.Errorf("%q: known %v met %v (%s), want known and missed", name, tg.Known, tg.Met, tg.Value)
		}
		if tg.Margin >= 1 {
			t.Errorf("%q: margin %.2f on a missed target", name, tg.Margin)
		}
	}
	for name, want := range map[string]float64{
		"push batch 100 vs ceiling":                   0.3 / 0.35,
		"push batch 1 × 64 vs one message per commit": 4.0 / 5,
		"pop+ack vs push ceiling":                     0.2 / 0.3,
		"parked long-poll wake-up p99":                10.0 / 12,
		"flat throughput 100 → 100,000 partitions":    0.5 / 0.8,
		"ahead of River on the shared workload":       0.8,
		"broker RSS under load":                       100.0 / 150,
		"messages lost":                               0,
	} {
		if got := m[name].Margin; !near(got, want) {
			t.Errorf("%q margin = %v, want %v", name, got, want)
		}
	}
	if got, want := m["messages lost"].Value, "lanes: 3 lost, 2 duplicated"; got != want {
		t.Errorf("messages lost value = %q, want %q", got, want)
	}
	if got := m["flat throughput 100 → 100,000 partitions"].Value; !strings.HasSuffix(got, "; 100,000 not measured in this run") {
		t.Errorf("flatness value %q does not say 100,000 partitions were not measured", got)
	}
}

func TestEvaluateTargetsOfAnEmptyRunAreNotMeasured(t *testing.T) {
	m := targetsByName(evaluateTargets(&Run{}))
	// nothing ran, so nothing was checked: "0 lost" would claim a check
	for _, name := range targetNames {
		if tg := m[name]; tg.Known || tg.Met || !strings.HasPrefix(tg.Value, "not measured") {
			t.Errorf("%q: known %v met %v value %q, want not measured", name, tg.Known, tg.Met, tg.Value)
		}
	}
}

// Only a Lanes scenario with a tally measures loss, and only a Lanes load
// scenario the broker's RSS: ceilings, the HTTP floor and the wake-up rounds
// alone leave both targets not measured.
func TestEvaluateTargetsOfARunWithoutLanesLoadLeaveLossAndRSSNotMeasured(t *testing.T) {
	run := &Run{BrokerPeakRSSMB: 20, Results: append(yardsticks(),
		Result{Scenario: "http-floor", System: "http", Available: true, MsgPerSec: 80000},
		Result{Scenario: "wake", System: "lanes", Available: true, LatencyMs: map[string]float64{"p99": 5}},
	)}
	m := targetsByName(evaluateTargets(run))
	for name, want := range map[string]string{
		"messages lost":         "not measured (no Lanes scenario with a tally ran)",
		"broker RSS under load": "not measured (no Lanes load scenario ran)",
	} {
		if tg := m[name]; tg.Known || tg.Met || tg.Value != want {
			t.Errorf("%q: known %v met %v value %q, want %q", name, tg.Known, tg.Met, tg.Value, want)
		}
	}
}

// Loss is summed per system; a message that arrived though never pushed is
// named and misses the target, and River's tally does not count as Lanes'.
func TestLossTargetSumsPerSystemAndReportsMessagesNeverPushed(t *testing.T) {
	tg := lossTarget([]Result{
		{Scenario: "push-b1", System: "lanes", LossChecked: true, Duplicated: 1},
		{Scenario: "latency-250", System: "lanes", LossChecked: true, Unexpected: 2, Redelivered: 3},
		{Scenario: "shared", System: "river", LossChecked: true, Lost: 4},
		{Scenario: "ceiling-b1", System: "postgres", Lost: 9},
	})
	want := "lanes: 0 lost, 2 never pushed arrived, 1 duplicated, 3 redelivered after lease expiry; river: 4 lost, 0 duplicated"
	if !tg.Known || tg.Met || tg.Value != want {
		t.Fatalf("loss target known %v met %v value\n %q\nwant %q", tg.Known, tg.Met, tg.Value, want)
	}
	if tg := lossTarget([]Result{{Scenario: "shared", System: "river", LossChecked: true, Lost: 4}, {Scenario: "push-b1", System: "lanes", LossChecked: true}}); !tg.Met {
		t.Fatalf("River's loss failed Lanes' target: %+v", tg)
	}
}

func TestEvaluateTargetsFlatnessNeedsTwoPartitionCountsOfAtLeastAHundred(t *testing.T) {
	run := &Run{Results: []Result{
		{Scenario: "parts-1", System: "lanes", Available: true, Partitions: 1, MsgPerSec: 1000},
		{Scenario: "parts-100", System: "lanes", Available: true, Partitions: 100, MsgPerSec: 20000},
	}}
	if tg := targetsByName(evaluateTargets(run))["flat throughput 100 → 100,000 partitions"]; tg.Known {
		t.Fatalf("flatness judged from one partition count ≥ 100: %+v", tg)
	}
}

func TestHumanIntGroupsThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 7: "7", 100: "100", 1000: "1,000", 10000: "10,000", 100000: "100,000", 1234567: "1,234,567"} {
		if got := humanInt(n); got != want {
			t.Errorf("humanInt(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestFmtLatShowsP50P99P999WithOneDecimal(t *testing.T) {
	if got := fmtLat(map[string]float64{"p50": 1.234, "p99": 9.96, "p999": 20, "max": 99}); got != "1.2 / 10.0 / 20.0" {
		t.Fatalf("fmtLat = %q", got)
	}
	if got := fmtLat(nil); got != "" {
		t.Fatalf("fmtLat(nil) = %q, want empty", got)
	}
}

func TestMarkdownHasARowPerResultAndTheTargetsTable(t *testing.T) {
	run := goodRun()
	run.Started = time.Date(2025, 1, 2, 3, 4, 0, 0, time.UTC)
	run.Command = "go run ./bench/cmd/lanes-bench -short"
	run.Results = append(run.Results,
		Result{Scenario: "txn", System: "lanes", Available: true, MsgPerSec: 1500, TxPerSec: 1500, LatencyMs: map[string]float64{"p50": 1, "p99": 2, "p999": 3}},
		Result{Scenario: "shared", System: "river", Available: false, Note: "error: a | b"},
	)
	// one missed target, to see the share of the goal it reached
	run.BrokerPeakRSSMB = 125
	run.Targets = evaluateTargets(run)
	run.ServerErrors = map[string]int{"POST /api/v1/push: 500 boom": 3}
	md := markdown(run)

	lines := strings.Split(md, "\n")
	rows := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "| ") && !strings.HasPrefix(l, "| scenario ") && !strings.HasPrefix(l, "| target ") && !strings.HasPrefix(l, "| --- ") {
			rows++
		}
	}
	if want := len(run.Results) + len(run.Targets); rows != want {
		t.Errorf("%d table rows, want %d results + %d targets:\n%s", rows, len(run.Results), len(run.Targets), md)
	}
	for _, want := range []string{
		"Run of 2025-01-02 03:04 UTC, `go run ./bench/cmd/lanes-bench -short`",
		"| scenario | system | msg/s | vs |",
		"| push-b100 | lanes | 40000 | 0.40× ceiling-b100 | ",
		"| ceiling-b100 | postgres | 100000 |  | ",
		"| txn | lanes | 1500 tx/s | ",
		"| 1.0 / 2.0 / 3.0 | — | — | — | 0 / 0 |", // txn kept no tally here
		"| push-b100 | lanes | 40000 | 0.40× ceiling-b100 |  | 0 | 0 | 0 | 0 / 0 |",
		"| PG write tx/s (xid) |",
		"| wake | lanes | — | ",
		"| shared | river | — | | error: a / b |", // a | in the note must not break the table
		"Targets (issue 12):",
		"| target | goal | this run | met |",
		"| push batch 100 vs ceiling | ≥ 0.35 × ceiling-b100 | 40000 msg/s = 0.40× ceiling-b100 | yes |",
		"| broker RSS under load | < 100 MB | peak 125 MB (VmHWM over the whole run) | no (80% of goal) |",
		"| messages lost | 0 | lanes: 0 lost, 0 duplicated, 4 redelivered after lease expiry | yes |",
		"- 3 × `POST /api/v1/push: 500 boom`",
		"- **push-b100** (lanes): ",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestMarkdownSaysWhichTargetsWereNotMeasured(t *testing.T) {
	run := &Run{}
	run.Targets = evaluateTargets(run)
	md := markdown(run)
	if !strings.Contains(md, "| push batch 100 vs ceiling | ≥ 0.35 × ceiling-b100 | not measured | not measured |") {
		t.Fatalf("markdown of an empty run:\n%s", md)
	}
	if strings.Contains(md, "5xx answers during the run") {
		t.Errorf("markdown lists 5xx answers of a run that had none:\n%s", md)
	}
}

// What a run did not measure prints "—", not a 0 that reads as measured:
// PostgreSQL's CPU without its postmaster's pid (-pg-url), lost and
// duplicated of a scenario that kept no tally.
func TestMarkdownPrintsADashForWhatWasNotMeasured(t *testing.T) {
	run := &Run{Results: []Result{
		{Scenario: "push-b100", System: "lanes", Available: true, MsgPerSec: 40000, LossChecked: true, Lost: 2, Unexpected: 1, PGCPUKnown: true, PGCPUCores: 0.5, PGWriteXactsPerSec: 700, PGCommitsPerSec: 650},
		{Scenario: "ceiling-b100", System: "postgres", Available: true, MsgPerSec: 100000, PGWriteXactsPerSec: 8000},
	}}
	md := markdown(run)
	for _, want := range []string{
		"| push-b100 | lanes | 40000 |  |  | 2 (+1 never pushed) | 0 | 0 | 0 / 0 |  |  | 0.50 | 0.00 | 700 | 0.00 |",
		"| ceiling-b100 | postgres | 100000 |  |  | — | — | — | 0 / 0 |  |  | — | 0.00 | 8000 | 0.00 |",
		"pg_stat_database commits/s 650",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

// The details give a window's WAL per message and its LSN range (for
// pg_waldump), and say nothing of WAL where the window read none.
func TestMarkdownGivesTheWindowsWALPerMessage(t *testing.T) {
	run := &Run{Results: []Result{
		{Scenario: "push-b1", System: "lanes", Available: true, Messages: 2000, WALBytes: 1_830_000, WALStartLSN: "0/2610700", WALEndLSN: "0/27C8F70"},
		{Scenario: "ceiling-b100", System: "postgres", Available: true, Messages: 1000},
	}}
	md := markdown(run)
	if want := "— WAL 915 bytes/msg (0/2610700 → 0/27C8F70)"; !strings.Contains(md, want) {
		t.Errorf("markdown lacks %q:\n%s", want, md)
	}
	if strings.Count(md, "WAL ") != 1 {
		t.Errorf("a window without WAL figures shows one:\n%s", md)
	}
}

func TestMarkdownGivesTheWindowsPushGroupCommits(t *testing.T) {
	run := &Run{Results: []Result{
		{Scenario: "push-b1", System: "lanes", Available: true, Messages: 20000, Seconds: 2,
			PushCommits: 800, PushCommitMessages: 20000, PushCommitSeconds: 1.9, PushWaits: 20000, PushWaitSeconds: 18},
		{Scenario: "ceiling-b100", System: "postgres", Available: true, Messages: 1000, Seconds: 2},
	}}
	md := markdown(run)
	want := "— push group commits 400/s, 25.0 messages each, 2.38 ms each, commits running 95% of the window, a push waiting 0.90 ms for its commit on average"
	if !strings.Contains(md, want) {
		t.Errorf("markdown lacks %q:\n%s", want, md)
	}
	if strings.Count(md, "push group commits") != 1 {
		t.Errorf("a window without push commits shows them:\n%s", md)
	}
}
