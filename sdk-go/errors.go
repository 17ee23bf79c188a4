package lanes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Sentinels for errors.Is. An *APIError matches the sentinel of its status.
var (
	// ErrBadRequest matches a 400: the broker refused the request as malformed or invalid
	// (Code says which rule). Not retried; nothing was applied.
	ErrBadRequest = errors.New("lanes: bad request")
	// ErrRateLimited matches a 429 that the retry policy gave up on (hint above the cap, or
	// the 429 budget spent); the *APIError carries RetryAfter.
	ErrRateLimited = errors.New("lanes: rate limited")
	// ErrUnauthorized matches a 401: the bearer token is missing, invalid or expired. Not
	// retried (the same token would be refused again); a consume loop ends on it.
	ErrUnauthorized = errors.New("lanes: unauthorized")
	// ErrForbidden matches a 403: the credential lacks the role. Terminal.
	ErrForbidden = errors.New("lanes: forbidden")
	// ErrPayloadTooLarge matches a 413. Terminal: reshape the request.
	ErrPayloadTooLarge = errors.New("lanes: payload too large")
	// ErrNotFound matches a 404.
	ErrNotFound = errors.New("lanes: not found")
	// ErrConflict matches a 409. Retried only when the answer carries x-should-retry: true.
	ErrConflict = errors.New("lanes: conflict")
	// ErrInternalServer matches a 5xx answer other than 501 that outlived the retries (501 is
	// ErrNotImplemented: a route missing, not a failure that may pass).
	ErrInternalServer = errors.New("lanes: broker error")
	// ErrNotImplemented matches a 501 answer: a proxy, or a broker build without the route.
	ErrNotImplemented = errors.New("lanes: not implemented by the broker")
	// ErrConnection matches a *ConnectionError: no response after the retries.
	ErrConnection = errors.New("lanes: connection failed")
	// ErrTimeout matches a *ConnectionError whose last attempt timed out (WithTimeout, or a
	// transport timeout); it matches ErrConnection too. The caller's own context deadline is
	// context.DeadlineExceeded, as usual.
	ErrTimeout = errors.New("lanes: timed out")
	// ErrOutcomeUnknown matches an *OutcomeUnknownError: a write that is not idempotent may or
	// may not have been applied.
	ErrOutcomeUnknown = errors.New("lanes: outcome unknown")
	// ErrEmptyTransaction is returned by Commit on a bundle without operations or riders.
	ErrEmptyTransaction = errors.New("lanes: transaction has no operations to commit")
	// ErrConsumerStopped is the cause of a handler context canceled by a hard stop.
	ErrConsumerStopped = errors.New("lanes: consumer stopped")
	// ErrNoKVValue is DecodeKV's error for an answer that carries no value, such as a get of a
	// missing key.
	ErrNoKVValue = errors.New("lanes: no KV value to decode")
)

// APIError is a non-2xx answer from the broker after the retry policy gave up.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Code is the stable snake_case code from the body ("" when the body had none).
	Code string
	// Message is the human text from the body, or the status text.
	Message string
	// RetryAfter is the server's delay hint (Retry-After / retry-after-ms), 0 when absent.
	RetryAfter time.Duration
	// Body is the raw response body.
	Body []byte
	// Attempts is how many HTTP attempts the call made before giving up (TS and Python
	// `attempts`).
	Attempts int
}

// Error implements error.
func (e *APIError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("lanes: %d %s: %s", e.Status, e.Code, e.Message)
	}
	return fmt.Sprintf("lanes: %d: %s", e.Status, e.Message)
}

// Is matches the package sentinels by status.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrBadRequest:
		return e.Status == http.StatusBadRequest
	case ErrConflict:
		return e.Status == http.StatusConflict
	case ErrInternalServer:
		return e.Status >= 500 && e.Status != http.StatusNotImplemented
	case ErrRateLimited:
		return e.Status == http.StatusTooManyRequests
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	case ErrForbidden:
		return e.Status == http.StatusForbidden
	case ErrPayloadTooLarge:
		return e.Status == http.StatusRequestEntityTooLarge
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrNotImplemented:
		return e.Status == http.StatusNotImplemented
	}
	return false
}

// Terminal reports whether the error must stop a consume loop: 403 and 413 always, and every
// other 4xx except 429 (docs/consuming.md §4). A push buffer drops a batch on fewer statuses
// (dropsBatch).
func (e *APIError) Terminal() bool {
	return e.Status >= 400 && e.Status < 500 && e.Status != http.StatusTooManyRequests
}

// newAPIError builds the error of an answer; now is the client's clock, which an HTTP-date
// Retry-After is read against, as the retry decision did.
func newAPIError(status int, h http.Header, body []byte, now time.Time) *APIError {
	e := &APIError{Status: status, Body: body}
	var env struct {
		Error any    `json:"error"`
		Code  string `json:"code"`
	}
	if json.Unmarshal(body, &env) == nil {
		e.Code = env.Code
		switch v := env.Error.(type) {
		case string:
			e.Message = v
		case nil:
		default:
			b, _ := json.Marshal(v)
			e.Message = string(b)
		}
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	if d, ok := parseRetryHint(h, now); ok {
		e.RetryAfter = d
	}
	return e
}

// ConnectionError means no response arrived after the retries (refused, reset, timeout).
type ConnectionError struct {
	URL string
	Err error
	// Attempts is how many HTTP attempts the call made (TS's and Python's attempts).
	Attempts int
}

// Error implements error.
func (e *ConnectionError) Error() string {
	return "lanes: connection to " + e.URL + ": " + e.Err.Error()
}

// Unwrap returns the transport error.
func (e *ConnectionError) Unwrap() error { return e.Err }

// Is matches ErrConnection, and ErrTimeout when the last attempt timed out.
func (e *ConnectionError) Is(target error) bool {
	switch target {
	case ErrConnection:
		return true
	case ErrTimeout:
		return e.Timeout()
	}
	return false
}

// Timeout reports whether the last attempt timed out rather than failed to connect or broke off,
// as net.Error does.
func (e *ConnectionError) Timeout() bool {
	var ne interface{ Timeout() bool }
	return errors.Is(e.Err, context.DeadlineExceeded) || (errors.As(e.Err, &ne) && ne.Timeout())
}

// OutcomeUnknownError means a write that is not safe to repeat (a KV incr, putIfAbsent or
// conditional write, a KV batch or transaction holding one and no push) failed after it was
// sent: a timeout, a reset or a 408/5xx answer. The broker may have applied it, so the SDK did
// not resend it; read the state to find out (docs/retries.md §5).
type OutcomeUnknownError struct {
	// Attempts is how many HTTP attempts the call made.
	Attempts int
	// Err is the failure of the last attempt: a *ConnectionError or an *APIError.
	Err error
}

// Error implements error.
func (e *OutcomeUnknownError) Error() string {
	return "lanes: outcome unknown (not retried, the write is not idempotent): " + e.Err.Error()
}

// Unwrap returns the last attempt's failure, so errors.Is(err, ErrConnection) and
// errors.As(err, &apiErr) still see it.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// Is matches ErrOutcomeUnknown.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// ItemError describes one push item that the broker reported as failed.
type ItemError struct {
	Index         int
	TransactionID string
	Status        string
	Message       string
}

// PushError is returned with the results when at least one pushed item has status `failed`.
// Retrying those items with the same transaction ids is safe.
type PushError struct {
	Items []ItemError
}

// Error implements error.
func (e *PushError) Error() string {
	parts := make([]string, 0, len(e.Items))
	for _, it := range e.Items {
		parts = append(parts, fmt.Sprintf("#%d %s: %s", it.Index, it.TransactionID, it.Message))
	}
	return fmt.Sprintf("lanes: %d push item(s) failed: %s", len(e.Items), strings.Join(parts, "; "))
}

// ErrClientClosed is returned by a push into a buffer after Client.Close: a closed client
// starts no new buffered work, since nothing would flush it. Direct calls keep working.
var ErrClientClosed = errors.New("lanes: client is closed")

// InvalidItemError means an item cannot be encoded (its Data does not marshal to JSON, or a
// json.RawMessage is not valid JSON). Nothing of the call was sent or buffered.
type InvalidItemError struct {
	// Index is the item's position in the call.
	Index int
	Err   error
}

// Error implements error.
func (e *InvalidItemError) Error() string {
	return fmt.Sprintf("lanes: push item #%d cannot be encoded: %v", e.Index, e.Err)
}

// Unwrap returns the encoding error.
func (e *InvalidItemError) Unwrap() error { return e.Err }

// UnexpectedAnswerError means the broker answered 2xx with a body the SDK cannot use: not the
// JSON the route answers, or a result count that does not match the request (a proxy or a
// broker of another version in the way). The request may have been applied: a push resent with
// the same transaction ids deduplicates, so it is safe to push the items again; it is not a
// PushError, since no item is known to have failed.
type UnexpectedAnswerError struct {
	// Status is the HTTP status of an answer that could not be decoded (0 for a count mismatch).
	Status int
	// Message says what did not match.
	Message string
	// Body is the raw answer when it could not be decoded.
	Body []byte
	// Err is the decoding error, if any.
	Err error
}

// Error implements error.
func (e *UnexpectedAnswerError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("lanes: unexpected answer: %s: %v", e.Message, e.Err)
	}
	return "lanes: unexpected answer: " + e.Message
}

// Unwrap returns the decoding error.
func (e *UnexpectedAnswerError) Unwrap() error { return e.Err }

// InvalidKVValueError means a KV value cannot be encoded to JSON (a NaN, a channel, a func...).
// Nothing was sent: KV.Put and its siblings return it, and so do KV.Batch and Commit for an op
// built by KVPut, KVPutIfAbsent or KVPutExpect.
type InvalidKVValueError struct {
	// Index is the op's position in the batch or the transaction's kv rider (0 for a single put).
	Index int
	Key   string
	Err   error
}

// Error implements error.
func (e *InvalidKVValueError) Error() string {
	return fmt.Sprintf("lanes: kv[%d] value of key %q cannot be encoded: %v", e.Index, e.Key, e.Err)
}

// Unwrap returns the encoding error.
func (e *InvalidKVValueError) Unwrap() error { return e.Err }

// DroppedError is what a buffer's OnError receives when it gives up on items: the broker
// refused each of them alone (400, 413) or refused the batch with 403. One flush reports all
// its dropped items in one DroppedError. Items can be pushed again once the cause is fixed
// (same transaction ids, so a retry deduplicates).
type DroppedError struct {
	Items []Item
	// Err is the broker's answer to the first refused item (an *APIError).
	Err error
}

// Error implements error.
func (e *DroppedError) Error() string {
	return fmt.Sprintf("lanes: buffer dropped %d item(s): %v", len(e.Items), e.Err)
}

// Unwrap returns the broker's answer.
func (e *DroppedError) Unwrap() error { return e.Err }

// AutoAckDroppedError is what OnError receives (or the warning log shows) when a consume loop or
// iterator under ServerAutoAck(true) drops messages it popped without handing them over: a hard
// stop, a canceled context, or an iterator left early. The broker committed them on delivery, so
// they will not be redelivered.
type AutoAckDroppedError struct {
	Count int
}

// Error implements error.
func (e *AutoAckDroppedError) Error() string {
	return fmt.Sprintf("lanes: %d message(s) popped under server auto-ack dropped unhandled (already committed, not redelivered)", e.Count)
}

// UnsentError is returned by Buffer.Flush, Client.FlushAll and Client.Close when ctx ended
// before every buffered item was sent. The items stay in their buffers: another Flush or Close
// may still send them.
type UnsentError struct {
	Unsent int
	// Err is the context's error.
	Err error
}

// Error implements error.
func (e *UnsentError) Error() string {
	return fmt.Sprintf("lanes: %d buffered item(s) unsent: %v", e.Unsent, e.Err)
}

// Unwrap returns the context's error.
func (e *UnsentError) Unwrap() error { return e.Err }

// AckError is returned with the results when at least one ack item answered success:false.
type AckError struct {
	Items []AckResult
}

// Error implements error.
func (e *AckError) Error() string {
	parts := make([]string, 0, len(e.Items))
	for _, it := range e.Items {
		msg := ""
		if it.Error != nil {
			msg = *it.Error
		}
		parts = append(parts, fmt.Sprintf("#%d %s: %s", it.Index, it.TransactionID, msg))
	}
	return fmt.Sprintf("lanes: %d ack(s) not applied: %s", len(e.Items), strings.Join(parts, "; "))
}

// Transaction rollback reasons (the closed set of TransactionError.Reason).
const (
	ReasonBadRequest           = "bad_request"
	ReasonDuplicate            = "duplicate"
	ReasonAckRejected          = "ack_rejected"
	ReasonKVPrecondition       = "kv_precondition"
	ReasonTimerHorizonExceeded = "timer_horizon_exceeded"
	ReasonPayloadTooLarge      = "payload_too_large"
	ReasonMisaligned           = "misaligned"
	ReasonDBError              = "db_error"
)

// TransactionError means the broker rolled the bundle back (success:false): nothing committed.
type TransactionError struct {
	// Reason is the closed rollback taxonomy (Reason* constants).
	Reason string
	// Message is the broker's human text.
	Message string
	// Attempts is how many HTTP attempts the commit took; a ReasonDuplicate with Attempts > 1
	// usually means an earlier attempt committed and its response was lost.
	Attempts int
	// FailedIndex, KVReason, Version and Value are set on ReasonKVPrecondition.
	FailedIndex *int
	KVReason    string
	Version     *int
	Value       json.RawMessage
	// Result is the decoded body.
	Result *TransactionResult
}

// Error implements error.
func (e *TransactionError) Error() string {
	return "lanes: transaction rolled back (" + e.Reason + "): " + e.Message
}

// HandlerPanicError wraps a panic recovered from a consume handler; the message is nacked.
type HandlerPanicError struct {
	Value any
	Stack []byte
}

// Error implements error.
func (e *HandlerPanicError) Error() string {
	return fmt.Sprintf("lanes: handler panicked: %v", e.Value)
}

// HandlerError is what OnError receives, under ReportHandlerErrors(true), when a handler returns
// an error or panics: the messages it was given (the one message of Consume, the partition slice
// of ConsumeBatch) and its own error (Err; a *HandlerPanicError for a panic), which errors.Is and
// errors.As still reach. Error names the transaction ids, queue and partition, never a payload.
// The message's `failed` ack (and its dead letter's errorMessage) carries Err's text alone.
type HandlerError struct {
	Messages []*Message
	Err      error
}

// Error implements error.
func (e *HandlerError) Error() string {
	return "lanes: handler failed on " + describeMessages(e.Messages) + ": " + e.Err.Error()
}

// Unwrap returns the handler's own error.
func (e *HandlerError) Unwrap() error { return e.Err }

// maxNamedTransactions caps the transaction ids an error's text names, so a large batch's line
// stays readable; the error's Messages hold them all.
const maxNamedTransactions = 5

// describeMessages names messages by transaction id, queue and partition (all of one partition in a
// batch slice): `transaction t1 (queue "q", partition "p")` or `3 messages, transactions t1, t2, t3
// (…)`.
func describeMessages(ms []*Message) string {
	if len(ms) == 0 {
		return "no message"
	}
	ids := make([]string, 0, min(len(ms), maxNamedTransactions))
	for _, m := range ms[:min(len(ms), maxNamedTransactions)] {
		ids = append(ids, m.TransactionID)
	}
	named := strings.Join(ids, ", ")
	if more := len(ms) - len(ids); more > 0 {
		named += fmt.Sprintf(" and %d more", more)
	}
	where := fmt.Sprintf("(queue %q, partition %q)", ms[0].Queue, ms[0].Partition)
	if len(ms) == 1 {
		return "transaction " + named + " " + where
	}
	return fmt.Sprintf("%d messages, transactions %s %s", len(ms), named, where)
}

// InvalidNameError is what Buffer.Push, Pop, Consume and Messages answer when the queue or
// partition name is one the broker refuses (empty, "." or "..", a NUL byte, invalid UTF-8, over
// 512 bytes), before anything is sent: nothing is buffered, since every item would only be
// dropped, and no pop goes out. Every call that takes a consumer group answers it for a group
// name of only white space (and, where the route names the group, an empty one), and every
// call that puts a name in its URL path answers it for "." or "..".
type InvalidNameError struct {
	// Field is "queue", "partition" or "group", or the path's other name ("key", "namespace",
	// "partitionId", …).
	Field  string
	Name   string
	Reason string
}

// Error implements error.
func (e *InvalidNameError) Error() string {
	return fmt.Sprintf("lanes: %s name %q %s", e.Field, e.Name, e.Reason)
}
