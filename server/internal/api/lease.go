package api

import (
	"context"

	"github.com/lanesmq/lanes/server/internal/api/gen"
)

// defaultLeaseExtension applies when the body is absent or names no seconds.
const defaultLeaseExtension = 60

// ExtendLease renews every live lease held under the id; it never shortens one.
func (s *Server) ExtendLease(ctx context.Context, req gen.ExtendLeaseRequestObject) (gen.ExtendLeaseResponseObject, error) {
	seconds := defaultLeaseExtension
	if req.Body != nil && req.Body.Seconds != nil {
		seconds = *req.Body.Seconds
	}
	ext, err := s.engine.ExtendLease(ctx, req.LeaseId, seconds)
	if err != nil {
		return nil, err
	}
	return gen.ExtendLease200JSONResponse{
		LeaseId: req.LeaseId, Success: ext.Renewed > 0, Renewed: ext.Renewed,
		NewExpiresAt: ext.ExpiresAt, ExpiresAt: ext.ExpiresAt, LeaseExpiresAt: ext.ExpiresAt,
	}, nil
}
