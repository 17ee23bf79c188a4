package lanes_test

import (
	"testing"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// The names docs/sdk-design.md's tables give the Go SDK, section by section. Removing or
// renaming one fails to compile here, so the tables cannot drift from the code silently; a row
// added to a table gets its name added here (sdk-js/test/unit/surface.test.ts and
// sdk-python/tests/test_surface.py hold the same rows for TS and Python).
var designSurface = map[string][]any{
	"1 client": {
		lanes.New, lanes.WithURL, lanes.WithBearerToken, lanes.WithBearerTokenFunc, lanes.WithTimeout,
		lanes.WithRetryAttempts, lanes.WithRetryDelay, lanes.WithMaxRetryDelay, lanes.WithMax429Attempts,
		lanes.WithMaxRetryAfter, lanes.WithHealthRetryAfter, lanes.WithLogger, lanes.WithHTTPClient, lanes.WithHeader,
		lanes.WithPopAutopilot, (*lanes.Client).Close, (*lanes.Client).Health, (*lanes.Client).FlushAll,
		(*lanes.Client).BufferStats, lanes.BufferStats{}.ActiveBuffers, lanes.BufferStats{}.TotalBufferedMessages,
		lanes.BufferStats{}.FlushesPerformed,
	},
	"2 producing": {
		(*lanes.Client).Queue, lanes.QueueBuilder.Partition, lanes.QueueBuilder.Push, lanes.Data,
		lanes.Item{}.Data, lanes.Item{}.TransactionID, lanes.Item{}.TraceID,
		lanes.PushResult{}.Index, lanes.PushResult{}.MessageID, lanes.PushResult{}.TransactionID,
		lanes.PushResult{}.Queue, lanes.PushResult{}.Status, lanes.PushResult{}.Error,
		lanes.StatusQueued, lanes.StatusDuplicate, lanes.StatusBuffered, lanes.StatusFailed,
		lanes.PushError{}.Items, lanes.ItemError{}.Index, lanes.ItemError{}.TransactionID,
		lanes.ItemError{}.Status, lanes.ItemError{}.Message,
		lanes.QueueBuilder.Buffer, lanes.BufferOptions{}.MessageCount, lanes.BufferOptions{}.FlushInterval,
		lanes.BufferOptions{}.MaxSize, lanes.BufferOptions{}.RetryDelay, (*lanes.Buffer).Push, (*lanes.Buffer).Flush,
		lanes.InvalidItemError{}.Index, lanes.DroppedError{}.Items, lanes.UnsentError{}.Unsent,
		lanes.ErrClientClosed,
	},
	"3 consuming": {
		(*lanes.Client).Namespace, lanes.QueueBuilder.Task, lanes.QueueBuilder.Group,
		lanes.QueueBuilder.SubscriptionMode, lanes.QueueBuilder.SubscriptionFrom, lanes.QueueBuilder.Batch,
		lanes.QueueBuilder.Partitions, lanes.QueueBuilder.Autopilot, lanes.QueueBuilder.Wait,
		lanes.QueueBuilder.Timeout, lanes.QueueBuilder.LeaseSeconds, lanes.QueueBuilder.ServerAutoAck,
		lanes.QueueBuilder.Concurrency, lanes.QueueBuilder.Limit, lanes.QueueBuilder.IdleTimeout,
		lanes.QueueBuilder.RenewLease, lanes.QueueBuilder.Each, lanes.QueueBuilder.AutoAck,
		lanes.QueueBuilder.OnError, lanes.QueueBuilder.SoftStopTimeout, lanes.QueueBuilder.ReportHandlerErrors,
		lanes.QueueBuilder.Pop, lanes.QueueBuilder.PopResult, lanes.QueueBuilder.Consume,
		lanes.QueueBuilder.ConsumeBatch, lanes.QueueBuilder.Run, lanes.QueueBuilder.Messages,
		(*lanes.Consumer).Stop, (*lanes.Consumer).StopAndCancel, (*lanes.Consumer).Done, (*lanes.Consumer).Err,
		(*lanes.Message).Decode, lanes.Message{}.ID, lanes.Message{}.TransactionID, lanes.Message{}.TraceID,
		lanes.Message{}.Data, lanes.Message{}.ProducerSub, lanes.Message{}.CreatedAt, lanes.Message{}.PartitionID,
		lanes.Message{}.Partition, lanes.Message{}.LeaseID, lanes.Message{}.ConsumerGroup, lanes.Message{}.Queue,
		lanes.PopResult{}.Queue, lanes.PopResult{}.Partition, lanes.PopResult{}.PartitionID,
		lanes.PopResult{}.LeaseID, lanes.PopResult{}.ConsumerGroup, lanes.PopResult{}.Messages,
		lanes.PopResult{}.PartitionsClaimed, lanes.PopResult{}.Autopilot,
		lanes.AutopilotEcho{}.Partitions, lanes.AutopilotEcho{}.Batch, lanes.AutopilotEcho{}.WaitMs,
	},
	"4 acks and leases": {
		(*lanes.Client).Ack, lanes.AckCompleted, lanes.AckFailed, lanes.AckRetry, lanes.AckDLQ,
		lanes.AckOpts{}.Group, lanes.AckOpts{}.Error, lanes.AckOpts{}.WithoutLease,
		lanes.AckResult{}.Index, lanes.AckResult{}.TransactionID, lanes.AckResult{}.Success,
		lanes.AckResult{}.Error, lanes.AckResult{}.LeaseReleased, lanes.AckResult{}.DLQ,
		lanes.AckResult{}.Noop, lanes.AckResult{}.Dropped, lanes.AckError{}.Items,
		(*lanes.Client).Renew, (*lanes.Client).RenewMessages, lanes.RenewResult{}.LeaseID,
		lanes.RenewResult{}.Success, lanes.RenewResult{}.Renewed, lanes.RenewResult{}.NewExpiresAt,
	},
	"5 transactions": {
		(*lanes.Client).Transaction, (*lanes.TransactionBuilder).Queue, lanes.TxQueue.Partition,
		lanes.TxQueue.Push, (*lanes.TransactionBuilder).Ack, (*lanes.TransactionBuilder).AckWith, (*lanes.TransactionBuilder).KV,
		(*lanes.TransactionBuilder).Timer, (*lanes.TransactionBuilder).Commit, lanes.ErrEmptyTransaction,
		lanes.TransactionError{}.Reason, lanes.TransactionError{}.Message, lanes.TransactionError{}.Attempts,
		lanes.TransactionError{}.Result, lanes.TransactionError{}.FailedIndex, lanes.TransactionError{}.KVReason,
		lanes.TransactionError{}.Version, lanes.TransactionError{}.Value,
		lanes.ReasonBadRequest, lanes.ReasonDuplicate, lanes.ReasonAckRejected, lanes.ReasonKVPrecondition,
		lanes.ReasonTimerHorizonExceeded, lanes.ReasonPayloadTooLarge, lanes.ReasonMisaligned, lanes.ReasonDBError,
	},
	"6 admin": {
		(*lanes.Client).Admin, lanes.Admin.ConfigureQueue, lanes.ConfigureReplace, lanes.ConfigureMerge,
		lanes.QueueBuilder.Configure, lanes.QueueBuilder.Delete, lanes.QueueBuilder.Depth,
		lanes.Admin.GetQueue, lanes.Admin.ListQueues, lanes.Admin.DeleteQueue, lanes.Admin.QueueDepth,
		lanes.QueueQuery{}.Namespace, lanes.QueueQuery{}.Task, lanes.QueueQuery{}.Limit, lanes.QueueQuery{}.Offset,
		lanes.Admin.SeekConsumerGroup, lanes.SeekToEnd, lanes.SeekToTime, lanes.Admin.SeekConsumerGroupPartition,
		lanes.Admin.ListConsumerGroups, lanes.Admin.GetConsumerGroup, lanes.Admin.LaggingConsumerGroups,
		lanes.Admin.DeleteConsumerGroup, lanes.Admin.DeleteConsumerGroupForQueue, lanes.Admin.UpdateSubscription,
		lanes.Admin.ListDLQ, lanes.Admin.PurgeDLQ, lanes.Admin.ReplayDLQ,
		lanes.DLQQuery{}.Queue, lanes.DLQQuery{}.Group, lanes.DLQQuery{}.Partition, lanes.DLQQuery{}.From,
		lanes.DLQQuery{}.To, lanes.DLQQuery{}.Limit, lanes.DLQQuery{}.Offset,
		lanes.QueueBuilder.DLQ, lanes.DLQBuilder.Partition, lanes.DLQBuilder.Limit, lanes.DLQBuilder.Offset,
		lanes.DLQBuilder.From, lanes.DLQBuilder.To, lanes.DLQBuilder.Get, lanes.DLQBuilder.All,
		lanes.Admin.AllDLQ, lanes.Admin.AllMessages, lanes.Admin.AllQueues, lanes.Admin.AllQueueStatus,
		lanes.Admin.ListMessages, lanes.Admin.GetMessage, lanes.Admin.DeleteMessage, lanes.Admin.RetryMessage,
		lanes.MessageQuery{}.Queue, lanes.MessageQuery{}.Partition, lanes.MessageQuery{}.Namespace,
		lanes.MessageQuery{}.Task, lanes.MessageQuery{}.Status, lanes.MessageQuery{}.From, lanes.MessageQuery{}.To,
		lanes.MessageQuery{}.Limit, lanes.MessageQuery{}.Offset,
		lanes.Admin.Overview, lanes.Admin.Namespaces, lanes.Admin.Tasks,
		lanes.Admin.Status, lanes.Admin.ListQueueStatus, lanes.Admin.QueueStatus, lanes.Admin.BufferStatus,
		lanes.StatusQuery{}.Queue, lanes.StatusQuery{}.Namespace, lanes.StatusQuery{}.Task,
		lanes.StatusQuery{}.From, lanes.StatusQuery{}.To, lanes.StatusQuery{}.Limit, lanes.StatusQuery{}.Offset,
		lanes.Admin.Metrics, lanes.Admin.MaintenanceMode, lanes.Admin.SetMaintenanceMode,
		lanes.Admin.PopMaintenanceMode, lanes.Admin.SetPopMaintenanceMode,
	},
	"6 kv and timers": {
		(*lanes.Client).KV, (*lanes.Client).Timers, (*lanes.Client).KVNamespaces,
		lanes.KV.Get, lanes.KV.Put, lanes.Forever, lanes.KV.PutExpect, lanes.KV.PutIfAbsent, lanes.KV.GetMany,
		lanes.KV.GetPrefix, lanes.KVPrefixOpts{}.After, lanes.KVPrefixOpts{}.Limit, lanes.KVPrefixOpts{}.KeysOnly,
		lanes.KV.Incr, lanes.KVIncrOpts{}.Min, lanes.KVIncrOpts{}.Max, lanes.KV.Delete, lanes.KV.DeleteExpect,
		lanes.KV.Batch, lanes.KVGet, lanes.KVGetMany, lanes.KVGetPrefix, lanes.KVPut, lanes.KVPutExpect,
		lanes.KVPutIfAbsent, lanes.KVIncr, lanes.KVDelete, lanes.KVDeleteExpect,
		lanes.KV.List, lanes.KVListQuery{}.Prefix, lanes.KVListQuery{}.After, lanes.KVListQuery{}.Limit,
		lanes.KVListQuery{}.KeysOnly, lanes.KVListQuery{}.IncludeExpired,
		lanes.KVReasonExists, lanes.DecodeKV[int], lanes.ErrNoKVValue,
		lanes.Timers.Schedule, lanes.Timers.Reschedule, lanes.Timers.Partition, lanes.Timers.TransactionID,
		lanes.Timers.Cancel, lanes.Timers.Get, lanes.Timers.List, lanes.Timers.ListPrefix, lanes.Timers.Batch,
		lanes.TimerSchedule, lanes.TimerReschedule, lanes.TimerCancel,
	},
	"7 errors": {
		lanes.APIError{}.Status, lanes.APIError{}.Code, lanes.APIError{}.Message, lanes.APIError{}.RetryAfter, lanes.APIError{}.Attempts,
		lanes.ConnectionError{}.Err, lanes.ConnectionError{}.Attempts, (*lanes.ConnectionError).Timeout, lanes.OutcomeUnknownError{}.Err,
		lanes.UnexpectedAnswerError{}.Status, lanes.UnexpectedAnswerError{}.Body,
		lanes.InvalidKVValueError{}.Err, lanes.InvalidNameError{}.Field, lanes.HandlerPanicError{}.Value,
		lanes.HandlerError{}.Messages, lanes.HandlerError{}.Err,
		lanes.ErrBadRequest, lanes.ErrUnauthorized, lanes.ErrForbidden, lanes.ErrNotFound, lanes.ErrConflict,
		lanes.ErrPayloadTooLarge, lanes.ErrRateLimited, lanes.ErrInternalServer, lanes.ErrNotImplemented,
		lanes.ErrTimeout, lanes.ErrConnection, lanes.ErrOutcomeUnknown, lanes.ErrEmptyTransaction,
		lanes.ErrConsumerStopped, lanes.ErrClientClosed,
	},
}

// The error types are errors through the pointer, as errors.As expects them.
var designErrorTypes = []error{
	(*lanes.APIError)(nil), (*lanes.ConnectionError)(nil), (*lanes.OutcomeUnknownError)(nil),
	(*lanes.PushError)(nil), (*lanes.AckError)(nil), (*lanes.TransactionError)(nil),
	(*lanes.UnexpectedAnswerError)(nil), (*lanes.InvalidItemError)(nil), (*lanes.InvalidKVValueError)(nil),
	(*lanes.InvalidNameError)(nil), (*lanes.UnsentError)(nil), (*lanes.DroppedError)(nil),
	(*lanes.HandlerPanicError)(nil), (*lanes.HandlerError)(nil),
}

// TestDesignSurface is the check itself: it compiles only while every name above exists.
func TestDesignSurface(t *testing.T) {
	if len(designSurface) == 0 || len(designErrorTypes) == 0 {
		t.Fatal("empty surface lists")
	}
}
