package api

import (
	"context"
	"time"

	"github.com/lanesmq/lanes/server/internal/api/gen"
)

const engineName = "lanes-segments"

// GetHealth is readiness: a real database round trip, 503 when it fails, and
// 503 while the schema is not applied yet on a database that answers. The key
// sets' state is reported but never makes the broker unhealthy: their cached
// keys keep verifying while an endpoint is down.
func (s *Server) GetHealth(ctx context.Context, _ gen.GetHealthRequestObject) (gen.GetHealthResponseObject, error) {
	engineLabel, version, jwks := engineName, s.opts.Version, s.keySetHealth()
	if err := s.engine.Ping(ctx); err != nil {
		return gen.GetHealth503JSONResponse{Status: "unhealthy", Database: "disconnected", Engine: engineLabel, Version: version, Jwks: jwks}, nil
	}
	if !s.schemaReady() {
		return gen.GetHealth503JSONResponse{Status: "unhealthy", Database: "schema not applied", Engine: engineLabel, Version: version, Jwks: jwks}, nil
	}
	return gen.GetHealth200JSONResponse{Status: "healthy", Database: "connected", Engine: engineLabel, Version: version, Jwks: jwks}, nil
}

// keySetHealth is each JWKS's state, or nil without key sets.
func (s *Server) keySetHealth() *[]gen.JWKSHealth {
	if s.opts.Auth == nil {
		return nil
	}
	sets := s.opts.Auth.KeySets()
	if len(sets) == 0 {
		return nil
	}
	out := make([]gen.JWKSHealth, len(sets))
	for i, set := range sets {
		out[i] = gen.JWKSHealth{Url: set.URL, Reachable: set.Reachable, Keys: set.Keys, RefreshFailures: int(set.Failures),
			LastRefreshAt: utcOrNil(set.LastRefresh), LastErrorAt: utcOrNil(set.LastErrorAt)}
		if set.LastError != "" {
			out[i].LastError = &set.LastError
		}
	}
	return &out
}

// utcOrNil is t in UTC, or nil for the zero time.
func utcOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// GetLiveness is liveness: it never touches the database.
func (s *Server) GetLiveness(context.Context, gen.GetLivenessRequestObject) (gen.GetLivenessResponseObject, error) {
	engineLabel := engineName
	return gen.GetLiveness200JSONResponse{Status: "ok", Engine: engineLabel}, nil
}
