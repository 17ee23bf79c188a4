package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// pgPerf samples PostgreSQL's CPU with Linux perf during a window, so a
// profile run says which executor phases PostgreSQL's CPU goes to (plan
// start-up, scans, commits, page faults), not only which statements were
// active (activitySampler). It records the whole machine and reports the
// postgres processes only: backends come and go, so a pid list would miss
// some. Without perf on PATH, or without the permission to record every CPU,
// the window has no PostgreSQL profile and says why.
type pgPerf struct {
	cmd  *exec.Cmd
	data string
	out  string
	why  string
}

// startPGPerf begins recording; the result is written by finish.
func startPGPerf(dir, name string) *pgPerf {
	p := &pgPerf{data: filepath.Join(dir, name+"-pg-perf.data"), out: filepath.Join(dir, name+"-pg-perf.txt")}
	bin, err := exec.LookPath("perf")
	if err != nil {
		p.why = "perf is not installed (Debian: apt-get install linux-perf)"
		return p
	}
	// 499 Hz: a few thousand samples per 10 s window, little overhead.
	p.cmd = exec.CommandContext(context.Background(), bin, "record", "-a", "-g", "-F", "499", "-o", p.data, "--quiet")
	if err := p.cmd.Start(); err != nil {
		p.why = "perf record: " + err.Error()
		p.cmd = nil
	}
	return p
}

// finish stops the recording and writes the report; it returns the report's
// path, or "" when there is none.
func (p *pgPerf) finish() string {
	if p.cmd != nil {
		_ = p.cmd.Process.Signal(os.Interrupt)
		// perf exits non-zero on SIGINT; its data file is what tells.
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
		defer func() { _ = os.Remove(p.data) }()
		report, err := perfReport(p.data)
		if err != nil {
			p.why = err.Error()
		} else if err := os.WriteFile(p.out, []byte(report), 0o644); err != nil {
			return ""
		} else {
			return p.out
		}
	}
	if p.why != "" {
		_ = os.WriteFile(p.out, []byte("no PostgreSQL CPU profile: "+p.why+"\n"), 0o644)
		return p.out
	}
	return ""
}

// perfReport renders the samples three ways: by process (PostgreSQL's share
// of the machine beside the broker's and the harness's), then PostgreSQL's by
// function including callees (where its time goes by phase, e.g.
// ExecutorStart against ExecutorRun) and by function alone (the hottest
// code), as percentages of PostgreSQL's samples. Functions the stripped
// binary names only by address are left out.
func perfReport(data string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var b strings.Builder
	for _, view := range []struct {
		title string
		args  []string
		lines int
	}{
		{"CPU samples by process, % of the machine's", []string{"--no-children", "--sort", "comm", "--percent-limit", "1"}, 10},
		{"PostgreSQL by function including callees, % of PostgreSQL's samples",
			[]string{"--children", "--comm", "postgres", "--percentage", "relative", "--sort", "dso,sym", "--percent-limit", "1"}, 50},
		{"PostgreSQL by function alone, % of PostgreSQL's samples",
			[]string{"--no-children", "--comm", "postgres", "--percentage", "relative", "--sort", "dso,sym", "--percent-limit", "0.5"}, 30},
	} {
		args := append([]string{"report", "-i", data, "--stdio", "-g", "none"}, view.args...)
		out, err := exec.CommandContext(ctx, "perf", args...).Output()
		if err != nil {
			return "", fmt.Errorf("perf report: %w", err)
		}
		fmt.Fprintf(&b, "%s\n", view.title)
		b.WriteString(perfLines(string(out), view.lines))
		b.WriteString("\n")
	}
	return b.String(), nil
}

// perfLines keeps the first n sample lines of a perf report, without its
// comments and without functions named only by address.
func perfLines(report string, n int) string {
	var b strings.Builder
	for _, l := range strings.Split(report, "\n") {
		if n == 0 {
			break
		}
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") || strings.Contains(l, "] 0x0") {
			continue
		}
		b.WriteString(l + "\n")
		n--
	}
	return b.String()
}
