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
}

func (t timerArgs) delay() time.Duration { return time.Duration(t.DelayMs) * time.Millisecond }

// payload is the JSON text the fired message carries (the Go SDK takes it as bytes).
func (t timerArgs) payload() []byte {
	if len(t.Data) == 0 {
		return []byte("null")
	}
	return []byte(canonical(t.Data))
}

// stateStep runs the KV and timer steps; ok is false for any other op.
func (s *state) stateStep(ctx context.Context, in stepIn) (map[string]any, bool, error) {
	switch in.Op {
	case "kvGet", "kvPut", "kvDelete":
		var a struct {
			NS         string          `json:"ns"`
			Key        string          `json:"key"`
			Value      json.RawMessage `json:"value"`
			TTLSeconds int             `json:"ttlSeconds"`
		}
		if err := json.Unmarshal(in.Args, &a); err != nil {
			return nil, true, err
		}
		kv := s.client.KV(a.NS)
		var (
			r   *lanes.KVResult
			err error
		)
		switch in.Op {
		case "kvGet":
			r, err = kv.Get(ctx, a.Key)
		case "kvPut":
			ttl := lanes.Forever
			if a.TTLSeconds > 0 {
				ttl = time.Duration(a.TTLSeconds) * time.Second
			}
			var v any = json.RawMessage("null")
			if len(a.Value) > 0 {
				v = a.Value
			}
			r, err = kv.Put(ctx, a.Key, v, ttl)
		default:
			r, err = kv.Delete(ctx, a.Key)
		}
		return wireResult(r, err), true, nil

	case "kvBatch":
		var a struct {
			Ops []lanes.KVOperation `json:"ops"`
		}
		if err := json.Unmarshal(in.Args, &a); err != nil {
			return nil, true, err
		}
		ns := ""
		if len(a.Ops) > 0 {
			ns = a.Ops[0].Ns
		}
		res, err := s.client.KV(ns).Batch(ctx, a.Ops...)
		out := map[string]any{}
		if err == nil {
			out["results"] = wire(res)
		}
		return withErr(out, err), true, nil

	case "timerSchedule", "timerGet", "timerCancel", "timerList":
		var a timerArgs
		if err := json.Unmarshal(in.Args, &a); err != nil {
			return nil, true, err
		}
		t := s.client.Timers(a.Queue)
		switch in.Op {
		case "timerSchedule":
			r, err := t.Schedule(ctx, a.Key, a.delay(), a.payload())
			return wireResult(r, err), true, nil
		case "timerGet":
			r, err := t.Get(ctx, a.Key)
			return wireResult(r, err), true, nil
		case "timerCancel":
			r, err := t.Cancel(ctx, a.Key)
			return wireResult(r, err), true, nil
		default:
			r, err := t.List(ctx, a.Limit, a.After)
			return wireResult(r, err), true, nil
		}
	}
	return nil, false, nil
}

// address is a message step's target: a saved message (messages + index) or raw ids.
type address struct {
	Messages      string `json:"messages"`
	Index         int    `json:"index"`
	PartitionID   string `json:"partitionId"`
	TransactionID string `json:"transactionId"`
}

func (s *state) address(a address) (partitionID, transactionID string, err error) {
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

// adminStep runs the DLQ, message and consumer-group steps; ok is false for any other op.
func (s *state) adminStep(ctx context.Context, in stepIn) (map[string]any, bool, error) {
	ad := s.client.Admin()
	switch in.Op {
	case "dlqReplay":
		var a struct {
			DLQ   string `json:"dlq"`
			Index int    `json:"index"`
			ID    string `json:"id"`
		}
		if err := json.Unmarshal(in.Args, &a); err != nil {
			return nil, true, err
		}
		id := a.ID
		if a.DLQ != "" {
			list, ok := s.dlq[a.DLQ]
			if !ok || a.Index < 0 || a.Index >= len(list) {
				return nil, true, fmt.Errorf("no saved dead letter %s[%d]", a.DLQ, a.Index)
			}
			id = list[a.Index].Id
		}
		r, err := ad.ReplayDLQ(ctx, id, "", "")
		return wireResult(r, err), true, nil

	case "dlqPurge":
		var a struct {
			Queue string `json:"queue"`
			Group string `json:"group"`
		}
		if err := json.Unmarshal(in.Args, &a); err != nil {
			return nil, true, err
		}
		r, err := ad.PurgeDLQ(ctx, a.Queue, a.Group)
		return wireResult(r, err), true, nil

	case "messageGet", "messageDelete", "messageRetry":
		var a address
		if err := json.Unmarshal(in.Args, &a); err != nil {
			return nil, true, err
		}
		pid, tid, err := s.address(a)
		if err != nil {
			return nil, true, err
		}
		switch in.Op {
		case "messageGet":
			r, err := ad.GetMessage(ctx, pid, tid)
			return wireResult(r, err), true, nil
		case "messageDelete":
			r, err := ad.DeleteMessage(ctx, pid, tid)
			return wireResult(r, err), true, nil
		default:
			r, err := ad.RetryMessage(ctx, pid, tid)
			return wireResult(r, err), true, nil
		}

	case "groups":
		var a struct {
			Prefix string `json:"prefix"`
		}
		if err := json.Unmarshal(in.Args, &a); err != nil {
			return nil, true, err
		}
		list, err := ad.ListConsumerGroups(ctx)
		if err != nil {
			return withErr(map[string]any{}, err), true, nil
		}
		names := make([]string, 0, len(list))
		for _, g := range list {
			names = append(names, g.Name)
		}
		return map[string]any{"names": groupNames(names, a.Prefix)}, true, nil

	case "groupDelete":
		var a struct {
			Group          string `json:"group"`
			Queue          string `json:"queue"`
			DeleteMetadata *bool  `json:"deleteMetadata"`
		}
		if err := json.Unmarshal(in.Args, &a); err != nil {
			return nil, true, err
		}
		meta := a.DeleteMetadata == nil || *a.DeleteMetadata
		var (
			r   *lanes.ConsumerGroupDeleteResult
			err error
		)
		if a.Queue != "" {
			r, err = ad.DeleteConsumerGroupForQueue(ctx, a.Group, a.Queue, meta)
		} else {
			r, err = ad.DeleteConsumerGroup(ctx, a.Group, meta)
		}
		return wireResult(r, err), true, nil

	case "lagging":
		var a struct {
			MinLagSeconds int    `json:"minLagSeconds"`
			Prefix        string `json:"prefix"`
		}
		if err := json.Unmarshal(in.Args, &a); err != nil {
			return nil, true, err
		}
		list, err := ad.LaggingConsumerGroups(ctx, time.Duration(a.MinLagSeconds)*time.Second)
		if err != nil {
			return withErr(map[string]any{}, err), true, nil
		}
		names := make([]string, 0, len(list))
		for _, g := range list {
			names = append(names, g.ConsumerGroup)
		}
		return map[string]any{"names": groupNames(names, a.Prefix)}, true, nil
	}
	return nil, false, nil
}
