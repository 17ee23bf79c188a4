package engine

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// MaxLeaseSeconds bounds every lease (a year, the highest leaseTime configure
// accepts): a pop's leaseSeconds and a lease extension past it are cut to it,
// where a huge value overflowed the lease column ("timestamp out of range").
const MaxLeaseSeconds = 31536000

// LeaseExtension reports a lease renewal.
type LeaseExtension struct {
	Renewed   int
	ExpiresAt *time.Time // earliest new expiry among renewed leases; nil when none
}

// ExtendLease pushes the expiry of every live lease held under leaseID to at
// least now+seconds, seconds taken between 1 and MaxLeaseSeconds. It never
// shortens a lease and never revives an expired one.
func (e *Engine) ExtendLease(ctx context.Context, leaseID string, seconds int) (LeaseExtension, error) {
	var out LeaseExtension
	seconds = min(max(seconds, 1), MaxLeaseSeconds)
	if !isUUID(leaseID) {
		return out, nil // not a lease this broker could have issued
	}
	// Any session will do (an index probe by lease id either way): consumers
	// renew every few seconds, and must not switch hot sessions back and forth.
	err := e.pool.QueryRow(withSessionMode(ctx, sessionAny), `WITH renewed AS (
			UPDATE lanes.consumers
			SET lease_expires_at = greatest(lease_expires_at, now() + make_interval(secs => $2))
			WHERE lease_id = $1::uuid AND lease_expires_at > now()
			RETURNING lease_expires_at)
		SELECT count(*), min(lease_expires_at) FROM renewed`, leaseID, seconds).Scan(&out.Renewed, &out.ExpiresAt)
	return out, err
}

func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil
}
