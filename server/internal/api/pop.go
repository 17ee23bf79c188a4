package api

import (
	"context"
	"strings"
	"time"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
)

// popParams is what the three pop routes share.
type popParams struct {
	batch, partitions, timeout, leaseSeconds *int
	wait, autoAck, autopilot                 *bool
	group, mode, from                        *string
}

func (s *Server) pop(ctx context.Context, req engine.PopRequest, p popParams) (*gen.PopResponse, error) {
	req.Batch = deref(p.batch)
	if req.Partition == "" {
		req.Partitions = 1
		if p.partitions != nil {
			req.Partitions = *p.partitions
		}
	}
	// autopilot=true hands the broker only the knobs the request left out.
	if deref(p.autopilot) {
		req.AutoBatch = p.batch == nil
		req.AutoWidth = p.partitions == nil && req.Partition == ""
	}
	req.Timeout = popParkTime(p.wait, p.timeout)
	req.Wait = req.Timeout > 0
	req.LeaseSeconds = deref(p.leaseSeconds)
	req.AutoAck = deref(p.autoAck)
	req.Group = deref(p.group)
	req.SubscriptionMode = deref(p.mode)
	req.SubscriptionFrom = deref(p.from)
	if later := popLaterOf(ctx); later != nil && later.armed {
		later.take(req)
		return nil, nil
	}
	res, err := s.engine.Pop(ctx, req)
	if err != nil {
		return nil, err
	}
	return popResponseOf(req.Queue, res), nil
}

// popResponseOf is the answer of a pop of queue that claimed res; nil when it
// claimed nothing.
func popResponseOf(queue string, res *engine.PopResult) *gen.PopResponse {
	if len(res.Messages) == 0 {
		return nil
	}
	out := &gen.PopResponse{
		Success:           true,
		Queue:             queue,
		Partition:         res.Partition,
		PartitionId:       res.PartitionID.String(),
		LeaseId:           res.LeaseID,
		ConsumerGroup:     res.ConsumerGroup,
		PartitionsClaimed: res.PartitionsClaimed,
		Messages:          make([]gen.PopMessage, len(res.Messages)),
	}
	if res.LeaseSeconds > 0 {
		seconds, expiresAt := res.LeaseSeconds, res.LeaseExpiresAt.UTC()
		out.LeaseSeconds, out.LeaseExpiresAt = &seconds, &expiresAt
	}
	if a := res.Autopilot; a != nil {
		out.Autopilot = &gen.PopAutopilot{Partitions: a.Partitions, Batch: a.Batch, WaitMs: a.WaitMs}
	}
	// A batch holds runs of one partition: its id is formatted once per run.
	// The message ids share one string: a string each cost an allocation per
	// message delivered.
	partitionID, partitionIDText := res.PartitionID, out.PartitionId
	var ids strings.Builder
	ids.Grow(len(res.Messages) * uuidTextLen)
	for i, m := range res.Messages {
		if m.PartitionID != partitionID {
			partitionID, partitionIDText = m.PartitionID, m.PartitionID.String()
		}
		out.Messages[i] = gen.PopMessage{
			Id:            appendUUIDText(&ids, m.ID),
			TransactionId: m.TransactionID,
			TraceId:       optional(m.TraceID),
			ProducerSub:   optional(m.ProducerSub),
			Data:          m.Data,
			CreatedAt:     m.CreatedAt.UTC(),
			PartitionId:   partitionIDText,
			Partition:     m.Partition,
			LeaseId:       m.LeaseID,
			ConsumerGroup: m.ConsumerGroup,
		}
	}
	return out
}

// popParkTime is how long a pop may park waiting for a message: not at all
// without wait=true, nor with an explicit timeout=0, which answers at once like
// wait=false (the engine would read a zero timeout as its 30 s default); else
// the timeout, 30 s when absent. The request deadline is built from the same
// value (requestDeadline), so the park always ends before the deadline does.
func popParkTime(wait *bool, timeoutMs *int) time.Duration {
	switch {
	case !deref(wait):
		return 0
	case timeoutMs == nil:
		return engine.DefaultPopTimeout
	}
	return time.Duration(*timeoutMs) * time.Millisecond
}

// PopQueue claims from any partition of a queue.
func (s *Server) PopQueue(ctx context.Context, req gen.PopQueueRequestObject) (gen.PopQueueResponseObject, error) {
	p := req.Params
	res, err := s.pop(ctx, engine.PopRequest{Queue: req.Queue}, popParams{
		batch: p.Batch, partitions: p.Partitions, timeout: p.Timeout, leaseSeconds: p.LeaseSeconds,
		wait: p.Wait, autoAck: p.AutoAck, autopilot: p.Autopilot, group: p.ConsumerGroup,
		mode: p.SubscriptionMode, from: p.SubscriptionFrom,
	})
	if err != nil || res == nil {
		return gen.PopQueue204Response{}, err
	}
	return popAnswer(*res), nil
}

// PopPartition claims from exactly one partition.
func (s *Server) PopPartition(ctx context.Context, req gen.PopPartitionRequestObject) (gen.PopPartitionResponseObject, error) {
	p := req.Params
	res, err := s.pop(ctx, engine.PopRequest{Queue: req.Queue, Partition: req.Partition}, popParams{
		batch: p.Batch, timeout: p.Timeout, leaseSeconds: p.LeaseSeconds,
		wait: p.Wait, autoAck: p.AutoAck, autopilot: p.Autopilot, group: p.ConsumerGroup,
		mode: p.SubscriptionMode, from: p.SubscriptionFrom,
	})
	if err != nil || res == nil {
		return gen.PopPartition204Response{}, err
	}
	return popAnswer(*res), nil
}

// PopDiscover claims across every queue matching namespace and/or task.
func (s *Server) PopDiscover(ctx context.Context, req gen.PopDiscoverRequestObject) (gen.PopDiscoverResponseObject, error) {
	p := req.Params
	if deref(p.Namespace) == "" && deref(p.Task) == "" {
		// The reference's body, which clients may read, plus our code.
		success, messages := false, []any{}
		return gen.PopDiscover400JSONResponse{Success: &success, Messages: &messages,
			Error: "namespace or task is required", Code: CodeBadRequest}, nil
	}
	res, err := s.pop(ctx, engine.PopRequest{Namespace: deref(p.Namespace), Task: deref(p.Task)}, popParams{
		batch: p.Batch, partitions: p.Partitions, timeout: p.Timeout, leaseSeconds: p.LeaseSeconds,
		wait: p.Wait, autoAck: p.AutoAck, autopilot: p.Autopilot, group: p.ConsumerGroup,
		mode: p.SubscriptionMode, from: p.SubscriptionFrom,
	})
	if err != nil || res == nil {
		return gen.PopDiscover204Response{}, err
	}
	return popAnswer(*res), nil
}
