package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	middleware "github.com/oapi-codegen/nethttp-middleware"

	"github.com/lanesmq/lanes/server/internal/api/gen"
)

// isHotPathBody exempts the push and ack bodies from schema validation (and so
// from rawBody, which limitBody fills for the validator and handlers): walking
// every item against the schema cost a third of the broker's CPU on push and a
// fifth on ack. Their handlers enforce the same rules (required fields checked
// in push.go and ack.go; field types by the JSON decoder, which answers 400).
// Both routes take no parameters the validator would otherwise check.
func isHotPathBody(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	switch r.URL.Path {
	case "/api/v1/push", "/api/v1/ack", "/api/v1/ack/batch":
		return true
	}
	return false
}

// validationError answers a request the spec validator refused; one for a
// method the path does not serve goes to methodNotAllowed.
func validationError(methodNotAllowed http.Handler, listAfter *openapi3.Parameter) func(context.Context, error, http.ResponseWriter, *http.Request, middleware.ErrorHandlerOpts) {
	return func(_ context.Context, err error, w http.ResponseWriter, r *http.Request, opts middleware.ErrorHandlerOpts) {
		if opts.MatchedRoute == nil {
			if strings.Contains(err.Error(), "no matching operation") {
				writeError(w, http.StatusNotFound, CodeNoSuchRoute, "Not Found")
				return
			}
			if strings.Contains(err.Error(), "method not allowed") {
				methodNotAllowed.ServeHTTP(w, r)
				return
			}
		}
		specRefused(w, r, err, opts, listAfter)
	}
}

func specRefused(w http.ResponseWriter, r *http.Request, err error, opts middleware.ErrorHandlerOpts, listAfter *openapi3.Parameter) {
	if refused := listAfterRefusal(r, err, listAfter); refused != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, refused.Error())
		return
	}
	if isDlqPurgeWithoutQueue(err, opts) {
		writeError(w, http.StatusBadRequest, CodeQueueRequired, "queue is required")
		return
	}
	if option, message := configureOptionFault(r, err); option != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(gen.ConfigureError{Error: message, Code: CodeInvalidOption, Invalid: &option})
		return
	}
	status := opts.StatusCode
	if status < 400 {
		status = http.StatusBadRequest
	}
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		status = http.StatusBadRequest
	}
	var reqErr *openapi3filter.RequestError
	msg := err.Error()
	if errors.As(err, &reqErr) {
		msg = describeRequestError(reqErr)
	}
	writeError(w, status, validationCode(r.URL.Path, status, err), msg)
}

// validationCode is the code of a request the spec refuses. The KV and timers
// routes answer every bad request with their family's code, as the reference
// does (http-api-v1.md §1.14, §1.15), whether the spec or the handler found
// it, and so do a transaction's kv and timers parts, except a KV ttlSeconds
// below 1 (kv_expiry_not_specified); the rest answers validation_failed.
func validationCode(path string, status int, err error) string {
	if status != http.StatusBadRequest {
		return CodeValidation
	}
	if isKVTTLBelowOne(path, err) {
		return CodeKVExpiryNotSpecified
	}
	if family := routeFamilyCode(path); family != "" {
		return family
	}
	if code := bodyFaultCode(err); code != "" {
		return code
	}
	var schemaErr *openapi3.SchemaError
	if errors.As(err, &schemaErr) {
		if field := schemaErr.JSONPointer(); len(field) > 0 {
			if code := riderCode(path, field[0]); code != "" {
				return code
			}
		}
	}
	return CodeValidation
}

// isKVTTLBelowOne reports the spec's refusal of a KV ttlSeconds below 1, on the KV routes or in a
// transaction's kv part. Such a ttl is no expiry, and a write without exactly one of
// ttlSeconds (> 0) or forever:true answers kv_expiry_not_specified (http-api-v1.md §1.14),
// the code a client already matches when it sent neither.
func isKVTTLBelowOne(path string, err error) bool {
	var schemaErr *openapi3.SchemaError
	if !errors.As(err, &schemaErr) || schemaErr.SchemaField != "minimum" {
		return false
	}
	field := schemaErr.JSONPointer()
	if len(field) == 0 || field[len(field)-1] != "ttlSeconds" {
		return false
	}
	return routeFamilyCode(path) == CodeKVBadRequest || riderCode(path, field[0]) == CodeKVBadRequest
}

// riderCode is the family code of a fault in a transaction's kv or timers
// part, named by the first element of the faulty field's path, or "".
func riderCode(path, topField string) string {
	if path != "/api/v1/transaction" {
		return ""
	}
	switch topField {
	case "kv":
		return CodeKVBadRequest
	case "timers":
		return CodeTimersBadRequest
	}
	return ""
}

// routeFamilyCode is the code every 400 of the KV and timers routes carries
// (kv_bad_request, timers_bad_request), or "" on other routes.
func routeFamilyCode(path string) string {
	switch {
	case path == "/api/v1/kv" || strings.HasPrefix(path, "/api/v1/kv/"):
		return CodeKVBadRequest
	case path == "/api/v1/timers" || strings.HasPrefix(path, "/api/v1/timers/"):
		return CodeTimersBadRequest
	}
	return ""
}

// badRequestCode is the code of a 400 that is no specific code's: the
// route's family code, else bad_request.
func badRequestCode(path string) string {
	if family := routeFamilyCode(path); family != "" {
		return family
	}
	return CodeBadRequest
}

// listAfterParameter is the spec's ListAfter, the after of the listings paged
// by a key: the operations that name it share this value.
func listAfterParameter(spec *openapi3.T) *openapi3.Parameter {
	if spec.Components == nil || spec.Components.Parameters["ListAfter"] == nil {
		return nil
	}
	return spec.Components.Parameters["ListAfter"].Value
}

// listAfterRefusal is the answer to an after the spec's ListAfter refuses (too
// short, or a character outside unpadded base64url): the handler's answer to
// an after that is no key, or to one sent with an offset, whichever layer
// found it. nil for any other fault.
func listAfterRefusal(r *http.Request, err error, listAfter *openapi3.Parameter) error {
	var reqErr *openapi3filter.RequestError
	if listAfter == nil || !errors.As(err, &reqErr) || reqErr.Parameter != listAfter {
		return nil
	}
	if r.URL.Query().Has("offset") {
		return afterWithOffset()
	}
	return badAfter()
}

// isDlqPurgeWithoutQueue reports a DELETE /api/v1/dlq whose queue is absent or
// empty (the spec's minLength), which answers queue_required as the handler
// did before the spec stated it: one condition, one code. (The embedded spec
// spells operation ids capitalized.)
func isDlqPurgeWithoutQueue(err error, opts middleware.ErrorHandlerOpts) bool {
	var reqErr *openapi3filter.RequestError
	return opts.MatchedRoute != nil && opts.MatchedRoute.Route != nil && opts.MatchedRoute.Route.Operation != nil &&
		strings.EqualFold(opts.MatchedRoute.Route.Operation.OperationID, "purgeDlq") &&
		errors.As(err, &reqErr) && reqErr.Parameter != nil && reqErr.Parameter.Name == "queue"
}

// configureOptionFault names the option in a configure body's options object
// whose value the spec refuses, with what is wrong, or returns "". A bad option
// answers invalid_option naming it, as the handler answers one sent at the top
// level (and as the reference answers a bad sink hold), whichever found it.
func configureOptionFault(r *http.Request, err error) (option, message string) {
	var schemaErr *openapi3.SchemaError
	if r.Method != http.MethodPost || r.URL.Path != "/api/v1/configure" || !errors.As(err, &schemaErr) {
		return "", ""
	}
	field := schemaErr.JSONPointer()
	if len(field) < 2 || field[0] != "options" {
		return "", ""
	}
	option = field[1]
	if s := schemaErr.Schema; s != nil && s.Min != nil && s.Max != nil && (schemaErr.SchemaField == "minimum" || schemaErr.SchemaField == "maximum") {
		return option, fmt.Sprintf("%s must be between %d and %d", option, int64(*s.Min), int64(*s.Max))
	}
	return option, option + ": " + schemaErr.Reason
}

// describeRequestError turns a validator error into one readable sentence.
func describeRequestError(e *openapi3filter.RequestError) string {
	var schemaErr *openapi3.SchemaError
	where := "request body"
	if e.Parameter != nil {
		where = "query parameter " + e.Parameter.Name
		if e.Parameter.In == "path" {
			where = "path parameter " + e.Parameter.Name
		}
	}
	var parseErr *openapi3filter.ParseError
	if e.Parameter == nil && errors.As(e.Err, &parseErr) && parseErr.Cause != nil {
		// decodeValidatedBody's finding: say what is wrong with the JSON.
		return "bad body: " + parseErr.Cause.Error()
	}
	if errors.As(e.Err, &schemaErr) {
		field := schemaErr.JSONPointer()
		path := strings.Join(field, ".")
		if path != "" {
			where += " field " + path
		}
		return where + ": " + schemaErr.Reason + kvExpiryHint(field, schemaErr)
	}
	if e.Reason != "" {
		return where + ": " + e.Reason
	}
	return where + ": " + e.Err.Error()
}

// kvExpiryHint completes the refusal of a KV ttlSeconds below 1: a writer that sent 0 most often
// meant "no expiry" (Go's zero time.Duration), which is forever:true on the wire.
func kvExpiryHint(field []string, schemaErr *openapi3.SchemaError) string {
	if len(field) == 0 || field[len(field)-1] != "ttlSeconds" || schemaErr.SchemaField != "minimum" {
		return ""
	}
	return "; a key that never expires takes forever:true instead of ttlSeconds"
}
