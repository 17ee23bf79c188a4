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

// queuePage answers one page of the queues f selects, its pagination and
// the after of the next page (nil when no more follow).
func (s *Server) queuePage(ctx context.Context, f engine.QueueListFilter) ([]gen.QueueSummary, gen.Pagination, *string, error) {
	list, total, more, err := s.engine.ListQueues(ctx, f)
	if err != nil {
		return nil, gen.Pagination{}, nil, err
	}
	out := make([]gen.QueueSummary, len(list))
	for i := range list {
		out[i] = wireQueueSummary(&list[i])
	}
	var next *string
	if more {
		next, _ = nextPlaces(engine.RowPage{After: f.After}, len(list), list[len(list)-1].Name)
	}
	limit, offset := f.Limit, f.Offset
	return out, gen.Pagination{Limit: limit, Offset: offset, Total: &total}, next, nil
}

// queueListPage is the filter's page a queue listing's limit (100 when
// omitted), offset and after ask for; after with offset, or an after that
// is not a queue name this listing gave, is the caller's mistake.
func queueListPage(limit *gen.Limit, offset *gen.KeyedListOffset, after *gen.ListAfter) (engine.QueueListFilter, error) {
	page, err := keyedRowPage(nil, offset, after, 1)
	f := engine.QueueListFilter{Limit: 100, Offset: page.Offset, After: page.After}
	if limit != nil {
		f.Limit = *limit
	}
	return f, err
}

// defaultListLimit is the page of a listing whose rows carry no payload
// (groups, lagging cursors, labels, a queue's partitions) when the request
// names no limit: the spec's maximum, so that a client written for the
// reference, which answers every row, meets a cut page only past 10,000 rows.
const defaultListLimit = 10000

// rowPage is the page a request's limit and offset ask for.
func rowPage(limit *gen.ListLimit, offset *gen.KeyedListOffset) engine.RowPage {
	page := engine.RowPage{Limit: defaultListLimit}
	if limit != nil {
		page.Limit = *limit
	}
	if offset != nil {
		page.Offset = *offset
	}
	return page
}

// nextOffset is where the page after one of rows rows starts, nil when no more rows follow.
func nextOffset(page engine.RowPage, rows int, more bool) *int {
	if !more {
		return nil
	}
	next := page.Offset + rows
	return &next
}

// ListQueues lists queues by name with watermark-derived counts.
func (s *Server) ListQueues(ctx context.Context, req gen.ListQueuesRequestObject) (gen.ListQueuesResponseObject, error) {
	p := req.Params
	f, err := queueListPage(p.Limit, p.Offset, p.After)
	if err != nil {
		return nil, err
	}
	f.Namespace, f.Task = deref(p.Namespace), deref(p.Task)
	queues, page, next, err := s.queuePage(ctx, f)
	if err != nil {
		return nil, err
	}
	return gen.ListQueues200JSONResponse{Queues: queues, Total: deref(page.Total), Pagination: page, NextAfter: next}, nil
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

// ListNamespaces summarizes one page of namespaces.
func (s *Server) ListNamespaces(ctx context.Context, req gen.ListNamespacesRequestObject) (gen.ListNamespacesResponseObject, error) {
	page, err := keyedRowPage(req.Params.Limit, req.Params.Offset, req.Params.After, 1)
	if err != nil {
		return nil, err
	}
	list, more, err := s.engine.Namespaces(ctx, page)
	if err != nil {
		return nil, err
	}
	out := make([]gen.NamespaceSummary, len(list))
	for i := range list {
		l := &list[i]
		out[i] = gen.NamespaceSummary{Namespace: l.Label, Queues: l.Queues, Partitions: l.Partitions, Messages: wireCounts(l.Messages)}
	}
	answer := gen.ListNamespaces200JSONResponse{Namespaces: out, Truncated: &more}
	if more {
		answer.NextAfter, answer.NextOffset = nextPlaces(page, len(out), out[len(out)-1].Namespace)
	}
	return answer, nil
}

// ListTasks summarizes one page of tasks.
func (s *Server) ListTasks(ctx context.Context, req gen.ListTasksRequestObject) (gen.ListTasksResponseObject, error) {
	page, err := keyedRowPage(req.Params.Limit, req.Params.Offset, req.Params.After, 1)
	if err != nil {
		return nil, err
	}
	list, more, err := s.engine.Tasks(ctx, page)
	if err != nil {
		return nil, err
	}
	out := make([]gen.TaskSummary, len(list))
	for i := range list {
		l := &list[i]
		out[i] = gen.TaskSummary{Task: l.Label, Queues: l.Queues, Partitions: l.Partitions, Messages: wireCounts(l.Messages)}
	}
	answer := gen.ListTasks200JSONResponse{Tasks: out, Truncated: &more}
	if more {
		answer.NextAfter, answer.NextOffset = nextPlaces(page, len(out), out[len(out)-1].Task)
	}
	return answer, nil
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

// GetQueueDepth answers what a group has not committed: the queue's totals
// and one page of partitions.
func (s *Server) GetQueueDepth(ctx context.Context, req gen.GetQueueDepthRequestObject) (gen.GetQueueDepthResponseObject, error) {
	group := deref(req.Params.Group)
	page, err := keyedRowPage(req.Params.Limit, req.Params.Offset, req.Params.After, 1)
	if err != nil {
		return nil, err
	}
	depth, err := s.engine.QueueDepth(ctx, req.Queue, group, page)
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
	out := gen.GetQueueDepth200JSONResponse{Queue: req.Queue, Group: &group, Pending: int(depth.Pending),
		PartitionsPending: depth.PartitionsPending, Partitions: make([]gen.PartitionDepth, len(depth.Partitions)),
		Truncated: &depth.More}
	if depth.More {
		out.NextAfter, out.NextOffset = nextPlaces(page, len(depth.Partitions), depth.Partitions[len(depth.Partitions)-1].Partition)
	}
	for i, p := range depth.Partitions {
		out.Partitions[i] = gen.PartitionDepth{Partition: p.Partition, Pending: int(p.Pending)}
	}
	return out, nil
}
