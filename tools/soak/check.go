package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Why a message was handled more than once.
const (
	dupAfterAckFailure = "ack failure reported by the loop in between"
	dupAfterFault      = "a fault ran in between (lost lease or an ack undone by a crash)"
	dupUnexplained     = "unexplained"
)

// report is the soak's verdict and its figures.
type report struct {
	Seed          uint64         `json:"seed"`
	Duration      string         `json:"duration"`
	DrainTime     string         `json:"drainTime"`
	Drained       bool           `json:"drained"`
	Faults        map[string]int `json:"faults"`
	FaultFailures []string       `json:"faultFailures,omitempty"`

	Pushed         int            `json:"pushed"`           // distinct messages sent at least once
	PushAttempts   int            `json:"pushAttempts"`     // sends, resends included
	Acknowledged   map[string]int `json:"acknowledged"`     // by the status that acknowledged it
	Unacknowledged int            `json:"unacknowledged"`   // never answered stored (allowed to arrive or not)
	UnackedArrived int            `json:"unackedArrived"`   // of those, handled by some group
	PushErrors     map[string]int `json:"pushErrors"`       // error text → count (the producers' view)
	Undecoded      int            `json:"undecodedPayload"` // handled messages without a soak key

	Groups map[string]*groupReport `json:"groups"`

	LoopWarnings map[string]int `json:"loopWarnings"` // the consume loops' warnings by op
	LoopErrors   []string       `json:"loopErrors,omitempty"`
}

type groupReport struct {
	Deliveries   int            `json:"deliveries"`
	Distinct     int            `json:"distinct"`
	Lost         []string       `json:"lost,omitempty"`    // acknowledged, never handled
	Phantom      []string       `json:"phantom,omitempty"` // handled, never pushed
	OutOfOrder   []string       `json:"outOfOrder,omitempty"`
	Duplicates   int            `json:"duplicates"`
	DuplicatesBy map[string]int `json:"duplicatesBy,omitempty"`
	Unexplained  []string       `json:"unexplained,omitempty"`
}

func check(led *ledger, loops []*consumeLoop, inj *injector) *report {
	led.mu.Lock()
	defer led.mu.Unlock()
	rep := &report{Faults: inj.counts(), Acknowledged: map[string]int{}, PushErrors: led.pushErrors,
		Undecoded: led.undecoded, Groups: map[string]*groupReport{}, LoopWarnings: map[string]int{}}
	for _, r := range led.pushes {
		rep.Pushed++
		rep.PushAttempts += r.Attempts
		if r.Status == "" {
			rep.Unacknowledged++
		} else {
			rep.Acknowledged[r.Status]++
		}
	}
	warnsOf := map[int]*warnLog{}
	for _, cl := range loops {
		warnsOf[cl.id] = cl.warns
		cl.warns.mu.Lock()
		for op, n := range cl.warns.counts {
			rep.LoopWarnings[op] += n
		}
		cl.warns.mu.Unlock()
	}
	arrivedUnacked := map[string]bool{}
	for _, g := range soakGroups {
		gr := &groupReport{DuplicatesBy: map[string]int{}}
		rep.Groups[g.label] = gr
		first := map[string]delivery{}
		last := map[string]delivery{}
		lastSeq := map[string]int{} // queue/partition → seq of the last first delivery checked
		for _, d := range led.deliveries {
			if d.Group != g.label {
				continue
			}
			gr.Deliveries++
			r, pushed := led.pushes[d.Key]
			if !pushed {
				gr.Phantom = append(gr.Phantom, d.Key)
				continue
			}
			prev, again := last[d.Key]
			last[d.Key] = d
			if again {
				gr.Duplicates++
				why := dupUnexplained
				if warnsOf[prev.Loop].ackFailedBetween(prev.At, d.At) {
					why = dupAfterAckFailure
				} else if _, ok := inj.faultBetween(prev.At, d.At); ok {
					why = dupAfterFault
				}
				gr.DuplicatesBy[why]++
				if why == dupUnexplained && len(gr.Unexplained) < 50 {
					gr.Unexplained = append(gr.Unexplained, fmt.Sprintf("%s: loop %d at %s, loop %d at %s",
						d.Key, prev.Loop, prev.At.Format("15:04:05.000"), d.Loop, d.At.Format("15:04:05.000")))
				}
				continue
			}
			first[d.Key] = d
			if r.Status == "" {
				arrivedUnacked[d.Key] = true
				continue
			}
			if r.Overtaken {
				continue
			}
			part := r.Queue + "/" + r.Partition
			if r.Seq < lastSeq[part] {
				gr.OutOfOrder = append(gr.OutOfOrder, fmt.Sprintf("%s (status %s) handled at %s after seq %d",
					d.Key, r.Status, d.At.Format("15:04:05.000"), lastSeq[part]))
			} else {
				lastSeq[part] = r.Seq
			}
		}
		gr.Distinct = len(first)
		for key, r := range led.pushes {
			if r.Status != "" {
				if _, ok := first[key]; !ok {
					gr.Lost = append(gr.Lost, fmt.Sprintf("%s (status %s at %s, %d attempts)", key, r.Status, r.AckedAt.Format("15:04:05.000"), r.Attempts))
				}
			}
		}
		sort.Strings(gr.Lost)
	}
	rep.UnackedArrived = len(arrivedUnacked)
	return rep
}

func (r *report) ok() bool { return r.verdict() == "" }

// verdict names what broke the promise, or "" when nothing did.
func (r *report) verdict() string {
	var bad []string
	for _, label := range r.groupLabels() {
		g := r.Groups[label]
		if len(g.Lost) > 0 {
			bad = append(bad, fmt.Sprintf("%s lost %d acknowledged messages", label, len(g.Lost)))
		}
		if len(g.Phantom) > 0 {
			bad = append(bad, fmt.Sprintf("%s handled %d messages never pushed", label, len(g.Phantom)))
		}
		if len(g.OutOfOrder) > 0 {
			bad = append(bad, fmt.Sprintf("%s handled %d messages out of partition order", label, len(g.OutOfOrder)))
		}
	}
	if len(r.FaultFailures) > 0 {
		bad = append(bad, fmt.Sprintf("%d faults did not recover", len(r.FaultFailures)))
	}
	if len(r.LoopErrors) > 0 {
		bad = append(bad, fmt.Sprintf("%d consume loops ended with an error", len(r.LoopErrors)))
	}
	return strings.Join(bad, "; ")
}

func (r *report) groupLabels() []string {
	var out []string
	for _, g := range soakGroups {
		out = append(out, g.label)
	}
	return out
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "\nseed %d, %s of load, drained in %s (complete: %v)\n", r.Seed, r.Duration, r.DrainTime, r.Drained)
	fmt.Fprintf(w, "faults: %s\n", sortedCounts(r.Faults))
	for _, f := range r.FaultFailures {
		fmt.Fprintf(w, "  fault failure: %s\n", f)
	}
	acked := 0
	for _, n := range r.Acknowledged {
		acked += n
	}
	fmt.Fprintf(w, "pushed %d messages in %d sends; acknowledged %d (%s); never acknowledged %d, of which %d arrived anyway\n",
		r.Pushed, r.PushAttempts, acked, sortedCounts(r.Acknowledged), r.Unacknowledged, r.UnackedArrived)
	errs := 0
	for _, n := range r.PushErrors {
		errs += n
	}
	fmt.Fprintf(w, "push errors seen by producers: %d\n", errs)
	for _, label := range r.groupLabels() {
		g := r.Groups[label]
		fmt.Fprintf(w, "%-12s deliveries %d, distinct %d, lost %d, phantom %d, out of order %d, duplicates %d (%s)\n",
			label, g.Deliveries, g.Distinct, len(g.Lost), len(g.Phantom), len(g.OutOfOrder), g.Duplicates, sortedCounts(g.DuplicatesBy))
		for _, list := range [][]string{g.Lost, g.Phantom, g.OutOfOrder, g.Unexplained} {
			for i, s := range list {
				if i == 10 {
					fmt.Fprintf(w, "    ... %d more\n", len(list)-10)
					break
				}
				fmt.Fprintf(w, "    %s\n", s)
			}
		}
	}
	fmt.Fprintf(w, "consume loop warnings by op: %s\n", sortedCounts(r.LoopWarnings))
	for _, e := range r.LoopErrors {
		fmt.Fprintf(w, "  %s\n", e)
	}
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// write saves the report, every push and every delivery in the run directory, for a closer look
// at a failure.
func (r *report) write(dir string, led *ledger) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644); err != nil {
		return err
	}
	led.mu.Lock()
	defer led.mu.Unlock()
	writeLines := func(name string, each func(enc *json.Encoder) error) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		defer f.Close()
		return each(json.NewEncoder(f))
	}
	if err := writeLines("pushes.jsonl", func(enc *json.Encoder) error {
		for _, p := range led.pushes {
			if err := enc.Encode(p); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	return writeLines("deliveries.jsonl", func(enc *json.Encoder) error {
		for _, d := range led.deliveries {
			if err := enc.Encode(d); err != nil {
				return err
			}
		}
		return nil
	})
}
