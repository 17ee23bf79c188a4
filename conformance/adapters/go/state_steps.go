package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// wire turns an SDK result into its wire JSON (the field names of openapi.yaml), which is the
// neutral shape the KV, timer and admin steps report.
func wire(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return map[string]any{"adapterError": err.Error()}
	}
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// wireResult is wire for an object result, merged into the step result.
func wireResult(v any, err error) map[string]any {
	out := map[string]any{}
	if err == nil {
		if m, ok := wire(v).(map[string]any); ok {
			out = m
		}
	}
	return withErr(out, err)
}

// timerArgs are a timer step's (and a transaction timer op's) arguments.
type timerArgs struct {
	Queue   string          `json:"queue"`
	Key     string          `json:"key"`
	DelayMs int             `json:"delayMs"`
	Data    json.RawMessage `json:"data"`
	Limit   int             `json:"limit"`
	After   string          `json:"after"`
	Prefix  string          `json:"prefix"`
	// Partition and TransactionID place the fired message (timerSchedule, timerReschedule and
	// a timerBatch op).
	Partition     *string `json:"partition"`
	TransactionID string  `json:"transactionId"`
}

func (t timerArgs) delay() time.Duration { return time.Duration(t.DelayMs) * time.Millisecond }

// payload is the JSON text the fired message carries (the Go SDK takes it as bytes); a step
// without data sends none, as the other adapters do.
func (t timerArgs) payload() []byte {
	if len(t.Data) == 0 {
		return nil
	}
	return []byte(canonical(t.Data))
}

// kvArgs are the arguments of kvGet, kvPut and kvDelete.
type kvArgs struct {
	NS         string          `json:"ns"`
	Key        string          `json:"key"`
	Value      json.RawMessage `json:"value"`
	TTLSeconds *float64        `json:"ttlSeconds"`
	// Expect makes kvPut a PutExpect (0 = the key must not exist) and kvDelete a DeleteExpect;
	// IfAbsent makes kvPut a PutIfAbsent.
	Expect   *int `json:"expect"`
	IfAbsent bool `json:"ifAbsent"`
}

// ttlOf is the SDK ttl of a step's ttlSeconds: absent is lanes.Forever; a number, 0 and
// fractions included, is passed on as given, so a case pins the SDK's own ttl rule.
func ttlOf(seconds *float64) time.Duration {
	if seconds == nil {
		return lanes.Forever
	}
	return time.Duration(*seconds * float64(time.Second))
}

func (s *state) kvGet(ctx context.Context, a kvArgs) (map[string]any, error) {
	return wireResult(s.client.KV(a.NS).Get(ctx, a.Key)), nil
}

func (s *state) kvPut(ctx context.Context, a kvArgs) (map[string]any, error) {
	var v any = json.RawMessage("null")
	if len(a.Value) > 0 {
		v = a.Value
	}
	kv := s.client.KV(a.NS)
	switch {
	case a.IfAbsent:
		return wireResult(kv.PutIfAbsent(ctx, a.Key, v, ttlOf(a.TTLSeconds))), nil
	case a.Expect != nil:
		return wireResult(kv.PutExpect(ctx, a.Key, v, ttlOf(a.TTLSeconds), *a.Expect)), nil
	}
	return wireResult(kv.Put(ctx, a.Key, v, ttlOf(a.TTLSeconds))), nil
}

func (s *state) kvDelete(ctx context.Context, a kvArgs) (map[string]any, error) {
	if a.Expect != nil {
		return wireResult(s.client.KV(a.NS).DeleteExpect(ctx, a.Key, *a.Expect)), nil
	}
	return wireResult(s.client.KV(a.NS).Delete(ctx, a.Key)), nil
}

// kvIncrArgs are the arguments of kvIncr; Delta absent is 1, TTLSeconds absent is forever.
type kvIncrArgs struct {
	NS         string   `json:"ns"`
	Key        string   `json:"key"`
	Delta      *int     `json:"delta"`
	TTLSeconds *float64 `json:"ttlSeconds"`
	Min        *int     `json:"min"`
	Max        *int     `json:"max"`
}

func (s *state) kvIncr(ctx context.Context, a kvIncrArgs) (map[string]any, error) {
	delta := 1
	if a.Delta != nil {
		delta = *a.Delta
	}
	return wireResult(s.client.KV(a.NS).Incr(ctx, a.Key, delta, ttlOf(a.TTLSeconds), lanes.KVIncrOpts{Min: a.Min, Max: a.Max})), nil
}

type kvBatchArgs struct {
	Ops []lanes.KVOperation `json:"ops"`
}

func (s *state) kvBatch(ctx context.Context, a kvBatchArgs) (map[string]any, error) {
	ns := ""
	if len(a.Ops) > 0 {
		ns = a.Ops[0].Ns
	}
	res, err := s.client.KV(ns).Batch(ctx, a.Ops...)
	out := map[string]any{}
	if err == nil {
		out["results"] = wire(res)
	}
	return withErr(out, err), nil
}

func (s *state) timerSchedule(ctx context.Context, a timerArgs) (map[string]any, error) {
	return wireResult(s.placedTimers(a).Schedule(ctx, a.Key, a.delay(), a.payload())), nil
}

func (s *state) timerReschedule(ctx context.Context, a timerArgs) (map[string]any, error) {
	return wireResult(s.placedTimers(a).Reschedule(ctx, a.Key, a.delay(), a.payload())), nil
}

// placedTimers is the step's queue's timers, firing into the step's partition under its id.
func (s *state) placedTimers(a timerArgs) lanes.Timers {
	t := s.client.Timers(a.Queue)
	if a.Partition != nil {
		t = t.Partition(*a.Partition)
	}
	if a.TransactionID != "" {
		t = t.TransactionID(a.TransactionID)
	}
	return t
}

type timerBatchArgs struct {
	Ops []struct {
		Op string `json:"op"`
		timerArgs
	} `json:"ops"`
}

// timerBatch sends the ops through Timers.Batch, built with the SDK's op builders.
func (s *state) timerBatch(ctx context.Context, a timerBatchArgs) (map[string]any, error) {
	ops := make([]lanes.TimerOperation, 0, len(a.Ops))
	for _, o := range a.Ops {
		var op lanes.TimerOperation
		switch o.Op {
		case "schedule":
			op = lanes.TimerSchedule(o.Queue, o.Key, o.delay(), o.payload())
		case "reschedule":
			op = lanes.TimerReschedule(o.Queue, o.Key, o.delay(), o.payload())
		case "cancel":
			op = lanes.TimerCancel(o.Queue, o.Key)
		default:
			return nil, fmt.Errorf("timer op %q: want schedule, reschedule or cancel", o.Op)
		}
		op.Partition = o.Partition
		if o.TransactionID != "" {
			op.Txn = &o.TransactionID
		}
		ops = append(ops, op)
	}
	queue := ""
	if len(a.Ops) > 0 {
		queue = a.Ops[0].Queue
	}
	res, err := s.client.Timers(queue).Batch(ctx, ops...)
	out := map[string]any{}
	if err == nil {
		out["results"] = wire(res)
	}
	return withErr(out, err), nil
}

func (s *state) timerGet(ctx context.Context, a timerArgs) (map[string]any, error) {
	return wireResult(s.client.Timers(a.Queue).Get(ctx, a.Key)), nil
}

func (s *state) timerCancel(ctx context.Context, a timerArgs) (map[string]any, error) {
	return wireResult(s.client.Timers(a.Queue).Cancel(ctx, a.Key)), nil
}

func (s *state) timerList(ctx context.Context, a timerArgs) (map[string]any, error) {
	return wireResult(s.client.Timers(a.Queue).ListPrefix(ctx, a.Prefix, a.Limit, a.After)), nil
}

// address is a message step's target: a saved message (messages + index), a message a message
// walk handed over (walk + index, in walk order), or raw ids.
type address struct {
	Messages      string `json:"messages"`
	Walk          string `json:"walk"`
	Index         int    `json:"index"`
	PartitionID   string `json:"partitionId"`
	TransactionID string `json:"transactionId"`
}

func (s *state) address(a address) (partitionID, transactionID string, err error) {
	if a.Walk != "" {
		rows, ok := s.walked[a.Walk]
		if !ok || a.Index < 0 || a.Index >= len(rows) {
			return "", "", fmt.Errorf("no message %s[%d] handed over by a message walk", a.Walk, a.Index)
		}
		return rows[a.Index].PartitionId, rows[a.Index].TransactionId, nil
	}
	if a.Messages == "" {
		return a.PartitionID, a.TransactionID, nil
	}
	ms, err := s.messages(a.Messages, []int{a.Index})
	if err != nil {
		return "", "", err
	}
	return ms[0].PartitionID, ms[0].TransactionID, nil
}

// groupNames keeps the names that start with prefix (other cases' groups share the broker), sorted.
func groupNames(names []string, prefix string) []any {
	out := []any{}
	slices.Sort(names)
	names = slices.Compact(names)
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}

type dlqReplayArgs struct {
	DLQ       string `json:"dlq"`
	Index     int    `json:"index"`
	ID        string `json:"id"`
	Queue     string `json:"queue"`
	Partition string `json:"partition"`
}

func (s *state) dlqReplay(ctx context.Context, a dlqReplayArgs) (map[string]any, error) {
	id := a.ID
	if a.DLQ != "" {
		list, ok := s.dlq[a.DLQ]
		if !ok || a.Index < 0 || a.Index >= len(list) {
			return nil, fmt.Errorf("no saved dead letter %s[%d]", a.DLQ, a.Index)
		}
		id = list[a.Index].Id
	}
	return wireResult(s.client.Admin().ReplayDLQ(ctx, id, a.Queue, a.Partition)), nil
}

type dlqPurgeArgs struct {
	Queue string `json:"queue"`
	Group string `json:"group"`
}

func (s *state) dlqPurge(ctx context.Context, a dlqPurgeArgs) (map[string]any, error) {
	return wireResult(s.client.Admin().PurgeDLQ(ctx, a.Queue, a.Group)), nil
}

// messageStep is messageGet, messageDelete or messageRetry: call on the addressed message.
func messageStep[R any](s *state, call func(ctx context.Context, partitionID, transactionID string) (R, error)) stepFunc {
	return decodeArgs(func(ctx context.Context, a address) (map[string]any, error) {
		pid, tid, err := s.address(a)
		if err != nil {
			return nil, err
		}
		return wireResult(call(ctx, pid, tid)), nil
	})
}

type prefixArgs struct {
	Prefix string `json:"prefix"`
}

func (s *state) groups(ctx context.Context, a prefixArgs) (map[string]any, error) {
	list, err := s.client.Admin().ListConsumerGroups(ctx)
	if err != nil {
		return withErr(map[string]any{}, err), nil
	}
	names := make([]string, 0, len(list))
	for _, g := range list {
		names = append(names, g.Name)
	}
	return map[string]any{"names": groupNames(names, a.Prefix)}, nil
}

type groupDeleteArgs struct {
	Group          string `json:"group"`
	Queue          string `json:"queue"`
	DeleteMetadata *bool  `json:"deleteMetadata"`
}

func (s *state) groupDelete(ctx context.Context, a groupDeleteArgs) (map[string]any, error) {
	meta := a.DeleteMetadata == nil || *a.DeleteMetadata
	if a.Queue != "" {
		return wireResult(s.client.Admin().DeleteConsumerGroupForQueue(ctx, a.Group, a.Queue, meta)), nil
	}
	return wireResult(s.client.Admin().DeleteConsumerGroup(ctx, a.Group, meta)), nil
}

type laggingArgs struct {
	MinLagSeconds int    `json:"minLagSeconds"`
	Prefix        string `json:"prefix"`
}

func (s *state) lagging(ctx context.Context, a laggingArgs) (map[string]any, error) {
	list, err := s.client.Admin().LaggingConsumerGroups(ctx, time.Duration(a.MinLagSeconds)*time.Second)
	if err != nil {
		return withErr(map[string]any{}, err), nil
	}
	names := make([]string, 0, len(list))
	for _, g := range list {
		names = append(names, g.ConsumerGroup)
	}
	return map[string]any{"names": groupNames(names, a.Prefix)}, nil
}
