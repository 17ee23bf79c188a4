package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

type item struct {
	Data          json.RawMessage `json:"data"`
	TransactionID string          `json:"transactionId"`
	TraceID       string          `json:"traceId"`
	// NotJSON makes the item's data a value JSON has no form for ({"amount": NaN}), which a
	// case cannot write.
	NotJSON bool `json:"notJSON"`
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
		if it.NotJSON {
			data = map[string]any{"amount": math.NaN()}
		}
		out[i] = lanes.Item{Data: data, TransactionID: it.TransactionID, TraceID: it.TraceID}
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

type pushArgs struct {
	queueArgs
	Items []item `json:"items"`
	// DeadlineMs is the caller's deadline for the call: a context with that timeout.
	DeadlineMs int `json:"deadlineMs"`
}

func (s *state) push(ctx context.Context, a pushArgs) (map[string]any, error) {
	if a.DeadlineMs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(a.DeadlineMs)*time.Millisecond)
		defer cancel()
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
}

type popArgs struct {
	queueArgs
	Save string `json:"save"`
}

func (s *state) pop(ctx context.Context, a popArgs) (map[string]any, error) {
	pr, err := s.builder(a.queueArgs).PopResult(ctx)
	if err != nil {
		return withErr(map[string]any{}, err), nil
	}
	if a.Save != "" {
		s.saved[a.Save] = pr.Messages
	}
	return popSummary(pr), nil
}

type ackArgs struct {
	Messages string `json:"messages"`
	Indices  []int  `json:"indices"`
	Status   string `json:"status"`
	Group    string `json:"group"`
	Error    string `json:"error"`
	// TransactionID, when set, names another message under the saved messages' lease.
	TransactionID string `json:"transactionId"`
	WithoutLease  bool   `json:"withoutLease"`
}

func (s *state) ack(ctx context.Context, a ackArgs) (map[string]any, error) {
	ms, err := s.messages(a.Messages, a.Indices)
	if err != nil {
		return nil, err
	}
	if a.TransactionID != "" {
		renamed := make([]*lanes.Message, len(ms))
		for i, m := range ms {
			c := *m
			c.TransactionID = a.TransactionID
			renamed[i] = &c
		}
		ms = renamed
	}
	res, err := s.client.Ack(ctx, ms, lanes.AckStatus(a.Status), lanes.AckOpts{Group: a.Group, Error: a.Error, WithoutLease: a.WithoutLease})
	out := successList(res, func(r lanes.AckResult) bool { return r.Success }, err)
	if res != nil {
		out["results"] = wire(res)
	}
	return out, nil
}

type renewArgs struct {
	Messages string `json:"messages"`
	Seconds  int    `json:"seconds"`
}

func (s *state) renew(ctx context.Context, a renewArgs) (map[string]any, error) {
	ms, err := s.messages(a.Messages, nil)
	if err != nil {
		return nil, err
	}
	res, err := s.client.RenewMessages(ctx, a.Seconds, ms...)
	return successList(res, func(r lanes.RenewResult) bool { return r.Success }, err), nil
}

// successList is an ack's or a renewal's result: one success flag per message (present even
// beside an error when the SDK answered per-message results), and the error.
func successList[R any](res []R, success func(R) bool, err error) map[string]any {
	out := map[string]any{}
	if res != nil {
		flags := make([]any, len(res))
		for i, r := range res {
			flags[i] = success(r)
		}
		out["success"] = flags
	}
	return withErr(out, err)
}

type transactionArgs struct {
	Ops []struct {
		Push *pushArgs `json:"push"`
		Ack  *struct {
			Messages string `json:"messages"`
			Index    int    `json:"index"`
			Status   string `json:"status"`
			Group    string `json:"group"`
			Error    string `json:"error"`
			// WithoutLease asks for a lease-less ack, which a transaction has no form of.
			WithoutLease bool `json:"withoutLease"`
		} `json:"ack"`
		KV          *lanes.KVOperation `json:"kv"`
		Timer       *timerArgs         `json:"timer"`
		CancelTimer *timerArgs         `json:"cancelTimer"`
	} `json:"ops"`
}

func (s *state) transaction(ctx context.Context, a transactionArgs) (map[string]any, error) {
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
			tb.AckWith(ms[0], lanes.AckStatus(op.Ack.Status), lanes.AckOpts{Group: op.Ack.Group, Error: op.Ack.Error,
				WithoutLease: op.Ack.WithoutLease})
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
}

type configureArgs struct {
	Queue     string          `json:"queue"`
	Namespace string          `json:"namespace"`
	Task      string          `json:"task"`
	Options   json.RawMessage `json:"options"`
}

func (s *state) configure(ctx context.Context, a configureArgs) (map[string]any, error) {
	// Strict: Go's typed QueueOptions cannot carry an unknown option, so dropping one would run
	// the step with defaults where TypeScript and Python send it and get 400 invalid_option.
	var opts lanes.QueueOptions
	if len(a.Options) > 0 {
		dec := json.NewDecoder(bytes.NewReader(a.Options))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&opts); err != nil {
			return nil, fmt.Errorf("configure options: %w", err)
		}
	}
	var err error
	if a.Namespace != "" || a.Task != "" {
		_, err = s.client.Admin().ConfigureQueueLabels(ctx, a.Queue, a.Namespace, a.Task, opts, lanes.ConfigureReplace)
	} else {
		_, err = s.client.Queue(a.Queue).Configure(ctx, opts)
	}
	return withErr(map[string]any{"ok": err == nil}, err), nil
}

type seekArgs struct {
	Group     string  `json:"group"`
	Queue     string  `json:"queue"`
	Partition *string `json:"partition"`
	ToEnd     bool    `json:"toEnd"`
	Mark      string  `json:"mark"`
}

func (s *state) seek(ctx context.Context, a seekArgs) (map[string]any, error) {
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
}

type markArgs struct {
	Name string `json:"name"`
}

func (s *state) mark(_ context.Context, a markArgs) (map[string]any, error) {
	s.marks[a.Name] = time.Now()
	return map[string]any{"ok": true}, nil
}

type sleepArgs struct {
	Ms int `json:"ms"`
}

func sleepStep(_ context.Context, a sleepArgs) (map[string]any, error) {
	time.Sleep(time.Duration(a.Ms) * time.Millisecond)
	return map[string]any{}, nil
}

type dlqArgs struct {
	Queue  string `json:"queue"`
	Group  string `json:"group"`
	Save   string `json:"save"`
	Limit  int    `json:"limit"`
	Offset int    `json:"offset"`
	pageArgs
}

func (s *state) listDLQ(ctx context.Context, a dlqArgs) (map[string]any, error) {
	after, err := s.after(a.pageArgs)
	if err != nil {
		return nil, err
	}
	list, err := s.client.Admin().ListDLQ(ctx, lanes.DLQQuery{Queue: a.Queue, Group: a.Group, Limit: a.Limit, Offset: a.Offset, After: after})
	if err != nil {
		return withErr(map[string]any{}, err), nil
	}
	if a.Save != "" {
		s.dlq[a.Save] = list.Messages
		s.pages[a.Save] = list.NextAfter
	}
	data := []any{}
	for _, m := range list.Messages {
		data = append(data, m.Data)
	}
	return map[string]any{"count": len(data), "data": data, "rows": wire(list.Messages),
		"truncated": list.Truncated, "nextAfter": list.NextAfter}, nil
}

// pageArgs place a listing page: after, a raw key, or afterPage, the nextAfter of a page an
// earlier step saved (a key is opaque, so a case cannot write one).
type pageArgs struct {
	After     string `json:"after"`
	AfterPage string `json:"afterPage"`
}

// after is the key the step sends ("" = none).
func (s *state) after(a pageArgs) (string, error) {
	if a.AfterPage == "" {
		return a.After, nil
	}
	next, ok := s.pages[a.AfterPage]
	if !ok || next == nil {
		return "", fmt.Errorf("no saved page %q with a nextAfter", a.AfterPage)
	}
	return *next, nil
}

func popSummary(pr *lanes.PopResult) map[string]any {
	data, parts, tids, ids, traces := []any{}, []any{}, []any{}, []any{}, []any{}
	leases := map[string]bool{}
	for _, m := range pr.Messages {
		data = append(data, m.Data)
		parts = append(parts, m.Partition)
		tids = append(tids, m.TransactionID)
		ids = append(ids, m.ID)
		var trace any // null when the message has none
		if m.TraceID != nil && *m.TraceID != "" {
			trace = *m.TraceID
		}
		traces = append(traces, trace)
		if m.LeaseID != "" {
			leases[m.LeaseID] = true
		}
	}
	var echo any
	if pr.Autopilot != nil {
		echo = map[string]any{"partitions": pr.Autopilot.Partitions, "batch": pr.Autopilot.Batch}
	}
	return map[string]any{"count": len(pr.Messages), "data": data, "partitions": parts,
		"transactionIds": tids, "messageIds": ids, "traceIds": traces, "leases": len(leases), "autopilot": echo}
}
