package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
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

// leaseExtendBody rewrites the body of a lease extension to {"seconds":N}. The
// reference renews whatever the body holds (absent, empty, not JSON, null or a
// seconds that is no number: 60 s), where the generated binder and the
// validator answered 400 and a renew loop let its lease lapse.
func leaseExtendBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/api/v1/lease/") && strings.HasSuffix(r.URL.Path, "/extend") {
			var raw []byte
			if r.Body != nil {
				raw, _ = io.ReadAll(r.Body) // limitBody has already read and capped it
			}
			body := []byte(`{"seconds":` + strconv.Itoa(leaseExtensionSeconds(raw)) + `}`)
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			r.Header.Set("Content-Type", "application/json")
		}
		next.ServeHTTP(w, r)
	})
}

// leaseExtensionSeconds reads seconds from a lease-extension body: 60 when
// there is no usable number, else rounded up and kept within 1 and
// engine.MaxLeaseSeconds (a huge value overflowed the lease column: 500).
func leaseExtensionSeconds(raw []byte) int {
	var body struct {
		Seconds *float64 `json:"seconds"`
	}
	if json.Unmarshal(raw, &body) != nil || body.Seconds == nil {
		return defaultLeaseExtension
	}
	return int(min(max(math.Ceil(*body.Seconds), 1), engine.MaxLeaseSeconds))
}
