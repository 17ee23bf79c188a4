// Wire types, taken from the types generated from openapi.yaml (src/generated) and
// re-exported under stable names. Nothing here is hand-shaped: when the spec changes,
// `make generate` changes these.
import type { components, operations } from "./generated/schema.js";

type Schemas = components["schemas"];

/** WirePushResult is the broker's verdict on one pushed item as `POST /api/v1/push` answers it (`queued`, `duplicate`, `buffered` or `failed`). */
export type WirePushResult = Schemas["PushResult"];
/** WirePushItem is one item of `POST /api/v1/push`. */
export type WirePushItem = Schemas["PushItem"];
/** PushStatus is the closed set of push item statuses. */
export type PushStatus = WirePushResult["status"];
/** PopResponse is the body of a `200` pop. */
export type PopResponse = Schemas["PopResponse"];
/** PopAutopilotEcho is the sizes the broker chose when a pop engaged autopilot. */
export type PopAutopilotEcho = Schemas["PopAutopilot"];
/** WireMessage is one message as the pop route returns it. */
export type WireMessage = Schemas["PopMessage"];
/** PopQuery is the query string of the pop routes. */
export type PopQuery = NonNullable<operations["popQueue"]["parameters"]["query"]>;
/** AckResult is the broker's per-item answer to an acknowledgement. */
export type AckResult = Schemas["AckResult"];
/** AckItem is one item of an ack batch on the wire. */
export type AckItem = Schemas["AckItem"];
/** LeaseExtendResult is the answer to a lease renewal. */
export type LeaseExtendResult = Schemas["LeaseExtendResult"];
/** TransactionRequest is the body of `POST /api/v1/transaction`. */
export type TransactionRequest = Schemas["TransactionRequest"];
/** TransactionOperation is one push or ack operation of a transaction bundle. */
export type TransactionOperation = Schemas["TransactionOperation"];
/** TransactionResult is the answer to a transaction bundle (committed or rolled back). */
export type TransactionResult = Omit<Schemas["TransactionResult"], "kv" | "value"> & { kv?: KvResult[]; value?: KvValue };
/** TransactionReason is the closed set of reasons a bundle rolls back. */
export type TransactionReason = NonNullable<TransactionResult["reason"]>;
/** QueueOptions are the queue options `configure` accepts. */
export type QueueOptions = Schemas["QueueOptions"];
/** ConfigureRequest is the body of `POST /api/v1/configure`. */
export type ConfigureRequest = Schemas["ConfigureRequest"];
/** ConfigureResult is the effective configuration after `configure`. */
export type ConfigureResult = Schemas["ConfigureResult"];
/** QueueList is the answer of the queue listing. */
export type QueueList = Schemas["QueueList"];
/** QueueDetail is one queue with its options and partitions. */
export type QueueDetail = Schemas["QueueDetail"];
/** DeleteQueueResult is the answer to a queue deletion. */
export type DeleteQueueResult = Schemas["DeleteQueueResult"];
/** QueueDepth is the pending-message arithmetic of a queue for one group. */
export type QueueDepth = Schemas["QueueDepth"];
/** Overview is the system-wide counters. */
export type Overview = Schemas["Overview"];
/** NamespaceList lists namespaces. */
export type NamespaceList = Schemas["NamespaceList"];
/** TaskList lists tasks. */
export type TaskList = Schemas["TaskList"];
/** MessageList is a page of messages. */
export type MessageList = Schemas["MessageList"];
/** MessageListQuery filters the message listing. */
export type MessageListQuery = NonNullable<operations["listMessages"]["parameters"]["query"]>;
/** MessageDetail is one message with its per-group state. */
export type MessageDetail = Schemas["MessageDetail"];
/** DeleteMessageResult is the answer to deleting a dead-lettered message. */
export type DeleteMessageResult = Schemas["DeleteMessageResult"];
/** DlqList is a page of dead letters. */
export type DlqList = Schemas["DlqList"];
/** DlqMessage is one dead letter. */
export type DlqMessage = Schemas["DlqMessage"];
/** MessageListItem is one message of a message listing. */
export type MessageListItem = Schemas["MessageListItem"];
/** QueueSummary is one queue of a queue listing (`listQueues`, `listQueueStatus`). */
export type QueueSummary = Schemas["QueueSummary"];
/** DlqListQuery filters the dead-letter listing. */
export type DlqListQuery = NonNullable<operations["listDlq"]["parameters"]["query"]>;
/** DlqPurgeResult is the answer to a dead-letter purge. */
export type DlqPurgeResult = Schemas["DlqPurgeResult"];
/** DlqReplayRequest names an optional replay destination. */
export type DlqReplayRequest = Schemas["DlqReplayRequest"];
/** DlqReplayResult is the outcome of a dead-letter replay. */
export type DlqReplayResult = Schemas["DlqReplayResult"];
/** ConsumerGroupSummary is one (group, queue) row of the group listing. */
export type ConsumerGroupSummary = Schemas["ConsumerGroupSummary"];
/** ConsumerGroupDetail is a group's cursors keyed by queue. */
export type ConsumerGroupDetail = Schemas["ConsumerGroupDetail"];
/** LaggingConsumerGroup is one lagging (group, partition) row. */
export type LaggingConsumerGroup = Schemas["LaggingConsumerGroup"];
/** ConsumerGroupDeleteResult is the answer to a group deletion. */
export type ConsumerGroupDeleteResult = Schemas["ConsumerGroupDeleteResult"];
/** SubscriptionUpdateResult is the answer to a subscription timestamp update. */
export type SubscriptionUpdateResult = Schemas["SubscriptionUpdateResult"];
/** SeekRequest is `{toEnd: true}` or `{timestamp}`. */
export type SeekRequest = Schemas["SeekRequest"];
/** SeekQueueResult is the answer to a queue-wide seek. */
export type SeekQueueResult = Schemas["SeekQueueResult"];
/** SeekPartitionResult is the answer to a one-partition seek. */
export type SeekPartitionResult = Schemas["SeekPartitionResult"];
/** KvValue is a KV value as the SDK reads it: any JSON, with an integer beyond Number.MAX_SAFE_INTEGER (a counter past 2^53) as a bigint, so it keeps every digit. A bigint may be written too. */
export type KvValue = NonNullable<Schemas["KvResult"]["value"]> | bigint | null;
/** KvOperation is one KV operation (batch route and transaction rider); `delta`, `min`, `max` and `value` may hold bigints (the broker's counters are int64). */
export type KvOperation = Omit<Schemas["KvOperation"], "value" | "delta" | "min" | "max"> & {
  value?: KvValue;
  delta?: number | bigint;
  min?: number | bigint;
  max?: number | bigint;
};
/** KvResult is the result of one KV operation; `value` (and each row's) is a bigint where an integer is beyond Number.MAX_SAFE_INTEGER. */
export type KvResult = Omit<Schemas["KvResult"], "value" | "rows"> & { value?: KvValue; rows?: KvRow[] };
/** KvRow is one key/value row. */
export type KvRow = Omit<Schemas["KvRow"], "value"> & { value?: KvValue };
/** KvNamespaceList lists KV namespaces. */
export type KvNamespaceList = Schemas["KvNamespaceList"];
/** KvListRequest pages through a KV namespace. */
export type KvListRequest = Schemas["KvListRequest"];
/** KvListResult is a page of KV rows. */
export type KvListResult = Omit<Schemas["KvListResult"], "rows"> & { rows: KvRow[] };
/** TimerOperation schedules, reschedules or cancels a timer (batch route and transaction rider). */
export type TimerOperation = Schemas["TimerOperation"];
/** TimerResult is the outcome of one timer operation. */
export type TimerResult = Schemas["TimerResult"];
/** Timer is one stored timer. */
export type Timer = Schemas["Timer"];
/** TimerList is a page of timers, or a count. */
export type TimerList = Schemas["TimerList"];
/** Health is the answer of `GET /health`. */
export type Health = Schemas["Health"];
/** Metrics is the answer of `GET /metrics`. */
export type Metrics = Schemas["Metrics"];
/** Maintenance is a maintenance switch state. */
export type Maintenance = Schemas["Maintenance"];
/** ErrorBody is the JSON envelope of every 4xx/5xx answer. */
export type ErrorBody = Schemas["Error"];
/** StatusOverview is the dashboard aggregate of `GET /api/v1/status`. */
export type StatusOverview = Schemas["StatusOverview"];
/** QueueStatusList is the answer of `GET /api/v1/status/queues`. */
export type QueueStatusList = Schemas["QueueStatusList"];
/** QueueStatus is the live detail of one queue. */
export type QueueStatus = Schemas["QueueStatus"];
/** BufferStatus is the broker's disk-spool state. */
export type BufferStatus = Schemas["BufferStatus"];
