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
	Seed       uint64 `json:"seed"`
	Duration   string `json:"duration"`
	DrainTime  string `json:"drainTime"`
	DrainLimit string `json:"drainLimit"` // -drain
	// Drained is set when every group handled every acknowledged message and the broker held
	// nothing pending before -drain ran out.
	Drained       bool           `json:"drained"`
	BacklogError  string         `json:"backlogError,omitempty"` // asking the broker what it still held failed
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
	Deliveries int      `json:"deliveries"`
	Distinct   int      `json:"distinct"`
	Lost       []string `json:"lost,omitempty"` // acknowledged, never handled (see check)
	// NotDrained counts the acknowledged messages never handled that the broker still held
	// pending when a run that did not drain ended: a backlog, not a loss.
	NotDrained           int            `json:"notDrained"`
	NotDrainedByQueue    map[string]int `json:"notDrainedByQueue,omitempty"`
	NotDrainedPartitions int            `json:"notDrainedPartitions"`
	Phantom              []string       `json:"phantom,omitempty"` // handled, never pushed
	OutOfOrder           []string       `json:"outOfOrder,omitempty"`
	Duplicates           int            `json:"duplicates"`
	DuplicatesBy         map[string]int `json:"duplicatesBy,omitempty"`
	Unexplained          []string       `json:"unexplained,omitempty"`
}

// backlog is what the broker still held once the consume loops stopped: group label →
// "queue/partition" → messages the group has not committed.
type backlog map[string]map[string]int

// check compares what was pushed with what each group handled. An acknowledged message a group
// never handled is lost when a later message of its partition reached that group (a hole), or
// when it is in the partition's tail (after the last one handled) and the run drained, or the
// broker holds fewer pending messages of that partition than the tail counts. Otherwise the tail
// is a backlog the consumers did not reach in time: not drained, which fails the run for a
// reason of its own.
func check(led *ledger, loops []*consumeLoop, inj *injector, drained bool, held backlog) *report {
	led.mu.Lock()
	defer led.mu.Unlock()
	rep := &report{Faults: inj.counts(), Acknowledged: map[string]int{}, PushErrors: led.pushErrors, Drained: drained,
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
		gr := &groupReport{DuplicatesBy: map[string]int{}, NotDrainedByQueue: map[string]int{}}
		rep.Groups[g.label] = gr
		first := map[string]delivery{}
		last := map[string]delivery{}
		lastSeq := map[string]int{} // queue/partition → seq of the last first delivery checked
		// queue/partition → highest seq handled, of any push: what a missing message is
		// checked against to tell a hole from the tail.
		highestSeq := map[string]int{}
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
			if part := r.Queue + "/" + r.Partition; r.Seq > highestSeq[part] {
				highestSeq[part] = r.Seq
			}
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
		missing := func(r *pushRecord, why string) string {
			return fmt.Sprintf("%s (status %s at %s, %d attempts; %s)", r.Key, r.Status, r.AckedAt.Format("15:04:05.000"), r.Attempts, why)
		}
		tails := map[string][]*pushRecord{} // queue/partition → acknowledged, after the last handled
		for key, r := range led.pushes {
			if _, ok := first[key]; ok || r.Status == "" {
				continue
			}
			part := r.Queue + "/" + r.Partition
			// An overtaken message was stored after later ones of its request, so it may sit in
			// the tail with a higher seq handled: counting it a hole errs toward a loss.
			if r.Seq < highestSeq[part] {
				gr.Lost = append(gr.Lost, missing(r, fmt.Sprintf("seq %d of the partition was handled", highestSeq[part])))
				continue
			}
			tails[part] = append(tails[part], r)
		}
		for part, tail := range tails {
			pending := held[g.label][part]
			if !drained && pending >= len(tail) {
				gr.NotDrained += len(tail)
				gr.NotDrainedByQueue[tail[0].Queue] += len(tail)
				gr.NotDrainedPartitions++
				continue
			}
			why := "the run drained"
			if !drained {
				why = fmt.Sprintf("the broker holds %d pending of the partition's %d at the tail", pending, len(tail))
			}
			for _, r := range tail {
				gr.Lost = append(gr.Lost, missing(r, why))
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
	notDrained := 0
	for _, label := range r.groupLabels() {
		if g := r.Groups[label]; g.NotDrained > 0 {
			notDrained += g.NotDrained
			bad = append(bad, fmt.Sprintf("%s did not reach %d acknowledged messages in %s, still pending at the broker (not drained, not lost)",
				label, g.NotDrained, partitionCount(g.NotDrainedPartitions)))
		}
	}
	if !r.Drained {
		msg := fmt.Sprintf("the consumers did not drain within -drain %s, so the run cannot check everything it pushed: re-run with a longer -drain or a lighter load", r.DrainLimit)
		if notDrained == 0 {
			msg = fmt.Sprintf("the consumers did not drain within -drain %s (the broker still held messages not committed): re-run with a longer -drain or a lighter load", r.DrainLimit)
		}
		bad = append(bad, msg)
	}
	if r.BacklogError != "" {
		bad = append(bad, "asking the broker what it still held failed: "+r.BacklogError)
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
	fmt.Fprintf(w, "\nseed %d, %s of load, drained in %s (complete: %v, -drain %s)\n", r.Seed, r.Duration, r.DrainTime, r.Drained, r.DrainLimit)
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
		fmt.Fprintf(w, "%-12s deliveries %d, distinct %d, lost %d, not drained %d, phantom %d, out of order %d, duplicates %d (%s)\n",
			label, g.Deliveries, g.Distinct, len(g.Lost), g.NotDrained, len(g.Phantom), len(g.OutOfOrder), g.Duplicates, sortedCounts(g.DuplicatesBy))
		if g.NotDrained > 0 {
			fmt.Fprintf(w, "    not drained: %d acknowledged messages in %s still pending at the broker (%s)\n",
				g.NotDrained, partitionCount(g.NotDrainedPartitions), sortedCounts(g.NotDrainedByQueue))
		}
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

// partitionCount reads "1 partition" or "n partitions".
func partitionCount(n int) string {
	if n == 1 {
		return "1 partition"
	}
	return fmt.Sprintf("%d partitions", n)
}
