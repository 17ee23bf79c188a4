package api

import (
	"context"
	"time"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
)

const engineName = "lanes-segments"

// GetHealth is readiness: a real database round trip, 503 when it fails, and
// 503 while the schema is not applied yet on a database that answers. The key
// sets' state is reported but never makes the broker unhealthy: their cached
// keys keep verifying while an endpoint is down.
func (s *Server) GetHealth(ctx context.Context, _ gen.GetHealthRequestObject) (gen.GetHealthResponseObject, error) {
	engineLabel, version, jwks, schema := engineName, s.opts.Version, s.keySetHealth(), s.schemaVersions()
	if err := s.engine.Ping(ctx); err != nil {
		return gen.GetHealth503JSONResponse{Status: "unhealthy", Database: "disconnected", Engine: engineLabel, Version: version, Jwks: jwks, SchemaVersions: schema}, nil
	}
	if !s.schemaReady() {
		return gen.GetHealth503JSONResponse{Status: "unhealthy", Database: "schema not applied", Engine: engineLabel, Version: version, Jwks: jwks, SchemaVersions: schema}, nil
	}
	return gen.GetHealth200JSONResponse{Status: "healthy", Database: "connected", Engine: engineLabel, Version: version, Jwks: jwks, SchemaVersions: schema}, nil
}

// schemaVersions is this broker's schema version beside the database's
// figures as last read (nulls before a read): /health adds no round trip.
func (s *Server) schemaVersions() *gen.SchemaVersions {
	broker, _ := engine.SchemaVersion() // fails only for a misnamed embedded file, which the boot refuses
	out := &gen.SchemaVersions{Broker: broker}
	if s.opts.SchemaState == nil {
		return out
	}
	if state, read := s.opts.SchemaState(); read {
		out.Recorded, out.MinBroker, out.MinBrokerRaisedBy = &state.Recorded, &state.MinBrokerVersion, &state.MinBrokerVersionRaisedBy
		out.ReadAt = utcOrNil(state.ReadAt)
	}
	return out
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
