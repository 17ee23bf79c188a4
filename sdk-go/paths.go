//nolint:bodyclose // every response goes back to the caller, whose Client.decode closes the body.
package lanes

import (
	"context"

	"github.com/lanesmq/lanes/sdk-go/internal/gen"
)

// pathGuard is the generated client with a check in front of every route that puts a name in
// its URL path. The generated code resolves each path as a URL reference, which removes a "."
// or ".." segment together with the one before it, so such a name would reach another route
// (Timers("..").Get(ctx, "status") sent GET /api/v1/status and read the broker's status as a
// timer). Those names are refused with *InvalidNameError before anything is sent; every other
// route is the embedded client's.
type pathGuard struct{ *gen.Client }

// refuseDotNames returns an *InvalidNameError for the first pair of fieldsAndNames (a field,
// then its name) whose name is "." or "..".
func refuseDotNames(fieldsAndNames ...string) error {
	for i := 0; i+1 < len(fieldsAndNames); i += 2 {
		if name := fieldsAndNames[i+1]; name == "." || name == ".." {
			return &InvalidNameError{Field: fieldsAndNames[i], Name: name, Reason: dotNameReason}
		}
	}
	return nil
}

func (g pathGuard) GetQueue(ctx context.Context, queue string, params *gen.GetQueueParams, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("queue", queue); err != nil {
		return nil, err
	}
	return g.Client.GetQueue(ctx, queue, params, e...)
}

func (g pathGuard) DeleteQueue(ctx context.Context, queue string, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("queue", queue); err != nil {
		return nil, err
	}
	return g.Client.DeleteQueue(ctx, queue, e...)
}

func (g pathGuard) GetQueueDepth(ctx context.Context, queue string, params *gen.GetQueueDepthParams, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("queue", queue); err != nil {
		return nil, err
	}
	return g.Client.GetQueueDepth(ctx, queue, params, e...)
}

func (g pathGuard) GetQueueStatus(ctx context.Context, queue string, params *gen.GetQueueStatusParams, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("queue", queue); err != nil {
		return nil, err
	}
	return g.Client.GetQueueStatus(ctx, queue, params, e...)
}

func (g pathGuard) PopQueue(ctx context.Context, queue string, params *gen.PopQueueParams, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("queue", queue); err != nil {
		return nil, err
	}
	return g.Client.PopQueue(ctx, queue, params, e...)
}

func (g pathGuard) PopPartition(ctx context.Context, queue string, partition string, params *gen.PopPartitionParams, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("queue", queue, "partition", partition); err != nil {
		return nil, err
	}
	return g.Client.PopPartition(ctx, queue, partition, params, e...)
}

func (g pathGuard) SeekQueue(ctx context.Context, group string, queue string, body gen.SeekQueueJSONRequestBody, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("group", group, "queue", queue); err != nil {
		return nil, err
	}
	return g.Client.SeekQueue(ctx, group, queue, body, e...)
}

func (g pathGuard) SeekPartition(ctx context.Context, group string, queue string, partition string, body gen.SeekPartitionJSONRequestBody, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("group", group, "queue", queue, "partition", partition); err != nil {
		return nil, err
	}
	return g.Client.SeekPartition(ctx, group, queue, partition, body, e...)
}

func (g pathGuard) GetConsumerGroup(ctx context.Context, group string, params *gen.GetConsumerGroupParams, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("group", group); err != nil {
		return nil, err
	}
	return g.Client.GetConsumerGroup(ctx, group, params, e...)
}

func (g pathGuard) DeleteConsumerGroup(ctx context.Context, group string, params *gen.DeleteConsumerGroupParams, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("group", group); err != nil {
		return nil, err
	}
	return g.Client.DeleteConsumerGroup(ctx, group, params, e...)
}

func (g pathGuard) DeleteConsumerGroupQueue(ctx context.Context, group string, queue string, params *gen.DeleteConsumerGroupQueueParams, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("group", group, "queue", queue); err != nil {
		return nil, err
	}
	return g.Client.DeleteConsumerGroupQueue(ctx, group, queue, params, e...)
}

func (g pathGuard) UpdateConsumerGroupSubscription(ctx context.Context, group string, body gen.UpdateConsumerGroupSubscriptionJSONRequestBody, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("group", group); err != nil {
		return nil, err
	}
	return g.Client.UpdateConsumerGroupSubscription(ctx, group, body, e...)
}

func (g pathGuard) ReplayDlq(ctx context.Context, id string, body gen.ReplayDlqJSONRequestBody, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("dlq id", id); err != nil {
		return nil, err
	}
	return g.Client.ReplayDlq(ctx, id, body, e...)
}

func (g pathGuard) GetMessage(ctx context.Context, partitionID string, transactionID string, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("partitionId", partitionID, "transactionId", transactionID); err != nil {
		return nil, err
	}
	return g.Client.GetMessage(ctx, partitionID, transactionID, e...)
}

func (g pathGuard) DeleteMessage(ctx context.Context, partitionID string, transactionID string, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("partitionId", partitionID, "transactionId", transactionID); err != nil {
		return nil, err
	}
	return g.Client.DeleteMessage(ctx, partitionID, transactionID, e...)
}

func (g pathGuard) RetryMessage(ctx context.Context, partitionID string, transactionID string, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("partitionId", partitionID, "transactionId", transactionID); err != nil {
		return nil, err
	}
	return g.Client.RetryMessage(ctx, partitionID, transactionID, e...)
}

func (g pathGuard) ExtendLease(ctx context.Context, leaseID string, body gen.ExtendLeaseJSONRequestBody, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("lease", leaseID); err != nil {
		return nil, err
	}
	return g.Client.ExtendLease(ctx, leaseID, body, e...)
}

func (g pathGuard) KvGet(ctx context.Context, ns string, key string, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("namespace", ns, "key", key); err != nil {
		return nil, err
	}
	return g.Client.KvGet(ctx, ns, key, e...)
}

func (g pathGuard) KvPut(ctx context.Context, ns string, key string, body gen.KvPutJSONRequestBody, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("namespace", ns, "key", key); err != nil {
		return nil, err
	}
	return g.Client.KvPut(ctx, ns, key, body, e...)
}

func (g pathGuard) KvDelete(ctx context.Context, ns string, key string, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("namespace", ns, "key", key); err != nil {
		return nil, err
	}
	return g.Client.KvDelete(ctx, ns, key, e...)
}

func (g pathGuard) GetTimer(ctx context.Context, queue string, key string, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("queue", queue, "key", key); err != nil {
		return nil, err
	}
	return g.Client.GetTimer(ctx, queue, key, e...)
}

func (g pathGuard) CancelTimer(ctx context.Context, queue string, key string, params *gen.CancelTimerParams, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("queue", queue, "key", key); err != nil {
		return nil, err
	}
	return g.Client.CancelTimer(ctx, queue, key, params, e...)
}

func (g pathGuard) ListTimers(ctx context.Context, queue string, params *gen.ListTimersParams, e ...gen.RequestEditorFn) (*httpResp, error) {
	if err := refuseDotNames("queue", queue); err != nil {
		return nil, err
	}
	return g.Client.ListTimers(ctx, queue, params, e...)
}
