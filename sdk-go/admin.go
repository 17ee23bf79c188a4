//nolint:bodyclose // every response is handed to Client.decode (via Client.result), which closes the body.
package lanes

import (
	"context"
	"encoding/json"
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

// GetQueue returns a queue's detail.
func (a Admin) GetQueue(ctx context.Context, queue string) (*QueueDetail, error) {
	return call[QueueDetail](a.c, ctx, func() (*httpResp, error) { return a.c.gen.GetQueue(ctx, queue) })
}

// QueueQuery filters ListQueues: by namespace and task labels (empty = any), paged by Limit
// (0 = the broker's default) and Offset.
type QueueQuery struct {
	Namespace, Task string
	Limit, Offset   int
}

// ListQueues lists queues by name.
func (a Admin) ListQueues(ctx context.Context, q QueueQuery) (*QueueList, error) {
	p := &gen.ListQueuesParams{Namespace: ptrUnlessZero(q.Namespace), Task: ptrUnlessZero(q.Task),
		Limit: ptrIfPositive(q.Limit), Offset: ptrIfPositive(q.Offset)}
	return call[QueueList](a.c, ctx, func() (*httpResp, error) { return a.c.gen.ListQueues(ctx, p) })
}

// DeleteQueue deletes a queue with everything in it.
func (a Admin) DeleteQueue(ctx context.Context, queue string) (*DeleteQueueResult, error) {
	return call[DeleteQueueResult](a.c, ctx, func() (*httpResp, error) { return a.c.gen.DeleteQueue(ctx, queue) })
}

// QueueDepth returns pending counts (group "" = queue mode).
func (a Admin) QueueDepth(ctx context.Context, queue, group string) (*QueueDepth, error) {
	p := &gen.GetQueueDepthParams{Group: ptrUnlessZero(group)}
	return call[QueueDepth](a.c, ctx, func() (*httpResp, error) { return a.c.gen.GetQueueDepth(ctx, queue, p) })
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
	return call[SeekQueueResult](a.c, ctx, func() (*httpResp, error) { return a.c.gen.SeekQueue(ctx, group, queue, to.body()) })
}

// SeekConsumerGroupPartition moves one group's cursor on one partition.
func (a Admin) SeekConsumerGroupPartition(ctx context.Context, group, queue, partition string, to SeekTarget) (*SeekPartitionResult, error) {
	return call[SeekPartitionResult](a.c, ctx, func() (*httpResp, error) {
		return a.c.gen.SeekPartition(ctx, group, queue, partition, to.body())
	})
}

// ListConsumerGroups lists (group, queue) rows.
func (a Admin) ListConsumerGroups(ctx context.Context) ([]ConsumerGroupSummary, error) {
	out, err := call[[]ConsumerGroupSummary](a.c, ctx, func() (*httpResp, error) { return a.c.gen.ListConsumerGroups(ctx) })
	if err != nil {
		return nil, err
	}
	return *out, nil
}

// GetConsumerGroup returns a group's cursors keyed by queue.
func (a Admin) GetConsumerGroup(ctx context.Context, group string) (ConsumerGroupDetail, error) {
	out, err := call[ConsumerGroupDetail](a.c, ctx, func() (*httpResp, error) { return a.c.gen.GetConsumerGroup(ctx, group) })
	if err != nil {
		return nil, err
	}
	return *out, nil
}

// LaggingConsumerGroups lists partitions whose oldest unconsumed message is older than minLag.
func (a Admin) LaggingConsumerGroups(ctx context.Context, minLag time.Duration) ([]LaggingConsumerGroup, error) {
	p := &gen.ListLaggingConsumerGroupsParams{MinLagSeconds: ptr(int(minLag / time.Second))}
	out, err := call[[]LaggingConsumerGroup](a.c, ctx, func() (*httpResp, error) { return a.c.gen.ListLaggingConsumerGroups(ctx, p) })
	if err != nil {
		return nil, err
	}
	return *out, nil
}

// DeleteConsumerGroup deletes a group's cursors on every queue (the next pop re-seeds).
func (a Admin) DeleteConsumerGroup(ctx context.Context, group string, deleteMetadata bool) (*ConsumerGroupDeleteResult, error) {
	p := &gen.DeleteConsumerGroupParams{DeleteMetadata: &deleteMetadata}
	return call[ConsumerGroupDeleteResult](a.c, ctx, func() (*httpResp, error) { return a.c.gen.DeleteConsumerGroup(ctx, group, p) })
}

// DeleteConsumerGroupForQueue deletes a group's cursors on one queue.
func (a Admin) DeleteConsumerGroupForQueue(ctx context.Context, group, queue string, deleteMetadata bool) (*ConsumerGroupDeleteResult, error) {
	p := &gen.DeleteConsumerGroupQueueParams{DeleteMetadata: &deleteMetadata}
	return call[ConsumerGroupDeleteResult](a.c, ctx, func() (*httpResp, error) {
		return a.c.gen.DeleteConsumerGroupQueue(ctx, group, queue, p)
	})
}

// UpdateSubscription changes where untouched partitions of a group get seeded.
func (a Admin) UpdateSubscription(ctx context.Context, group string, t time.Time) (*SubscriptionUpdateResult, error) {
	body := gen.SubscriptionUpdateRequest{SubscriptionTimestamp: t.UTC()}
	return call[SubscriptionUpdateResult](a.c, ctx, func() (*httpResp, error) {
		return a.c.gen.UpdateConsumerGroupSubscription(ctx, group, body)
	})
}

// DLQQuery filters ListDLQ.
type DLQQuery struct {
	Queue, Group, Partition string
	From, To                time.Time
	Limit, Offset           int
}

// ListDLQ lists dead letters, newest first.
func (a Admin) ListDLQ(ctx context.Context, q DLQQuery) (*DLQList, error) {
	p := &gen.ListDlqParams{Queue: ptrUnlessZero(q.Queue), ConsumerGroup: ptrUnlessZero(q.Group),
		Partition: ptrUnlessZero(q.Partition), From: timeUnlessZero(q.From), To: timeUnlessZero(q.To),
		Limit: ptrIfPositive(q.Limit), Offset: ptrIfPositive(q.Offset)}
	return call[DLQList](a.c, ctx, func() (*httpResp, error) { return a.c.gen.ListDlq(ctx, p) })
}

// PurgeDLQ deletes the dead letters of a queue (group "" = all groups).
func (a Admin) PurgeDLQ(ctx context.Context, queue, group string) (*DLQPurgeResult, error) {
	p := &gen.PurgeDlqParams{Queue: queue, ConsumerGroup: ptrUnlessZero(group)}
	return call[DLQPurgeResult](a.c, ctx, func() (*httpResp, error) { return a.c.gen.PurgeDlq(ctx, p) })
}

// ReplayDLQ moves one dead letter back to a queue (its own by default; queue/partition override).
func (a Admin) ReplayDLQ(ctx context.Context, id, queue, partition string) (*DLQReplayResult, error) {
	body := gen.DlqReplayRequest{Queue: ptrUnlessZero(queue), Partition: ptrUnlessZero(partition)}
	return call[DLQReplayResult](a.c, ctx, func() (*httpResp, error) { return a.c.gen.ReplayDlq(ctx, id, body) })
}

// MessageQuery filters ListMessages.
type MessageQuery struct {
	Queue, Partition, Status string
	Limit, Offset            int
}

// ListMessages lists messages.
func (a Admin) ListMessages(ctx context.Context, q MessageQuery) (*MessageList, error) {
	p := &gen.ListMessagesParams{Queue: ptrUnlessZero(q.Queue), Partition: ptrUnlessZero(q.Partition),
		Status: ptrUnlessZero(gen.ListMessagesParamsStatus(q.Status)), Limit: ptrIfPositive(q.Limit), Offset: ptrIfPositive(q.Offset)}
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

// ---------------------------------------------------------------------------------------------
// KV

// Forever marks a KV write without expiry.
const Forever time.Duration = -1

// KV addresses one KV namespace.
type KV struct {
	c  *Client
	ns string
}

// KV returns helpers for namespace ns.
func (c *Client) KV(ns string) KV { return KV{c: c, ns: ns} }

// KVPut builds a put op for batches and transaction riders (ttl Forever = no expiry).
func KVPut(ns, key string, value any, ttl time.Duration) KVOperation {
	b, _ := json.Marshal(value)
	op := KVOperation{Op: gen.KvOperationOp("put"), Ns: ns, Key: &key, Value: b}
	setTTL(&op.TtlSeconds, &op.Forever, ttl)
	return op
}

// KVPutIfAbsent builds a putIfAbsent op; required escalates a lost race to a rollback.
func KVPutIfAbsent(ns, key string, value any, ttl time.Duration, required bool) KVOperation {
	op := KVPut(ns, key, value, ttl)
	op.Op = gen.KvOperationOp("putIfAbsent")
	if required {
		op.Required = ptr(true)
	}
	return op
}

// KVDelete builds a delete op.
func KVDelete(ns, key string) KVOperation {
	return KVOperation{Op: gen.KvOperationOp("delete"), Ns: ns, Key: &key}
}

// KVDeleteExpect builds a conditional delete op: the key is deleted only if its current version
// is expect (>= 1; the broker answers 400 kv_bad_request otherwise). A lost condition is Applied
// false with Reason "version" (or "absent" when the key does not exist).
func KVDeleteExpect(ns, key string, expect int) KVOperation {
	op := KVDelete(ns, key)
	op.Expect = &expect
	return op
}

// KVGet builds a get op.
func KVGet(ns, key string) KVOperation {
	return KVOperation{Op: gen.KvOperationOp("get"), Ns: ns, Key: &key}
}

// KVGetMany builds a getMany op: the rows of the keys that exist, plus the ones Missing.
func KVGetMany(ns string, keys ...string) KVOperation {
	return KVOperation{Op: gen.KvOperationOp("getMany"), Ns: ns, Keys: &keys}
}

// KVPrefixOpts pages a getPrefix op. After continues after a key (a result's NextAfter), Limit
// is the page size (0 = the broker's default of 100, clamped to 1000) and KeysOnly omits values.
type KVPrefixOpts struct {
	After    string
	Limit    int
	KeysOnly bool
}

// KVGetPrefix builds a getPrefix op: one page of the keys that start with prefix (non-empty), in
// key order; Truncated and NextAfter tell whether and where to continue.
func KVGetPrefix(ns, prefix string, opts KVPrefixOpts) KVOperation {
	return KVOperation{Op: gen.KvOperationOp("getPrefix"), Ns: ns, Prefix: &prefix, After: ptrUnlessZero(opts.After),
		Limit: ptrIfPositive(opts.Limit), KeysOnly: ptrUnlessZero(opts.KeysOnly)}
}

// KVIncrOpts bounds an incr op. Min and Max are inclusive; nil = unbounded. An incr that would
// leave the range is not applied (Applied false, Reason "limit") and the key keeps its value.
type KVIncrOpts struct {
	Min *int
	Max *int
}

// KVIncr builds an incr op: adds delta (may be negative) to a numeric key, creating it at 0 with
// ttl (Forever = no expiry; the TTL applies only when incr creates the key).
func KVIncr(ns, key string, delta int, ttl time.Duration, opts KVIncrOpts) KVOperation {
	op := KVOperation{Op: gen.KvOperationOp("incr"), Ns: ns, Key: &key, Delta: &delta, Min: opts.Min, Max: opts.Max}
	setTTL(&op.TtlSeconds, &op.Forever, ttl)
	return op
}

// KVPutExpect builds a conditional put op: expect 0 = the key must not exist, N = its current
// version must be N. A lost condition is Applied false with Reason "exists" or "version".
func KVPutExpect(ns, key string, value any, ttl time.Duration, expect int) KVOperation {
	op := KVPut(ns, key, value, ttl)
	op.Expect = &expect
	return op
}

func setTTL(ttl **int, forever **bool, d time.Duration) {
	if d == Forever || d <= 0 {
		*forever = ptr(true)
		return
	}
	*ttl = ptr(max(int(d/time.Second), 1))
}

// Batch runs KV ops (POST /api/v1/kv) and returns their results, index-aligned.
func (k KV) Batch(ctx context.Context, ops ...KVOperation) ([]KVResult, error) {
	sendCtx := withFlags(ctx, reqFlags{notIdempotent: !kvOpsIdempotent(ops)})
	out, err := call[gen.KvBatchResult](k.c, ctx, func() (*httpResp, error) {
		return k.c.gen.KvBatch(sendCtx, gen.KvBatchRequest{Operations: ops})
	})
	if err != nil {
		return nil, err
	}
	return out.Results, nil
}

// one runs a single op through the batch route and returns its result.
func (k KV) one(ctx context.Context, op KVOperation) (*KVResult, error) {
	res, err := k.Batch(ctx, op)
	if err != nil {
		return nil, err
	}
	if len(res) != 1 {
		return nil, errUnexpected("kv", len(res))
	}
	return &res[0], nil
}

// Get reads one key.
func (k KV) Get(ctx context.Context, key string) (*KVResult, error) {
	return call[KVResult](k.c, ctx, func() (*httpResp, error) { return k.c.gen.KvGet(ctx, k.ns, key) })
}

// Put writes one key (ttl Forever = no expiry).
func (k KV) Put(ctx context.Context, key string, value any, ttl time.Duration) (*KVResult, error) {
	b, err := json.Marshal(value)
	if err != nil {
		return nil, err
	}
	body := gen.KvPutRequest{Value: b}
	setTTL(&body.TtlSeconds, &body.Forever, ttl)
	return call[KVResult](k.c, ctx, func() (*httpResp, error) { return k.c.gen.KvPut(ctx, k.ns, key, body) })
}

// PutExpect writes one key only if its version matches: expect 0 = the key must not exist, N =
// its current version must be N (optimistic concurrency). A lost condition is not an error: the
// result has Applied false, Reason "exists" or "version", and the current Value and Version.
func (k KV) PutExpect(ctx context.Context, key string, value any, ttl time.Duration, expect int) (*KVResult, error) {
	b, err := json.Marshal(value)
	if err != nil {
		return nil, err
	}
	body := gen.KvPutRequest{Value: b, Expect: &expect}
	setTTL(&body.TtlSeconds, &body.Forever, ttl)
	sendCtx := withFlags(ctx, reqFlags{notIdempotent: true}) // a conditional write
	return call[KVResult](k.c, ctx, func() (*httpResp, error) { return k.c.gen.KvPut(sendCtx, k.ns, key, body) })
}

// PutIfAbsent writes one key only when it does not exist (ttl Forever = no expiry). When it
// exists, the result has Applied false, Reason "exists", and the current Value and Version.
func (k KV) PutIfAbsent(ctx context.Context, key string, value any, ttl time.Duration) (*KVResult, error) {
	if _, err := json.Marshal(value); err != nil {
		return nil, err
	}
	return k.one(ctx, KVPutIfAbsent(k.ns, key, value, ttl, false))
}

// GetMany reads several keys in one call: Rows holds the keys that exist (with values and
// versions), Missing the ones that do not.
func (k KV) GetMany(ctx context.Context, keys ...string) (*KVResult, error) {
	return k.one(ctx, KVGetMany(k.ns, keys...))
}

// GetPrefix reads one page of the keys that start with prefix (non-empty), in key order. When
// Truncated is true, pass NextAfter as opts.After to read the next page.
func (k KV) GetPrefix(ctx context.Context, prefix string, opts KVPrefixOpts) (*KVResult, error) {
	return k.one(ctx, KVGetPrefix(k.ns, prefix, opts))
}

// Incr adds delta (may be negative) to a numeric key atomically and returns the new Value and
// Version. A missing key starts at 0 and gets ttl (Forever = no expiry). With bounds in opts, an
// incr that would leave [Min, Max] is not applied: Applied false, Reason "limit".
func (k KV) Incr(ctx context.Context, key string, delta int, ttl time.Duration, opts KVIncrOpts) (*KVResult, error) {
	return k.one(ctx, KVIncr(k.ns, key, delta, ttl, opts))
}

// KVListQuery selects a page of List: keys with Prefix (empty = all), after After (a page's
// NextAfter), Limit rows (0 = the broker's default), KeysOnly to omit values, and
// IncludeExpired to also return expired rows (marked Expired).
type KVListQuery struct {
	Prefix         string
	After          string
	Limit          int
	KeysOnly       bool
	IncludeExpired bool
}

// List pages through the namespace's keys in key order (POST /api/v1/resources/kv/list, the
// console route). Unlike GetPrefix it takes an empty prefix and can include expired rows.
func (k KV) List(ctx context.Context, q KVListQuery) (*KVListResult, error) {
	body := gen.KvListRequest{Namespace: k.ns, Prefix: ptrUnlessZero(q.Prefix), After: ptrUnlessZero(q.After),
		Limit: ptrIfPositive(q.Limit), KeysOnly: ptrUnlessZero(q.KeysOnly), IncludeExpired: ptrUnlessZero(q.IncludeExpired)}
	return call[KVListResult](k.c, ctx, func() (*httpResp, error) { return k.c.gen.ListKvKeys(ctx, body) })
}

// KVNamespaces lists the KV namespaces with their live key counts
// (GET /api/v1/resources/kv/namespaces).
func (c *Client) KVNamespaces(ctx context.Context) (*KVNamespaceList, error) {
	return call[KVNamespaceList](c, ctx, func() (*httpResp, error) { return c.gen.ListKvNamespaces(ctx) })
}

// Delete removes one key.
func (k KV) Delete(ctx context.Context, key string) (*KVResult, error) {
	return call[KVResult](k.c, ctx, func() (*httpResp, error) { return k.c.gen.KvDelete(ctx, k.ns, key) })
}

// DeleteExpect removes one key only if its current version is expect (>= 1), for optimistic
// concurrency: read, decide, delete what was read. A lost condition is not an error: the result
// has Applied false and Reason "version" (with the current Value and Version) or "absent".
func (k KV) DeleteExpect(ctx context.Context, key string, expect int) (*KVResult, error) {
	return k.one(ctx, KVDeleteExpect(k.ns, key, expect))
}

// ---------------------------------------------------------------------------------------------
// timers

// Timers addresses the timers of one queue. Like the queue builders it is an immutable value:
// Partition returns a copy, so a base Timers can be shared across goroutines.
type Timers struct {
	c             *Client
	queue         string
	partition     string
	transactionID string
}

// Partition returns a copy of t whose Schedule and Reschedule push into partition p when the
// timer fires (empty = the broker's default partition, "Default").
func (t Timers) Partition(p string) Timers {
	t.partition = p
	return t
}

// TransactionID returns a copy of t whose Schedule and Reschedule give the fired message this
// transaction id (empty = one minted by the broker). A fixed id makes the firing idempotent: the
// push deduplicates like any other.
func (t Timers) TransactionID(id string) Timers {
	t.transactionID = id
	return t
}

// Timers returns helpers for the timers of queue.
func (c *Client) Timers(queue string) Timers { return Timers{c: c, queue: queue} }

// TimerSchedule builds a schedule op: after delay, payload (JSON bytes; nil = `{}`) is pushed to
// queue under the key.
func TimerSchedule(queue, key string, delay time.Duration, payload []byte) TimerOperation {
	op := TimerOperation{Op: gen.TimerOperationOp("schedule"), Queue: queue, TimerKey: key,
		DelayMs: ptr(int(delay / time.Millisecond))}
	if payload != nil {
		op.Payload = &payload
	}
	return op
}

// TimerReschedule builds a reschedule op: like TimerSchedule, and it also resets the timer's
// attempts. Set the op's Partition field to fire into a partition other than "Default".
func TimerReschedule(queue, key string, delay time.Duration, payload []byte) TimerOperation {
	op := TimerSchedule(queue, key, delay, payload)
	op.Op = gen.TimerOperationOp("reschedule")
	return op
}

// TimerCancel builds a cancel op.
func TimerCancel(queue, key string) TimerOperation {
	return TimerOperation{Op: gen.TimerOperationOp("cancel"), Queue: queue, TimerKey: key}
}

// Schedule schedules (or replaces) one timer: after delay, payload (JSON bytes) is pushed to
// the queue, into the partition set with Partition, under the id set with TransactionID.
func (t Timers) Schedule(ctx context.Context, key string, delay time.Duration, payload []byte) (*TimerResult, error) {
	return t.one(ctx, t.targeted(TimerSchedule(t.queue, key, delay, payload)))
}

// Reschedule replaces one timer (or creates it) and resets its attempts; Status is
// "rescheduled" when the timer existed.
func (t Timers) Reschedule(ctx context.Context, key string, delay time.Duration, payload []byte) (*TimerResult, error) {
	return t.one(ctx, t.targeted(TimerReschedule(t.queue, key, delay, payload)))
}

// targeted sets the fired message's partition and transaction id chosen on t.
func (t Timers) targeted(op TimerOperation) TimerOperation {
	op.Partition, op.Txn = ptrUnlessZero(t.partition), ptrUnlessZero(t.transactionID)
	return op
}

func (t Timers) one(ctx context.Context, op TimerOperation) (*TimerResult, error) {
	out, err := call[gen.TimerBatchResult](t.c, ctx, func() (*httpResp, error) {
		return t.c.gen.ScheduleTimers(ctx, gen.TimerBatchRequest{Operations: []TimerOperation{op}})
	})
	if err != nil {
		return nil, err
	}
	if len(out.Results) != 1 {
		return nil, errUnexpected("timers", len(out.Results))
	}
	return &out.Results[0], nil
}

// Cancel cancels one timer.
func (t Timers) Cancel(ctx context.Context, key string) (*TimerResult, error) {
	return call[TimerResult](t.c, ctx, func() (*httpResp, error) {
		return t.c.gen.CancelTimer(ctx, t.queue, key, &gen.CancelTimerParams{})
	})
}

// Get reads one timer (Found false when absent).
func (t Timers) Get(ctx context.Context, key string) (*Timer, error) {
	return call[Timer](t.c, ctx, func() (*httpResp, error) { return t.c.gen.GetTimer(ctx, t.queue, key) })
}

// List lists the queue's timers in key order: limit per page (0 = the broker's default), after
// a key (a page's NextAfter; empty = from the start).
func (t Timers) List(ctx context.Context, limit int, after string) (*TimerList, error) {
	return t.ListPrefix(ctx, "", limit, after)
}

// ListPrefix lists the queue's timers whose key starts with prefix (empty = all), paged like List.
func (t Timers) ListPrefix(ctx context.Context, prefix string, limit int, after string) (*TimerList, error) {
	p := &gen.ListTimersParams{Prefix: ptrUnlessZero(prefix), Limit: ptrIfPositive(limit), After: ptrUnlessZero(after)}
	return call[TimerList](t.c, ctx, func() (*httpResp, error) { return t.c.gen.ListTimers(ctx, t.queue, p) })
}
