package main

import (
	"context"
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

// resource is a step over resourceArgs whose result is call's, in wire form.
func resource(call func(ctx context.Context, a resourceArgs) (any, error)) stepFunc {
	return decodeArgs(func(ctx context.Context, a resourceArgs) (map[string]any, error) {
		return wireResult(call(ctx, a)), nil
	})
}

// prefixedResource is a listing step filtered to the entries whose field starts with the
// step's prefix (see prefixed).
func prefixedResource(key, field string, call func(ctx context.Context) (any, error)) stepFunc {
	return decodeArgs(func(ctx context.Context, a resourceArgs) (map[string]any, error) {
		v, err := call(ctx)
		return prefixed(v, err, key, field, a.Prefix), nil
	})
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

// subscription moves a consumer group's subscription to a mark.
func (s *state) subscription(ctx context.Context, a resourceArgs) (map[string]any, error) {
	t, ok := s.marks[a.Mark]
	if !ok {
		return nil, fmt.Errorf("no mark %q", a.Mark)
	}
	return wireResult(s.client.Admin().UpdateSubscription(ctx, a.Group, t)), nil
}

type messagesArgs struct {
	Queue     string `json:"queue"`
	Partition string `json:"partition"`
	Status    string `json:"status"`
	Limit     int    `json:"limit"`
	Offset    int    `json:"offset"`
	Save      string `json:"save"`
	pageArgs
}

// listMessages lists one page of messages; save keeps its nextAfter for a later afterPage.
func (s *state) listMessages(ctx context.Context, a messagesArgs) (map[string]any, error) {
	after, err := s.after(a.pageArgs)
	if err != nil {
		return nil, err
	}
	list, err := s.client.Admin().ListMessages(ctx, lanes.MessageQuery{Queue: a.Queue, Partition: a.Partition,
		Status: a.Status, Limit: a.Limit, Offset: a.Offset, After: after})
	if err == nil && a.Save != "" {
		s.pages[a.Save] = list.NextAfter
	}
	return wireResult(list, err), nil
}

type queueListArgs struct {
	Queue     string `json:"queue"`
	Namespace string `json:"namespace"`
	Task      string `json:"task"`
	Limit     int    `json:"limit"`
	Offset    int    `json:"offset"`
	Save      string `json:"save"`
	pageArgs
}

// listQueues lists one page of queues; save keeps its nextAfter for a later afterPage.
func (s *state) listQueues(ctx context.Context, a queueListArgs) (map[string]any, error) {
	after, err := s.after(a.pageArgs)
	if err != nil {
		return nil, err
	}
	list, err := s.client.Admin().ListQueues(ctx, lanes.QueueQuery{Namespace: a.Namespace, Task: a.Task,
		Limit: a.Limit, Offset: a.Offset, After: after})
	if err == nil && a.Save != "" {
		s.pages[a.Save] = list.NextAfter
	}
	return wireResult(list, err), nil
}

// listQueueStatuses lists one page of queue statuses, paged as listQueues.
func (s *state) listQueueStatuses(ctx context.Context, a queueListArgs) (map[string]any, error) {
	after, err := s.after(a.pageArgs)
	if err != nil {
		return nil, err
	}
	list, err := s.client.Admin().ListQueueStatus(ctx, lanes.StatusQuery{Queue: a.Queue, Namespace: a.Namespace,
		Task: a.Task, Limit: a.Limit, Offset: a.Offset, After: after})
	if err == nil && a.Save != "" {
		s.pages[a.Save] = list.NextAfter
	}
	return wireResult(list, err), nil
}
