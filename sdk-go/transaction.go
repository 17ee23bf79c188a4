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
	c      *Client
	ops    []map[string]any
	leases []string
	seen   map[string]bool
	kv     []KVOperation
	timers []TimerOperation
	err    error
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
		t.tb.ops = append(t.tb.ops, map[string]any{"type": "push", "items": wire})
	}
	return t.tb
}

// Ack adds an ack of a popped message; group "" uses the message's ConsumerGroup. The lease id
// travels on the op and in requiredLeases, so a stale lease rolls the bundle back.
func (tb *TransactionBuilder) Ack(m *Message, status AckStatus, group string) *TransactionBuilder {
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
	op := map[string]any{"type": "ack", "transactionId": m.TransactionID, "partitionId": m.PartitionID, "status": string(status)}
	if group != "" {
		op["consumerGroup"] = group
	}
	if m.LeaseID != "" {
		op["leaseId"] = m.LeaseID
		if !tb.seen[m.LeaseID] {
			tb.seen[m.LeaseID] = true
			tb.leases = append(tb.leases, m.LeaseID)
		}
	}
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
	for _, op := range tb.ops {
		if op["type"] == "push" {
			return true
		}
	}
	return kvOpsIdempotent(tb.kv)
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
	req := struct {
		Operations     []map[string]any `json:"operations"`
		RequiredLeases []string         `json:"requiredLeases,omitempty"`
		KV             []KVOperation    `json:"kv,omitempty"`
		Timers         []TimerOperation `json:"timers,omitempty"`
	}{Operations: tb.ops, RequiredLeases: tb.leases, KV: tb.kv, Timers: tb.timers}
	if req.Operations == nil {
		req.Operations = []map[string]any{}
	}
	body, err := json.Marshal(req)
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
