package main

import (
	"errors"
	"strings"
	"testing"
)

func TestCombineRoundsShowsTheMedianRoundAndAddsUpWhatNoRoundMayHide(t *testing.T) {
	rounds := []Result{
		{Scenario: "push-b1", Available: true, MsgPerSec: 15000, BrokerCPUCores: 0.7, BrokerPeakRSSMB: 60, Lost: 0, ServerErrors: 1, LoadAvg: 1},
		{Scenario: "push-b1", Available: true, MsgPerSec: 12000, BrokerCPUCores: 0.6, BrokerPeakRSSMB: 75, Duplicated: 2, LoadAvg: 2},
		{Scenario: "push-b1", Available: true, MsgPerSec: 17000, BrokerCPUCores: 0.8, BrokerPeakRSSMB: 58, Lost: 3, Throttled: 4, LoadAvg: 3},
	}
	got := combineRounds(rounds)
	if got.MsgPerSec != 15000 || got.BrokerCPUCores != 0.7 || got.LoadAvg != 1 {
		t.Errorf("combined %v msg/s, %v cores, load %v: want the median round's 15000, 0.7, 1", got.MsgPerSec, got.BrokerCPUCores, got.LoadAvg)
	}
	if got.Lost != 3 || got.Duplicated != 2 || got.ServerErrors != 1 || got.Throttled != 4 {
		t.Errorf("lost %d, duplicated %d, 5xx %d, 429 %d: want every round's added up (3, 2, 1, 4)", got.Lost, got.Duplicated, got.ServerErrors, got.Throttled)
	}
	if got.BrokerPeakRSSMB != 75 {
		t.Errorf("peak RSS %v, want the highest round's 75", got.BrokerPeakRSSMB)
	}
	if len(got.Rounds) != 3 || got.Rounds[0].MsgPerSec != 15000 || got.Rounds[1].MsgPerSec != 12000 || got.Rounds[2].MsgPerSec != 17000 {
		t.Errorf("rounds %+v, want each round's figure in the order they ran", got.Rounds)
	}
	if rounds[1].Lost != 0 || rounds[0].Rounds != nil {
		t.Error("combining changed the rounds it was given")
	}
}

func TestCombineRoundsRanksThePipelineHandoffByTransactions(t *testing.T) {
	got := combineRounds([]Result{
		{Scenario: "txn", System: "lanes", Available: true, MsgPerSec: 900, TxPerSec: 300},
		{Scenario: "txn", System: "lanes", Available: true, MsgPerSec: 1000, TxPerSec: 100},
		{Scenario: "txn", System: "lanes", Available: true, MsgPerSec: 800, TxPerSec: 200},
	})
	if got.TxPerSec != 200 {
		t.Errorf("txn combined to %v tx/s, want the median 200 (not the round of the median msg/s)", got.TxPerSec)
	}
	if text := roundsText(got); !strings.Contains(text, "300 / 100 / 200 tx/s") {
		t.Errorf("txn rounds described as %q", text)
	}
}

func TestCombineRoundsTakesTheLowerMiddleOfAnEvenCount(t *testing.T) {
	got := combineRounds([]Result{
		{Available: true, MsgPerSec: 40}, {Available: true, MsgPerSec: 10}, {Available: true, MsgPerSec: 30}, {Available: true, MsgPerSec: 20},
	})
	if got.MsgPerSec != 20 {
		t.Errorf("median of 10, 20, 30, 40 read %v, want the lower middle 20", got.MsgPerSec)
	}
}

func TestCombineRoundsRanksWakeRoundsByTheirP99(t *testing.T) {
	got := combineRounds([]Result{
		{Scenario: "wake", Available: true, LatencyMs: map[string]float64{"p50": 2, "p99": 9}},
		{Scenario: "wake", Available: true, LatencyMs: map[string]float64{"p50": 3, "p99": 4}},
		{Scenario: "wake", Available: true, LatencyMs: map[string]float64{"p50": 1, "p99": 6}},
	})
	if got.LatencyMs["p99"] != 6 || got.LatencyMs["p50"] != 1 {
		t.Errorf("wake combined to p50 %v p99 %v, want the round of the median p99 (6, its p50 1)", got.LatencyMs["p50"], got.LatencyMs["p99"])
	}
	if !strings.Contains(roundsText(got), "9.0 / 4.0 / 6.0 ms p99") {
		t.Errorf("wake rounds described as %q", roundsText(got))
	}
}

func TestCombineRoundsNeverLetsAFailedRoundBeOutvoted(t *testing.T) {
	got := combineRounds([]Result{
		{Scenario: "consume-queue", Available: true, MsgPerSec: 100},
		{Scenario: "consume-queue", Available: false, Note: "error: drain stalled"},
		{Scenario: "consume-queue", Available: true, MsgPerSec: 120},
	})
	if got.Available || got.Note != "round 2 of 3; error: drain stalled" {
		t.Errorf("combined available %v, note %q: want the failed round, named", got.Available, got.Note)
	}
}

func TestRunRoundsCombinesEachWindowAndStopsAtAFailedRound(t *testing.T) {
	var prepared []int
	calls := 0
	rs, err := runRounds(3, func(round int) { prepared = append(prepared, round) }, func() ([]Result, error) {
		calls++
		return []Result{
			{Scenario: "wake", Available: true, LatencyMs: map[string]float64{"p99": float64(calls)}},
			{Scenario: "wake-autoack", Available: true, LatencyMs: map[string]float64{"p99": float64(10 * calls)}},
		}, nil
	})
	if err != nil || len(rs) != 2 || len(prepared) != 3 || prepared[2] != 3 {
		t.Fatalf("three rounds of two windows: %d results, err %v, prepared %v", len(rs), err, prepared)
	}
	if rs[0].Scenario != "wake" || rs[0].LatencyMs["p99"] != 2 || rs[1].Scenario != "wake-autoack" || rs[1].LatencyMs["p99"] != 20 || len(rs[1].Rounds) != 3 {
		t.Errorf("combined %+v, want each window's own median round (2 and 20 ms) with three rounds", rs)
	}

	calls = 0
	failure := errors.New("broker gone")
	rs, err = runRounds(3, func(int) {}, func() ([]Result, error) {
		calls++
		if calls == 2 {
			return []Result{{Scenario: "push-b1"}}, failure
		}
		return []Result{{Scenario: "push-b1", Available: true, MsgPerSec: 1}}, nil
	})
	if !errors.Is(err, failure) || calls != 2 || len(rs) != 1 || rs[0].Note != "round 2 of 3" {
		t.Errorf("a failing second round: err %v after %d calls, results %+v; want its error and result, named, and no third round", err, calls, rs)
	}
}

func TestRunRoundsOfOneRoundReturnsTheWindowsAsTheyAre(t *testing.T) {
	want := Result{Scenario: "push-b100", Available: true, MsgPerSec: 123, Lost: 1}
	rs, err := runRounds(1, func(int) {}, func() ([]Result, error) { return []Result{want}, nil })
	if err != nil || len(rs) != 1 || rs[0].MsgPerSec != 123 || rs[0].Lost != 1 || rs[0].Rounds != nil {
		t.Errorf("one round gave %+v, %v", rs, err)
	}
}

func TestMarkdownGivesEveryRoundOfARepeatedScenario(t *testing.T) {
	r := combineRounds([]Result{
		{Scenario: "push-b100", System: "lanes", Available: true, MsgPerSec: 100000, Seconds: 8},
		{Scenario: "push-b100", System: "lanes", Available: true, MsgPerSec: 125000, Seconds: 8},
		{Scenario: "push-b100", System: "lanes", Available: true, MsgPerSec: 110000, Seconds: 8},
	})
	md := markdown(&Run{Results: []Result{r}, PostgreSQL: map[string]string{}, Machine: map[string]string{}})
	want := "3 rounds, in order: 100000 / 125000 / 110000 msg/s, the lowest 80% of the highest; the median round is shown"
	if !strings.Contains(md, want) {
		t.Errorf("markdown lacks %q:\n%s", want, md)
	}
	if !strings.Contains(md, "| push-b100 | lanes | 110000 |") {
		t.Errorf("the table does not show the median round:\n%s", md)
	}
}
