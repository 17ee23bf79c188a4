package main

import (
	"context"
	"fmt"
	"iter"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// walkArgs are what every walk step takes beside its listing's filters. pauseAfter stops after
// that many rows and leaves the walk open under save; the steps after it then act between two
// of its pages (the SDKs ask for a page only when the rows before are used up), and a
// walkResume step takes the rest.
type walkArgs struct {
	PauseAfter int    `json:"pauseAfter"`
	Save       string `json:"save"`
}

// openWalk is a walk a step started: take hands over up to n more rows (0 = the rest).
type openWalk struct {
	take func(n int) map[string]any
	stop func()
}

// peekAfterError bounds how far a walk is read past its error: anything there already fails
// the step, and a walk that never ends must not hang the case.
const peekAfterError = 5

// startWalk pulls rows from a walk one at a time; kept sees every row handed over.
func startWalk[T any](rows iter.Seq2[T, error], kept func(T)) *openWalk {
	next, stop := iter.Pull2(rows)
	ended := false
	take := func(n int) map[string]any {
		got := []T{}
		out := map[string]any{}
		for !ended && (n == 0 || len(got) < n) {
			row, err, ok := next()
			switch {
			case !ok:
				ended = true
			case err != nil:
				ended = true
				withErr(out, err)
				if after := yieldedAfterError(next); len(after) > 0 {
					out["afterError"] = after
				}
			default:
				got = append(got, row)
				kept(row)
			}
		}
		out["count"] = len(got)
		out["rows"] = wire(got)
		return out
	}
	return &openWalk{take: take, stop: stop}
}

// yieldedAfterError is what a walk yields after its error, which ends it: nothing, unless the
// walk is broken.
func yieldedAfterError[T any](next func() (T, error, bool)) []any {
	out := []any{}
	for range peekAfterError {
		row, err, ok := next()
		if !ok {
			break
		}
		if err != nil {
			out = append(out, map[string]any{"error": errKind(err)})
			continue
		}
		out = append(out, map[string]any{"row": wire(row)})
	}
	return out
}

// walk runs a walk step: every row, or with pauseAfter the first rows, the walk left open
// under save.
func (s *state) walk(w *openWalk, a walkArgs) (map[string]any, error) {
	if a.Save == "" {
		defer w.stop()
		return w.take(a.PauseAfter), nil
	}
	if _, taken := s.walks[a.Save]; taken {
		w.stop()
		return nil, fmt.Errorf("a walk is already saved as %q", a.Save)
	}
	s.walks[a.Save] = w
	return w.take(a.PauseAfter), nil
}

type walkResumeArgs struct {
	Walk       string `json:"walk"`
	PauseAfter int    `json:"pauseAfter"`
}

// walkResume takes the rest of a paused walk's rows (pauseAfter: that many more).
func (s *state) walkResume(_ context.Context, a walkResumeArgs) (map[string]any, error) {
	w, ok := s.walks[a.Walk]
	if !ok {
		return nil, fmt.Errorf("no walk saved as %q", a.Walk)
	}
	return w.take(a.PauseAfter), nil
}

type dlqWalkArgs struct {
	Queue string `json:"queue"`
	Group string `json:"group"`
	Limit int    `json:"limit"`
	walkArgs
}

// walkDLQ walks every dead letter of a queue (and group), limit rows a page; save also keeps
// the dead letters handed over, in walk order, for dlqReplay.
func (s *state) walkDLQ(ctx context.Context, a dlqWalkArgs) (map[string]any, error) {
	rows := s.client.Admin().AllDLQ(ctx, lanes.DLQQuery{Queue: a.Queue, Group: a.Group, Limit: a.Limit})
	return s.walk(startWalk(rows, keepAs(s.dlq, a.Save)), a.walkArgs)
}

// keepAs empties saved[name] and returns what appends each row a walk hands over to it; with
// no name, it keeps nothing.
func keepAs[T any](saved map[string][]T, name string) func(T) {
	if name == "" {
		return func(T) {}
	}
	saved[name] = nil
	return func(row T) { saved[name] = append(saved[name], row) }
}

type messagesWalkArgs struct {
	Queue     string `json:"queue"`
	Partition string `json:"partition"`
	Status    string `json:"status"`
	Limit     int    `json:"limit"`
	walkArgs
}

// walkMessages walks every message the filters select, limit rows a page; save also keeps the
// messages handed over, in walk order, for the message steps' walk address.
func (s *state) walkMessages(ctx context.Context, a messagesWalkArgs) (map[string]any, error) {
	rows := s.client.Admin().AllMessages(ctx, lanes.MessageQuery{Queue: a.Queue, Partition: a.Partition,
		Status: a.Status, Limit: a.Limit})
	return s.walk(startWalk(rows, keepAs(s.walked, a.Save)), a.walkArgs)
}

type queuesWalkArgs struct {
	Queue     string `json:"queue"`
	Namespace string `json:"namespace"`
	Task      string `json:"task"`
	Limit     int    `json:"limit"`
	walkArgs
}

// walkQueues walks every queue the labels select, limit rows a page.
func (s *state) walkQueues(ctx context.Context, a queuesWalkArgs) (map[string]any, error) {
	rows := s.client.Admin().AllQueues(ctx, lanes.QueueQuery{Namespace: a.Namespace, Task: a.Task, Limit: a.Limit})
	return s.walk(startWalk(rows, func(lanes.QueueSummary) {}), a.walkArgs)
}

// walkQueueStatuses walks every queue status the filters select, limit rows a page.
func (s *state) walkQueueStatuses(ctx context.Context, a queuesWalkArgs) (map[string]any, error) {
	rows := s.client.Admin().AllQueueStatus(ctx, lanes.StatusQuery{Queue: a.Queue, Namespace: a.Namespace,
		Task: a.Task, Limit: a.Limit})
	return s.walk(startWalk(rows, func(lanes.QueueSummary) {}), a.walkArgs)
}
