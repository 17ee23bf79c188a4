//nolint:bodyclose // every response is handed to Client.decode (via Client.result), which closes the body.
package lanes

import (
	"context"
	"time"

	"github.com/lanesmq/lanes/sdk-go/internal/gen"
)

// StatusQuery narrows Status and ListQueueStatus to a queue, namespace or task (empty = any) and
// a time window (zero = the broker's default: the last hour). Limit and Offset page
// ListQueueStatus (0 = the broker's default); Status ignores them.
type StatusQuery struct {
	Queue, Namespace, Task string
	From, To               time.Time
	Limit, Offset          int
	// After is the NextAfter of the page before (ListQueueStatus), as QueueQuery.After.
	After string
}

// Status is the dashboard aggregate (GET /api/v1/status): message counts, live leases and dead
// letters of the queues q selects.
func (a Admin) Status(ctx context.Context, q StatusQuery) (*StatusOverview, error) {
	p := &gen.GetStatusParams{Queue: ptrUnlessZero(q.Queue), Namespace: ptrUnlessZero(q.Namespace),
		Task: ptrUnlessZero(q.Task), From: timeUnlessZero(q.From), To: timeUnlessZero(q.To)}
	return call[StatusOverview](a.c, ctx, func() (*httpResp, error) { return a.c.gen.GetStatus(ctx, p) })
}

// ListQueueStatus lists the queues q selects with their message counts.
func (a Admin) ListQueueStatus(ctx context.Context, q StatusQuery) (*QueueStatusList, error) {
	p := &gen.ListQueueStatusParams{Queue: ptrUnlessZero(q.Queue), Namespace: ptrUnlessZero(q.Namespace),
		Task: ptrUnlessZero(q.Task), From: timeUnlessZero(q.From), To: timeUnlessZero(q.To),
		Limit: ptrIfPositive(q.Limit), Offset: ptrIfPositive(q.Offset), After: ptrUnlessZero(q.After)}
	return call[QueueStatusList](a.c, ctx, func() (*httpResp, error) { return a.c.gen.ListQueueStatus(ctx, p) })
}

// BufferStatus is the state of the broker's disk spool (pushes waiting to drain).
func (a Admin) BufferStatus(ctx context.Context) (*BufferStatus, error) {
	return call[BufferStatus](a.c, ctx, func() (*httpResp, error) { return a.c.gen.GetBufferStatus(ctx) })
}

// Metrics is the broker's JSON metrics snapshot (GET /metrics).
func (a Admin) Metrics(ctx context.Context) (*Metrics, error) {
	return call[Metrics](a.c, ctx, func() (*httpResp, error) { return a.c.gen.GetMetrics(ctx) })
}

// MaintenanceMode reads push maintenance: while on, every push goes to the broker's disk spool
// (status buffered) and drains when it is turned off.
func (a Admin) MaintenanceMode(ctx context.Context) (*Maintenance, error) {
	return call[Maintenance](a.c, ctx, func() (*httpResp, error) { return a.c.gen.GetPushMaintenance(ctx) })
}

// SetMaintenanceMode turns push maintenance on or off for every broker on the database.
func (a Admin) SetMaintenanceMode(ctx context.Context, enabled bool) (*Maintenance, error) {
	return call[Maintenance](a.c, ctx, func() (*httpResp, error) {
		return a.c.gen.SetPushMaintenance(ctx, gen.Maintenance{Enabled: enabled})
	})
}

// PopMaintenanceMode reads pop maintenance: while on, every pop answers empty at once.
func (a Admin) PopMaintenanceMode(ctx context.Context) (*Maintenance, error) {
	return call[Maintenance](a.c, ctx, func() (*httpResp, error) { return a.c.gen.GetPopMaintenance(ctx) })
}

// SetPopMaintenanceMode turns pop maintenance on or off for every broker on the database.
func (a Admin) SetPopMaintenanceMode(ctx context.Context, enabled bool) (*Maintenance, error) {
	return call[Maintenance](a.c, ctx, func() (*httpResp, error) {
		return a.c.gen.SetPopMaintenance(ctx, gen.Maintenance{Enabled: enabled})
	})
}
