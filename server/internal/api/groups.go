package api

import (
	"context"
	"math"
	"time"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
)

// defaultMinLagSeconds is the lagging route's threshold when none is given.
const defaultMinLagSeconds = 3600

// ListConsumerGroups answers one page of rows, one per (group, queue); the
// answer is a bare array, so the headers say whether more follow.
func (s *Server) ListConsumerGroups(ctx context.Context, req gen.ListConsumerGroupsRequestObject) (gen.ListConsumerGroupsResponseObject, error) {
	page, err := keyedRowPage(req.Params.Limit, req.Params.Offset, req.Params.After, 2)
	if err != nil {
		return nil, err
	}
	groups, more, err := s.engine.ListGroups(ctx, page)
	if err != nil {
		return nil, err
	}
	out := make([]gen.ConsumerGroupSummary, 0, len(groups))
	for _, g := range groups {
		var mode *string
		if g.SubscriptionMode != "" {
			mode = valuePtr(g.SubscriptionMode)
		}
		out = append(out, gen.ConsumerGroupSummary{
			Name:                  g.Group,
			Topics:                []string{g.Queue},
			QueueName:             g.Queue,
			Members:               g.Cursors,
			PartitionCursors:      g.Cursors,
			PartitionsWithLag:     g.PartitionsWithLag,
			TotalLag:              int(g.TotalLag),
			MaxTimeLag:            int(g.MaxTimeLag / time.Second),
			State:                 gen.ConsumerGroupSummaryState(g.State()),
			Storage:               "segments",
			SubscriptionMode:      mode,
			SubscriptionTimestamp: clampedUTC(g.SubscriptionTimestamp),
			SubscriptionCreatedAt: clampedUTC(g.SubscriptionCreatedAt),
			Conflation:            false,
		})
	}
	headers := gen.ListConsumerGroups200ResponseHeaders{XLanesTruncated: more}
	if more {
		last := groups[len(groups)-1]
		headers.XLanesNextAfter, headers.XLanesNextOffset = nextPlaces(page, len(out), last.Group, last.Queue)
	}
	return gen.ListConsumerGroups200JSONResponse{Body: out, Headers: headers}, nil
}

// ListLaggingConsumerGroups answers one page of the (group, partition) rows
// lagging by at least minLagSeconds; the headers say whether more follow.
func (s *Server) ListLaggingConsumerGroups(ctx context.Context, req gen.ListLaggingConsumerGroupsRequestObject) (gen.ListLaggingConsumerGroupsResponseObject, error) {
	minLag := defaultMinLagSeconds
	if req.Params.MinLagSeconds != nil {
		minLag = *req.Params.MinLagSeconds
	}
	page, err := keyedRowPage(req.Params.Limit, req.Params.Offset, req.Params.After, 3)
	if err != nil {
		return nil, err
	}
	cursors, more, err := s.engine.LaggingCursors(ctx, lagThreshold(minLag), page)
	if err != nil {
		return nil, err
	}
	out := make([]gen.LaggingConsumerGroup, 0, len(cursors))
	for _, c := range cursors {
		seconds := int(c.TimeLag / time.Second)
		out = append(out, gen.LaggingConsumerGroup{
			ConsumerGroup:      c.Group,
			QueueName:          c.Queue,
			PartitionName:      c.Partition,
			PartitionId:        c.PartitionID.String(),
			WorkerId:           optional(c.LeaseID),
			OffsetLag:          int(c.OffsetLag),
			TimeLagSeconds:     seconds,
			LagHours:           float32(c.TimeLag.Hours()),
			OldestUnconsumedAt: clampedUTC(c.OldestUnconsumed),
			LastConsumedAt:     clampedUTC(c.LastConsumedAt),
		})
	}
	headers := gen.ListLaggingConsumerGroups200ResponseHeaders{XLanesTruncated: more}
	if more {
		last := cursors[len(cursors)-1]
		headers.XLanesNextAfter, headers.XLanesNextOffset = nextPlaces(page, len(out), last.Group, last.Queue, last.Partition)
	}
	return gen.ListLaggingConsumerGroups200JSONResponse{Body: out, Headers: headers}, nil
}

// GetConsumerGroup answers one page of the group's cursors keyed by queue ({}
// for an unknown group); the headers say whether more follow.
func (s *Server) GetConsumerGroup(ctx context.Context, req gen.GetConsumerGroupRequestObject) (gen.GetConsumerGroupResponseObject, error) {
	if err := engine.CheckGroupAddress("consumerGroup", req.Group); err != nil {
		return nil, err
	}
	page, err := keyedRowPage(req.Params.Limit, req.Params.Offset, req.Params.After, 2)
	if err != nil {
		return nil, err
	}
	cursors, more, err := s.engine.GroupCursors(ctx, req.Group, page)
	if err != nil {
		return nil, err
	}
	partitions := map[string][]gen.ConsumerGroupPartition{}
	for _, c := range cursors {
		partitions[c.Queue] = append(partitions[c.Queue], gen.ConsumerGroupPartition{
			Partition:      c.Partition,
			WorkerId:       optional(c.LeaseID),
			LastConsumedAt: clampedUTC(c.LastConsumedAt),
			TotalConsumed:  int(c.TotalConsumed),
			OffsetLag:      int(c.OffsetLag),
			TimeLagSeconds: int(c.TimeLag / time.Second),
			LeaseActive:    c.LeaseActive,
		})
	}
	out := gen.ConsumerGroupDetail{}
	for queue, parts := range partitions {
		out[queue] = gen.ConsumerGroupQueue{Conflation: false, Partitions: parts}
	}
	headers := gen.GetConsumerGroup200ResponseHeaders{XLanesTruncated: more}
	if more {
		last := cursors[len(cursors)-1]
		headers.XLanesNextAfter, headers.XLanesNextOffset = nextPlaces(page, len(cursors), last.Queue, last.Partition)
	}
	return gen.GetConsumerGroup200JSONResponse{Body: out, Headers: headers}, nil
}

// UpdateConsumerGroupSubscription moves where the group's untouched partitions start.
func (s *Server) UpdateConsumerGroupSubscription(ctx context.Context, req gen.UpdateConsumerGroupSubscriptionRequestObject) (gen.UpdateConsumerGroupSubscriptionResponseObject, error) {
	if err := engine.CheckGroupAddress("consumerGroup", req.Group); err != nil {
		return nil, err
	}
	if req.Body == nil {
		return nil, &engine.InvalidInputError{Field: "subscriptionTimestamp", Message: "subscriptionTimestamp is required"}
	}
	ts := req.Body.SubscriptionTimestamp.UTC()
	res, err := s.engine.UpdateSubscription(ctx, req.Group, ts)
	if err != nil {
		return nil, err
	}
	return gen.UpdateConsumerGroupSubscription200JSONResponse{
		Success: true, ConsumerGroup: req.Group, NewTimestamp: ts, RowsUpdated: res.RowsUpdated,
	}, nil
}

// DeleteConsumerGroup deletes the group's cursors on every queue. Unlike the
// other group routes it takes a white-space-only name: a delete creates
// nothing, and it is how a group stored under such a name by an older broker
// is removed.
func (s *Server) DeleteConsumerGroup(ctx context.Context, req gen.DeleteConsumerGroupRequestObject) (gen.DeleteConsumerGroupResponseObject, error) {
	res, err := s.engine.DeleteGroup(ctx, req.Group, "", deleteMetadata(req.Params.DeleteMetadata))
	if err != nil {
		return nil, err
	}
	return gen.DeleteConsumerGroup200JSONResponse{
		Success: true, ConsumerGroup: req.Group,
		DeletedPartitions: res.DeletedPartitions, MetadataDeleted: res.MetadataDeleted,
	}, nil
}

// DeleteConsumerGroupQueue deletes the group's cursors on one queue.
func (s *Server) DeleteConsumerGroupQueue(ctx context.Context, req gen.DeleteConsumerGroupQueueRequestObject) (gen.DeleteConsumerGroupQueueResponseObject, error) {
	res, err := s.engine.DeleteGroup(ctx, req.Group, req.Queue, deleteMetadata(req.Params.DeleteMetadata))
	if err != nil {
		return nil, err
	}
	return gen.DeleteConsumerGroupQueue200JSONResponse{
		Success: true, ConsumerGroup: req.Group, QueueName: valuePtr(req.Queue),
		DeletedPartitions: res.DeletedPartitions, MetadataDeleted: res.MetadataDeleted,
	}, nil
}

// deleteMetadata defaults to true, as the spec says.
func deleteMetadata(p *bool) bool {
	return p == nil || *p
}

// clampedUTC is a stored instant in UTC, held within the years JSON can
// write: a subscription an older build stored past 9999 (UTC) made the group
// listing answer 500 to every caller.
func clampedUTC(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	switch {
	case u.Before(engine.FirstJSONTime):
		u = engine.FirstJSONTime
	case u.After(engine.LastJSONTime):
		u = engine.LastJSONTime
	}
	return &u
}

// lagThreshold converts minLagSeconds to a duration. Past what a Duration
// holds (about 292 years) the product wrapped negative and every row
// qualified; such a "never" threshold is the largest Duration, which no lag reaches.
func lagThreshold(seconds int) time.Duration {
	if seconds > int(math.MaxInt64/int64(time.Second)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(seconds) * time.Second
}
