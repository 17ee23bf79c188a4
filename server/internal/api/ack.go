package api

import (
	"context"
	"fmt"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
)

// Ack acknowledges one message; always 200, the body an array holding its one result, as the
// reference answers (its clients read /ack and /ack/batch alike).
func (s *Server) Ack(ctx context.Context, req gen.AckRequestObject) (gen.AckResponseObject, error) {
	b := req.Body
	if msg := missingAckField(b.TransactionId, b.PartitionId, -1); msg != "" {
		return gen.Ack400JSONResponse{BadRequestJSONResponse: gen.BadRequestJSONResponse{Error: msg, Code: CodeValidation}}, nil
	}
	res, err := s.engine.Ack(ctx, []engine.AckItem{{
		TransactionID: b.TransactionId, PartitionID: b.PartitionId, Status: ackStatus(b.Status),
		Group: deref(b.ConsumerGroup), LeaseID: deref(b.LeaseId), Error: deref(b.Error),
	}})
	if err != nil {
		return nil, err
	}
	return gen.Ack200JSONResponse{ackResult(res[0])}, nil
}

// AckBatch acknowledges many messages of one group; one result per item, in order.
func (s *Server) AckBatch(ctx context.Context, req gen.AckBatchRequestObject) (gen.AckBatchResponseObject, error) {
	if req.Body.Acknowledgments == nil {
		return gen.AckBatch400JSONResponse{BadRequestJSONResponse: gen.BadRequestJSONResponse{
			Error: "bad body: acknowledgments is required and must be an array", Code: CodeValidation}}, nil
	}
	for i, a := range req.Body.Acknowledgments {
		if msg := missingAckField(a.TransactionId, a.PartitionId, i); msg != "" {
			return gen.AckBatch400JSONResponse{BadRequestJSONResponse: gen.BadRequestJSONResponse{Error: msg, Code: CodeValidation}}, nil
		}
	}
	group := deref(req.Body.ConsumerGroup)
	items := make([]engine.AckItem, len(req.Body.Acknowledgments))
	for i, a := range req.Body.Acknowledgments {
		items[i] = engine.AckItem{
			TransactionID: a.TransactionId, PartitionID: a.PartitionId, Status: ackStatus(a.Status),
			Group: group, LeaseID: deref(a.LeaseId), Error: deref(a.Error),
		}
	}
	res, err := s.engine.Ack(ctx, items)
	if err != nil {
		return nil, err
	}
	out := make(ackBatchAnswer, len(res))
	for i, r := range res {
		out[i] = ackResult(r)
	}
	return out, nil
}

// ackStatus is the engine's status for a wire status. The engine reads "" as
// absent (completed); a sent "" is not absent: the reference's normalisation
// table makes it failed, so a client that maps "not OK" to an empty string
// gets a redelivery, not a commit.
func ackStatus(status *string) string {
	switch {
	case status == nil:
		return ""
	case *status == "":
		return "failed"
	}
	return *status
}

// missingAckField names a required ack field left out of the body, or of its
// item-th acknowledgment (item >= 0); the schema validator does not run on
// this hot route.
func missingAckField(transactionID, partitionID string, item int) string {
	var field string
	switch {
	case transactionID == "":
		field = "transactionId"
	case partitionID == "":
		field = "partitionId"
	default:
		return ""
	}
	if item >= 0 {
		field = fmt.Sprintf("acknowledgments[%d].%s", item, field)
	}
	return "bad body: " + field + " is required"
}

func ackResult(r engine.AckResult) gen.AckResult {
	out := gen.AckResult{
		Index: r.Index, TransactionId: r.TransactionID, Success: r.Success, Error: optional(r.Error),
		LeaseReleased: r.LeaseReleased, Dlq: r.DLQ, Noop: r.Noop,
	}
	if r.Dropped {
		dropped := true // not &r.Dropped, which moved every r to the heap
		out.Dropped = &dropped
	}
	return out
}
