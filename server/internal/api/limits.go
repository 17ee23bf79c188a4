package api

import (
	"fmt"

	"github.com/lanesmq/lanes/server/internal/api/gen"
)

// Default caps (each a LANES_MAX_* setting).
const (
	DefaultMaxPushItems     = 10000
	DefaultMaxAckItems      = 10000
	DefaultMaxTxnOperations = 10000
	// DefaultMaxPopBatch is also the spec's bound on the batch parameter.
	DefaultMaxPopBatch = 10000
)

// Limits caps what one request may carry; zero fields take the defaults.
type Limits struct {
	MaxPushItems     int
	MaxAckItems      int
	MaxTxnOperations int
	MaxPopBatch      int
}

func (l Limits) withDefaults() Limits {
	def := func(v, d int) int {
		if v <= 0 {
			return d
		}
		return v
	}
	return Limits{
		MaxPushItems:     def(l.MaxPushItems, DefaultMaxPushItems),
		MaxAckItems:      def(l.MaxAckItems, DefaultMaxAckItems),
		MaxTxnOperations: def(l.MaxTxnOperations, DefaultMaxTxnOperations),
		MaxPopBatch:      min(def(l.MaxPopBatch, DefaultMaxPopBatch), DefaultMaxPopBatch),
	}
}

// limitError is a request past a cap; it answers 400 limit_exceeded.
type limitError struct{ msg string }

func (e *limitError) Error() string { return e.msg }

func overLimit(what string, n, limit int, setting string) error {
	return &limitError{msg: fmt.Sprintf("%s: %d exceeds the limit of %d per request (%s)", what, n, limit, setting)}
}

// check rejects a decoded request that carries more than a cap allows.
func (l Limits) check(request any) error {
	popBatch := func(batch *int) error {
		if batch != nil && *batch > l.MaxPopBatch {
			return overLimit("batch", *batch, l.MaxPopBatch, "LANES_MAX_POP_BATCH")
		}
		return nil
	}
	switch req := request.(type) {
	case gen.PushRequestObject:
		if req.Body != nil && len(req.Body.Items) > l.MaxPushItems {
			return overLimit("push items", len(req.Body.Items), l.MaxPushItems, "LANES_MAX_PUSH_ITEMS")
		}
	case gen.AckBatchRequestObject:
		if req.Body != nil && len(req.Body.Acknowledgments) > l.MaxAckItems {
			return overLimit("acknowledgments", len(req.Body.Acknowledgments), l.MaxAckItems, "LANES_MAX_ACK_ITEMS")
		}
	case gen.TransactionRequestObject:
		if req.Body == nil {
			return nil
		}
		if n := transactionOps(req.Body); n > l.MaxTxnOperations {
			return overLimit("transaction operations", n, l.MaxTxnOperations, "LANES_MAX_TXN_OPERATIONS")
		}
	case gen.PopQueueRequestObject:
		return popBatch(req.Params.Batch)
	case gen.PopPartitionRequestObject:
		return popBatch(req.Params.Batch)
	case gen.PopDiscoverRequestObject:
		return popBatch(req.Params.Batch)
	}
	return nil
}

// transactionOps counts a bundle's work: every pushed item (a push operation
// may carry a list), every ack, and the kv and timer rider operations.
func transactionOps(b *gen.TransactionRequest) int {
	n := 0
	for _, op := range b.Operations {
		if op.Items != nil {
			n += len(*op.Items)
			continue
		}
		n++
	}
	if b.Kv != nil {
		n += len(*b.Kv)
	}
	if b.Timers != nil {
		n += len(*b.Timers)
	}
	return n
}
