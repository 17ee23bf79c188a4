package main

import (
	"math/rand/v2"
	"testing"
	"time"
)

// recorderOf records the given millisecond samples in a shuffled order, so a
// recorder that forgot to sort would answer wrong figures.
func recorderOf(ms ...int) *recorder {
	r := &recorder{}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
	for _, m := range ms {
		r.add(time.Duration(m) * time.Millisecond)
	}
	return r
}

func seq(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func TestRecorderPercentilesOfOneToAThousandMilliseconds(t *testing.T) {
	got := recorderOf(seq(1, 1000)...).percentiles()
	want := map[string]float64{"p50": 500, "p99": 990, "p999": 999, "max": 1000}
	if len(got) != len(want) {
		t.Fatalf("percentiles = %v, want the keys of %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v ms, want %v ms (all: %v)", k, got[k], v, got)
		}
	}
}

func TestRecorderPercentilesOfAHundredSamplesPutP999AtTheMaximum(t *testing.T) {
	got := recorderOf(seq(1, 100)...).percentiles()
	// nearest rank: p999 of 100 samples is the 100th, p99 the 99th, p50 the 50th
	for k, v := range map[string]float64{"p50": 50, "p99": 99, "p999": 100, "max": 100} {
		if got[k] != v {
			t.Errorf("%s = %v ms, want %v ms", k, got[k], v)
		}
	}
}

func TestRecorderPercentilesSeeATailThatTheMedianHides(t *testing.T) {
	// 990 fast samples and 10 slow ones: the median stays fast, p99 is still
	// fast (the 990th sample), p999 lands in the tail.
	ms := make([]int, 0, 1000)
	for range 990 {
		ms = append(ms, 2)
	}
	for range 10 {
		ms = append(ms, 200)
	}
	got := recorderOf(ms...).percentiles()
	for k, v := range map[string]float64{"p50": 2, "p99": 2, "p999": 200, "max": 200} {
		if got[k] != v {
			t.Errorf("%s = %v ms, want %v ms", k, got[k], v)
		}
	}
}

func TestRecorderPercentilesKeepMicrosecondResolution(t *testing.T) {
	r := &recorder{}
	r.add(1500 * time.Microsecond)
	got := r.percentiles()
	for _, k := range []string{"p50", "p99", "p999", "max"} {
		if got[k] != 1.5 {
			t.Errorf("%s = %v ms, want 1.5 ms for a single 1.5 ms sample", k, got[k])
		}
	}
}

func TestEmptyRecorderHasNoPercentiles(t *testing.T) {
	// nil, not zeros: the report leaves the latency cell empty rather than print 0 ms
	if got := (&recorder{}).percentiles(); got != nil {
		t.Fatalf("percentiles of an empty recorder = %v, want nil", got)
	}
	if got := fmtLat((&recorder{}).percentiles()); got != "" {
		t.Fatalf("fmtLat of an empty recorder = %q, want empty", got)
	}
}

func TestRecorderPercentileIsTheNearestRankEvenBelowAHalf(t *testing.T) {
	// 0.99 × 70 = 69.3: the nearest rank is the 70th sample, which rounding
	// 69.3 down would miss.
	var r recorder
	for i := 1; i <= 70; i++ {
		r.add(time.Duration(i) * time.Millisecond)
	}
	if got := r.percentiles()["p99"]; got != 70 {
		t.Fatalf("p99 of 1..70 ms = %v ms, want 70", got)
	}
}
