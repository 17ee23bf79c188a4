// Command adapter-go is the Go SDK's conformance adapter: it reads cases as JSON Lines on
// stdin, runs each step through the public API of github.com/lanesmq/lanes/sdk-go, and writes
// one result line per case on stdout. It never speaks HTTP itself. Protocol: docs/conformance.md.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

type caseIn struct {
	Case    string            `json:"case"`
	Run     string            `json:"run"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	Client  clientOpts        `json:"client"`
	Steps   []stepIn          `json:"steps"`
}

type clientOpts struct {
	RetryAttempts   *int              `json:"retryAttempts"`
	RetryDelayMs    *int              `json:"retryDelayMs"`
	MaxRetryDelayMs *int              `json:"maxRetryDelayMs"`
	Max429Attempts  *int              `json:"max429Attempts"`
	MaxRetryAfterMs *int              `json:"maxRetryAfterMs"`
	TimeoutMs       *int              `json:"timeoutMs"`
	PopAutopilot    *bool             `json:"popAutopilot"`
	Env             map[string]string `json:"env"`
}

type stepIn struct {
	ID   string          `json:"id"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args"`
}

type stepOut struct {
	ID     string         `json:"id"`
	Result map[string]any `json:"result"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var c caseIn
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			_ = out.Encode(map[string]any{"error": "bad case line: " + err.Error()})
			continue
		}
		steps, err := runCase(c)
		res := map[string]any{"case": c.Case, "steps": steps}
		if err != nil {
			res["error"] = err.Error()
		}
		_ = out.Encode(res)
	}
}

// state is what one case's steps share: the client, saved message sets and time marks.
type state struct {
	client *lanes.Client
	saved  map[string][]*lanes.Message
	dlq    map[string][]lanes.DLQMessage
	marks  map[string]time.Time
}

func newClient(c caseIn) (*lanes.Client, error) {
	opts := []lanes.Option{lanes.WithURL(c.URL)}
	for k, v := range c.Headers {
		opts = append(opts, lanes.WithHeader(k, v))
	}
	o := c.Client
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	if o.RetryAttempts != nil {
		opts = append(opts, lanes.WithRetryAttempts(*o.RetryAttempts))
	}
	if o.RetryDelayMs != nil {
		opts = append(opts, lanes.WithRetryDelay(ms(*o.RetryDelayMs)))
	}
	if o.MaxRetryDelayMs != nil {
		opts = append(opts, lanes.WithMaxRetryDelay(ms(*o.MaxRetryDelayMs)))
	}
	if o.Max429Attempts != nil {
		opts = append(opts, lanes.WithMax429Attempts(*o.Max429Attempts))
	}
	if o.MaxRetryAfterMs != nil {
		opts = append(opts, lanes.WithMaxRetryAfter(ms(*o.MaxRetryAfterMs)))
	}
	if o.TimeoutMs != nil {
		opts = append(opts, lanes.WithTimeout(ms(*o.TimeoutMs)))
	}
	if o.PopAutopilot != nil {
		opts = append(opts, lanes.WithPopAutopilot(*o.PopAutopilot))
	}
	// Environment read by the constructor (LANES_SDK_POP_AUTOPILOT) is set around it only.
	restore := map[string]*string{}
	for k, v := range o.Env {
		if old, ok := os.LookupEnv(k); ok {
			restore[k] = &old
		} else {
			restore[k] = nil
		}
		_ = os.Setenv(k, v)
	}
	defer func() {
		for k, v := range restore {
			if v == nil {
				_ = os.Unsetenv(k)
			} else {
				_ = os.Setenv(k, *v)
			}
		}
	}()
	return lanes.New(opts...)
}

func runCase(c caseIn) ([]stepOut, error) {
	client, err := newClient(c)
	if err != nil {
		return nil, fmt.Errorf("lanes.New: %w", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.Close(ctx)
	}()
	st := &state{client: client, saved: map[string][]*lanes.Message{}, dlq: map[string][]lanes.DLQMessage{}, marks: map[string]time.Time{}}
	steps := make([]stepOut, 0, len(c.Steps))
	for _, s := range c.Steps {
		start := time.Now()
		res, err := st.step(s)
		if err != nil {
			res = map[string]any{"adapterError": err.Error()}
		}
		if res == nil {
			res = map[string]any{}
		}
		res["elapsedMs"] = time.Since(start).Milliseconds()
		steps = append(steps, stepOut{ID: s.ID, Result: res})
	}
	return steps, nil
}

// ---------------------------------------------------------------------------------------------
// step arguments

type item struct {
	Data          json.RawMessage `json:"data"`
	TransactionID string          `json:"transactionId"`
}

type queueArgs struct {
	Queue            string  `json:"queue"`
	Namespace        string  `json:"namespace"`
	Task             string  `json:"task"`
	Partition        *string `json:"partition"`
	Group            string  `json:"group"`
	SubscriptionMode string  `json:"subscriptionMode"`
	SubscriptionFrom string  `json:"subscriptionFrom"`
	Batch            int     `json:"batch"`
	Partitions       int     `json:"partitions"`
	Autopilot        *bool   `json:"autopilot"`
	Wait             *bool   `json:"wait"`
	TimeoutMs        *int    `json:"timeoutMs"`
	LeaseSeconds     int     `json:"leaseSeconds"`
	ServerAutoAck    *bool   `json:"serverAutoAck"`
}

func (s *state) builder(a queueArgs) lanes.QueueBuilder {
	q := s.client.Queue(a.Queue)
	if a.Namespace != "" {
		q = s.client.Namespace(a.Namespace)
	}
	if a.Task != "" {
		q = q.Task(a.Task)
	}
	if a.Partition != nil {
		q = q.Partition(*a.Partition)
	}
	if a.Group != "" {
		q = q.Group(a.Group)
	}
	if a.SubscriptionMode != "" {
		q = q.SubscriptionMode(a.SubscriptionMode)
	}
	if a.SubscriptionFrom != "" {
		q = q.SubscriptionFrom(a.SubscriptionFrom)
	}
	if a.Batch > 0 {
		q = q.Batch(a.Batch)
	}
	if a.Partitions > 0 {
		q = q.Partitions(a.Partitions)
	}
	if a.Autopilot != nil {
		q = q.Autopilot(*a.Autopilot)
	}
	if a.Wait != nil {
		q = q.Wait(*a.Wait)
	}
	if a.TimeoutMs != nil {
		q = q.Timeout(time.Duration(*a.TimeoutMs) * time.Millisecond)
	}
	if a.LeaseSeconds > 0 {
		q = q.LeaseSeconds(a.LeaseSeconds)
	}
	if a.ServerAutoAck != nil {
		q = q.ServerAutoAck(*a.ServerAutoAck)
	}
	return q
}

func items(in []item) []lanes.Item {
	out := make([]lanes.Item, len(in))
	for i, it := range in {
		var data any = json.RawMessage("null")
		if len(it.Data) > 0 {
			data = it.Data
		}
		out[i] = lanes.Item{Data: data, TransactionID: it.TransactionID}
	}
	return out
}

func (s *state) messages(name string, indices []int) ([]*lanes.Message, error) {
	ms, ok := s.saved[name]
	if !ok {
		return nil, fmt.Errorf("no saved messages %q", name)
	}
	if indices == nil {
		return ms, nil
	}
	out := make([]*lanes.Message, 0, len(indices))
	for _, i := range indices {
		if i < 0 || i >= len(ms) {
			return nil, fmt.Errorf("saved messages %q have no index %d", name, i)
		}
		out = append(out, ms[i])
	}
	return out, nil
}

// ---------------------------------------------------------------------------------------------
// steps

func (s *state) step(in stepIn) (map[string]any, error) {
	ctx := context.Background()
	switch in.Op {
	case "push":
		var a struct {
			queueArgs
			Items []item `json:"items"`
		}
		if err := json.Unmarshal(in.Args, &a); err != nil {
			return nil, err
		}
		res, err := s.builder(a.queueArgs).Push(ctx, items(a.Items)...)
		out := map[string]any{}
		if res != nil {
			list := make([]any, len(res))
			for i, r := range res {
				list[i] = map[string]any{"status": r.Status, "messageId": r.MessageID, "transactionId": r.TransactionID}
			}
			out["items"] = list
		}
		return withErr(out, err), nil

	case "pop":
		var a struct {
			queueArgs
			Save string `json:"save"`
		}
		if err := json.Unmarshal(in.Args, &a); err != nil {
			return nil, err
		}
		pr, err := s.builder(a.queueArgs).PopResult(ctx)
		if err != nil {
			return withErr(map[string]any{}, err), nil
		}
		if a.Save != "" {
			s.saved[a.Save] = pr.Messages
		}
		return popSummary(pr), nil

	case "ack":
		var a struct {
			Messages string `json:"messages"`
			Indices  []int  `json:"indices"`
			Status   string `json:"status"`
			Group    string `json:"group"`
			Error    string `json:"error"`
		}
		if err := json.Unmarshal(in.Args, &a); err != nil {
			return nil, err
		}
		ms, err := s.messages(a.Messages, a.Indices)
		if err != nil {
			return nil, err
		}
		res, err := s.client.Ack(ctx, ms, lanes.AckStatus(a.Status), lanes.AckOpts{Group: a.Group, Error: a.Error})
		out := map[string]any{}
		if res != nil {
			ok := make([]any, len(res))
			for i, r := range res {
				ok[i] = r.Success
			}
			out["success"] = ok
		}
		return withErr(out, err), nil

	case "renew":
		var a struct {
			Messages string `json:"messages"`
			Seconds  int    `json:"seconds"`
		}
		if err := json.Unmarshal(in.Args, &a); err != nil {
			return nil, err
		}
		ms, err := s.messages(a.Messages, nil)
		if err != nil {
			return nil, err
		}
		res, err := s.client.RenewMessages(ctx, a.Seconds, ms...)
		out := map[string]any{}
		if res != nil {
			ok := make([]any, len(res))
			for i, r := range res {
				ok[i] = r.Success
			}
			out["success"] = ok
		}
		return withErr(out, err), nil

	case "transaction":
		var a struct {
			Ops []struct {
				Push *struct {
					queueArgs
					Items []item `json:"items"`
				} `json:"push"`
				Ack *struct {
					Messages string `json:"messages"`
					Index    int    `json:"index"`
					Status   string `json:"status"`
					Group    string `json:"group"`
				} `json:"ack"`
				KV          *lanes.KVOperation `json:"kv"`
				Timer       *timerArgs         `json:"timer"`
				CancelTimer *timerArgs         `json:"cancelTimer"`
			} `json:"ops"`
		}
		if err := json.Unmarshal(in.Args, &a); err != nil {
			return nil, err
		}
		tb := s.client.Transaction()
		for _, op := range a.Ops {
			switch {
			case op.Push != nil:
				tq := tb.Queue(op.Push.Queue)
				if op.Push.Partition != nil {
					tq = tq.Partition(*op.Push.Partition)
				}
				tq.Push(items(op.Push.Items)...)
			case op.Ack != nil:
				ms, err := s.messages(op.Ack.Messages, []int{op.Ack.Index})
				if err != nil {
					return nil, err
				}
				tb.Ack(ms[0], lanes.AckStatus(op.Ack.Status), op.Ack.Group)
			case op.KV != nil:
				tb.KV(*op.KV)
			case op.Timer != nil:
				tb.Timer(lanes.TimerSchedule(op.Timer.Queue, op.Timer.Key, op.Timer.delay(), op.Timer.payload()))
			case op.CancelTimer != nil:
				tb.Timer(lanes.TimerCancel(op.CancelTimer.Queue, op.CancelTimer.Key))
			default:
				return nil, errors.New("transaction op needs push, ack, kv, timer or cancelTimer")
			}
		}
		res, err := tb.Commit(ctx)
		out := map[string]any{"ok": err == nil}
		if res != nil && len(res.KV) > 0 {
			out["kv"] = wire(res.KV)
		}
		return withErr(out, err), nil

	case "configure":
		var a struct {
			Queue     string          `json:"queue"`
			Namespace string          `json:"namespace"`
			Task      string          `json:"task"`
			Options   json.RawMessage `json:"options"`
		}
		if err := json.Unmarshal(in.Args, &a); err != nil {
			return nil, err
		}
		var opts lanes.QueueOptions
		if len(a.Options) > 0 {
			if err := json.Unmarshal(a.Options, &opts); err != nil {
				return nil, err
			}
		}
		var err error
		if a.Namespace != "" || a.Task != "" {
			_, err = s.client.Admin().ConfigureQueueLabels(ctx, a.Queue, a.Namespace, a.Task, opts, lanes.ConfigureReplace)
		} else {
			_, err = s.client.Queue(a.Queue).Configure(ctx, opts)
		}
		return withErr(map[string]any{"ok": err == nil}, err), nil

	case "seek":
		var a struct {
			Group     string  `json:"group"`
			Queue     string  `json:"queue"`
			Partition *string `json:"partition"`
			ToEnd     bool    `json:"toEnd"`
			Mark      string  `json:"mark"`
		}
		if err := json.Unmarshal(in.Args, &a); err != nil {
			return nil, err
		}
		to := lanes.SeekToEnd()
		if !a.ToEnd {
			t, ok := s.marks[a.Mark]
			if !ok {
				return nil, fmt.Errorf("no mark %q", a.Mark)
			}
			to = lanes.SeekToTime(t)
		}
		var err error
		if a.Partition != nil {
			_, err = s.client.Admin().SeekConsumerGroupPartition(ctx, a.Group, a.Queue, *a.Partition, to)
		} else {
			_, err = s.client.Admin().SeekConsumerGroup(ctx, a.Group, a.Queue, to)
		}
		return withErr(map[string]any{"ok": err == nil}, err), nil

	case "mark":
		var a struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(in.Args, &a); err != nil {
			return nil, err
		}
		s.marks[a.Name] = time.Now()
		return map[string]any{"ok": true}, nil

	case "sleep":
		var a struct {
			Ms int `json:"ms"`
		}
		if err := json.Unmarshal(in.Args, &a); err != nil {
			return nil, err
		}
		time.Sleep(time.Duration(a.Ms) * time.Millisecond)
		return map[string]any{}, nil

	case "dlq":
		var a struct {
			Queue string `json:"queue"`
			Group string `json:"group"`
			Save  string `json:"save"`
		}
		if err := json.Unmarshal(in.Args, &a); err != nil {
			return nil, err
		}
		list, err := s.client.Admin().ListDLQ(ctx, lanes.DLQQuery{Queue: a.Queue, Group: a.Group})
		if err != nil {
			return withErr(map[string]any{}, err), nil
		}
		if a.Save != "" {
			s.dlq[a.Save] = list.Messages
		}
		data := []any{}
		for _, m := range list.Messages {
			data = append(data, m.Data)
		}
		return map[string]any{"count": len(data), "data": data}, nil

	case "consume":
		return s.consume(in.Args)
	}
	if out, ok, err := s.stateStep(ctx, in); ok {
		return out, err
	}
	if out, ok, err := s.adminStep(ctx, in); ok {
		return out, err
	}
	if out, ok, err := s.resourceStep(ctx, in); ok {
		return out, err
	}
	return map[string]any{"unsupported": in.Op}, nil
}

func popSummary(pr *lanes.PopResult) map[string]any {
	data, parts, tids := []any{}, []any{}, []any{}
	leases := map[string]bool{}
	for _, m := range pr.Messages {
		data = append(data, m.Data)
		parts = append(parts, m.Partition)
		tids = append(tids, m.TransactionID)
		if m.LeaseID != "" {
			leases[m.LeaseID] = true
		}
	}
	var echo any
	if pr.Autopilot != nil {
		echo = map[string]any{"partitions": pr.Autopilot.Partitions, "batch": pr.Autopilot.Batch}
	}
	return map[string]any{"count": len(pr.Messages), "data": data, "partitions": parts,
		"transactionIds": tids, "leases": len(leases), "autopilot": echo}
}

// ---------------------------------------------------------------------------------------------
// consume

type handlerSpec struct {
	SleepMs      int  `json:"sleepMs"`
	FirstSleepMs int  `json:"firstSleepMs"`
	HonourCancel bool `json:"honourCancel"`
	Fail         []struct {
		Data  json.RawMessage `json:"data"`
		Times int             `json:"times"`
	} `json:"fail"`
}

func canonical(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func (s *state) consume(raw json.RawMessage) (map[string]any, error) {
	var a struct {
		queueArgs
		Concurrency  int         `json:"concurrency"`
		Limit        int         `json:"limit"`
		IdleMs       int         `json:"idleMs"`
		RenewEveryMs int         `json:"renewEveryMs"`
		AutoAck      *bool       `json:"autoAck"`
		Handler      handlerSpec `json:"handler"`
		StopAfterMs  int         `json:"stopAfterMs"`
		StopWhen     int         `json:"stopWhenHandled"`
		Stop         string      `json:"stop"`
		MaxMs        int         `json:"maxMs"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, err
	}
	q := s.builder(a.queueArgs)
	if a.Concurrency > 0 {
		q = q.Concurrency(a.Concurrency)
	}
	if a.Limit > 0 {
		q = q.Limit(a.Limit)
	}
	if a.IdleMs > 0 {
		q = q.IdleTimeout(time.Duration(a.IdleMs) * time.Millisecond)
	}
	if a.RenewEveryMs > 0 {
		q = q.RenewLease(true, time.Duration(a.RenewEveryMs)*time.Millisecond)
	}
	if a.AutoAck != nil {
		q = q.AutoAck(*a.AutoAck)
	}
	var mu sync.Mutex
	handled := []any{}
	byPartition := map[string][]any{}
	onErrors := []any{}
	failLeft := map[string]int{}
	for _, f := range a.Handler.Fail {
		failLeft[canonical(f.Data)] += max(f.Times, 1)
	}
	calls := 0
	q = q.OnError(func(err error) {
		mu.Lock()
		onErrors = append(onErrors, errKind(err))
		mu.Unlock()
	})
	c, err := q.Consume(context.Background(), func(ctx context.Context, m *lanes.Message) error {
		key := canonical(m.Data)
		mu.Lock()
		handled = append(handled, m.Data)
		byPartition[m.Partition] = append(byPartition[m.Partition], m.Data)
		calls++
		sleep := a.Handler.SleepMs
		if calls == 1 && a.Handler.FirstSleepMs > 0 {
			sleep = a.Handler.FirstSleepMs
		}
		fail := failLeft[key] > 0
		if fail {
			failLeft[key]--
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
		if fail {
			return errors.New("handler failure (scripted)")
		}
		return nil
	})
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
		// Stop relative to the handler's progress, not to the start (robust under load).
		for {
			mu.Lock()
			n := len(handled)
			mu.Unlock()
			if n >= a.StopWhen || time.Since(started) > maxWait {
				break
			}
			select {
			case <-c.Done():
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
	mu.Unlock()
	return withErr(out, c.Err()), nil
}

// ---------------------------------------------------------------------------------------------
// errors

func withErr(out map[string]any, err error) map[string]any {
	if err != nil {
		out["error"] = errKind(err)
	}
	return out
}

// errKind maps an SDK error to the protocol's neutral shape.
func errKind(err error) map[string]any {
	var (
		pe  *lanes.PushError
		ae  *lanes.AckError
		te  *lanes.TransactionError
		api *lanes.APIError
	)
	switch {
	case errors.As(err, &pe):
		return map[string]any{"kind": "push", "message": err.Error()}
	case errors.As(err, &ae):
		return map[string]any{"kind": "ack", "message": err.Error()}
	case errors.As(err, &te):
		out := map[string]any{"kind": "transaction", "reason": te.Reason, "message": err.Error()}
		if te.KVReason != "" {
			out["kvReason"] = te.KVReason
		}
		if te.FailedIndex != nil {
			out["failedIndex"] = *te.FailedIndex
		}
		return out
	case errors.As(err, &api):
		kind := map[int]string{429: "rate_limited", 403: "forbidden", 413: "payload_too_large", 404: "not_found", 501: "not_implemented"}[api.Status]
		if kind == "" {
			kind = "api"
		}
		return map[string]any{"kind": kind, "status": api.Status, "code": api.Code, "message": api.Message}
	case errors.Is(err, lanes.ErrConnection):
		return map[string]any{"kind": "connection", "message": err.Error()}
	default:
		return map[string]any{"kind": "other", "message": strings.TrimSpace(err.Error())}
	}
}
