package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var pngMagic = []byte("\x89PNG\r\n\x1a\n")

// checkCharts asserts dir holds the three charts as decodable PNG images.
func checkCharts(t *testing.T, dir string) {
	t.Helper()
	for _, name := range []string{"throughput.png", "latency.png", "partitions.png"} {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !bytes.HasPrefix(raw, pngMagic) {
			t.Errorf("%s does not start with the PNG signature (%d bytes)", name, len(raw))
			continue
		}
		img, err := png.Decode(bytes.NewReader(raw))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
			t.Errorf("%s is %dx%d, too small for a chart", name, b.Dx(), b.Dy())
		}
	}
}

func TestWriteChartsDrawsThreePNGs(t *testing.T) {
	run := goodRun()
	run.Results = append(run.Results,
		Result{Scenario: "latency-250", System: "lanes", Available: true, OfferedRate: 250, LatencyMs: map[string]float64{"p50": 3, "p99": 9, "p999": 15}},
		Result{Scenario: "push-b1", System: "lanes", Available: true, MsgPerSec: 6000, LatencyMs: map[string]float64{"p50": 4, "p99": 10, "p999": 12}},
		Result{Scenario: "parts-100", System: "lanes", Available: true, Partitions: 100, MsgPerSec: 20000, PushedPerSec: 21000},
	)
	dir := t.TempDir()
	if err := writeCharts(run, dir); err != nil {
		t.Fatal(err)
	}
	checkCharts(t, dir)
}

func TestWriteChartsDrawsARunThatMeasuredNothing(t *testing.T) {
	// a run of one scenario, or one whose scenarios all failed, still gets its charts
	dir := t.TempDir()
	if err := writeCharts(&Run{Results: []Result{{Scenario: "push-b1", System: "lanes", Available: false}}}, dir); err != nil {
		t.Fatal(err)
	}
	checkCharts(t, dir)
}

func TestWriteChartsReportsAnUnwritableDirectory(t *testing.T) {
	if err := writeCharts(goodRun(), filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("writeCharts into a missing directory returned no error")
	}
}

// A failed scenario has no bar: drawn as 0 msg/s it would read as measured.
func TestThroughputRowsLeaveOutFailedScenarios(t *testing.T) {
	rs := append(yardsticks(),
		Result{Scenario: "push-b100", System: "lanes", Available: true, MsgPerSec: 40000},
		Result{Scenario: "consume-queue", System: "lanes", Available: false, Note: "error: drain deadline"},
		Result{Scenario: "consume-fanout", System: "lanes", Available: true, MsgPerSec: 90000},
	)
	var labels []string
	for _, r := range throughputRows(rs) {
		labels = append(labels, r.label)
		if r.label == "pop+ack 10 groups" && r.ceiling != 0 {
			t.Errorf("fan-out is drawn beside ceiling-b100, which is no yardstick for it")
		}
	}
	if got := strings.Join(labels, ","); got != "push b100×8,pop+ack 10 groups" {
		t.Fatalf("throughput chart groups %q", got)
	}
}

// Under -rounds a Lanes bar is the median round; its label gives the spread.
func TestThroughputRowsNameTheRoundsSpread(t *testing.T) {
	pushed := combineRounds([]Result{
		{Scenario: "push-b1", System: "lanes", Available: true, MsgPerSec: 15908},
		{Scenario: "push-b1", System: "lanes", Available: true, MsgPerSec: 15181},
		{Scenario: "push-b1", System: "lanes", Available: true, MsgPerSec: 16944},
	})
	once := Result{Scenario: "push-b100", System: "lanes", Available: true, MsgPerSec: 148978}
	rows := throughputRows(append(yardsticks(), pushed, once))
	if len(rows) != 2 || rows[0].label != "push b1×64\n3 rounds 15.2k–16.9k" || rows[0].lanes != 15908 {
		t.Errorf("rows %+v: want push-b1's median bar labeled with its rounds' range", rows)
	}
	if len(rows) == 2 && rows[1].label != "push b100×8" {
		t.Errorf("a scenario run once is labeled %q, want no range", rows[1].label)
	}
	if err := writeCharts(&Run{Results: append(yardsticks(), pushed, once)}, t.TempDir()); err != nil {
		t.Errorf("charts with a two-line label: %v", err)
	}
}

func TestThroughputChartKeepsTheOuterBarsOfTheEndGroups(t *testing.T) {
	// River's bar sits right of the last group's tick and the Lanes bar left of
	// the first one's: the X range must reach past both ticks or they are cut.
	run := goodRun()
	p, err := throughputPlot(run)
	if err != nil {
		t.Fatal(err)
	}
	groups := len(throughputRows(run.Results))
	if groups < 2 {
		t.Fatalf("goodRun has %d throughput groups, want at least 2", groups)
	}
	if p.X.Min > -0.5 || p.X.Max < float64(groups-1)+0.5 {
		t.Errorf("X range [%v, %v] does not leave half a group beyond the ticks 0..%d", p.X.Min, p.X.Max, groups-1)
	}
}
