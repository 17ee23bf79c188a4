package main

import (
	"context"
	"sync"
	"time"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// loopArgs are the settings the consume and iterate steps share.
type loopArgs struct {
	Limit   int   `json:"limit"`
	IdleMs  int   `json:"idleMs"`
	AutoAck *bool `json:"autoAck"`
}

func (a loopArgs) apply(q lanes.QueueBuilder) lanes.QueueBuilder {
	if a.Limit > 0 {
		q = q.Limit(a.Limit)
	}
	if a.IdleMs > 0 {
		q = q.IdleTimeout(time.Duration(a.IdleMs) * time.Millisecond)
	}
	if a.AutoAck != nil {
		q = q.AutoAck(*a.AutoAck)
	}
	return q
}

type iterateArgs struct {
	queueArgs
	loopArgs
	// Break leaves the loop in the body of that message (1-based): the message in hand is
	// released with the unhandled rest, or with autoAck false left to the caller.
	Break int `json:"break"`
	MaxMs int `json:"maxMs"`
}

// iterate ranges over the builder's Messages until the iteration ends on its own (limit, idle, a
// terminal error) or the body breaks; at maxMs the range's context is canceled (timedOut).
func (s *state) iterate(ctx context.Context, a iterateArgs) (map[string]any, error) {
	q := a.apply(s.builder(a.queueArgs))
	var mu sync.Mutex
	onErrors := []any{}
	q = q.OnError(func(err error) {
		mu.Lock()
		onErrors = append(onErrors, errKind(err))
		mu.Unlock()
	})
	maxWait := 20 * time.Second
	if a.MaxMs > 0 {
		maxWait = time.Duration(a.MaxMs) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, maxWait)
	defer cancel()
	handled := []any{}
	byPartition := map[string][]any{}
	out := map[string]any{}
	for m, err := range q.Messages(ctx) {
		if err != nil {
			out["error"] = errKind(err)
			break
		}
		handled = append(handled, m.Data)
		byPartition[m.Partition] = append(byPartition[m.Partition], m.Data)
		if len(handled) == a.Break {
			break
		}
	}
	if ctx.Err() != nil {
		out["timedOut"] = true
	}
	out["handled"] = handled
	out["byPartition"] = byPartition
	mu.Lock()
	out["onError"] = onErrors
	mu.Unlock()
	return out, nil
}
