package engine

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// SeekRequest moves one group's cursor on a queue (or one partition of it).
type SeekRequest struct {
	Group     string // empty: queue mode
	Queue     string
	Partition string // empty: every partition of Queue
	// Timestamp lands on the first retained segment created at or after it;
	// ignored when ToEnd is set.
	Timestamp *time.Time
	ToEnd     bool
}

// SeekResult reports how many cursors were placed.
type SeekResult struct {
	PartitionsUpdated int
}

// ErrQueueHasNoPartitions and ErrPartitionNotFound are the two ways a seek
// target can be missing; both wrap ErrNotFound.
var (
	ErrQueueHasNoPartitions = notFound("Queue not found or has no partitions")
	ErrPartitionNotFound    = notFound("Partition not found")
)

type notFoundError struct{ msg string }

func notFound(msg string) error               { return &notFoundError{msg: msg} }
func (e *notFoundError) Error() string        { return e.msg }
func (e *notFoundError) Is(target error) bool { return target == ErrNotFound }

// Seek places the group's cursor at the end, or at the segment boundary just
// before the first retained segment created at or after Timestamp (no such
// segment: the end). It never goes below log_start − 1, releases any live lease
// (the in-flight batch is abandoned, not acked), resets the retry budget and
// creates cursor rows that do not exist yet. Other groups are not touched.
func (e *Engine) Seek(ctx context.Context, req SeekRequest) (SeekResult, error) {
	var out SeekResult
	if !req.ToEnd && req.Timestamp == nil {
		return out, invalid("timestamp", "Must specify toEnd=true or a timestamp")
	}
	if !req.ToEnd {
		if err := checkJSONYears("timestamp", *req.Timestamp); err != nil {
			return out, err
		}
	}
	// A seek creates the group's cursor rows it does not have yet.
	if err := checkOptionalName("consumerGroup", req.Group); err != nil {
		return out, err
	}
	if req.Group == "" {
		req.Group = QueueModeGroup
	}
	var ts any
	if !req.ToEnd {
		ts = *req.Timestamp
	}
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		// Lock order: consumer rows ascending by partition id, then the group's metadata row.
		err := tx.QueryRow(ctx, `WITH target AS (
				SELECT p.id, p.queue_id, greatest(p.log_start - 1, CASE WHEN $4::timestamptz IS NULL THEN p.last_offset ELSE
					coalesce((SELECT sg.base_offset - 1 FROM lanes.segments sg
						WHERE sg.partition_id = p.id AND sg.end_offset >= p.log_start AND sg.created_at >= $4
						ORDER BY sg.base_offset LIMIT 1), p.last_offset) END) AS committed
				FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
				WHERE q.name = $1 AND ($3 = '' OR p.name = $3)
				ORDER BY p.id),
			placed AS (
				INSERT INTO lanes.consumers AS c (partition_id, consumer_group, queue_id, committed, batch_end)
				SELECT t.id, $2, t.queue_id, t.committed, t.committed FROM target t ORDER BY t.id
				ON CONFLICT (partition_id, consumer_group) DO UPDATE SET
					committed = EXCLUDED.committed, batch_end = EXCLUDED.committed,
					lease_id = NULL, lease_expires_at = NULL, retry_count = 0
				RETURNING 1)
			SELECT count(*) FROM placed`, req.Queue, req.Group, req.Partition, ts).Scan(&out.PartitionsUpdated)
		if err != nil {
			return err
		}
		if out.PartitionsUpdated == 0 {
			if req.Partition != "" {
				return ErrPartitionNotFound
			}
			return ErrQueueHasNoPartitions
		}
		return resetClaimFloor(ctx, tx, req.Group, req.Queue)
	})
	if err == nil {
		// A cursor moved back or a lease was dropped: parked pops of the
		// group may claim now, here and on other brokers, and no push will
		// tell them.
		e.announce(map[string][]string{req.Queue: nil}, nil)
	}
	return out, err
}

// resetClaimFloor makes the group's next pops look at every partition of the
// queue again; needed whenever a cursor moves backwards. Bumping the epoch
// keeps a pop that computed its floor before this move from storing it.
func resetClaimFloor(ctx context.Context, tx pgx.Tx, group, queue string) error {
	_, err := tx.Exec(ctx, `UPDATE lanes.consumer_groups g SET claim_floor = '0', claim_epoch = claim_epoch + 1
		FROM lanes.queues q WHERE q.id = g.queue_id AND q.name = $2 AND g.consumer_group = $1`, group, queue)
	return err
}
