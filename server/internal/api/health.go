package api

import (
	"context"

	"github.com/lanesmq/lanes/server/internal/api/gen"
)

const engineName = "lanes-segments"

// GetHealth is readiness: a real database round trip, 503 when it fails, and
// 503 while the schema is not applied yet on a database that answers.
func (s *Server) GetHealth(ctx context.Context, _ gen.GetHealthRequestObject) (gen.GetHealthResponseObject, error) {
	engineLabel, version := engineName, s.opts.Version
	if err := s.engine.Ping(ctx); err != nil {
		return gen.GetHealth503JSONResponse{Status: "unhealthy", Database: "disconnected", Engine: engineLabel, Version: version}, nil
	}
	if !s.schemaReady() {
		return gen.GetHealth503JSONResponse{Status: "unhealthy", Database: "schema not applied", Engine: engineLabel, Version: version}, nil
	}
	return gen.GetHealth200JSONResponse{Status: "healthy", Database: "connected", Engine: engineLabel, Version: version}, nil
}

// GetLiveness is liveness: it never touches the database.
func (s *Server) GetLiveness(context.Context, gen.GetLivenessRequestObject) (gen.GetLivenessResponseObject, error) {
	engineLabel := engineName
	return gen.GetLiveness200JSONResponse{Status: "ok", Engine: engineLabel}, nil
}
