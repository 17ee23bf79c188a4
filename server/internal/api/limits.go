package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
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

// requestDeadline is how long an operation's database work may take: none for
// push (it has its own deadline, past which it spools), the long-poll timeout
// on top of the budget for a waiting pop.
func (s *Server) requestDeadline(request any) time.Duration {
	budget := s.opts.DBTimeout
	if budget <= 0 {
		return 0
	}
	park := func(wait *bool, timeout *int) time.Duration {
		return budget + popParkTime(wait, timeout)
	}
	switch req := request.(type) {
	case gen.PushRequestObject:
		return 0
	case gen.PopQueueRequestObject:
		return park(req.Params.Wait, req.Params.Timeout)
	case gen.PopPartitionRequestObject:
		return park(req.Params.Wait, req.Params.Timeout)
	case gen.PopDiscoverRequestObject:
		return park(req.Params.Wait, req.Params.Timeout)
	}
	return budget
}

// strictMiddleware runs around every generated operation: it enforces the
// caps, puts a deadline on the database work, counts acknowledged messages,
// and hands a pop's answer to deliverPop (which counts it), or gives the claim
// back at once when its client already left.
func (s *Server) strictMiddleware(f gen.StrictHandlerFunc, operationID string) gen.StrictHandlerFunc {
	limits := s.opts.Limits.withDefaults()
	return func(ctx context.Context, w http.ResponseWriter, r *http.Request, request any) (any, error) {
		if err := limits.check(request); err != nil {
			return nil, err
		}
		if d := s.requestDeadline(request); d > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		resp, err := f(ctx, w, r, request)
		if err != nil {
			return resp, err
		}
		if pop := popResponse(resp); pop != nil {
			if r.Context().Err() != nil {
				s.giveBack(pop)
				return nil, r.Context().Err()
			}
			return popDelivery{s: s, r: r, pop: pop}, nil
		}
		s.countAcks(resp)
		return resp, nil
	}
}

func (s *Server) schemaReady() bool {
	return s.opts.SchemaReady == nil || s.opts.SchemaReady()
}

func popResponse(resp any) *gen.PopResponse {
	a, ok := resp.(popAnswer)
	if !ok {
		return nil
	}
	out := gen.PopResponse(a)
	return &out
}

func (s *Server) countAcks(resp any) {
	acked, dlq := 0, 0
	add := func(success, dead bool) {
		if success {
			acked++
		}
		if dead {
			dlq++
		}
	}
	switch v := resp.(type) {
	case gen.Ack200JSONResponse:
		add(v.Success, v.Dlq)
	case ackBatchAnswer:
		for _, r := range v {
			add(r.Success, r.Dlq)
		}
	case gen.Transaction200JSONResponse:
		if !v.Success {
			return
		}
		for _, r := range v.Results {
			if r.Type == "ack" {
				add(r.Success, r.Dlq != nil && *r.Dlq)
			}
		}
	default:
		return
	}
	s.metrics.CountAcks(acked, dlq)
}

// deliverPop sends a pop's answer, or gives its claim back when the client
// cannot have it: the client left before the answer went out (checked once it
// is encoded, which takes milliseconds for a large batch), or sending it
// failed. An answer sent into a socket whose client leaves a moment later is
// indistinguishable from one a consumer received and then crashed on: its
// lease frees at expiry.
func (s *Server) deliverPop(w http.ResponseWriter, r *http.Request, pop *gen.PopResponse) error {
	buf := takeBuffer()
	defer giveBuffer(buf)
	if err := encodeJSON(buf, pop); err != nil {
		s.giveBack(pop)
		return err
	}
	holdAnswerForFaultScript(r)
	if r.Context().Err() != nil {
		s.giveBack(pop)
		return nil // nobody to answer
	}
	err := sendJSON(w, http.StatusOK, buf)
	if err == nil {
		err = http.NewResponseController(w).Flush()
		if errors.Is(err, http.ErrNotSupported) {
			err = nil // sent when the handler returns
		}
	}
	if err != nil {
		s.giveBack(pop)
		return err
	}
	s.metrics.CountPopped(len(pop.Messages))
	return nil
}

// giveBack releases a claim whose client left before the answer was written:
// one retry acknowledgement of the first message of each claimed partition
// rewinds nothing (the cursor stays), charges no retry budget and clears the
// lease, so the messages are claimable again at once instead of at lease expiry.
// An autoAck pop has no lease and nothing to give back.
func (s *Server) giveBack(pop *gen.PopResponse) {
	seen := map[string]bool{}
	var items []engine.AckItem
	for _, m := range pop.Messages {
		if m.LeaseId == "" || seen[m.PartitionId] {
			continue
		}
		seen[m.PartitionId] = true
		items = append(items, engine.AckItem{TransactionID: m.TransactionId, PartitionID: m.PartitionId,
			Status: "retry", Group: m.ConsumerGroup, LeaseID: m.LeaseId})
	}
	if len(items) == 0 {
		return
	}
	timeout := s.opts.DBTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	results, err := s.engine.Ack(ctx, items)
	if err != nil {
		s.log.Warn("client left during a pop; giving the claim back failed (it frees at lease expiry)", "err", err)
		return
	}
	for _, r := range results {
		if !r.Success || !r.LeaseReleased {
			s.log.Warn("client left during a pop; a claim could not be given back (it frees at lease expiry)", "transactionId", r.TransactionID, "err", r.Error)
			return
		}
	}
	s.metrics.CountLeaseGivenBack()
	s.log.Info("client left during a pop; claim given back", "partitions", len(items), "messages", len(pop.Messages))
}

// isDatabaseTimeout reports a deadline or statement_timeout on database work.
func isDatabaseTimeout(err error) bool {
	if engine.HasSQLState(err) {
		return engine.IsStatementTimeout(err)
	}
	return errors.Is(err, context.DeadlineExceeded)
}
