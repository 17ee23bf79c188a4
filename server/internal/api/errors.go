package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
)

// Stable error codes on the wire. Clients match on these, never on text.
const (
	CodeBadRequest  = "bad_request"
	CodeInvalidJSON = "invalid_json"
	CodeValidation  = "validation_failed"
	CodeNotFound    = "not_found"
	CodeNoSuchRoute = "no_such_route"
	CodeTooLarge    = "payload_too_large"
	CodeDatabase    = "database_unavailable"
	CodeInternal    = "internal_error"
	CodeMethod      = "method_not_allowed"
)

// writeError writes the JSON error envelope {error, code}.
func writeError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(gen.Error{Error: message, Code: code})
}

// errorResponder maps errors escaping a handler to status codes.
type errorResponder struct{ log *slog.Logger }

func (e errorResponder) requestError(w http.ResponseWriter, r *http.Request, err error) {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		writeBodyTooLarge(w, tooLarge.Limit)
		return
	}
	writeError(w, http.StatusBadRequest, CodeInvalidJSON, "bad body: "+err.Error())
}

func (e errorResponder) responseError(w http.ResponseWriter, r *http.Request, err error) {
	var invalid *engine.InvalidInputError
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &invalid):
		writeError(w, http.StatusBadRequest, CodeBadRequest, invalid.Message)
	case errors.Is(err, engine.ErrNotFound):
		writeError(w, http.StatusNotFound, CodeNotFound, err.Error())
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads this.
		w.WriteHeader(499)
	case errors.As(err, &pgErr):
		e.log.Error("database error", "path", r.URL.Path, "err", err)
		writeError(w, http.StatusInternalServerError, CodeInternal, "database error: "+pgErr.Message)
	default:
		e.log.Error("request failed", "path", r.URL.Path, "err", err)
		if isConnectionError(err) {
			writeError(w, http.StatusInternalServerError, CodeDatabase, "pool: database unavailable")
			return
		}
		writeError(w, http.StatusInternalServerError, CodeInternal, err.Error())
	}
}

// isConnectionError reports failures that mean the database could not be reached.
func isConnectionError(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return false
	}
	var connErr *pgconn.ConnectError
	return errors.As(err, &connErr) || pgconn.SafeToRetry(err) || errors.Is(err, context.DeadlineExceeded)
}
