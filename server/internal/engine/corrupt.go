package engine

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// corruptClaim is a claimed partition whose stored segments do not decode.
type corruptClaim struct {
	claim
	err *CorruptSegmentError
}

// deliverClaim is deliver for a committed claim, a pop's own or one a write ran
// for it. The claim of a partition whose stored segments do not decode is
// given back at once, so no lease holds it for nobody, and the damage is
// logged (once a minute with the count: every pop that reaches the segment
// meets it again). The pop still gets what its other partitions hold; with
// nothing else it fails with the partition's CorruptSegmentError.
func (e *Engine) deliverClaim(ctx context.Context, req *PopRequest, leaseID string, d *delivery) (*PopResult, error) {
	e.expiredLeases.Add(uint64(d.expiredLeases)) // d is committed: every caller runs this after the claim's COMMIT
	res, corrupt := e.deliver(req, leaseID, d)
	if len(corrupt) == 0 {
		return res, nil
	}
	ctx, cancel := e.claimContext(ctx) // given back even when the pop's client has left
	defer cancel()
	for _, c := range corrupt {
		attrs := []any{"group", req.Group, "claimedFrom", c.from, "claimedTo", c.to}
		if err := e.giveBackClaim(ctx, req.Group, leaseID, c.claim); err != nil {
			attrs = append(attrs, "givenBack", false, "giveBackErr", err)
		} else {
			attrs = append(attrs, "givenBack", true)
		}
		e.reportCorruptSegment(c.err, attrs...)
	}
	if len(res.Messages) > 0 {
		return res, nil
	}
	// res still says how many partitions the claim saw claimable (claimOnce).
	return res, corrupt[0].err
}

// reportCorruptSegment logs c with its details and extra ones: the first at
// once, then once a minute with the count.
func (e *Engine) reportCorruptSegment(c *CorruptSegmentError, extra ...any) {
	e.corruptSegments.Failed(c.Err, append(c.logAttrs(), extra...)...)
}

// errClaimMoved: the cursor a claim wrote has changed since, so it cannot be given back.
var errClaimMoved = errors.New("the cursor moved since the claim")

// giveBackClaim undoes the claim c of group: a lease is released (the cursor
// never moved, and no retry is charged), an autoAck claim's cursor moves back
// before the span it took, with the group's claim floor reset as after any
// cursor moving backwards.
func (e *Engine) giveBackClaim(ctx context.Context, group, leaseID string, c claim) error {
	if leaseID != "" {
		tag, err := e.pool.Exec(ctx, `UPDATE lanes.consumers SET lease_id = NULL, lease_expires_at = NULL, batch_end = committed
			WHERE partition_id = $1 AND consumer_group = $2 AND lease_id = $3`, c.partitionID, group, leaseID)
		if err == nil && tag.RowsAffected() == 0 {
			err = errClaimMoved
		}
		return err
	}
	return pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE lanes.consumers SET committed = $3::int8 - 1, batch_end = $3::int8 - 1,
				total_consumed = total_consumed - ($4::int8 - $3::int8 + 1)
			WHERE partition_id = $1 AND consumer_group = $2 AND committed = $4 AND lease_id IS NULL`,
			c.partitionID, group, c.from, c.to)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return errClaimMoved
		}
		return resetClaimFloor(ctx, tx, group, c.queue)
	})
}
