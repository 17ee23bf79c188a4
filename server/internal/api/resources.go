package api

import (
	"context"
	"errors"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
)

func wireCounts(c engine.MessageCounts) gen.MessageCounts {
	total, pending, processing, completed, dead := int(c.Total), int(c.Pending), int(c.Processing), int(c.Completed), int(c.DeadLetter)
	failed := 0
	return gen.MessageCounts{Total: total, Pending: pending, Processing: processing, Completed: completed,
		DeadLetter: dead, Failed: failed}
}

func wireQueueSummary(q *engine.QueueSummary) gen.QueueSummary {
	id := q.ID.String()
	created := q.CreatedAt.UTC()
	return gen.QueueSummary{Id: id, Name: q.Name, Namespace: q.Namespace, Task: q.Task, CreatedAt: created,
		Partitions: q.Partitions, Messages: wireCounts(q.Messages)}
}

func (s *Server) queuePage(ctx context.Context, f engine.QueueListFilter) ([]gen.QueueSummary, gen.Pagination, error) {
	list, total, err := s.engine.ListQueues(ctx, f)
	if err != nil {
		return nil, gen.Pagination{}, err
	}
	out := make([]gen.QueueSummary, len(list))
	for i := range list {
		out[i] = wireQueueSummary(&list[i])
	}
	limit, offset := f.Limit, f.Offset
	return out, gen.Pagination{Limit: limit, Offset: offset, Total: &total}, nil
}

func pageOf(limit *gen.Limit, offset *gen.Offset) (int, int) {
	l, o := 100, 0
	if limit != nil {
		l = *limit
	}
	if offset != nil {
		o = *offset
	}
	return l, o
}

// ListQueues lists queues by name with watermark-derived counts.
func (s *Server) ListQueues(ctx context.Context, req gen.ListQueuesRequestObject) (gen.ListQueuesResponseObject, error) {
	p := req.Params
	limit, offset := pageOf(p.Limit, p.Offset)
	queues, page, err := s.queuePage(ctx, engine.QueueListFilter{Namespace: deref(p.Namespace), Task: deref(p.Task),
		Limit: limit, Offset: offset})
	if err != nil {
		return nil, err
	}
	return gen.ListQueues200JSONResponse{Queues: queues, Total: deref(page.Total), Pagination: page}, nil
}

// GetOverview answers system-wide counters.
func (s *Server) GetOverview(ctx context.Context, _ gen.GetOverviewRequestObject) (gen.GetOverviewResponseObject, error) {
	o, err := s.engine.Overview(ctx, engine.QueueListFilter{})
	if err != nil {
		return nil, err
	}
	return gen.GetOverview200JSONResponse{Queues: o.Queues, Partitions: o.Partitions, Namespaces: o.Namespaces,
		Tasks: o.Tasks, Messages: wireCounts(o.Messages)}, nil
}

// ListNamespaces summarizes every namespace.
func (s *Server) ListNamespaces(ctx context.Context, _ gen.ListNamespacesRequestObject) (gen.ListNamespacesResponseObject, error) {
	list, err := s.engine.Namespaces(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]gen.NamespaceSummary, len(list))
	for i := range list {
		l := &list[i]
		out[i] = gen.NamespaceSummary{Namespace: l.Label, Queues: l.Queues, Partitions: l.Partitions, Messages: wireCounts(l.Messages)}
	}
	return gen.ListNamespaces200JSONResponse{Namespaces: out}, nil
}

// ListTasks summarizes every task.
func (s *Server) ListTasks(ctx context.Context, _ gen.ListTasksRequestObject) (gen.ListTasksResponseObject, error) {
	list, err := s.engine.Tasks(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]gen.TaskSummary, len(list))
	for i := range list {
		l := &list[i]
		out[i] = gen.TaskSummary{Task: l.Label, Queues: l.Queues, Partitions: l.Partitions, Messages: wireCounts(l.Messages)}
	}
	return gen.ListTasks200JSONResponse{Tasks: out}, nil
}

// DeleteQueue removes a queue and everything in it; 200 even when there was none,
// because clients delete before they create.
func (s *Server) DeleteQueue(ctx context.Context, req gen.DeleteQueueRequestObject) (gen.DeleteQueueResponseObject, error) {
	deleted, err := s.engine.DeleteQueue(ctx, req.Queue)
	if err != nil {
		return nil, err
	}
	out := gen.DeleteQueue200JSONResponse{Deleted: deleted, Queue: req.Queue}
	if !deleted {
		msg := "Queue not found; nothing deleted"
		out.Message = &msg
	}
	return out, nil
}

// GetQueueDepth answers what a group has not committed, per partition.
func (s *Server) GetQueueDepth(ctx context.Context, req gen.GetQueueDepthRequestObject) (gen.GetQueueDepthResponseObject, error) {
	group := deref(req.Params.Group)
	parts, err := s.engine.QueueDepth(ctx, req.Queue, group)
	if errors.Is(err, engine.ErrNotFound) {
		return gen.GetQueueDepth404JSONResponse{NotFoundJSONResponse: gen.NotFoundJSONResponse{
			Error: "Queue not found", Code: CodeQueueNotFound}}, nil
	}
	if err != nil {
		return nil, err
	}
	if group == "" {
		group = engine.QueueModeGroup
	}
	out := gen.GetQueueDepth200JSONResponse{Queue: req.Queue, Group: &group, Partitions: make([]gen.PartitionDepth, len(parts))}
	for i, p := range parts {
		out.Partitions[i] = gen.PartitionDepth{Partition: p.Partition, Pending: int(p.Pending)}
		out.Pending += int(p.Pending)
		if p.Pending > 0 {
			out.PartitionsPending++
		}
	}
	return out, nil
}
