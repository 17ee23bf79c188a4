package main

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

type handlerSpec struct {
	SleepMs      int        `json:"sleepMs"`
	FirstSleepMs int        `json:"firstSleepMs"`
	HonourCancel bool       `json:"honourCancel"`
	Ack          string     `json:"ack"`
	Fail         []failSpec `json:"fail"`
	// Batch makes it a batch handler (ConsumeBatch): one call per partition slice, failing
	// whole when a fail entry matches any of its messages, acking the slice in one call.
	Batch bool `json:"batch"`
}

// failSpec scripts a handler failure: a plain error, or the SDK's own error for want of a broker
// (Connection: a *lanes.ConnectionError; Status: an *lanes.APIError of that status).
type failSpec struct {
	Data       json.RawMessage `json:"data"`
	Times      int             `json:"times"`
	Status     int             `json:"status"`
	Connection bool            `json:"connection"`
}

// handlerFailure is the error a scripted failure returns.
func handlerFailure(f failSpec) error {
	const text = "handler failure (scripted)"
	switch {
	case f.Connection:
		return &lanes.ConnectionError{URL: "http://127.0.0.1:1", Err: errors.New(text)}
	case f.Status > 0:
		return &lanes.APIError{Status: f.Status, Code: "scripted", Message: text}
	}
	return errors.New(text)
}

func canonical(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

type consumeArgs struct {
	queueArgs
	Concurrency int `json:"concurrency"`
	loopArgs
	RenewEveryMs int         `json:"renewEveryMs"`
	SoftStopMs   int         `json:"softStopTimeoutMs"`
	ReportErrors bool        `json:"reportHandlerErrors"`
	Handler      handlerSpec `json:"handler"`
	StopAfterMs  int         `json:"stopAfterMs"`
	StopWhen     int         `json:"stopWhenHandled"`
	Stop         string      `json:"stop"`
	MaxMs        int         `json:"maxMs"`
}

func (s *state) consume(ctx context.Context, a consumeArgs) (map[string]any, error) {
	q := a.apply(s.builder(a.queueArgs))
	if a.Concurrency > 0 {
		q = q.Concurrency(a.Concurrency)
	}
	if a.RenewEveryMs > 0 {
		q = q.RenewLease(true, time.Duration(a.RenewEveryMs)*time.Millisecond)
	}
	if a.SoftStopMs > 0 {
		q = q.SoftStopTimeout(time.Duration(a.SoftStopMs) * time.Millisecond)
	}
	if a.ReportErrors {
		q = q.ReportHandlerErrors(true)
	}
	var mu sync.Mutex
	handled := []any{}
	byPartition := map[string][]any{}
	onErrors := []any{}
	failLeft := map[string]int{}
	failAs := map[string]failSpec{}
	for _, f := range a.Handler.Fail {
		failLeft[canonical(f.Data)] += max(f.Times, 1)
		failAs[canonical(f.Data)] = f
	}
	calls := 0
	q = q.OnError(func(err error) {
		mu.Lock()
		onErrors = append(onErrors, errKind(err))
		mu.Unlock()
	})
	batches := []any{}
	// handle runs the script for one call: the message of a Consume handler, or the partition
	// slice of a ConsumeBatch handler.
	handle := func(ctx context.Context, ms []*lanes.Message) error {
		mu.Lock()
		calls++
		sleep := a.Handler.SleepMs
		if calls == 1 && a.Handler.FirstSleepMs > 0 {
			sleep = a.Handler.FirstSleepMs
		}
		var fail *failSpec
		slice := []any{}
		for _, m := range ms {
			key := canonical(m.Data)
			handled = append(handled, m.Data)
			slice = append(slice, m.Data)
			byPartition[m.Partition] = append(byPartition[m.Partition], m.Data)
			if failLeft[key] > 0 {
				failLeft[key]--
				f := failAs[key]
				fail = &f
			}
		}
		if a.Handler.Batch {
			batches = append(batches, slice)
		}
		mu.Unlock()
		if sleep > 0 {
			if a.Handler.HonourCancel {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Duration(sleep) * time.Millisecond):
				}
			} else {
				time.Sleep(time.Duration(sleep) * time.Millisecond)
			}
		}
		if fail != nil {
			return handlerFailure(*fail)
		}
		if a.Handler.Ack != "" {
			_, err := s.client.Ack(ctx, ms, lanes.AckStatus(a.Handler.Ack))
			return err
		}
		return nil
	}
	var (
		c   *lanes.Consumer
		err error
	)
	if a.Handler.Batch {
		c, err = q.ConsumeBatch(ctx, func(ctx context.Context, ms []*lanes.Message) error { return handle(ctx, ms) })
	} else {
		c, err = q.Consume(ctx, func(ctx context.Context, m *lanes.Message) error { return handle(ctx, []*lanes.Message{m}) })
	}
	if err != nil {
		return withErr(map[string]any{}, err), nil
	}
	out := map[string]any{}
	started := time.Now()
	maxWait := 20 * time.Second
	if a.MaxMs > 0 {
		maxWait = time.Duration(a.MaxMs) * time.Millisecond
	}
	deadline := time.NewTimer(maxWait)
	defer deadline.Stop()
	if a.StopWhen > 0 {
		// Stop relative to the handler's progress, not to the start (robust under load); a loop
		// that ends on its own ends the wait.
	progress:
		for {
			mu.Lock()
			n := len(handled)
			mu.Unlock()
			if n >= a.StopWhen || time.Since(started) > maxWait {
				break
			}
			select {
			case <-c.Done():
				break progress
			case <-time.After(5 * time.Millisecond):
			}
		}
		a.StopAfterMs = max(a.StopAfterMs, 1)
	}
	if a.StopAfterMs > 0 {
		select {
		case <-c.Done():
		case <-time.After(time.Duration(a.StopAfterMs) * time.Millisecond):
			stopStart := time.Now()
			sctx, cancel := context.WithTimeout(context.Background(), maxWait)
			var serr error
			if a.Stop == "hard" {
				serr = c.StopAndCancel(sctx)
			} else {
				serr = c.Stop(sctx)
			}
			cancel()
			out["stopMs"] = time.Since(stopStart).Milliseconds()
			if serr != nil {
				out["stopError"] = errKind(serr)
			}
		}
	}
	select {
	case <-c.Done():
	case <-deadline.C:
		out["timedOut"] = true
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = c.StopAndCancel(sctx)
		cancel()
	}
	mu.Lock()
	out["handled"] = handled
	out["byPartition"] = byPartition
	out["onError"] = onErrors
	if a.Handler.Batch {
		out["batches"] = batches
	}
	mu.Unlock()
	return withErr(out, c.Err()), nil
}
