package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// RoundFigure is what one round of a repeated scenario read (-rounds).
type RoundFigure struct {
	MsgPerSec      float64 `json:"msgPerSec,omitempty"`
	TxPerSec       float64 `json:"txPerSec,omitempty"`
	P99Ms          float64 `json:"p99Ms,omitempty"`
	BrokerCPUCores float64 `json:"brokerCpuCores,omitempty"`
	PGCPUCores     float64 `json:"pgCpuCores,omitempty"`
	LoadAvg        float64 `json:"loadAvg1m"`
}

// runRounds runs a scenario's windows (f, which returns one result per
// window) rounds times, calling prepare with the round's number (from 1)
// before each, and returns each window's rounds combined (combineRounds). A
// failed round ends the repeats: its results and error are returned, the
// round named in their notes.
func runRounds(rounds int, prepare func(round int), f func() ([]Result, error)) ([]Result, error) {
	var byWindow [][]Result
	for round := 1; round <= rounds; round++ {
		prepare(round)
		rs, err := f()
		if err != nil {
			if rounds > 1 {
				for i := range rs {
					rs[i].Note = roundNote(round, rounds, rs[i].Note)
				}
			}
			return rs, err
		}
		for i, r := range rs {
			if i == len(byWindow) {
				byWindow = append(byWindow, nil)
			}
			byWindow[i] = append(byWindow[i], r)
		}
	}
	out := make([]Result, len(byWindow))
	for i, rs := range byWindow {
		out[i] = combineRounds(rs)
	}
	return out, nil
}

// roundFigure is the figure rounds are ranked by, and its unit: the rate the
// report's table shows (transactions for the pipeline handoff), else the p99
// latency (the wake-up scenarios).
func roundFigure(r Result) (float64, string) {
	switch {
	case r.TxPerSec > 0 && r.System == "lanes":
		return r.TxPerSec, "tx/s"
	case r.MsgPerSec > 0:
		return r.MsgPerSec, "msg/s"
	default:
		return r.LatencyMs["p99"], "ms p99"
	}
}

// combineRounds folds the rounds of one scenario into the result the report
// shows: the median round (the lower middle one of an even count), ranked by
// roundFigure, with every round's figures in Rounds. What no round may hide is
// added up over all of them: messages lost, never pushed, duplicated and
// redelivered, and the 5xx, 429 and buffered answers; the peak RSS is the
// highest. A failed round is the result, so a failure is never outvoted.
func combineRounds(rounds []Result) Result {
	if len(rounds) == 1 {
		return rounds[0]
	}
	for i, r := range rounds {
		if !r.Available {
			r.Note = roundNote(i+1, len(rounds), r.Note)
			return r
		}
	}
	order := make([]int, len(rounds))
	for i := range order {
		order[i] = i
	}
	figure := func(i int) float64 { v, _ := roundFigure(rounds[i]); return v }
	sort.SliceStable(order, func(a, b int) bool { return figure(order[a]) < figure(order[b]) })
	out := rounds[order[(len(rounds)-1)/2]]
	out.Rounds = make([]RoundFigure, len(rounds))
	out.Lost, out.Unexpected, out.Duplicated, out.Redelivered = 0, 0, 0, 0
	out.ServerErrors, out.Throttled, out.Buffered = 0, 0, 0
	for i, r := range rounds {
		out.Rounds[i] = RoundFigure{MsgPerSec: r.MsgPerSec, TxPerSec: r.TxPerSec, P99Ms: r.LatencyMs["p99"],
			BrokerCPUCores: r.BrokerCPUCores, PGCPUCores: r.PGCPUCores, LoadAvg: r.LoadAvg}
		out.Lost += r.Lost
		out.Unexpected += r.Unexpected
		out.Duplicated += r.Duplicated
		out.Redelivered += r.Redelivered
		out.ServerErrors += r.ServerErrors
		out.Throttled += r.Throttled
		out.Buffered += r.Buffered
		out.BrokerPeakRSSMB = max(out.BrokerPeakRSSMB, r.BrokerPeakRSSMB)
	}
	return out
}

// roundNote names the failed round in its result's note.
func roundNote(round, rounds int, note string) string {
	return strings.TrimSuffix(fmt.Sprintf("round %d of %d; %s", round, rounds, note), "; ")
}

// roundValues is each round's figure of a combined result, in the order they
// ran, in the unit roundFigure ranks it by; none for a result of one round.
func roundValues(r Result) ([]float64, string) {
	_, unit := roundFigure(r)
	if len(r.Rounds) < 2 {
		return nil, unit
	}
	vals := make([]float64, len(r.Rounds))
	for i, f := range r.Rounds {
		switch unit {
		case "tx/s":
			vals[i] = f.TxPerSec
		case "msg/s":
			vals[i] = f.MsgPerSec
		default:
			vals[i] = f.P99Ms
		}
	}
	return vals, unit
}

// roundsText describes a combined result's rounds for the report's details:
// each round's figure in the order they ran, and their spread.
func roundsText(r Result) string {
	vals, unit := roundValues(r)
	if vals == nil {
		return ""
	}
	figures := make([]string, len(vals))
	for i, v := range vals {
		if unit == "ms p99" {
			figures[i] = fmt.Sprintf("%.1f", v)
		} else {
			figures[i] = fmt.Sprintf("%.0f", v)
		}
	}
	spread := ""
	if hi := slices.Max(vals); hi > 0 {
		spread = fmt.Sprintf(", the lowest %.0f%% of the highest", 100*slices.Min(vals)/hi)
	}
	return fmt.Sprintf("%d rounds, in order: %s %s%s; the median round is shown, with the losses and error answers of all rounds added up",
		len(vals), strings.Join(figures, " / "), unit, spread)
}
