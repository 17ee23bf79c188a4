//nolint:bodyclose // every response is handed to Client.decode (via Client.result), which closes the body.
package lanes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/lanesmq/lanes/sdk-go/internal/gen"
)

// QueueBuilder addresses a queue (or a discovery scope) and carries pop and consume knobs.
// It is a value: every setter returns a modified copy, so a base builder can be shared.
type QueueBuilder struct {
	c            *Client
	queue        string
	partition    string
	hasPartition bool
	namespace    string
	task         string

	group            string
	subscriptionMode string
	subscriptionFrom string
	batch            int
	partitions       int
	autopilot        *bool
	wait             bool
	timeout          time.Duration
	leaseSeconds     int
	serverAutoAck    *bool

	consume consumeOpts
}

// Queue starts a builder for queue name.
func (c *Client) Queue(name string) QueueBuilder {
	return QueueBuilder{c: c, queue: name, wait: true, timeout: 30 * time.Second, consume: defaultConsumeOpts()}
}

// Namespace starts a discovery builder: pops go to GET /api/v1/pop?namespace=…[&task=…].
func (c *Client) Namespace(ns string) QueueBuilder {
	q := c.Queue("")
	q.namespace = ns
	return q
}

// Task narrows a discovery builder to a task label.
func (q QueueBuilder) Task(task string) QueueBuilder { q.task = task; return q }

// Partition pins the partition: pushes land there and pops use the partition route.
func (q QueueBuilder) Partition(p string) QueueBuilder {
	q.partition, q.hasPartition = p, true
	return q
}

// Group sets the consumer group (default: queue mode, competing consumers).
func (q QueueBuilder) Group(g string) QueueBuilder { q.group = g; return q }

// Subscription modes: where a consumer group starts on its first pop.
const (
	SubscriptionModeNew     = "new"      // skip the backlog (the broker's default)
	SubscriptionModeNewOnly = "new-only" // the reference clients' spelling of SubscriptionModeNew
	SubscriptionModeAll     = "all"      // read the backlog from the start
)

// SubscriptionMode sets where a new group starts: SubscriptionModeNew (default on
// the broker) or SubscriptionModeAll; the broker also accepts "new-only".
func (q QueueBuilder) SubscriptionMode(m string) QueueBuilder { q.subscriptionMode = m; return q }

// SubscriptionFrom sets a new group's start: "now" or an ISO-8601 timestamp.
func (q QueueBuilder) SubscriptionFrom(s string) QueueBuilder { q.subscriptionFrom = s; return q }

// Batch pins the pop batch budget; 0 = unset (autopilot sizes it).
func (q QueueBuilder) Batch(n int) QueueBuilder { q.batch = max(n, 0); return q }

// Partitions pins the pop width; 0 = unset (autopilot sizes it). Ignored on the partition route.
func (q QueueBuilder) Partitions(n int) QueueBuilder { q.partitions = max(n, 0); return q }

// Autopilot switches pop autopilot for this builder; false restores batch 1 / width 1 exactly.
// An explicit call outranks LANES_SDK_POP_AUTOPILOT.
func (q QueueBuilder) Autopilot(on bool) QueueBuilder { q.autopilot = &on; return q }

// autopilotBatch is the broker's automatic batch (decisions.md, "Pop autopilot"): what a pop
// with autopilot engaged and no Batch takes.
const autopilotBatch = 100

// popBatch is the batch a pop of this builder takes: Batch when set, else the automatic batch
// under autopilot, else 1.
func (q QueueBuilder) popBatch() int {
	switch {
	case q.batch > 0:
		return q.batch
	case q.autopilotOn():
		return autopilotBatch
	default:
		return 1
	}
}

// Wait sets long polling (default true).
func (q QueueBuilder) Wait(on bool) QueueBuilder { q.wait = on; return q }

// Timeout sets the long-poll timeout (default 30 s; sent in milliseconds). Under 1 ms sends 0,
// which the broker answers at once, like Wait(false).
func (q QueueBuilder) Timeout(d time.Duration) QueueBuilder { q.timeout = d; return q }

// parks reports whether the broker holds this builder's pops until a message arrives: a timeout
// of 0 ms answers at once, so a loop must then pause between empty pops as without wait.
func (q QueueBuilder) parks() bool { return q.wait && q.timeout.Milliseconds() > 0 }

// LeaseSeconds overrides the lease of popped batches.
func (q QueueBuilder) LeaseSeconds(n int) QueueBuilder { q.leaseSeconds = n; return q }

// ServerAutoAck asks the broker to commit on delivery (wire autoAck, at-most-once, no lease).
// A consume loop or iterator then caps each pop's batch at what is left of Limit (workers
// reserve it before popping, so with any Concurrency they pop no more than Limit between them)
// and at the batch the pop would take anyway (Batch, else 100 under autopilot, else 1). It hands
// every popped message over, even after a soft stop, which lets pops in flight answer rather
// than cut them (nothing can release their messages); a hard stop, a canceled context or an
// iterator left early reports the ones it dropped as a *AutoAckDroppedError.
func (q QueueBuilder) ServerAutoAck(on bool) QueueBuilder { q.serverAutoAck = &on; return q }

// committedOnDelivery: pops ask for server auto-ack (at-most-once), so the broker commits their
// messages on delivery: there is no lease to ack against or renew, and nothing to release.
func (q QueueBuilder) committedOnDelivery() bool {
	return q.serverAutoAck != nil && *q.serverAutoAck
}

// ---------------------------------------------------------------------------------------------
// push

// pushItemWire is one item of a push, its payload already encoded; appendPushItems writes it, as
// json.Marshal would by these tags but without encoding the payload again.
type pushItemWire struct {
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition,omitempty"`
	Payload       json.RawMessage `json:"payload"`
	TransactionID string          `json:"transactionId"`
	TraceID       string          `json:"traceId,omitempty"`
}

// encodeItems shapes items for the wire; a bad item fails the whole call (InvalidItemError).
func encodeItems(queue, partition string, items []Item) ([]pushItemWire, error) {
	wire := make([]pushItemWire, 0, len(items))
	for i, it := range items {
		payload, err := encodePayload(it.Data)
		if err != nil {
			return nil, &InvalidItemError{Index: i, Err: err}
		}
		tid := it.TransactionID
		if tid == "" {
			tid = newUUIDv7()
		}
		wire = append(wire, pushItemWire{Queue: queue, Partition: partition, Payload: payload, TransactionID: tid, TraceID: it.TraceID})
	}
	return wire, nil
}

// encodePayload follows encoding/json, so a payload has one shape whatever its bytes: a
// json.RawMessage is sent as it is (it must be valid JSON), and everything else is marshaled
// ([]byte becomes a base64 string, which Message.Decode turns back into the same []byte).
func encodePayload(data any) (json.RawMessage, error) {
	raw, ok := data.(json.RawMessage)
	if !ok {
		return marshalExact(data)
	}
	if len(raw) == 0 {
		return json.RawMessage("null"), nil
	}
	if !json.Valid(raw) {
		return nil, fmt.Errorf("json.RawMessage is not valid JSON")
	}
	if !utf8.Valid(raw) {
		return nil, fmt.Errorf("json.RawMessage is not UTF-8 (the broker refuses such a body)")
	}
	return raw, nil
}

// errNotUTF8 is a value holding a string that is not UTF-8.
var errNotUTF8 = errors.New("a string is not UTF-8: encoding/json would send U+FFFD in its place")

// replacementEscape is how encoding/json writes each byte of a string that is not UTF-8.
var replacementEscape = []byte(`\ufffd`)

// marshalExact is json.Marshal refusing the one change it makes silently: each byte of a string
// that is not UTF-8 becomes the escape \ufffd, which it writes for nothing else (a real U+FFFD
// is written as is), unless a json.Marshaler or json.RawMessage in v writes that escape itself.
func marshalExact(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if !bytes.Contains(b, replacementEscape) {
		return b, nil // the common case: one fast scan, not a loop over every byte
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if bytes.HasPrefix(b[i:], replacementEscape) {
			return nil, errNotUTF8
		}
		i++ // the escaped character
	}
	return b, nil
}

func newUUIDv7() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// Push sends items to this queue (and partition, default "Default") in one request and returns
// one result per item, in order. When an item is `failed` it also returns *PushError.
func (q QueueBuilder) Push(ctx context.Context, items ...Item) ([]PushResult, error) {
	if q.queue == "" {
		return nil, fmt.Errorf("lanes: push needs a queue name")
	}
	if len(items) == 0 {
		return []PushResult{}, nil
	}
	wire, err := encodeItems(q.queue, q.partition, items)
	if err != nil {
		return nil, err
	}
	return q.c.pushWire(ctx, wire)
}

// pushBody is the push request {"items":[…]}.
func pushBody(wire []pushItemWire) []byte {
	b := make([]byte, 0, len(`{"items":}`)+pushItemsSize(wire))
	b = append(b, `{"items":`...)
	b = appendPushItems(b, wire)
	return append(b, '}')
}

// pushItemsSize is the length appendPushItems writes for wire, give or take the omitted fields
// and escapes, so the buffer it writes into is allocated once.
func pushItemsSize(wire []pushItemWire) int {
	size := len(`[]`)
	for i := range wire {
		w := &wire[i]
		size += len(`{"queue":"","partition":"","payload":,"transactionId":"","traceId":""},`) +
			len(w.Queue) + len(w.Partition) + len(w.Payload) + len(w.TransactionID) + len(w.TraceID)
	}
	return size
}

// appendPushItems appends the items as the JSON array json.Marshal gives for them, with each
// payload appended as encodeItems encoded it rather than validated and encoded a second time.
// A push request and a transaction's push operation both carry their items this way.
func appendPushItems(b []byte, wire []pushItemWire) []byte {
	b = append(b, '[')
	for i := range wire {
		w := &wire[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"queue":`...)
		b = appendJSONString(b, w.Queue)
		if w.Partition != "" {
			b = append(b, `,"partition":`...)
			b = appendJSONString(b, w.Partition)
		}
		b = append(b, `,"payload":`...)
		b = append(b, w.Payload...)
		b = append(b, `,"transactionId":`...)
		b = appendJSONString(b, w.TransactionID)
		if w.TraceID != "" {
			b = append(b, `,"traceId":`...)
			b = appendJSONString(b, w.TraceID)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendJSONString appends s as json.Marshal encodes it. Names and ids are plain ASCII almost
// always, and encoding/json writes those as they are; anything else goes through json.Marshal.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func (c *Client) pushWire(ctx context.Context, wire []pushItemWire) ([]PushResult, error) {
	var out []PushResult
	if _, err := c.result(ctx, &out)(c.gen.PushWithBody(ctx, contentJSON, newBytesBody(pushBody(wire)))); err != nil {
		return nil, err
	}
	if len(out) != len(wire) {
		return nil, errResultCount("push", len(out), len(wire), "items")
	}
	var failed []ItemError
	for i, r := range out {
		switch r.Status {
		case StatusFailed:
			msg := r.Error
			if msg == "" {
				msg = "stored nowhere"
			}
			failed = append(failed, ItemError{Index: i, TransactionID: r.TransactionID, Status: r.Status, Message: msg})
		case StatusBuffered:
			c.log.Warn("lanes: push item buffered on the broker's disk spool", "queue", r.Queue, "transactionId", r.TransactionID)
		}
	}
	if len(failed) > 0 {
		return out, &PushError{Items: failed}
	}
	return out, nil
}

// ---------------------------------------------------------------------------------------------
// pop

// autopilotOn is the effective autopilot switch of this builder.
func (q QueueBuilder) autopilotOn() bool {
	if q.autopilot != nil {
		return *q.autopilot
	}
	return q.c.autopilot
}

// popQuery assembles the pop query string byte for byte (docs/consuming.md §2).
func (q QueueBuilder) popQuery() string {
	var b bytes.Buffer
	add := func(k, v string) {
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(v))
	}
	widthApplies := !q.hasPartition
	on := q.autopilotOn()
	engaged := on && (q.batch == 0 || (widthApplies && q.partitions == 0))
	switch {
	case engaged:
		add("autopilot", "true")
		if q.batch > 0 {
			add("batch", strconv.Itoa(q.batch))
		}
	case on:
		add("batch", strconv.Itoa(q.batch))
	default:
		add("batch", strconv.Itoa(max(q.batch, 1)))
	}
	add("wait", strconv.FormatBool(q.wait))
	add("timeout", strconv.FormatInt(q.timeout.Milliseconds(), 10))
	if q.group != "" {
		add("consumerGroup", q.group)
	}
	if widthApplies {
		switch {
		case engaged || on:
			if q.partitions > 0 {
				add("partitions", strconv.Itoa(q.partitions))
			}
		default:
			if q.partitions > 1 {
				add("partitions", strconv.Itoa(q.partitions))
			}
		}
	}
	if q.leaseSeconds > 0 {
		add("leaseSeconds", strconv.Itoa(q.leaseSeconds))
	}
	if q.subscriptionMode != "" {
		add("subscriptionMode", q.subscriptionMode)
	}
	if q.subscriptionFrom != "" {
		add("subscriptionFrom", q.subscriptionFrom)
	}
	if q.serverAutoAck != nil {
		add("autoAck", strconv.FormatBool(*q.serverAutoAck))
	}
	if q.queue == "" {
		if q.namespace != "" {
			add("namespace", q.namespace)
		}
		if q.task != "" {
			add("task", q.task)
		}
	}
	return b.String()
}

// Pop claims one batch (one request) and returns its messages; nil on an empty answer (204).
func (q QueueBuilder) Pop(ctx context.Context) ([]*Message, error) {
	r, err := q.PopResult(ctx)
	if err != nil {
		return nil, err
	}
	return r.Messages, nil
}

// PopResult is Pop with the whole answer, including the autopilot echo.
func (q QueueBuilder) PopResult(ctx context.Context) (*PopResult, error) {
	if q.queue == "" && q.namespace == "" && q.task == "" {
		return nil, fmt.Errorf("lanes: pop needs a queue, or a namespace/task for discovery")
	}
	if err := q.checkPopNames(); err != nil {
		return nil, err
	}
	query := q.popQuery()
	flags := reqFlags{longPoll: q.wait}
	if q.wait {
		flags.timeout = q.timeout + 5*time.Second
	}
	ctx2 := withFlags(ctx, flags)
	setQuery := func(_ context.Context, req *http.Request) error { req.URL.RawQuery = query; return nil }
	var out PopResult
	var resp *http.Response
	var err error
	switch {
	case q.queue == "":
		resp, err = q.c.gen.PopDiscover(ctx2, &gen.PopDiscoverParams{}, setQuery)
	case q.hasPartition:
		resp, err = q.c.gen.PopPartition(ctx2, q.queue, q.partition, &gen.PopPartitionParams{}, setQuery)
	default:
		resp, err = q.c.gen.PopQueue(ctx2, q.queue, &gen.PopQueueParams{}, setQuery)
	}
	if _, err := q.c.result(ctx, &out)(resp, err); err != nil {
		return nil, err
	}
	for _, m := range out.Messages {
		m.Queue = q.queue
	}
	return &out, nil
}
