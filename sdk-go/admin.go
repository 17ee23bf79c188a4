//nolint:bodyclose // every response is handed to Client.decode (via Client.result), which closes the body.
package lanes

import (
	"context"
	"time"

	"github.com/lanesmq/lanes/sdk-go/internal/gen"
)

// Admin groups management calls: queues, consumer groups (seek), DLQ and messages.
type Admin struct{ c *Client }

// Admin returns the management API.
func (c *Client) Admin() Admin { return Admin{c: c} }

// ConfigureMode selects how Configure treats omitted options.
type ConfigureMode string

// Configure modes.
const (
	// ConfigureReplace (the broker default): omitted options return to their defaults.
	ConfigureReplace ConfigureMode = "replace"
	// ConfigureMerge keeps omitted options.
	ConfigureMerge ConfigureMode = "merge"
)

func ptr[T any](v T) *T { return &v }

// ptrUnlessZero is ptr for an optional wire field: nil (omitted) for the zero value.
func ptrUnlessZero[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// ptrIfPositive is ptrUnlessZero for a count or page size: nil (the broker's default) unless n > 0.
func ptrIfPositive(n int) *int { return ptrUnlessZero(max(n, 0)) }

// timeUnlessZero is ptrUnlessZero for an instant, sent in UTC: RFC 3339 offsets carry no seconds,
// so a zone whose offset has them would shift the instant (and a zero time with a location
// would escape ptrUnlessZero's comparison by value).
func timeUnlessZero(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return ptr(t.UTC())
}

func call[T any](c *Client, ctx context.Context, do func() (*httpResp, error)) (*T, error) {
	var out T
	if _, err := c.result(ctx, &out)(do()); err != nil {
		return nil, err
	}
	return &out, nil
}

// ConfigureQueue creates or configures a queue (POST /api/v1/configure).
func (a Admin) ConfigureQueue(ctx context.Context, queue string, opts QueueOptions, mode ConfigureMode) (*ConfigureResult, error) {
	return a.ConfigureQueueLabels(ctx, queue, "", "", opts, mode)
}

// ConfigureQueueLabels configures a queue like ConfigureQueue and also sets its namespace and
// task labels (empty = unset), which discovery pops (Client.Namespace(ns).Task(task)) select on.
func (a Admin) ConfigureQueueLabels(ctx context.Context, queue, namespace, task string, opts QueueOptions, mode ConfigureMode) (*ConfigureResult, error) {
	body := gen.ConfigureRequest{Queue: queue, Options: &opts}
	body.Mode = ptrUnlessZero(gen.ConfigureRequestMode(mode))
	body.Namespace, body.Task = ptrUnlessZero(namespace), ptrUnlessZero(task)
	return call[ConfigureResult](a.c, ctx, func() (*httpResp, error) { return a.c.gen.Configure(ctx, body) })
}

// Configure configures this builder's queue (full replace of its options).
func (q QueueBuilder) Configure(ctx context.Context, opts QueueOptions) (*ConfigureResult, error) {
	return q.c.Admin().ConfigureQueue(ctx, q.queue, opts, ConfigureReplace)
}

// Delete deletes this builder's queue (200 even when nothing was deleted).
func (q QueueBuilder) Delete(ctx context.Context) (*DeleteQueueResult, error) {
	return q.c.Admin().DeleteQueue(ctx, q.queue)
}

// Depth returns this builder's queue's pending counts for its group (no Group = queue mode).
func (q QueueBuilder) Depth(ctx context.Context) (*QueueDepth, error) {
	return q.c.Admin().QueueDepth(ctx, q.queue, q.group)
}

// DLQ starts a page query over this queue's dead letters of group ("" = the builder's Group;
// neither = every group): client.Queue(q).DLQ(g).Limit(10).Get(ctx).
func (q QueueBuilder) DLQ(group string) DLQBuilder {
	if group == "" {
		group = q.group
	}
	return DLQBuilder{c: q.c, q: DLQQuery{Queue: q.queue, Group: group}}
}

// DLQBuilder pages through one queue's dead letters. It is a value: every setter returns a copy.
type DLQBuilder struct {
	c *Client
	q DLQQuery
}

// Partition keeps the dead letters of one partition.
func (b DLQBuilder) Partition(p string) DLQBuilder { b.q.Partition = p; return b }

// Limit is the page size (0 = the broker's default, 100).
func (b DLQBuilder) Limit(n int) DLQBuilder { b.q.Limit = n; return b }

// Offset skips rows. Prefer After: dead letters replayed or filed between two pages move an offset.
func (b DLQBuilder) Offset(n int) DLQBuilder { b.q.Offset = n; return b }

// After starts the page after the row key names: the NextAfter of the page before (not with Offset).
func (b DLQBuilder) After(key string) DLQBuilder { b.q.After = key; return b }

// From is the lower bound on the time the dead letters failed.
func (b DLQBuilder) From(t time.Time) DLQBuilder { b.q.From = t; return b }

// To is the upper bound on the time the dead letters failed.
func (b DLQBuilder) To(t time.Time) DLQBuilder { b.q.To = t; return b }

// Get fetches the page, newest first (Admin.ListDLQ with the builder's filters).
func (b DLQBuilder) Get(ctx context.Context) (*DLQList, error) {
	return b.c.Admin().ListDLQ(ctx, b.q)
}

// QueueQuery filters ListQueues: by namespace and task labels (empty = any), paged by Limit
// (0 = the broker's default) and Offset.
type QueueQuery struct {
	Namespace, Task string
	Limit, Offset   int
	// After is the NextAfter of the page before: the queues after it, which queues created or
	// deleted between two pages do not shift, as they shift an Offset. Not with Offset.
	After string
}

// ListQueues lists queues by name.
func (a Admin) ListQueues(ctx context.Context, q QueueQuery) (*QueueList, error) {
	p := &gen.ListQueuesParams{Namespace: ptrUnlessZero(q.Namespace), Task: ptrUnlessZero(q.Task),
		Limit: ptrIfPositive(q.Limit), Offset: ptrIfPositive(q.Offset), After: ptrUnlessZero(q.After)}
	return call[QueueList](a.c, ctx, func() (*httpResp, error) { return a.c.gen.ListQueues(ctx, p) })
}

// DeleteQueue deletes a queue with everything in it.
func (a Admin) DeleteQueue(ctx context.Context, queue string) (*DeleteQueueResult, error) {
	return call[DeleteQueueResult](a.c, ctx, func() (*httpResp, error) { return a.c.gen.DeleteQueue(ctx, queue) })
}

// Overview returns the resource overview.
func (a Admin) Overview(ctx context.Context) (*Overview, error) {
	return call[Overview](a.c, ctx, func() (*httpResp, error) { return a.c.gen.GetOverview(ctx) })
}

// SeekTarget is where a seek moves a cursor: SeekToEnd or SeekToTime.
type SeekTarget struct {
	toEnd bool
	at    time.Time
}

// SeekToEnd moves the cursor past every retained message.
func SeekToEnd() SeekTarget { return SeekTarget{toEnd: true} }

// SeekToTime moves the cursor to the first segment committed at or after t (segment-granular).
func SeekToTime(t time.Time) SeekTarget { return SeekTarget{at: t} }

func (s SeekTarget) body() gen.SeekRequest {
	if s.toEnd {
		return gen.SeekRequest{ToEnd: ptr(true)}
	}
	return gen.SeekRequest{Timestamp: ptr(s.at.UTC())}
}

// SeekConsumerGroup moves one group's cursor on every partition of a queue; it releases live
// leases and resets the retry budget.
func (a Admin) SeekConsumerGroup(ctx context.Context, group, queue string, to SeekTarget) (*SeekQueueResult, error) {
	if err := checkGroupNamed(group); err != nil {
		return nil, err
	}
	return call[SeekQueueResult](a.c, ctx, func() (*httpResp, error) { return a.c.gen.SeekQueue(ctx, group, queue, to.body()) })
}

// SeekConsumerGroupPartition moves one group's cursor on one partition.
func (a Admin) SeekConsumerGroupPartition(ctx context.Context, group, queue, partition string, to SeekTarget) (*SeekPartitionResult, error) {
	if err := checkGroupNamed(group); err != nil {
		return nil, err
	}
	return call[SeekPartitionResult](a.c, ctx, func() (*httpResp, error) {
		return a.c.gen.SeekPartition(ctx, group, queue, partition, to.body())
	})
}

// DeleteConsumerGroup deletes a group's cursors on every queue (the next pop re-seeds).
func (a Admin) DeleteConsumerGroup(ctx context.Context, group string, deleteMetadata bool) (*ConsumerGroupDeleteResult, error) {
	if err := checkGroupNamed(group); err != nil {
		return nil, err
	}
	p := &gen.DeleteConsumerGroupParams{DeleteMetadata: &deleteMetadata}
	return call[ConsumerGroupDeleteResult](a.c, ctx, func() (*httpResp, error) { return a.c.gen.DeleteConsumerGroup(ctx, group, p) })
}

// DeleteConsumerGroupForQueue deletes a group's cursors on one queue.
func (a Admin) DeleteConsumerGroupForQueue(ctx context.Context, group, queue string, deleteMetadata bool) (*ConsumerGroupDeleteResult, error) {
	if err := checkGroupNamed(group); err != nil {
		return nil, err
	}
	p := &gen.DeleteConsumerGroupQueueParams{DeleteMetadata: &deleteMetadata}
	return call[ConsumerGroupDeleteResult](a.c, ctx, func() (*httpResp, error) {
		return a.c.gen.DeleteConsumerGroupQueue(ctx, group, queue, p)
	})
}

// UpdateSubscription changes where untouched partitions of a group get seeded.
func (a Admin) UpdateSubscription(ctx context.Context, group string, t time.Time) (*SubscriptionUpdateResult, error) {
	if err := checkGroupNamed(group); err != nil {
		return nil, err
	}
	body := gen.SubscriptionUpdateRequest{SubscriptionTimestamp: t.UTC()}
	return call[SubscriptionUpdateResult](a.c, ctx, func() (*httpResp, error) {
		return a.c.gen.UpdateConsumerGroupSubscription(ctx, group, body)
	})
}

// DLQQuery filters ListDLQ. A page starts after Offset rows, or after the row After names (the
// NextAfter of the page before; not with Offset), which rows replayed, deleted or filed between
// two pages do not move.
type DLQQuery struct {
	Queue, Group, Partition string
	From, To                time.Time
	Limit, Offset           int
	After                   string
}

// ListDLQ lists dead letters, newest first.
func (a Admin) ListDLQ(ctx context.Context, q DLQQuery) (*DLQList, error) {
	if err := checkGroup(q.Group); err != nil {
		return nil, err
	}
	p := &gen.ListDlqParams{Queue: ptrUnlessZero(q.Queue), ConsumerGroup: ptrUnlessZero(q.Group),
		Partition: ptrUnlessZero(q.Partition), From: timeUnlessZero(q.From), To: timeUnlessZero(q.To),
		Limit: ptrIfPositive(q.Limit), Offset: ptrIfPositive(q.Offset), After: ptrUnlessZero(q.After)}
	return call[DLQList](a.c, ctx, func() (*httpResp, error) { return a.c.gen.ListDlq(ctx, p) })
}

// PurgeDLQ deletes the dead letters of a queue (group "" = all groups).
func (a Admin) PurgeDLQ(ctx context.Context, queue, group string) (*DLQPurgeResult, error) {
	if err := checkGroup(group); err != nil {
		return nil, err
	}
	p := &gen.PurgeDlqParams{Queue: queue, ConsumerGroup: ptrUnlessZero(group)}
	return call[DLQPurgeResult](a.c, ctx, func() (*httpResp, error) { return a.c.gen.PurgeDlq(ctx, p) })
}

// ReplayDLQ moves one dead letter back to a queue (its own by default; queue/partition override).
func (a Admin) ReplayDLQ(ctx context.Context, id, queue, partition string) (*DLQReplayResult, error) {
	body := gen.DlqReplayRequest{Queue: ptrUnlessZero(queue), Partition: ptrUnlessZero(partition)}
	return call[DLQReplayResult](a.c, ctx, func() (*httpResp, error) { return a.c.gen.ReplayDlq(ctx, id, body) })
}

// MessageQuery filters ListMessages: by queue, partition, namespace and task labels and derived
// status (empty = any), and by createdAt from From (zero = the broker's default, an hour ago) to
// To (zero = now; the broker truncates To to the minute and lists that whole minute). A page
// starts after Offset messages, or after the message After names (the NextAfter of the page
// before; not with Offset), which messages pushed or consumed between two pages do not move.
type MessageQuery struct {
	Queue, Partition, Namespace, Task, Status string
	From, To                                  time.Time
	Limit, Offset                             int
	After                                     string
}

// ListMessages lists messages.
func (a Admin) ListMessages(ctx context.Context, q MessageQuery) (*MessageList, error) {
	p := &gen.ListMessagesParams{Queue: ptrUnlessZero(q.Queue), Partition: ptrUnlessZero(q.Partition),
		Namespace: ptrUnlessZero(q.Namespace), Task: ptrUnlessZero(q.Task),
		Status: ptrUnlessZero(gen.ListMessagesParamsStatus(q.Status)), From: timeUnlessZero(q.From), To: timeUnlessZero(q.To),
		Limit: ptrIfPositive(q.Limit), Offset: ptrIfPositive(q.Offset), After: ptrUnlessZero(q.After)}
	return call[MessageList](a.c, ctx, func() (*httpResp, error) { return a.c.gen.ListMessages(ctx, p) })
}

// GetMessage returns one message by address.
func (a Admin) GetMessage(ctx context.Context, partitionID, transactionID string) (*MessageDetail, error) {
	return call[MessageDetail](a.c, ctx, func() (*httpResp, error) { return a.c.gen.GetMessage(ctx, partitionID, transactionID) })
}

// DeleteMessage deletes the dead-letter rows of one address.
func (a Admin) DeleteMessage(ctx context.Context, partitionID, transactionID string) (*DeleteMessageResult, error) {
	return call[DeleteMessageResult](a.c, ctx, func() (*httpResp, error) { return a.c.gen.DeleteMessage(ctx, partitionID, transactionID) })
}

// RetryMessage replays the dead letter of one address.
func (a Admin) RetryMessage(ctx context.Context, partitionID, transactionID string) (*DLQReplayResult, error) {
	return call[DLQReplayResult](a.c, ctx, func() (*httpResp, error) { return a.c.gen.RetryMessage(ctx, partitionID, transactionID) })
}
