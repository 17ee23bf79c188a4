package main

import (
	"context"
	"encoding/json"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// stepFunc runs one step with its raw args. A returned error is the adapter's own failure (bad
// arguments, an unknown saved set or mark) and is reported as adapterError; SDK errors are part
// of the result.
type stepFunc func(ctx context.Context, args json.RawMessage) (map[string]any, error)

// decodeArgs makes a stepFunc of a step that takes its arguments typed.
func decodeArgs[T any](run func(ctx context.Context, a T) (map[string]any, error)) stepFunc {
	return func(ctx context.Context, raw json.RawMessage) (map[string]any, error) {
		var a T
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, err
		}
		return run(ctx, a)
	}
}

// steps is every op the adapter runs (docs/conformance.md), bound to this case's state; an op
// missing here is reported as unsupported.
func (s *state) steps() map[string]stepFunc {
	ad := s.client.Admin()
	status := func(a resourceArgs) lanes.StatusQuery {
		return lanes.StatusQuery{Queue: a.Queue, Namespace: a.Namespace, Task: a.Task, Limit: a.Limit, Offset: a.Offset}
	}
	return map[string]stepFunc{
		// queue plane (queue_steps.go, buffer_step.go, consume_step.go, iterate_step.go)
		"push":        decodeArgs(s.push),
		"bufferPush":  decodeArgs(s.bufferPush),
		"pop":         decodeArgs(s.pop),
		"ack":         decodeArgs(s.ack),
		"renew":       decodeArgs(s.renew),
		"transaction": decodeArgs(s.transaction),
		"configure":   decodeArgs(s.configure),
		"seek":        decodeArgs(s.seek),
		"mark":        decodeArgs(s.mark),
		"close":       decodeArgs(s.closeClient),
		"logs":        decodeArgs(s.logs),
		"sleep":       decodeArgs(sleepStep),
		"dlq":         decodeArgs(s.listDLQ),
		"dlqAll":      decodeArgs(s.walkDLQ),
		"consume":     decodeArgs(s.consume),
		"iterate":     decodeArgs(s.iterate),

		// KV, timers, DLQ, messages and consumer groups (state_steps.go)
		"kvGet":           decodeArgs(s.kvGet),
		"kvPut":           decodeArgs(s.kvPut),
		"kvDelete":        decodeArgs(s.kvDelete),
		"kvIncr":          decodeArgs(s.kvIncr),
		"kvBatch":         decodeArgs(s.kvBatch),
		"timerSchedule":   decodeArgs(s.timerSchedule),
		"timerReschedule": decodeArgs(s.timerReschedule),
		"timerBatch":      decodeArgs(s.timerBatch),
		"timerGet":        decodeArgs(s.timerGet),
		"timerCancel":     decodeArgs(s.timerCancel),
		"timerList":       decodeArgs(s.timerList),
		"dlqReplay":       decodeArgs(s.dlqReplay),
		"dlqPurge":        decodeArgs(s.dlqPurge),
		"messageGet":      messageStep(s, ad.GetMessage),
		"messageDelete":   messageStep(s, ad.DeleteMessage),
		"messageRetry":    messageStep(s, ad.RetryMessage),
		"groups":          decodeArgs(s.groups),
		"groupDelete":     decodeArgs(s.groupDelete),
		"lagging":         decodeArgs(s.lagging),

		// queues, listings, status, system and KV listings (resource_steps.go; the walks over
		// them, walkResume included, in walk_steps.go)
		"queueGet": resource(func(ctx context.Context, a resourceArgs) (any, error) { return ad.GetQueue(ctx, a.Queue) }),
		"queueDelete": resource(func(ctx context.Context, a resourceArgs) (any, error) {
			return ad.DeleteQueue(ctx, a.Queue)
		}),
		"queues":    decodeArgs(s.listQueues),
		"queuesAll": decodeArgs(s.walkQueues),
		"depth": resource(func(ctx context.Context, a resourceArgs) (any, error) {
			return ad.QueueDepth(ctx, a.Queue, a.Group)
		}),
		"overview":   resource(func(ctx context.Context, _ resourceArgs) (any, error) { return ad.Overview(ctx) }),
		"namespaces": prefixedResource("namespaces", "namespace", func(ctx context.Context) (any, error) { return ad.Namespaces(ctx) }),
		"tasks":      prefixedResource("tasks", "task", func(ctx context.Context) (any, error) { return ad.Tasks(ctx) }),
		"status": resource(func(ctx context.Context, a resourceArgs) (any, error) {
			return ad.Status(ctx, status(a))
		}),
		"queueStatuses":    decodeArgs(s.listQueueStatuses),
		"queueStatusesAll": decodeArgs(s.walkQueueStatuses),
		"queueStatus": resource(func(ctx context.Context, a resourceArgs) (any, error) {
			return ad.QueueStatus(ctx, a.Queue, a.IncludePartitions)
		}),
		"bufferStatus": resource(func(ctx context.Context, _ resourceArgs) (any, error) { return ad.BufferStatus(ctx) }),
		"metrics":      resource(func(ctx context.Context, _ resourceArgs) (any, error) { return ad.Metrics(ctx) }),
		"health":       resource(func(ctx context.Context, _ resourceArgs) (any, error) { return s.client.Health(ctx) }),
		"maintenance": resource(func(ctx context.Context, a resourceArgs) (any, error) {
			return s.maintenance(ctx, false, a.Scope, a.Enabled)
		}),
		"setMaintenance": resource(func(ctx context.Context, a resourceArgs) (any, error) {
			return s.maintenance(ctx, true, a.Scope, a.Enabled)
		}),
		"messages":    decodeArgs(s.listMessages),
		"messagesAll": decodeArgs(s.walkMessages),
		"walkResume":  decodeArgs(s.walkResume),
		"group": resource(func(ctx context.Context, a resourceArgs) (any, error) {
			return ad.GetConsumerGroup(ctx, a.Group)
		}),
		"subscription": decodeArgs(s.subscription),
		"kvList": resource(func(ctx context.Context, a resourceArgs) (any, error) {
			return s.client.KV(a.NS).List(ctx, lanes.KVListQuery{Prefix: a.Prefix, After: a.After, Limit: a.Limit, KeysOnly: a.KeysOnly, IncludeExpired: a.IncludeExpired})
		}),
		"kvNamespaces": prefixedResource("namespaces", "namespace", func(ctx context.Context) (any, error) { return s.client.KVNamespaces(ctx) }),
	}
}
