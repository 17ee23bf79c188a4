package main

import (
	"fmt"
	"sort"
	"strings"
)

// Target is one of issue 12's goals and how this run did against it.
type Target struct {
	Name   string  `json:"name"`
	Goal   string  `json:"goal"`
	Value  string  `json:"value"`
	Met    bool    `json:"met"`
	Known  bool    `json:"known"`  // false when the run lacked a scenario it needs
	Margin float64 `json:"margin"` // value / goal (or goal / value for upper bounds): ≥ 1 means met
}

func find(rs []Result, scenario, system string) *Result {
	for i := range rs {
		if rs[i].Scenario == scenario && rs[i].System == system && rs[i].Available {
			return &rs[i]
		}
	}
	return nil
}

// applyRatios prints each Lanes figure as a fraction of its yardstick.
func applyRatios(rs []Result) {
	b100 := find(rs, "ceiling-b100", "postgres")
	b1 := find(rs, "ceiling-b1", "postgres")
	river := find(rs, "shared", "river")
	for i := range rs {
		r := &rs[i]
		if r.System != "lanes" || !r.Available {
			continue
		}
		set := func(to *Result, label string, v float64) {
			if to != nil && v > 0 {
				r.RatioTo, r.Ratio = label, r.MsgPerSec/v
			}
		}
		switch r.Scenario {
		case "wake", "wake-autoack", "consume-fanout", "txn":
			// No yardstick matches: fan-out counts ten deliveries per stored
			// message, and a handoff is a pop, an ack and a push, not a row.
		case "push-b1":
			if b1 != nil {
				set(b1, "ceiling-b1", b1.MsgPerSec)
			}
		case "shared":
			if river != nil {
				set(river, "river", river.MsgPerSec)
			}
		default:
			if b100 != nil && !strings.HasPrefix(r.Scenario, "latency") {
				set(b100, "ceiling-b100", b100.MsgPerSec)
			}
		}
	}
}

func evaluateTargets(run *Run) []Target {
	rs := run.Results
	var ts []Target
	ratioTarget := func(name, scenario string, goal float64, goalText string) {
		t := Target{Name: name, Goal: goalText}
		if r := find(rs, scenario, "lanes"); r != nil && r.Ratio > 0 {
			t.Known = true
			t.Margin = r.Ratio / goal
			t.Met = t.Margin >= 1
			t.Value = fmt.Sprintf("%.0f msg/s = %.2f× %s", r.MsgPerSec, r.Ratio, r.RatioTo)
		} else {
			t.Value = "not measured"
		}
		ts = append(ts, t)
	}
	ratioTarget("push batch 100 vs ceiling", "push-b100", 0.35, "≥ 0.35 × ceiling-b100")
	ratioTarget("push batch 1 × 64 vs one message per commit", "push-b1", 5, "≥ 5 × ceiling-b1")
	// For reading the verdict: the same 64 producers against one writer that
	// commits each message before the next (no concurrency to share fsyncs).
	if serial, pb1 := find(rs, "ceiling-b1-serial", "postgres"), find(rs, "push-b1", "lanes"); serial != nil && pb1 != nil && serial.MsgPerSec > 0 {
		ts[len(ts)-1].Value += fmt.Sprintf("; %.1f× ceiling-b1-serial (one connection, %.0f msg/s)", pb1.MsgPerSec/serial.MsgPerSec, serial.MsgPerSec)
	}
	// And against what HTTP alone passes here: a goal above it is out of reach
	// for any broker behind Go's HTTP server on this machine.
	if floor, b1 := find(rs, "http-floor", "http"), find(rs, "ceiling-b1", "postgres"); floor != nil && floor.Available && floor.MsgPerSec > 0 && b1 != nil {
		ts[len(ts)-1].Value += fmt.Sprintf("; the goal, %.0f req/s, is %.2f× what a Go HTTP server that does nothing answers here (http-floor, %.0f req/s)",
			5*b1.MsgPerSec, 5*b1.MsgPerSec/floor.MsgPerSec, floor.MsgPerSec)
	}
	ratioTarget("pop+ack vs push ceiling", "consume-queue", 0.3, "≥ 0.3 × ceiling-b100")

	t := Target{Name: "parked long-poll wake-up p99", Goal: "< 10 ms"}
	if r := find(rs, "wake", "lanes"); r != nil && r.LatencyMs != nil {
		t.Known = true
		p99 := r.LatencyMs["p99"]
		t.Value = fmt.Sprintf("p99 %.2f ms push sent → delivered (%.2f ms push answered → delivered)", p99, r.AltLatencyMs["p99"])
		if a := find(rs, "wake-autoack", "lanes"); a != nil && a.LatencyMs != nil {
			t.Value += fmt.Sprintf("; autoAck pop %.2f ms", a.LatencyMs["p99"])
		}
		t.Margin = 10 / max(p99, 0.001)
		t.Met = p99 < 10
	} else {
		t.Value = "not measured"
	}
	ts = append(ts, t)

	t = Target{Name: "flat throughput 100 → 100,000 partitions", Goal: "min ≥ 0.8 × max"}
	var parts []*Result
	for i := range rs {
		if rs[i].Partitions >= 100 && rs[i].Available && rs[i].System == "lanes" {
			parts = append(parts, &rs[i])
		}
	}
	if len(parts) >= 2 {
		sort.Slice(parts, func(i, j int) bool { return parts[i].Partitions < parts[j].Partitions })
		lo, hi := parts[0].MsgPerSec, parts[0].MsgPerSec
		var vals []string
		for _, p := range parts {
			lo, hi = min(lo, p.MsgPerSec), max(hi, p.MsgPerSec)
			vals = append(vals, fmt.Sprintf("%s: %.0f", humanInt(p.Partitions), p.MsgPerSec))
		}
		t.Known = true
		t.Margin = lo / hi / 0.8
		t.Met = t.Margin >= 1
		t.Value = fmt.Sprintf("min/max = %.2f (%s msg/s)", lo/hi, strings.Join(vals, ", "))
		if parts[len(parts)-1].Partitions < 100000 {
			t.Value += "; 100,000 not measured in this run"
		}
	} else {
		t.Value = "not measured"
	}
	ts = append(ts, t)

	t = Target{Name: "ahead of River on the shared workload", Goal: "> 1 × River"}
	if r := find(rs, "shared", "lanes"); r != nil && r.RatioTo == "river" {
		t.Known = true
		t.Margin = r.Ratio
		t.Met = r.Ratio > 1
		river := find(rs, "shared", "river")
		t.Value = fmt.Sprintf("%.0f vs %.0f msg/s = %.2f×", r.MsgPerSec, river.MsgPerSec, r.Ratio)
	} else {
		t.Value = "not measured"
	}
	ts = append(ts, t)

	t = Target{Name: "broker RSS under load", Goal: "< 100 MB"}
	if run.BrokerPeakRSSMB > 0 && ranLanesLoad(rs) {
		t.Known = true
		t.Margin = 100 / run.BrokerPeakRSSMB
		t.Met = run.BrokerPeakRSSMB < 100
		t.Value = fmt.Sprintf("peak %.0f MB (VmHWM over the whole run)", run.BrokerPeakRSSMB)
	} else if run.BrokerPeakRSSMB > 0 {
		t.Value = "not measured (no Lanes load scenario ran)"
	} else {
		t.Value = "not measured (external broker)"
	}
	ts = append(ts, t)

	return append(ts, lossTarget(rs))
}

// ranLanesLoad says an available Lanes scenario loaded the broker: the
// wake-up rounds alone do not, and the peak RSS of an idle broker says
// nothing about the target.
func ranLanesLoad(rs []Result) bool {
	for _, r := range rs {
		if r.System == "lanes" && r.Available && !strings.HasPrefix(r.Scenario, "wake") {
			return true
		}
	}
	return false
}

// lossCount sums one system's tallies.
type lossCount struct {
	system                                    string
	lost, unexpected, duplicated, redelivered int64
}

func (c lossCount) String() string {
	s := fmt.Sprintf("%s: %d lost", c.system, c.lost)
	if c.unexpected > 0 {
		s += fmt.Sprintf(", %d never pushed arrived", c.unexpected)
	}
	s += fmt.Sprintf(", %d duplicated", c.duplicated)
	if c.redelivered > 0 {
		s += fmt.Sprintf(", %d redelivered after lease expiry", c.redelivered)
	}
	return s
}

// lossTarget sums lost, duplicated and redelivered per system over the
// scenarios that checked them; the target is judged on Lanes' and is not
// measured unless a Lanes scenario with a tally ran.
func lossTarget(rs []Result) Target {
	t := Target{Name: "messages lost", Goal: "0"}
	var counts []*lossCount
	bySystem := map[string]*lossCount{}
	for _, r := range rs {
		if !r.LossChecked {
			continue
		}
		c := bySystem[r.System]
		if c == nil {
			c = &lossCount{system: r.System}
			bySystem[r.System] = c
			counts = append(counts, c)
		}
		c.lost += r.Lost
		c.unexpected += r.Unexpected
		c.duplicated += r.Duplicated
		c.redelivered += r.Redelivered
	}
	lanes := bySystem["lanes"]
	if lanes == nil {
		t.Value = "not measured (no Lanes scenario with a tally ran)"
		return t
	}
	parts := make([]string, len(counts))
	for i, c := range counts {
		parts[i] = c.String()
	}
	t.Known = true
	t.Met = lanes.lost == 0 && lanes.unexpected == 0
	if t.Met {
		t.Margin = 1
	}
	t.Value = strings.Join(parts, "; ")
	return t
}

// fmtChecked prints a tally's count, or "—" where the scenario kept none.
func fmtChecked(r Result, n int64) string {
	if !r.LossChecked {
		return "—"
	}
	return fmt.Sprint(n)
}

// fmtLost prints lost, and the messages that arrived though never pushed.
func fmtLost(r Result) string {
	s := fmtChecked(r, r.Lost)
	if r.LossChecked && r.Unexpected > 0 {
		s += fmt.Sprintf(" (+%d never pushed)", r.Unexpected)
	}
	return s
}

// fmtPGCPU prints PostgreSQL's CPU, or "—" when its postmaster is unknown.
func fmtPGCPU(r Result) string {
	if !r.PGCPUKnown {
		return "—"
	}
	return fmt.Sprintf("%.2f", r.PGCPUCores)
}

func humanInt(n int) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func fmtLat(m map[string]float64) string {
	if m == nil {
		return ""
	}
	return fmt.Sprintf("%.1f / %.1f / %.1f", m["p50"], m["p99"], m["p999"])
}

// markdown renders the run as the tables docs/benchmarks.md shows.
func markdown(run *Run) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Run of %s, `%s`, %.0f s; load average %.2f at start, %.2f at end.\n",
		run.Started.Format("2006-01-02 15:04 MST"), run.Command, run.Seconds, run.LoadAvgStart, run.LoadAvgEnd)
	pg := run.PostgreSQL
	collation := ""
	if c := pg["database_collation"]; c != "" {
		collation = ", database collation " + c
	}
	fmt.Fprintf(&b, "PostgreSQL %s: fsync=%s, synchronous_commit=%s, full_page_writes=%s, shared_buffers=%s%s. Broker %s, %s. Machine: %s × %s, %s.\n\n",
		pg["server_version"], pg["fsync"], pg["synchronous_commit"], pg["full_page_writes"], pg["shared_buffers"], collation, run.BrokerCommit, run.BrokerSettings,
		run.Machine["cpus"], run.Machine["cpu"], run.Machine["memory"])
	if p := run.Hops; p != nil {
		fmt.Fprintf(&b, "Round trips on this machine (p50, %d samples each; idle = 20 ms apart): HTTP `GET /status` %.2f ms back to back, %.2f ms idle (p99 %.2f); one-row durable commit %.2f ms back to back, %.2f ms idle (p99 %.2f).\n\n",
			hopSamples, p.HTTPBusyP50Ms, p.HTTPIdleP50Ms, p.HTTPIdleP99Ms, p.CommitBusyP50Ms, p.CommitIdleP50Ms, p.CommitIdleP99Ms)
	}
	b.WriteString("| scenario | system | msg/s | vs | latency p50 / p99 / p999 ms | lost | dup | redelivered | 5xx / 429 | broker CPU (cores) | broker peak RSS MB | PG CPU (cores) | harness CPU | PG write tx/s (xid) | load |\n")
	b.WriteString("| --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range run.Results {
		if !r.Available {
			fmt.Fprintf(&b, "| %s | %s | — | | %s | %s | %s | %s | | | | | | | |\n", r.Scenario, r.System, strings.ReplaceAll(r.Note, "|", "/"),
				fmtLost(r), fmtChecked(r, r.Duplicated), fmtChecked(r, r.Redelivered))
			continue
		}
		rate := fmt.Sprintf("%.0f", r.MsgPerSec)
		if r.TxPerSec > 0 && r.System == "lanes" {
			rate = fmt.Sprintf("%.0f tx/s", r.TxPerSec)
		} else if strings.HasPrefix(r.Scenario, "wake") {
			rate = "—"
		}
		vs := ""
		if r.Ratio > 0 {
			vs = fmt.Sprintf("%.2f× %s", r.Ratio, r.RatioTo)
		}
		lat := fmtLat(r.LatencyMs)
		rss, bcpu := "", ""
		if r.System == "lanes" && r.BrokerPeakRSSMB > 0 {
			rss, bcpu = fmt.Sprintf("%.0f", r.BrokerPeakRSSMB), fmt.Sprintf("%.2f", r.BrokerCPUCores)
		}
		if r.System == "http" {
			bcpu = fmt.Sprintf("%.2f", r.BrokerCPUCores) // the floor's server
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %d / %d | %s | %s | %s | %.2f | %.0f | %.2f |\n",
			r.Scenario, r.System, rate, vs, lat, fmtLost(r), fmtChecked(r, r.Duplicated), fmtChecked(r, r.Redelivered), r.ServerErrors, r.Throttled, bcpu, rss, fmtPGCPU(r), r.HarnessCPUCores, r.PGWriteXactsPerSec, r.LoadAvg)
	}
	b.WriteString("\nTargets (issue 12):\n\n| target | goal | this run | met |\n| --- | --- | --- | --- |\n")
	for _, t := range run.Targets {
		met := "no"
		switch {
		case !t.Known:
			met = "not measured"
		case t.Met:
			met = "yes"
		}
		if t.Known && !t.Met && t.Margin > 0 {
			met += fmt.Sprintf(" (%.0f%% of goal)", 100*t.Margin)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.Name, t.Goal, t.Value, met)
	}
	if len(run.ServerErrors) > 0 {
		b.WriteString("\n5xx answers during the run (each retried up to 3 times, as the SDKs do):\n\n")
		keys := make([]string, 0, len(run.ServerErrors))
		for k := range run.ServerErrors {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "- %d × `%s`\n", run.ServerErrors[k], k)
		}
	}
	b.WriteString("\nScenario details:\n\n")
	for _, r := range run.Results {
		fmt.Fprintf(&b, "- **%s** (%s): %s", r.Scenario, r.System, r.Description)
		if r.AltLatencyMs != nil {
			fmt.Fprintf(&b, " — alt p50/p99/p999 %s ms", fmtLat(r.AltLatencyMs))
		}
		if r.AckLatencyMs != nil {
			fmt.Fprintf(&b, " — to ack p50/p99/p999 %s ms", fmtLat(r.AckLatencyMs))
		}
		if r.PushedPerSec > 0 {
			fmt.Fprintf(&b, " — pushed %.0f msg/s", r.PushedPerSec)
		}
		if r.Buffered > 0 {
			fmt.Fprintf(&b, " — %d pushes answered buffered (spooled)", r.Buffered)
		}
		if r.Note != "" && r.Available {
			fmt.Fprintf(&b, " — note: %s", r.Note)
		}
		if r.PopClaims+r.PopHandOffs > 0 {
			fmt.Fprintf(&b, " — pop claims %d own + %d handed off (run in a push's or an ack's round trip)", r.PopClaims, r.PopHandOffs)
			if r.Messages > 0 && r.LatencyMs == nil {
				fmt.Fprintf(&b, " (%.2f per 100 messages delivered)", float64(r.PopClaims+r.PopHandOffs)*100/float64(r.Messages))
			}
		}
		if r.PushCommits > 0 && r.Seconds > 0 {
			fmt.Fprintf(&b, " — push group commits %.0f/s, %.1f messages each, %.2f ms each, commits running %.0f%% of the window",
				float64(r.PushCommits)/r.Seconds, float64(r.PushCommitMessages)/float64(r.PushCommits),
				r.PushCommitSeconds*1000/float64(r.PushCommits), 100*r.PushCommitSeconds/r.Seconds)
			if r.PushWaits > 0 {
				fmt.Fprintf(&b, ", a push waiting %.2f ms for its commit on average", r.PushWaitSeconds*1000/float64(r.PushWaits))
			}
		}
		if text := roundsText(r); text != "" {
			fmt.Fprintf(&b, " — %s", text)
		}
		fmt.Fprintf(&b, " — pg_stat_database commits/s %.0f (flushed by backends about once a second)", r.PGCommitsPerSec)
		if r.WALBytes > 0 && r.Messages > 0 {
			fmt.Fprintf(&b, " — WAL %.0f bytes/msg (%s → %s)", float64(r.WALBytes)/float64(r.Messages), r.WALStartLSN, r.WALEndLSN)
		}
		if r.Checkpoints > 0 || r.CheckpointBuffers > 0 {
			fmt.Fprintf(&b, " — checkpoints during the window: %d started, %d buffers written", r.Checkpoints, r.CheckpointBuffers)
		}
		b.WriteString("\n")
	}
	return b.String()
}
