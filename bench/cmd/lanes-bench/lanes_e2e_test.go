package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startTestHarness wires a harness as run does, minus the hop probe and the
// ceiling and River databases: a broker built from this checkout's server/,
// started on a free port against a fresh database of the test cluster.
func startTestHarness(t *testing.T, duration time.Duration) *harness {
	t.Helper()
	admin := testClusterURL(t)
	ctx := t.Context()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "lanes")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./server/cmd/lanes")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./server/cmd/lanes: %v\n%s", err, out)
	}

	h := newHarness(options{short: true, duration: duration, out: tmp, analyze: true}, root)
	h.lanesDB = freshDatabase(t, admin, "lanes_bench_t")
	if err := recreateDatabase(ctx, admin, h.lanesDB, ""); err != nil {
		t.Fatal(err)
	}
	dbURL := withDatabase(admin, h.lanesDB)
	logPath := filepath.Join(tmp, "broker.log")
	b, err := startBroker(bin, dbURL, 0, "", logPath, filepath.Join(tmp, "spool"))
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-registered first: the broker stops before its database is dropped.
	t.Cleanup(func() {
		b.stop()
		if t.Failed() {
			if raw, err := os.ReadFile(logPath); err == nil {
				t.Logf("broker log (tail):\n%s", lastLines(string(raw), 40))
			}
		}
	})
	h.broker, h.brokerURL = b, b.url
	if h.admin, err = newPool(ctx, admin, 4); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.admin.Close)
	if h.lanesPool, err = newPool(context.Background(), dbURL, 4); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.lanesPool.Close)
	return h
}

// checkResult asserts what every Lanes scenario must show: traffic, nothing
// lost or delivered twice, no 5xx and the window's resource figures.
func checkResult(t *testing.T, r Result, err error, scenario string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v (result %+v)", scenario, err, r)
	}
	if r.Scenario != scenario || r.System != "lanes" || !r.Available {
		t.Errorf("%s: scenario %q system %q available %v", scenario, r.Scenario, r.System, r.Available)
	}
	if r.Messages <= 0 || r.MsgPerSec <= 0 || r.Seconds <= 0 {
		t.Errorf("%s: %d messages, %.0f msg/s in %.2f s; want traffic", scenario, r.Messages, r.MsgPerSec, r.Seconds)
	}
	if !r.LossChecked || r.Lost != 0 || r.Unexpected != 0 || r.Duplicated != 0 {
		t.Errorf("%s: loss checked %v, lost %d never pushed %d duplicated %d, want checked and 0 0 0", scenario, r.LossChecked, r.Lost, r.Unexpected, r.Duplicated)
	}
	if r.ServerErrors != 0 {
		t.Errorf("%s: %d 5xx answers", scenario, r.ServerErrors)
	}
	// the window sampled the broker the harness started
	if r.BrokerPeakRSSMB <= 0 {
		t.Errorf("%s: broker peak RSS %.1f MB, want the sampled RSS", scenario, r.BrokerPeakRSSMB)
	}
	// xid delta, not pg_stat_database's commits: backends flush those at most
	// once a second, so a sub-second window may not see its own commits yet
	if r.PGWriteXactsPerSec <= 0 {
		t.Errorf("%s: %.1f PostgreSQL write transactions/s", scenario, r.PGWriteXactsPerSec)
	}
	t.Logf("%s: %d messages, %.0f msg/s, latency %v, broker %.2f cores %.0f MB, %.0f write xacts/s",
		scenario, r.Messages, r.MsgPerSec, r.LatencyMs, r.BrokerCPUCores, r.BrokerPeakRSSMB, r.PGWriteXactsPerSec)
}

func TestLanesScenariosAgainstARealBroker(t *testing.T) {
	h := startTestHarness(t, time.Second)

	t.Run("push-b100", func(t *testing.T) {
		h.prepareScenario(t.Context())
		r, err := h.pushScenario("push-b100", 2, 100)
		checkResult(t, r, err, "push-b100")
		// closed loop with batch 100: every counted push carried whole batches
		if r.Messages%100 != 0 {
			t.Errorf("%d messages pushed, not a multiple of the batch", r.Messages)
		}
		if r.LatencyMs == nil || r.LatencyMs["p50"] <= 0 {
			t.Errorf("push round-trip latency %v", r.LatencyMs)
		}
	})
	t.Run("rounds", func(t *testing.T) {
		// Each round after the first runs on fresh queues: a second push round
		// reusing the first's queues and ids would be answered "duplicate".
		// Rounds 2 and 3 here, so the other subtests' queues stay theirs.
		for _, scenario := range []string{"push-b1", "consume-queue"} {
			rs, err := runRounds(2, func(round int) { h.round = round + 1; h.prepareScenario(t.Context()) }, func() ([]Result, error) {
				if scenario == "push-b1" {
					r, err := h.pushScenario("push-b1", 4, 1)
					return []Result{r}, err
				}
				r, err := h.consumeScenario("consume-queue", 0, 2, 2, 150)
				return []Result{r}, err
			})
			if len(rs) != 1 {
				t.Fatalf("%s: two rounds gave %d results (%v)", scenario, len(rs), err)
			}
			checkResult(t, rs[0], err, scenario)
			if len(rs[0].Rounds) != 2 || rs[0].Rounds[0].MsgPerSec <= 0 || rs[0].Rounds[1].MsgPerSec <= 0 {
				t.Errorf("%s: rounds %+v, want two with traffic", scenario, rs[0].Rounds)
			}
		}
		h.round = 0
	})
	t.Run("consume-queue", func(t *testing.T) {
		h.prepareScenario(t.Context())
		r, err := h.consumeScenario("consume-queue", 0, 2, 2, 150)
		checkResult(t, r, err, "consume-queue")
		// queue mode delivers each message of the backlog once
		if r.Messages != 300 {
			t.Errorf("%d deliveries of a 300-message backlog", r.Messages)
		}
	})
	t.Run("consume-fanout", func(t *testing.T) {
		h.prepareScenario(t.Context())
		r, err := h.consumeScenario("consume-fanout", 2, 1, 2, 50)
		checkResult(t, r, err, "consume-fanout")
		// each of the 2 groups gets the whole 100-message backlog
		if r.Messages != 200 {
			t.Errorf("%d deliveries of a 100-message backlog to 2 groups", r.Messages)
		}
	})
	t.Run("latency", func(t *testing.T) {
		h.prepareScenario(t.Context())
		r, err := h.latencyScenario(400, 0, 0)
		checkResult(t, r, err, "latency-400")
		// the percentiles run to the pop's answer; the ack's commit comes after it
		d, a := r.LatencyMs, r.AckLatencyMs
		if d == nil || a == nil {
			t.Fatalf("delivery latency %v, to the ack %v", d, a)
		}
		if d["p50"] >= a["p50"] || d["p99"] > a["p99"] {
			t.Errorf("delivery latency %v not below the latency to the ack's commit %v", d, a)
		}
	})
	t.Run("latency-parked", func(t *testing.T) {
		h.prepareScenario(t.Context())
		r, err := h.latencyScenario(200, 50, 10)
		checkResult(t, r, err, "latency-200-parked50-groups10")
		if r.LatencyMs == nil || !strings.Contains(r.Description, "50 idle long polls in 10 consumer groups") {
			t.Errorf("latency %v, description %q", r.LatencyMs, r.Description)
		}
	})
	// The push scenarios compare the ids accepted with the ids the log holds:
	// a loss and a message nobody pushed both show, and cannot cancel out.
	t.Run("stored ids", func(t *testing.T) {
		q := h.queue("stored-ids")
		var items []pushItem
		for _, id := range []string{"a", "b", "c"} {
			items = append(items, pushItem{Queue: q, Partition: "p", TransactionID: id, Payload: benchPayload{Body: payloadBody}})
		}
		if _, err := h.pushItems(t.Context(), items); err != nil {
			t.Fatal(err)
		}
		tl := newTally(3)
		tl.expect("a", "b", "x") // x accepted and missing, c stored though never accepted
		storedTwice, err := h.tallyStored(t.Context(), q, tl)
		if err != nil {
			t.Fatal(err)
		}
		if v := tl.verdict(); v != (verdict{Lost: 1, Unexpected: 1}) || storedTwice != 0 {
			t.Fatalf("verdict %+v, stored twice %d; want 1 lost, 1 never pushed, 0", v, storedTwice)
		}
	})

	if n := h.serverErrors.Load(); n != 0 {
		t.Errorf("%d 5xx answers over the run: %v", n, h.errSamples)
	}
	if !strings.HasPrefix(h.brokerURL, "http://127.0.0.1:") {
		t.Errorf("broker URL %q", h.brokerURL)
	}
}
