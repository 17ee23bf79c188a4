package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lanesmq/lanes/server/internal/api/gen"
	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/failurelog"
)

// writeError writes the JSON error envelope {error, code}.
func writeError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(gen.Error{Error: message, Code: code})
}

// writeErrorFor is writeError for a request's own failure (a handler's error, a
// panic). DLQ replay and message retry declare their failure answers as
// DlqReplayError, which requires success and result, so there the envelope
// also says success:false and result:"failed": a generated client parses every
// failure of those routes as the one type.
func writeErrorFor(w http.ResponseWriter, r *http.Request, status int, code, message string) {
	if !answersReplayOutcome(r) {
		writeError(w, status, code, message)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(gen.DlqReplayError{Error: message, Code: code, Success: false, Result: gen.DlqReplayErrorResultFailed})
}

// answersReplayOutcome reports the routes whose failures carry the replay
// outcome fields: POST /api/v1/dlq/{id}/replay and
// POST /api/v1/messages/{partitionId}/{transactionId}/retry.
func answersReplayOutcome(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	p := r.URL.EscapedPath()
	switch {
	case strings.HasPrefix(p, "/api/v1/dlq/") && strings.HasSuffix(p, "/replay"):
		return strings.Count(p, "/") == 5
	case strings.HasPrefix(p, "/api/v1/messages/") && strings.HasSuffix(p, "/retry"):
		return strings.Count(p, "/") == 6
	}
	return false
}

// errorResponder maps errors escaping a handler to status codes.
type errorResponder struct {
	// unavailable logs requests failing for want of the database, databaseErrors
	// those PostgreSQL answered with another error, and otherErrors the rest:
	// each the first at once, then once a minute with the count, so an outage
	// or a stream of bad requests does not write a line per request.
	unavailable, databaseErrors, otherErrors *failurelog.Reporter
}

func (e errorResponder) requestError(w http.ResponseWriter, r *http.Request, err error) {
	code := CodeInvalidJSON
	switch {
	case routeFamilyCode(r.URL.Path) != "":
		code = routeFamilyCode(r.URL.Path)
	case errors.Is(err, errBodyNotUTF8):
		code = CodeBadRequest
	case riderCode(r.URL.Path, topField(jsonTypeErrorField(err))) != "":
		code = riderCode(r.URL.Path, topField(jsonTypeErrorField(err)))
	case isWrongJSONType(err):
		code = CodeValidation
	}
	message := err.Error()
	if field, number, lo, hi, ok := integerOutOfRange(err); ok {
		message = fmt.Sprintf("%s must be an integer from %d to %d, not %s", field, lo, hi, number)
	}
	writeError(w, http.StatusBadRequest, code, "bad body: "+message)
}

// integerOutOfRange finds a JSON number an integer field cannot hold (a KV
// delta past int64, a fraction) in a decode error, whose own words name Go
// types ("into Go struct field KvBatchRequest.operations.0.delta of type
// int"); it gives the field's path, the number as sent, and the range.
func integerOutOfRange(err error) (field, number string, lo, hi int64, ok bool) {
	var stdType *json.UnmarshalTypeError
	var goccyType *gojson.UnmarshalTypeError
	var value string
	var typ reflect.Type
	switch {
	case errors.As(err, &stdType):
		value, typ, field = stdType.Value, stdType.Type, stdType.Field
	case errors.As(err, &goccyType):
		value, typ, field = goccyType.Value, goccyType.Type, goccyType.Field
	default:
		return "", "", 0, 0, false
	}
	number, isNumber := strings.CutPrefix(value, "number ")
	if !isNumber || typ == nil || field == "" {
		return "", "", 0, 0, false
	}
	switch typ.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := typ.Bits()
		return field, number, -1 << (bits - 1), 1<<(bits-1) - 1, true
	}
	return "", "", 0, 0, false
}

// jsonTypeErrorField is the dotted path of the field a JSON type error is
// about ("kv.0.delta"), or "".
func jsonTypeErrorField(err error) string {
	var stdType *json.UnmarshalTypeError
	var goccyType *gojson.UnmarshalTypeError
	switch {
	case errors.As(err, &stdType):
		return stdType.Field
	case errors.As(err, &goccyType):
		return goccyType.Field
	}
	return ""
}

// topField is the first element of a dotted field path.
func topField(field string) string {
	top, _, _ := strings.Cut(field, ".")
	return top
}

// isWrongJSONType reports a body that is valid JSON but holds a value of the
// wrong type for its field (a number for a queue name, a string for the items
// array, a date-time that does not parse). The routes whose bodies skip the
// spec validator (push, ack, ack batch: isHotPathBody) meet it in the decoder;
// it answers validation_failed, as the validator answers the same fault on
// every other route, and only malformed JSON answers invalid_json.
func isWrongJSONType(err error) bool {
	var stdType *json.UnmarshalTypeError
	var goccyType *gojson.UnmarshalTypeError
	var badTime *time.ParseError
	return errors.As(err, &stdType) || errors.As(err, &goccyType) || errors.As(err, &badTime)
}

func (e errorResponder) responseError(w http.ResponseWriter, r *http.Request, err error) {
	var invalid *engine.InvalidInputError
	var corrupt *engine.CorruptSegmentError
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &invalid):
		writeErrorFor(w, r, http.StatusBadRequest, CodeBadRequest, invalid.Message)
	case errors.Is(err, engine.ErrNotFound):
		writeErrorFor(w, r, http.StatusNotFound, CodeNotFound, err.Error())
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads this.
		w.WriteHeader(499)
	case engine.IsUnreachable(err) || errors.Is(err, context.DeadlineExceeded):
		// A PostgreSQL restart or outage, never the request's fault.
		e.unavailable.Failed(err, "path", r.URL.Path)
		writeErrorFor(w, r, http.StatusInternalServerError, CodeDatabase, "pool: database unavailable")
	case errors.As(err, &corrupt):
		// The engine logged it, with the offsets the answer leaves out.
		writeErrorFor(w, r, http.StatusInternalServerError, CodeCorruptSegment, corrupt.Error())
	case errors.As(err, &pgErr):
		e.databaseErrors.Failed(err, "path", r.URL.Path)
		writeErrorFor(w, r, http.StatusInternalServerError, CodeInternal, "database error: "+pgErr.Message)
	default:
		e.otherErrors.Failed(err, "path", r.URL.Path)
		writeErrorFor(w, r, http.StatusInternalServerError, CodeInternal, err.Error())
	}
}
