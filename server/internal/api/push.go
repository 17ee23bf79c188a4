package api

import (
	"context"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
)

// Push stores a list of items; every item carries its own verdict.
func (s *Server) Push(ctx context.Context, req gen.PushRequestObject) (gen.PushResponseObject, error) {
	if req.Body.Items == nil {
		return gen.Push400JSONResponse{BadRequestJSONResponse: gen.BadRequestJSONResponse{
			Error: "bad body: items is required and must be an array", Code: CodeValidation}}, nil
	}
	items := make([]engine.PushItem, len(req.Body.Items))
	for i, it := range req.Body.Items {
		items[i] = engine.PushItem{
			Queue:         it.Queue,
			Partition:     deref(it.Partition),
			TransactionID: deref(it.TransactionId),
			Payload:       it.Payload,
		}
	}
	results, err := s.storePush(ctx, items)
	if err != nil {
		return nil, err
	}
	out := make(pushAnswer, len(results))
	for i, r := range results {
		out[i] = gen.PushResult{
			Index:         r.Index,
			MessageId:     r.MessageID.String(),
			TransactionId: r.TransactionID,
			QueueName:     r.Queue,
			Status:        gen.PushResultStatus(r.Status),
		}
		if r.Error != "" {
			out[i].Error = &r.Error
		}
	}
	return out, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
