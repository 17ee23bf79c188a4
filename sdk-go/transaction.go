//nolint:bodyclose // every response is handed to Client.decode (via Client.result), which closes the body.
package lanes

import (
	"context"
	"encoding/json"
	"fmt"
)

// TransactionBuilder collects pushes, acks, KV ops and timer ops that commit together in one
// POST /api/v1/transaction. Unlike QueueBuilder it accumulates state: build it in one
// goroutine and Commit once.
type TransactionBuilder struct {
	c       *Client
	ops     [][]byte // each operation's JSON, encoded once when it is added
	hasPush bool
	leases  []string
	seen    map[string]bool
	kv      []KVOperation
	timers  []TimerOperation
	err     error
}

// txAckOp is an ack operation of the bundle.
type txAckOp struct {
	Type          string `json:"type"`
	TransactionID string `json:"transactionId"`
	PartitionID   string `json:"partitionId"`
	Status        string `json:"status"`
	ConsumerGroup string `json:"consumerGroup,omitempty"`
	LeaseID       string `json:"leaseId,omitempty"`
	Error         string `json:"error,omitempty"`
}

// Transaction starts an atomic bundle.
func (c *Client) Transaction() *TransactionBuilder {
	return &TransactionBuilder{c: c, seen: map[string]bool{}}
}

// TxQueue is the push target inside a transaction.
type TxQueue struct {
	tb        *TransactionBuilder
	queue     string
	partition string
}

// Queue selects the queue of the next Push in the bundle.
func (tb *TransactionBuilder) Queue(name string) TxQueue { return TxQueue{tb: tb, queue: name} }

// Partition selects the partition of the next Push.
func (t TxQueue) Partition(p string) TxQueue { t.partition = p; return t }

// Push adds the items (ids minted now when absent) and returns the bundle.
func (t TxQueue) Push(items ...Item) *TransactionBuilder {
	wire, err := encodeItems(t.queue, t.partition, items)
	if err != nil && t.tb.err == nil {
		t.tb.err = err
	}
	if len(wire) > 0 {
		op := make([]byte, 0, len(`{"type":"push","items":}`)+pushItemsSize(wire))
		op = append(op, `{"type":"push","items":`...)
		op = append(appendPushItems(op, wire), '}')
		t.tb.ops = append(t.tb.ops, op)
		t.tb.hasPush = true
	}
	return t.tb
}

// Ack adds an ack of a popped message; group "" uses the message's ConsumerGroup. The lease id
// travels on the op and in requiredLeases, so a stale lease rolls the bundle back.
func (tb *TransactionBuilder) Ack(m *Message, status AckStatus, group string) *TransactionBuilder {
	return tb.AckWith(m, status, AckOpts{Group: group})
}

// AckWith is Ack with the options of Client.Ack: Group (as Ack's group) and Error, the failure
// reason a `failed` or `dlq` ack stores on the message (TS and Python take it as their
// transaction ack's `error`). WithoutLease has no transaction form (the broker gives an ack op
// without a lease the cursor's live one), so it makes Commit fail unsent.
func (tb *TransactionBuilder) AckWith(m *Message, status AckStatus, opts AckOpts) *TransactionBuilder {
	group := opts.Group
	if opts.WithoutLease && tb.err == nil {
		tb.err = fmt.Errorf("lanes: a transaction ack cannot be lease-less (AckOpts.WithoutLease)")
	}
	if m == nil || m.TransactionID == "" || m.PartitionID == "" {
		if tb.err == nil {
			tb.err = fmt.Errorf("lanes: transaction ack needs a message with TransactionID and PartitionID")
		}
		return tb
	}
	if !status.valid() && tb.err == nil {
		tb.err = fmt.Errorf("lanes: unknown ack status %q", status)
	}
	if group == "" {
		group = m.ConsumerGroup
	}
	if err := checkGroup(group); err != nil && tb.err == nil {
		tb.err = err
	}
	if m.LeaseID != "" && !tb.seen[m.LeaseID] {
		tb.seen[m.LeaseID] = true
		tb.leases = append(tb.leases, m.LeaseID)
	}
	op, _ := json.Marshal(txAckOp{Type: "ack", TransactionID: m.TransactionID, PartitionID: m.PartitionID,
		Status: string(status), ConsumerGroup: group, LeaseID: m.LeaseID, Error: opts.Error}) // strings always encode
	tb.ops = append(tb.ops, op)
	return tb
}

// KV adds KV operations to the bundle's `kv` rider (applied first, same commit). A put whose value
// could not be encoded makes Commit return *InvalidKVValueError without sending.
func (tb *TransactionBuilder) KV(ops ...KVOperation) *TransactionBuilder {
	if err := checkKVValues(ops, len(tb.kv)); err != nil && tb.err == nil {
		tb.err = err
	}
	tb.kv = append(tb.kv, ops...)
	return tb
}

// Timer adds timer operations to the bundle's `timers` rider.
func (tb *TransactionBuilder) Timer(ops ...TimerOperation) *TransactionBuilder {
	tb.timers = append(tb.timers, ops...)
	return tb
}

// retrySafe reports whether the bundle may be resent after a lost answer: its KV rider is
// idempotent, or it holds a push, whose transaction ids make a resend of a committed bundle roll
// back as duplicate.
func (tb *TransactionBuilder) retrySafe() bool {
	return tb.hasPush || kvOpsIdempotent(tb.kv)
}

// Commit sends the bundle. It returns *TransactionError when the broker rolled it back
// (success:false) and ErrEmptyTransaction when there is nothing to send.
func (tb *TransactionBuilder) Commit(ctx context.Context) (*TransactionResult, error) {
	if tb.err != nil {
		return nil, tb.err
	}
	if len(tb.ops) == 0 && len(tb.kv) == 0 && len(tb.timers) == 0 {
		return nil, ErrEmptyTransaction
	}
	body, err := tb.body()
	if err != nil {
		return nil, err
	}
	attempts := 0
	ctx2 := withFlags(ctx, reqFlags{attempts: &attempts, notIdempotent: !tb.retrySafe()})
	var out TransactionResult
	if _, err := tb.c.result(ctx, &out)(tb.c.gen.TransactionWithBody(ctx2, contentJSON, newBytesBody(body))); err != nil {
		return nil, err
	}
	if !out.Success {
		return &out, &TransactionError{Reason: out.Reason, Message: out.Error, Attempts: attempts,
			FailedIndex: out.FailedIndex, KVReason: out.KVReason, Version: out.Version, Value: out.Value, Result: &out}
	}
	return &out, nil
}

// body is the request {"operations":[…],"requiredLeases":[…],"kv":[…],"timers":[…]}, the last
// three left out when empty. The operations are written as they were encoded when added, so a
// push payload is not validated and encoded a second time.
func (tb *TransactionBuilder) body() ([]byte, error) {
	size := len(`{"operations":[]}`)
	for _, op := range tb.ops {
		size += len(op) + 1
	}
	b := make([]byte, 0, size)
	b = append(b, `{"operations":[`...)
	for i, op := range tb.ops {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, op...)
	}
	b = append(b, ']')
	for _, field := range []struct {
		key   string
		value any
		empty bool
	}{
		{`,"requiredLeases":`, tb.leases, len(tb.leases) == 0},
		{`,"kv":`, tb.kv, len(tb.kv) == 0},
		{`,"timers":`, tb.timers, len(tb.timers) == 0},
	} {
		if field.empty {
			continue
		}
		v, err := json.Marshal(field.value)
		if err != nil {
			return nil, err
		}
		b = append(append(b, field.key...), v...)
	}
	return append(b, '}'), nil
}
