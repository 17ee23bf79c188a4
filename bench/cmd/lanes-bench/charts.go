package main

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

var (
	colLanes   = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colCeiling = color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}
	colRiver   = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
)

// writeCharts draws throughput.png, latency.png and partitions.png into dir.
func writeCharts(run *Run, dir string) error {
	if err := throughputChart(run, filepath.Join(dir, "throughput.png")); err != nil {
		return err
	}
	if err := latencyChart(run, filepath.Join(dir, "latency.png")); err != nil {
		return err
	}
	return partitionsChart(run, filepath.Join(dir, "partitions.png"))
}

func msgRate(rs []Result, scenario, system string) float64 {
	if r := find(rs, scenario, system); r != nil {
		return r.MsgPerSec
	}
	return 0
}

// slantLabels turns the category labels so long ones do not run into each other.
func slantLabels(p *plot.Plot) {
	p.X.Tick.Label.Rotation = math.Pi / 8
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YCenter
}

// roomForLegend raises the y axis above the tallest bar or point so the
// legend, drawn in the top corner, sits above them rather than over them.
func roomForLegend(p *plot.Plot, tallest float64) {
	p.Y.Min = 0
	if tallest > 0 {
		p.Y.Max = tallest * 1.35
	}
}

// throughputRow is one group of bars of the throughput chart.
type throughputRow struct {
	label                 string
	lanes, ceiling, river float64
}

// throughputRows are the throughput chart's groups: the scenarios that ran
// and succeeded, since a failed one is no 0 msg/s. Under -rounds a Lanes bar
// is the median round, and its label's second line gives the lowest and
// highest round.
func throughputRows(rs []Result) []throughputRow {
	var rows []throughputRow
	add := func(label, scenario string, ceiling, river float64) {
		lanes := find(rs, scenario, "lanes")
		if lanes == nil || lanes.MsgPerSec <= 0 {
			return
		}
		if vals, _ := roundValues(*lanes); len(vals) > 1 {
			label += fmt.Sprintf("\n%d rounds %s–%s", len(vals), shortRate(slices.Min(vals)), shortRate(slices.Max(vals)))
		}
		rows = append(rows, throughputRow{label, lanes.MsgPerSec, ceiling, river})
	}
	add("push b1×64", "push-b1", msgRate(rs, "ceiling-b1", "postgres"), 0)
	add("push b100×8", "push-b100", msgRate(rs, "ceiling-b100", "postgres"), 0)
	add("pop+ack queue", "consume-queue", msgRate(rs, "ceiling-b100", "postgres"), 0)
	add("pop+ack 10 groups", "consume-fanout", 0, 0)
	add("produce+consume", "shared", 0, msgRate(rs, "shared", "river"))
	return rows
}

// shortRate writes a rate in thousands: 15.2k, 149k.
func shortRate(v float64) string {
	if v >= 100000 {
		return fmt.Sprintf("%.0fk", v/1000)
	}
	return fmt.Sprintf("%.1fk", v/1000)
}

// throughputChart: Lanes per scenario beside its PostgreSQL ceiling and River.
func throughputChart(run *Run, path string) error {
	p, err := throughputPlot(run)
	if err != nil {
		return err
	}
	return p.Save(9*vg.Inch, 4.5*vg.Inch, path)
}

func throughputPlot(run *Run) (*plot.Plot, error) {
	rows := throughputRows(run.Results)
	tallest := 0.0
	for _, r := range rows {
		tallest = max(tallest, r.lanes, r.ceiling, r.river)
	}
	p := plot.New()
	p.Title.Text = "Throughput (msg/s), fsync on"
	p.Y.Label.Text = "messages per second"
	w := vg.Points(14)
	var lanes, ceiling, river plotter.Values
	var names []string
	for _, r := range rows {
		lanes, ceiling, river = append(lanes, r.lanes), append(ceiling, r.ceiling), append(river, r.river)
		names = append(names, r.label)
	}
	if len(rows) == 0 {
		lanes, ceiling, river = plotter.Values{0}, plotter.Values{0}, plotter.Values{0}
	}
	bl, err := plotter.NewBarChart(lanes, w)
	if err != nil {
		return nil, err
	}
	bl.Color, bl.LineStyle.Width, bl.Offset = colLanes, 0, -w
	bc, err := plotter.NewBarChart(ceiling, w)
	if err != nil {
		return nil, err
	}
	bc.Color, bc.LineStyle.Width = colCeiling, 0
	br, err := plotter.NewBarChart(river, w)
	if err != nil {
		return nil, err
	}
	br.Color, br.LineStyle.Width, br.Offset = colRiver, 0, w
	p.Add(bl, bc, br, plotter.NewGrid())
	p.Legend.Add("Lanes", bl)
	p.Legend.Add("PostgreSQL ceiling (pgx, no HTTP)", bc)
	p.Legend.Add("River", br)
	p.Legend.Top = true
	if len(names) > 0 {
		p.NominalX(names...)
		slantLabels(p)
	}
	// A group's outer bars sit one bar width either side of its tick: half a
	// group of room at each end keeps the first and last groups whole.
	p.X.Min, p.X.Max = -0.5, float64(max(len(names), 1))-0.5
	roomForLegend(p, tallest)
	return p, nil
}

// latencyChart: p50/p99/p999 of the open-loop end-to-end run, the wake-up and the push round trips.
func latencyChart(run *Run, path string) error {
	type row struct {
		label string
		lat   map[string]float64
	}
	var rows []row
	add := func(label, scenario string, alt bool) {
		if r := find(run.Results, scenario, "lanes"); r != nil {
			l := r.LatencyMs
			if alt {
				l = r.AltLatencyMs
			}
			if l != nil {
				rows = append(rows, row{label, l})
			}
		}
	}
	for _, r := range run.Results {
		if strings.HasPrefix(r.Scenario, "latency") && r.Available {
			add(fmt.Sprintf("e2e open loop %.0f/s", r.OfferedRate), r.Scenario, false)
		}
	}
	add("wake-up (push sent)", "wake", false)
	add("wake-up (push answered)", "wake", true)
	add("wake-up autoAck (push sent)", "wake-autoack", false)
	add("push b1 round trip", "push-b1", false)
	add("push b100 round trip", "push-b100", false)
	add("txn round trip", "txn", false)
	p := plot.New()
	p.Title.Text = "Latency percentiles (ms)"
	p.Y.Label.Text = "milliseconds"
	w := vg.Points(12)
	var names []string
	for _, r := range rows {
		names = append(names, r.label)
	}
	tallest := 0.0
	for i, q := range []string{"p50", "p99", "p999"} {
		var v plotter.Values
		for _, r := range rows {
			v = append(v, math.Max(r.lat[q], 0))
			tallest = max(tallest, r.lat[q])
		}
		if len(v) == 0 {
			v = append(v, 0)
		}
		b, err := plotter.NewBarChart(v, w)
		if err != nil {
			return err
		}
		b.Color, b.LineStyle.Width, b.Offset = plotutil.Color(i), 0, vg.Length(i-1)*w
		p.Add(b)
		p.Legend.Add(q, b)
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	if len(names) > 0 {
		p.NominalX(names...)
		slantLabels(p)
	}
	roomForLegend(p, tallest)
	return p.Save(10*vg.Inch, 5*vg.Inch, path)
}

// partitionsChart: acked and pushed msg/s against the partition count (log x).
func partitionsChart(run *Run, path string) error {
	var acked, pushed plotter.XYs
	tallest := 0.0
	for _, r := range run.Results {
		if r.Partitions > 0 && r.Available && r.System == "lanes" {
			acked = append(acked, plotter.XY{X: float64(r.Partitions), Y: r.MsgPerSec})
			pushed = append(pushed, plotter.XY{X: float64(r.Partitions), Y: r.PushedPerSec})
			tallest = max(tallest, r.MsgPerSec, r.PushedPerSec)
		}
	}
	p := plot.New()
	p.Title.Text = "Throughput vs partitions (1% busy, at least 1), fsync on"
	p.X.Label.Text = "partitions (log)"
	p.Y.Label.Text = "messages per second"
	p.Add(plotter.NewGrid())
	if len(acked) > 0 {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		if err := plotutil.AddLinePoints(p, "acked (pop+ack)", acked, "pushed", pushed); err != nil {
			return err
		}
	}
	roomForLegend(p, tallest)
	p.Legend.Top = true
	p.Legend.Left = true
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}
