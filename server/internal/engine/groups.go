package engine

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// GroupCursor is one (partition, group) cursor with its lag, computed from the
// watermarks (last_offset, committed, log_start) and one index probe for the
// age of the oldest unconsumed segment.
type GroupCursor struct {
	Group            string
	QueueID          uuid.UUID
	Queue            string
	Partition        string
	PartitionID      uuid.UUID
	LeaseID          string // "" when no live lease
	LeaseActive      bool
	TotalConsumed    int64
	LastConsumedAt   *time.Time
	OffsetLag        int64
	OldestUnconsumed *time.Time // nil when nothing is unconsumed
	TimeLag          time.Duration
}

// GroupSummary is one (group, queue) row of the group list.
type GroupSummary struct {
	Group                 string
	Queue                 string
	Cursors               int
	PartitionsWithLag     int
	TotalLag              int64
	MaxTimeLag            time.Duration
	EverConsumed          bool
	SubscriptionMode      string
	SubscriptionTimestamp *time.Time
	SubscriptionCreatedAt *time.Time
}

// State is "Lagging" past five minutes of time lag, "Stable" once anything was
// consumed, else "Dead".
func (g GroupSummary) State() string {
	switch {
	case g.MaxTimeLag > 300*time.Second:
		return "Lagging"
	case g.EverConsumed:
		return "Stable"
	default:
		return "Dead"
	}
}

// cursorsSQL lists cursors with lag; $1 filters the group (empty = all).
const cursorsSQL = `SELECT c.consumer_group, q.id, q.name, p.name, p.id,
		CASE WHEN c.lease_expires_at > now() THEN c.lease_id::text ELSE '' END,
		coalesce(c.lease_expires_at > now(), false), c.total_consumed, c.last_consumed_at,
		greatest(p.last_offset - greatest(c.committed, p.log_start - 1), 0), o.created_at,
		coalesce(extract(epoch FROM now() - o.created_at), 0)::float8
	FROM lanes.consumers c
	JOIN lanes.partitions p ON p.id = c.partition_id
	JOIN lanes.queues q ON q.id = p.queue_id
	LEFT JOIN LATERAL (SELECT sg.created_at FROM lanes.segments sg
		WHERE p.last_offset > greatest(c.committed, p.log_start - 1)
		  AND sg.partition_id = p.id AND sg.base_offset <= greatest(c.committed + 1, p.log_start)
		ORDER BY sg.base_offset DESC LIMIT 1) o ON true
	WHERE ($1 = '' OR c.consumer_group = $1)
	ORDER BY c.consumer_group, q.name, p.name`

// GroupCursors lists the cursors of group ("" = every group).
func (e *Engine) GroupCursors(ctx context.Context, group string) ([]GroupCursor, error) {
	rows, err := e.pool.Query(ctx, cursorsSQL, group)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (GroupCursor, error) {
		var c GroupCursor
		var lagSeconds float64
		err := row.Scan(&c.Group, &c.QueueID, &c.Queue, &c.Partition, &c.PartitionID, &c.LeaseID, &c.LeaseActive,
			&c.TotalConsumed, &c.LastConsumedAt, &c.OffsetLag, &c.OldestUnconsumed, &lagSeconds)
		c.TimeLag = time.Duration(max(lagSeconds, 0) * float64(time.Second))
		return c, err
	})
}

// ListGroups returns one summary per (group, queue): groups registered by a
// pop and groups that only have cursors (placed by a seek).
func (e *Engine) ListGroups(ctx context.Context) ([]GroupSummary, error) {
	cursors, err := e.GroupCursors(ctx, "")
	if err != nil {
		return nil, err
	}
	type key struct{ group, queue string }
	byKey := map[key]*GroupSummary{}
	var order []key
	get := func(k key) *GroupSummary {
		s := byKey[k]
		if s == nil {
			s = &GroupSummary{Group: k.group, Queue: k.queue}
			byKey[k] = s
			order = append(order, k)
		}
		return s
	}
	rows, err := e.pool.Query(ctx, `SELECT g.consumer_group, q.name, g.subscription_mode, g.subscription_timestamp, g.created_at
		FROM lanes.consumer_groups g JOIN lanes.queues q ON q.id = g.queue_id
		ORDER BY g.consumer_group, q.name`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var k key
		var mode string
		var ts, created time.Time
		if err := rows.Scan(&k.group, &k.queue, &mode, &ts, &created); err != nil {
			rows.Close()
			return nil, err
		}
		s := get(k)
		s.SubscriptionMode, s.SubscriptionTimestamp, s.SubscriptionCreatedAt = mode, &ts, &created
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, c := range cursors {
		s := get(key{c.Group, c.Queue})
		s.Cursors++
		if c.OffsetLag > 0 {
			s.PartitionsWithLag++
			s.TotalLag += c.OffsetLag
			s.MaxTimeLag = max(s.MaxTimeLag, c.TimeLag)
		}
		if c.LastConsumedAt != nil {
			s.EverConsumed = true
		}
	}
	out := make([]GroupSummary, 0, len(order))
	for _, k := range order {
		out = append(out, *byKey[k])
	}
	return out, nil
}

// LaggingCursors lists cursors whose oldest unconsumed message waited at least minLag.
func (e *Engine) LaggingCursors(ctx context.Context, minLag time.Duration) ([]GroupCursor, error) {
	all, err := e.GroupCursors(ctx, "")
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, c := range all {
		if c.OffsetLag > 0 && c.OldestUnconsumed != nil && c.TimeLag >= minLag {
			out = append(out, c)
		}
	}
	return out, nil
}

// SubscriptionUpdate reports a subscription change.
type SubscriptionUpdate struct {
	RowsUpdated int
}

// UpdateSubscription moves the instant from which the group's partitions that
// are not seeded yet start, on every queue of the group and every discovery
// scope it subscribed to (for the queues it has not met there yet). Existing
// cursors do not move (seek does that). A group subscribed with "all" becomes
// a timestamp subscription, since it now has a start instant.
func (e *Engine) UpdateSubscription(ctx context.Context, group string, ts time.Time) (SubscriptionUpdate, error) {
	if err := checkJSONYears("subscriptionTimestamp", ts); err != nil {
		return SubscriptionUpdate{}, err
	}
	const moved = `SET subscription_timestamp = $2,
			subscription_mode = CASE WHEN subscription_mode = 'all' THEN 'timestamp' ELSE subscription_mode END
		WHERE consumer_group = $1 RETURNING 1`
	var out SubscriptionUpdate
	err := e.pool.QueryRow(ctx, `WITH queues AS (UPDATE lanes.consumer_groups `+moved+`),
			scopes AS (UPDATE lanes.discovery_subscriptions `+moved+`)
		SELECT (SELECT count(*) FROM queues) + (SELECT count(*) FROM scopes)`, group, ts).Scan(&out.RowsUpdated)
	return out, err
}

// GroupDeletion reports what a group delete removed.
type GroupDeletion struct {
	DeletedPartitions int
	MetadataDeleted   bool
}

// DeleteGroup deletes the group's cursors (on queue, or on every queue when
// queue is ""), so its next pop seeds them again. With deleteMetadata the
// stored subscription goes too (for every queue: its discovery scopes' as
// well) and the next pop subscribes afresh; without it the subscription is
// kept and only re-seeding is forced.
func (e *Engine) DeleteGroup(ctx context.Context, group, queue string, deleteMetadata bool) (GroupDeletion, error) {
	var out GroupDeletion
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		// Lock order: consumer rows ascending, then the metadata rows.
		if err := tx.QueryRow(ctx, `WITH doomed AS (
				SELECT c.partition_id FROM lanes.consumers c
				JOIN lanes.partitions p ON p.id = c.partition_id
				JOIN lanes.queues q ON q.id = p.queue_id
				WHERE c.consumer_group = $1 AND ($2 = '' OR q.name = $2)
				ORDER BY c.partition_id FOR UPDATE OF c),
			gone AS (
				DELETE FROM lanes.consumers c USING doomed d
				WHERE c.partition_id = d.partition_id AND c.consumer_group = $1 RETURNING 1)
			SELECT count(*) FROM gone`, group, queue).Scan(&out.DeletedPartitions); err != nil {
			return err
		}
		if deleteMetadata {
			tag, err := tx.Exec(ctx, `DELETE FROM lanes.consumer_groups g USING lanes.queues q
				WHERE q.id = g.queue_id AND g.consumer_group = $1 AND ($2 = '' OR q.name = $2)`, group, queue)
			if err != nil {
				return err
			}
			out.MetadataDeleted = tag.RowsAffected() > 0
			if queue == "" {
				// Else a discovery pop would register the scope's queues from the old subscription.
				tag, err := tx.Exec(ctx, `DELETE FROM lanes.discovery_subscriptions WHERE consumer_group = $1`, group)
				if err != nil {
					return err
				}
				out.MetadataDeleted = out.MetadataDeleted || tag.RowsAffected() > 0
			}
			return nil
		}
		_, err := tx.Exec(ctx, `UPDATE lanes.consumer_groups g SET seeded_version = -1, claim_floor = '0', claim_epoch = claim_epoch + 1
			FROM lanes.queues q WHERE q.id = g.queue_id AND g.consumer_group = $1 AND ($2 = '' OR q.name = $2)`, group, queue)
		return err
	})
	return out, err
}
