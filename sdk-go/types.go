package lanes

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/lanesmq/lanes/sdk-go/internal/gen"
)

// jsonUnmarshal decodes the broker's answers. goccy/go-json reads a 100-message pop answer
// in about a fifth of encoding/json's time, which took half the CPU of a Go consume loop.
// Payloads a caller decodes (Message.Decode, KV values) keep encoding/json's rules.
func jsonUnmarshal(b []byte, v any) error { return gojson.Unmarshal(b, v) }

// Re-exported wire models (aliases of the generated types) used by admin, KV and timer calls.
type (
	// Health is the body of GET /health.
	Health = gen.Health
	// QueueOptions are a queue's options for Configure (nil fields are omitted).
	QueueOptions = gen.QueueOptions
	// QueueOptionsResult are a queue's effective options as configure answers
	// them: every option present, none nil.
	QueueOptionsResult = gen.QueueOptionsResult
	// QueueDetailOptions are the effective options of GET
	// /api/v1/resources/queues/{queue}: QueueOptionsResult plus namespace and task.
	QueueDetailOptions = gen.QueueDetailOptions
	// ConfigureResult is the answer of POST /api/v1/configure.
	ConfigureResult = gen.ConfigureResult
	// QueueDetail is the answer of GET /api/v1/resources/queues/{queue}.
	QueueDetail = gen.QueueDetail
	// QueueList is the answer of GET /api/v1/resources/queues.
	QueueList = gen.QueueList
	// QueueSummary is one queue of a queue listing (GET /api/v1/resources/queues, /status/queues).
	QueueSummary = gen.QueueSummary
	// QueueDepth is the answer of GET /api/v1/resources/queues/{queue}/depth.
	QueueDepth = gen.QueueDepth
	// DeleteQueueResult is the answer of DELETE /api/v1/resources/queues/{queue}.
	DeleteQueueResult = gen.DeleteQueueResult
	// Overview is the answer of GET /api/v1/resources/overview.
	Overview = gen.Overview
	// NamespaceList is the answer of GET /api/v1/resources/namespaces.
	NamespaceList = gen.NamespaceList
	// TaskList is the answer of GET /api/v1/resources/tasks.
	TaskList = gen.TaskList
	// StatusOverview is the answer of GET /api/v1/status (the dashboard aggregate).
	StatusOverview = gen.StatusOverview
	// QueueStatusList is the answer of GET /api/v1/status/queues.
	QueueStatusList = gen.QueueStatusList
	// QueueStatus is the answer of GET /api/v1/status/queues/{queue}.
	QueueStatus = gen.QueueStatus
	// BufferStatus is the answer of GET /api/v1/status/buffers (the broker's disk spool).
	BufferStatus = gen.BufferStatus
	// Metrics is the answer of GET /metrics (the JSON snapshot).
	Metrics = gen.Metrics
	// Maintenance is the answer of the maintenance routes: whether the switch is on.
	Maintenance = gen.Maintenance
	// SeekQueueResult is the answer of a queue-wide seek.
	SeekQueueResult = gen.SeekQueueResult
	// SeekPartitionResult is the answer of a partition seek.
	SeekPartitionResult = gen.SeekPartitionResult
	// ConsumerGroupSummary is one row of GET /api/v1/consumer-groups.
	ConsumerGroupSummary = gen.ConsumerGroupSummary
	// ConsumerGroupDetail is the answer of GET /api/v1/consumer-groups/{group}.
	ConsumerGroupDetail = gen.ConsumerGroupDetail
	// LaggingConsumerGroup is one row of GET /api/v1/consumer-groups/lagging.
	LaggingConsumerGroup = gen.LaggingConsumerGroup
	// ConsumerGroupDeleteResult is the answer of a consumer-group delete.
	ConsumerGroupDeleteResult = gen.ConsumerGroupDeleteResult
	// SubscriptionUpdateResult is the answer of a subscription update.
	SubscriptionUpdateResult = gen.SubscriptionUpdateResult
	// DLQList is the answer of GET /api/v1/dlq.
	DLQList = gen.DlqList
	// DLQMessage is one dead letter.
	DLQMessage = gen.DlqMessage
	// DLQPurgeResult is the answer of DELETE /api/v1/dlq.
	DLQPurgeResult = gen.DlqPurgeResult
	// DLQReplayResult is the answer of a DLQ replay (by id or by message address).
	DLQReplayResult = gen.DlqReplayResult
	// MessageList is the answer of GET /api/v1/messages.
	MessageList = gen.MessageList
	// MessageListItem is one message of a message listing.
	MessageListItem = gen.MessageListItem
	// MessageDetail is the answer of GET /api/v1/messages/{partitionId}/{transactionId}.
	MessageDetail = gen.MessageDetail
	// DeleteMessageResult is the answer of a message delete.
	DeleteMessageResult = gen.DeleteMessageResult
	// KVOperation is one KV op (batch route and transaction rider).
	KVOperation = gen.KvOperation
	// KVResult is the result of one KV op.
	KVResult = gen.KvResult
	// KVResultReason says why a KV write was not applied (KVReasonExists, KVReasonVersion, …).
	KVResultReason = gen.KvResultReason
	// KVRow is one key of a getMany / getPrefix result or a List page.
	KVRow = gen.KvRow
	// KVListResult is a page of KV.List.
	KVListResult = gen.KvListResult
	// KVNamespaceList is the answer of Client.KVNamespaces.
	KVNamespaceList = gen.KvNamespaceList
	// TimerOperation is one timer op (timers route and transaction rider).
	TimerOperation = gen.TimerOperation
	// TimerResult is the result of one timer op.
	TimerResult = gen.TimerResult
	// Timer is the answer of GET /api/v1/timers/{queue}/{timerKey}.
	Timer = gen.Timer
	// TimerList is the answer of GET /api/v1/timers/{queue}.
	TimerList = gen.TimerList
	// TransactionOperationResult is the result of one transaction operation.
	TransactionOperationResult = gen.TransactionOperationResult
)

// Reasons a KV write was not applied (KVResult.Reason; also TransactionError.KVReason).
const (
	// KVReasonAbsent: delete or a conditional write found no key.
	KVReasonAbsent = gen.KvResultReasonAbsent
	// KVReasonExists: putIfAbsent, or expect 0, found the key.
	KVReasonExists = gen.KvResultReasonExists
	// KVReasonVersion: the key's version is not the expected one.
	KVReasonVersion = gen.KvResultReasonVersion
	// KVReasonLimit: incr would cross its Min or Max.
	KVReasonLimit = gen.KvResultReasonLimit
	// KVReasonType: incr found a value that is not an integer.
	KVReasonType = gen.KvResultReasonType
)

// Push item statuses.
const (
	StatusQueued    = "queued"
	StatusDuplicate = "duplicate"
	StatusBuffered  = "buffered"
	StatusFailed    = "failed"
)

// Item is one message to push. Data is marshaled with encoding/json: a json.RawMessage is sent
// verbatim (and must be valid JSON), a []byte travels as a base64 string whatever its bytes, and
// a value encoding/json refuses (a channel, NaN) fails the call with *InvalidItemError. A
// missing TransactionID is minted as a UUIDv7 before the first attempt.
type Item struct {
	Data          any
	TransactionID string
	// TraceID is stored only by transactions; the push route ignores it.
	TraceID string
}

// Data is shorthand for Item{Data: v}.
func Data(v any) Item { return Item{Data: v} }

// PushResult is the broker's verdict for one pushed item.
type PushResult struct {
	Index         int    `json:"index"`
	MessageID     string `json:"message_id"`
	TransactionID string `json:"transaction_id"`
	Queue         string `json:"queueName"`
	// Status is StatusQueued, StatusDuplicate, StatusBuffered or StatusFailed.
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// Message is one leased message from a pop.
type Message struct {
	ID            string          `json:"id"`
	TransactionID string          `json:"transactionId"`
	TraceID       *string         `json:"traceId"`
	Data          json.RawMessage `json:"data"`
	ProducerSub   *string         `json:"producerSub"`
	CreatedAt     time.Time       `json:"createdAt"`
	PartitionID   string          `json:"partitionId"`
	Partition     string          `json:"partition"`
	LeaseID       string          `json:"leaseId"`
	ConsumerGroup string          `json:"consumerGroup"`
	// Queue is filled from the builder (empty on discovery pops).
	Queue string `json:"-"`
}

// Decode unmarshals the payload into v.
func (m *Message) Decode(v any) error { return json.Unmarshal(m.Data, v) }

// AutopilotEcho is what the broker chose when the pop engaged autopilot.
type AutopilotEcho struct {
	Partitions int  `json:"partitions"`
	Batch      int  `json:"batch"`
	WaitMs     *int `json:"waitMs,omitempty"`
}

// PopResult is a pop's full answer. On a 204 Messages is empty and the rest is zero.
type PopResult struct {
	Queue             string     `json:"queue"`
	Partition         string     `json:"partition"`
	PartitionID       string     `json:"partitionId"`
	LeaseID           string     `json:"leaseId"`
	ConsumerGroup     string     `json:"consumerGroup"`
	Messages          []*Message `json:"messages"`
	PartitionsClaimed int        `json:"partitionsClaimed"`
	// LeaseSeconds is the length of the pop's lease (its LeaseSeconds, else the queue's
	// leaseTime); 0 with server auto-ack, or from a broker that does not send it.
	LeaseSeconds int `json:"leaseSeconds,omitempty"`
	// LeaseExpiresAt is when the lease ends on the database's clock, which may differ from
	// this machine's: count from LeaseSeconds to compare with time.Now. Nil when LeaseSeconds is 0.
	LeaseExpiresAt *time.Time     `json:"leaseExpiresAt,omitempty"`
	Autopilot      *AutopilotEcho `json:"autopilot,omitempty"`
}

// AckStatus is the outcome an ack reports.
type AckStatus string

// Ack statuses.
const (
	AckCompleted AckStatus = "completed"
	AckFailed    AckStatus = "failed"
	AckRetry     AckStatus = "retry"
	AckDLQ       AckStatus = "dlq"
)

func (s AckStatus) valid() bool {
	switch s {
	case AckCompleted, AckFailed, AckRetry, AckDLQ:
		return true
	}
	return false
}

// AckResult is the broker's answer for one acked message.
type AckResult struct {
	Index         int     `json:"index"`
	TransactionID string  `json:"transactionId"`
	Success       bool    `json:"success"`
	Error         *string `json:"error"`
	LeaseReleased bool    `json:"leaseReleased"`
	DLQ           bool    `json:"dlq"`
	Noop          bool    `json:"noop"`
	Dropped       bool    `json:"dropped,omitempty"`
}

// RenewResult is the answer of one lease extension.
type RenewResult struct {
	LeaseID      string     `json:"leaseId"`
	Success      bool       `json:"success"`
	Renewed      int        `json:"renewed"`
	NewExpiresAt *time.Time `json:"newExpiresAt"`
}

// TransactionResult is the body of POST /api/v1/transaction.
type TransactionResult struct {
	TransactionID string                       `json:"transactionId"`
	Success       bool                         `json:"success"`
	Reason        string                       `json:"reason,omitempty"`
	Error         string                       `json:"error,omitempty"`
	Results       []TransactionOperationResult `json:"results"`
	FailedIndex   *int                         `json:"failedIndex,omitempty"`
	KVReason      string                       `json:"kvReason,omitempty"`
	Version       *int                         `json:"version,omitempty"`
	Value         json.RawMessage              `json:"value,omitempty"`
	KV            []KVResult                   `json:"kv,omitempty"`
	Timers        []TimerResult                `json:"timers,omitempty"`
}

type httpResp = http.Response

// errResultCount is the answer whose result count does not match the request: what is the
// route, want the number of items or operations sent.
func errResultCount(what string, got, want int, unit string) error {
	return &UnexpectedAnswerError{Message: fmt.Sprintf("%s: broker answered %d results for %d %s", what, got, want, unit)}
}
