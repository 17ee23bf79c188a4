package api

import (
	"context"
	"errors"
	"time"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
)

// GetStatus is the dashboard aggregate: counts from watermarks, live leases and
// dead letters. Throughput series need the metrics history, which this build
// does not keep, so throughput is empty.
func (s *Server) GetStatus(ctx context.Context, req gen.GetStatusRequestObject) (gen.GetStatusResponseObject, error) {
	p := req.Params
	to := time.Now().UTC()
	if p.To != nil {
		to = p.To.UTC()
	}
	from := to.Add(-time.Hour)
	if p.From != nil {
		from = p.From.UTC()
	}
	if engine.OutsideJSONYears(from) || engine.OutsideJSONYears(to) {
		// The answer echoes both instants, and JSON dates hold four-digit years only.
		return gen.GetStatus400JSONResponse{BadRequestJSONResponse: gen.BadRequestJSONResponse{
			Error: "from and to must fall within the years 0001 to 9999 (UTC); from defaults to an hour before to", Code: CodeBadRequest}}, nil
	}
	if !from.Before(to) {
		return gen.GetStatus400JSONResponse{BadRequestJSONResponse: gen.BadRequestJSONResponse{
			Error: "from must be before to", Code: CodeBadRequest}}, nil
	}
	filter := engine.QueueListFilter{Queue: deref(p.Queue), Namespace: deref(p.Namespace), Task: deref(p.Task)}
	o, err := s.engine.Overview(ctx, filter)
	if err != nil {
		return nil, err
	}
	leases, err := s.engine.Leases(ctx, filter)
	if err != nil {
		return nil, err
	}
	bucket, points := bucketMinutes(to.Sub(from)), 0
	var statsAge float32
	return gen.GetStatus200JSONResponse{
		TimeRange:     gen.StatusTimeRange{From: from, To: to},
		BucketMinutes: bucket, PointCount: points, Throughput: []map[string]any{},
		Queues:          gen.StatusQueueTotals{Total: o.Queues, Partitions: o.Partitions, Namespaces: o.Namespaces, Tasks: o.Tasks},
		Messages:        wireCounts(o.Messages),
		Leases:          gen.StatusLeases{Active: leases.Active, PartitionsLocked: leases.PartitionsLocked},
		DeadLetterQueue: gen.StatusDeadLetters{Total: int(o.DeadLetterRows)},
		Workers:         []map[string]any{}, Errors: map[string]any{}, StatsAge: statsAge,
	}, nil
}

// bucketMinutes picks the series resolution the reference dashboard uses for a window.
func bucketMinutes(window time.Duration) int {
	switch {
	case window <= 2*time.Hour:
		return 1
	case window <= 12*time.Hour:
		return 5
	case window <= 48*time.Hour:
		return 15
	case window <= 14*24*time.Hour:
		return 60
	}
	return 360
}

// ListQueueStatus lists queues with their message counters.
func (s *Server) ListQueueStatus(ctx context.Context, req gen.ListQueueStatusRequestObject) (gen.ListQueueStatusResponseObject, error) {
	p := req.Params
	f, err := queueListPage(p.Limit, p.Offset, p.After)
	if err != nil {
		return nil, err
	}
	f.Queue, f.Namespace, f.Task = deref(p.Queue), deref(p.Namespace), deref(p.Task)
	queues, page, next, err := s.queuePage(ctx, f)
	if err != nil {
		return nil, err
	}
	return gen.ListQueueStatus200JSONResponse{Queues: queues, Pagination: page, NextAfter: next}, nil
}

// GetQueueStatus answers one queue's live state, one page of partitions on request.
func (s *Server) GetQueueStatus(ctx context.Context, req gen.GetQueueStatusRequestObject) (gen.GetQueueStatusResponseObject, error) {
	page, err := keyedRowPage(req.Params.Limit, req.Params.Offset, req.Params.After, 1)
	if err != nil {
		return nil, err
	}
	q, parts, more, err := s.engine.QueueStatus(ctx, req.Queue, deref(req.Params.IncludePartitions), page)
	if errors.Is(err, engine.ErrNotFound) {
		return gen.GetQueueStatus404JSONResponse{NotFoundJSONResponse: gen.NotFoundJSONResponse{
			Error: "Queue not found", Code: CodeQueueNotFound}}, nil
	}
	if err != nil {
		return nil, err
	}
	out := gen.GetQueueStatus200JSONResponse{
		Queue: gen.QueueStatusQueue{Id: q.ID.String(), Name: q.Name, Namespace: q.Namespace, Task: q.Task,
			CreatedAt: q.CreatedAt.UTC(), Partitions: q.Partitions},
		Messages:  wireCounts(q.Messages),
		Truncated: &more,
	}
	if more {
		out.NextAfter, out.NextOffset = nextPlaces(page, len(parts), parts[len(parts)-1].Name)
	}
	if parts != nil {
		list := make([]gen.PartitionStatus, len(parts))
		for i := range parts {
			ps := &parts[i]
			list[i] = gen.PartitionStatus{
				Name: ps.Name, Messages: wireCounts(ps.Messages), LastActivity: ps.LastActivity,
				Stats: gen.PartitionStatusStats{Id: ps.ID.String(), ConsumerGroups: ps.Groups, TotalConsumed: int(ps.TotalConsumed)},
				Cursor: gen.PartitionStatusCursor{LeaseActive: ps.LeaseActive, LeaseExpiresAt: ps.LeaseExpiresAt,
					LastConsumedAt: ps.LastConsumedAt, TotalConsumed: int(ps.TotalConsumed)},
				OldestMessage: createdAtObject(ps.OldestCreatedAt), NewestMessage: createdAtObject(ps.NewestCreatedAt),
			}
		}
		out.Partitions = &list
	}
	return out, nil
}

func createdAtObject(t *time.Time) *gen.PartitionStatusMessage {
	if t == nil {
		return nil
	}
	return &gen.PartitionStatusMessage{CreatedAt: t.UTC()}
}
