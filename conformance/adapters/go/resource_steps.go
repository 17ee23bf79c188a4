package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// withPrefix keeps the entries of a wire list whose field starts with prefix (other cases share
// the broker), sorted by that field.
func withPrefix(list any, field, prefix string) []any {
	out := []any{}
	rows, _ := list.([]any)
	for _, r := range rows {
		m, _ := r.(map[string]any)
		if name, _ := m[field].(string); strings.HasPrefix(name, prefix) {
			out = append(out, m)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, _ := out[i].(map[string]any)[field].(string)
		b, _ := out[j].(map[string]any)[field].(string)
		return a < b
	})
	return out
}

// prefixed answers a wire list result with its key list filtered by withPrefix.
func prefixed(v any, err error, key, field, prefix string) map[string]any {
	out := wireResult(v, err)
	if err == nil {
		out[key] = withPrefix(out[key], field, prefix)
	}
	return out
}

// resourceArgs are the arguments of the queue, status, system and listing steps.
type resourceArgs struct {
	Queue             string `json:"queue"`
	Namespace         string `json:"namespace"`
	Task              string `json:"task"`
	Group             string `json:"group"`
	Partition         string `json:"partition"`
	Status            string `json:"status"`
	Prefix            string `json:"prefix"`
	Limit             int    `json:"limit"`
	Offset            int    `json:"offset"`
	IncludePartitions bool   `json:"includePartitions"`
	Scope             string `json:"scope"`
	Enabled           bool   `json:"enabled"`
	Mark              string `json:"mark"`
	// KV listing
	NS             string `json:"ns"`
	After          string `json:"after"`
	KeysOnly       bool   `json:"keysOnly"`
	IncludeExpired bool   `json:"includeExpired"`
}

// resourceStep runs the queue, listing, status, system, consumer-group detail and KV listing
// steps; ok is false for any other op.
func (s *state) resourceStep(ctx context.Context, in stepIn) (map[string]any, bool, error) {
	var a resourceArgs
	if err := json.Unmarshal(in.Args, &a); err != nil {
		return nil, true, err
	}
	ad := s.client.Admin()
	status := lanes.StatusQuery{Queue: a.Queue, Namespace: a.Namespace, Task: a.Task, Limit: a.Limit, Offset: a.Offset}
	switch in.Op {
	case "queueGet":
		r, err := ad.GetQueue(ctx, a.Queue)
		return wireResult(r, err), true, nil
	case "queueDelete":
		r, err := ad.DeleteQueue(ctx, a.Queue)
		return wireResult(r, err), true, nil
	case "queues":
		r, err := ad.ListQueues(ctx, lanes.QueueQuery{Namespace: a.Namespace, Task: a.Task, Limit: a.Limit, Offset: a.Offset})
		return wireResult(r, err), true, nil
	case "depth":
		r, err := ad.QueueDepth(ctx, a.Queue, a.Group)
		return wireResult(r, err), true, nil
	case "overview":
		r, err := ad.Overview(ctx)
		return wireResult(r, err), true, nil
	case "namespaces":
		r, err := ad.Namespaces(ctx)
		return prefixed(r, err, "namespaces", "namespace", a.Prefix), true, nil
	case "tasks":
		r, err := ad.Tasks(ctx)
		return prefixed(r, err, "tasks", "task", a.Prefix), true, nil
	case "status":
		r, err := ad.Status(ctx, status)
		return wireResult(r, err), true, nil
	case "queueStatuses":
		r, err := ad.ListQueueStatus(ctx, status)
		return wireResult(r, err), true, nil
	case "queueStatus":
		r, err := ad.QueueStatus(ctx, a.Queue, a.IncludePartitions)
		return wireResult(r, err), true, nil
	case "bufferStatus":
		r, err := ad.BufferStatus(ctx)
		return wireResult(r, err), true, nil
	case "metrics":
		r, err := ad.Metrics(ctx)
		return wireResult(r, err), true, nil
	case "health":
		r, err := s.client.Health(ctx)
		return wireResult(r, err), true, nil
	case "maintenance", "setMaintenance":
		r, err := s.maintenance(ctx, in.Op == "setMaintenance", a.Scope, a.Enabled)
		return wireResult(r, err), true, nil
	case "messages":
		r, err := ad.ListMessages(ctx, lanes.MessageQuery{Queue: a.Queue, Partition: a.Partition, Status: a.Status, Limit: a.Limit, Offset: a.Offset})
		return wireResult(r, err), true, nil
	case "group":
		r, err := ad.GetConsumerGroup(ctx, a.Group)
		return wireResult(r, err), true, nil
	case "subscription":
		t, ok := s.marks[a.Mark]
		if !ok {
			return nil, true, fmt.Errorf("no mark %q", a.Mark)
		}
		r, err := ad.UpdateSubscription(ctx, a.Group, t)
		return wireResult(r, err), true, nil
	case "kvList":
		r, err := s.client.KV(a.NS).List(ctx, lanes.KVListQuery{Prefix: a.Prefix, After: a.After, Limit: a.Limit, KeysOnly: a.KeysOnly, IncludeExpired: a.IncludeExpired})
		return wireResult(r, err), true, nil
	case "kvNamespaces":
		r, err := s.client.KVNamespaces(ctx)
		return prefixed(r, err, "namespaces", "namespace", a.Prefix), true, nil
	}
	return nil, false, nil
}

// maintenance reads or sets the push or pop maintenance switch.
func (s *state) maintenance(ctx context.Context, set bool, scope string, enabled bool) (*lanes.Maintenance, error) {
	ad := s.client.Admin()
	switch {
	case scope == "push" && set:
		return ad.SetMaintenanceMode(ctx, enabled)
	case scope == "push":
		return ad.MaintenanceMode(ctx)
	case scope == "pop" && set:
		return ad.SetPopMaintenanceMode(ctx, enabled)
	case scope == "pop":
		return ad.PopMaintenanceMode(ctx)
	}
	return nil, fmt.Errorf("maintenance scope %q: want push or pop", scope)
}
