package api

import (
	"github.com/lanesmq/lanes/server/internal/admission"
	"github.com/lanesmq/lanes/server/internal/engine"
)

// Stable error codes on the wire: the `code` of every JSON error body. Clients
// match on these, never on text, and openapi.yaml's Error.code lists each of
// them (TestEveryErrorCodeIsInTheSpec keeps the two equal). Codes the engine
// or admission decide are defined there and named here.
const (
	// Generic codes, any route.
	CodeBadRequest = "bad_request"
	// net/http's own refusals, before any handler runs (protocolerrors.go).
	CodeHeadersTooLarge         = "headers_too_large"
	CodeNotImplemented          = "not_implemented"
	CodeHTTPVersionNotSupported = "http_version_not_supported"
	CodeInvalidJSON             = "invalid_json"
	CodeValidation              = "validation_failed"
	CodeNotFound                = "not_found"
	CodeNoSuchRoute             = "no_such_route"
	CodeMethod                  = "method_not_allowed"
	CodeUnauthorized            = "unauthorized"
	CodeForbidden               = "forbidden"
	// CodeLimitExceeded answers a request that carries more than a configured cap.
	CodeLimitExceeded   = "limit_exceeded"
	CodePayloadTooLarge = engine.CodePayloadTooLarge
	// CodeRequestTimeout: the body did not arrive within LANES_BODY_READ_TIMEOUT_MS.
	CodeRequestTimeout = "request_timeout"
	CodeRateLimited    = admission.ReasonRateLimited
	CodeOverloaded     = admission.ReasonOverloaded
	CodeDatabase       = "database_unavailable"
	// CodeDatabaseTimeout answers a request whose database work passed its deadline.
	CodeDatabaseTimeout = "database_timeout"
	CodeInternal        = "internal_error"
	// CodeCorruptSegment: stored messages the request reads no longer decode
	// (tampering, or a bug); a pop gave its claim back.
	CodeCorruptSegment = "corrupt_segment"

	// Route-specific codes.
	CodeInvalidOption = "invalid_option"
	CodeQueueNotFound = "queue_not_found"
	// CodeMessageNotFound answers a message address with nothing behind it.
	CodeMessageNotFound = "message_not_found"
	CodeQueueRequired   = "queue_required"
	CodeInvalidID       = "invalid_id"
	CodeGone            = "gone"
	CodeDestinationGone = "destination_gone"
	// CodeMaintenance: a DLQ replay, message retry or transaction bundle with
	// pushes under push maintenance.
	CodeMaintenance = "maintenance"

	CodeKVBadRequest             = engine.CodeKVBadRequest
	CodeKVExpiryNotSpecified     = engine.CodeKVExpiryNotSpecified
	CodeKVPrefixRequired         = engine.CodeKVPrefixRequired
	CodeKVGetPrefixInTransaction = engine.CodeKVGetPrefixInBundle
	CodeKVRiderTooLarge          = engine.CodeKVTooManyOpsInBundle
	CodeTimersBadRequest         = engine.CodeTimersBadRequest
	CodeTimerHorizonExceeded     = engine.CodeTimerHorizonExceeded
)
