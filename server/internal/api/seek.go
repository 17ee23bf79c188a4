package api

import (
	"context"
	"errors"
	"time"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
)

// SeekQueue moves a group's cursor on every partition of a queue.
func (s *Server) SeekQueue(ctx context.Context, req gen.SeekQueueRequestObject) (gen.SeekQueueResponseObject, error) {
	seek := seekRequest(req.Body, false)
	seek.Group, seek.Queue = req.Group, req.Queue
	res, err := s.engine.Seek(ctx, seek)
	if errors.Is(err, engine.ErrNotFound) {
		return gen.SeekQueue404JSONResponse{SeekNotFoundJSONResponse: seekNotFound(err)}, nil
	}
	if err != nil {
		return nil, err
	}
	return gen.SeekQueue200JSONResponse{
		Success: true, ConsumerGroup: req.Group, QueueName: req.Queue,
		SeekToEnd: seek.ToEnd, TargetTimestamp: seekTarget(seek),
		PartitionsUpdated: res.PartitionsUpdated,
	}, nil
}

// SeekPartition moves a group's cursor on one partition; an empty body means toEnd.
func (s *Server) SeekPartition(ctx context.Context, req gen.SeekPartitionRequestObject) (gen.SeekPartitionResponseObject, error) {
	seek := seekRequest(req.Body, true)
	seek.Group, seek.Queue, seek.Partition = req.Group, req.Queue, req.Partition
	res, err := s.engine.Seek(ctx, seek)
	if errors.Is(err, engine.ErrNotFound) {
		return gen.SeekPartition404JSONResponse{SeekNotFoundJSONResponse: seekNotFound(err)}, nil
	}
	if err != nil {
		return nil, err
	}
	return gen.SeekPartition200JSONResponse{
		Success: true, ConsumerGroup: req.Group, QueueName: req.Queue, PartitionName: req.Partition,
		SeekToEnd: seek.ToEnd, TargetTimestamp: seekTarget(seek), Updated: res.PartitionsUpdated > 0,
	}, nil
}

// seekNotFound is the seek routes' 404: the error envelope plus success:false,
// which the reference's clients read (§1.11).
func seekNotFound(err error) gen.SeekNotFoundJSONResponse {
	return gen.SeekNotFoundJSONResponse{Success: false, Error: err.Error(), Code: CodeNotFound}
}

// seekRequest reads {toEnd} / {timestamp}; toEnd wins when both are given. A
// body with neither field ({}, what a generated client sends for an empty
// SeekRequest) is read as no body: toEnd on the partition route, and the
// engine's 400 on the queue route.
func seekRequest(body *gen.SeekRequest, emptyMeansEnd bool) engine.SeekRequest {
	var out engine.SeekRequest
	if body == nil || (body.ToEnd == nil && body.Timestamp == nil) {
		out.ToEnd = emptyMeansEnd
		return out
	}
	out.ToEnd = deref(body.ToEnd)
	if !out.ToEnd {
		out.Timestamp = body.Timestamp
	}
	return out
}

func seekTarget(r engine.SeekRequest) *time.Time {
	if r.ToEnd || r.Timestamp == nil {
		return nil
	}
	t := r.Timestamp.UTC()
	return &t
}

// valuePtr is &v for values that have no address (literals, results).
func valuePtr[T any](v T) *T { return &v }
