package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	gojson "github.com/goccy/go-json"
	"github.com/oapi-codegen/runtime"

	"github.com/lanesmq/lanes/server/internal/api/gen"
)

// Request bodies are decoded with goccy/go-json: on a 100-item push body it
// takes a third of encoding/json's time (push decoding was a third of the
// broker's CPU under load). Other answers are encoded by the generated code
// with encoding/json; the hot ones (pop, push, ack batch) are below.
type requestBodyCodec struct{}

func (requestBodyCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal refuses invalid UTF-8 first: the decoder would turn it into
// U+FFFD in names and keep it verbatim in raw payloads, which then poison the
// pop answers that carry them.
func (requestBodyCodec) Unmarshal(data []byte, v any) error {
	if !utf8.Valid(data) {
		return errBodyNotUTF8
	}
	switch req := v.(type) {
	case *gen.AckBatchRequest:
		if decodePlainAckBatch(data, req) {
			return nil
		}
	case *gen.PushRequest:
		if decodePlainPush(data, req) {
			return nil
		}
	}
	return gojson.Unmarshal(data, v)
}

// errBodyNotUTF8 is a request body that is not UTF-8 text (400 bad_request).
var errBodyNotUTF8 = errors.New("request body is not valid UTF-8")

// errBodyTrailingData is a request body with more after its JSON value.
var errBodyTrailingData = errors.New("request body holds data after its JSON value")

// decodeValidatedBody is the validator's JSON body decoder: one JSON value
// in UTF-8 and nothing after it. kin-openapi's own decoder reads the first
// value and ignores the rest, so {"enabled":true}{"enabled":false} switched
// maintenance on, and it turns invalid UTF-8 into U+FFFD; the handlers bind
// what the validator decoded.
func decodeValidatedBody(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	data, err := io.ReadAll(body) // limitBody already holds the whole body in memory
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(data) {
		return nil, &openapi3filter.ParseError{Kind: openapi3filter.KindInvalidFormat, Cause: errBodyNotUTF8}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var value any
	if err := dec.Decode(&value); err != nil {
		return nil, &openapi3filter.ParseError{Kind: openapi3filter.KindInvalidFormat, Cause: err}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &openapi3filter.ParseError{Kind: openapi3filter.KindInvalidFormat, Cause: errBodyTrailingData}
	}
	return value, nil
}

// bodyFaultCode is the code of a body that is not one JSON value in UTF-8, or
// "" for any other fault.
func bodyFaultCode(err error) string {
	var syntax *json.SyntaxError
	var goccySyntax *gojson.SyntaxError
	switch {
	case errors.Is(err, errBodyNotUTF8):
		return CodeBadRequest
	case errors.Is(err, errBodyTrailingData), errors.Is(err, io.ErrUnexpectedEOF),
		errors.As(err, &syntax), errors.As(err, &goccySyntax):
		return CodeInvalidJSON
	}
	return ""
}

// MarshalWrite writes what Marshal returns, as the runtime does for a codec
// that does not stream (no trailing newline).
func (c requestBodyCodec) MarshalWrite(w io.Writer, v any) error {
	data, err := c.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

// UnmarshalRead decodes a request body through a pooled buffer: the runtime
// otherwise reads each body with io.ReadAll, whose doubling was an eighth of
// the broker's allocations under batch pushes. The decoder copies every
// string and raw payload out of its input, so the buffer can be reused.
func (c requestBodyCodec) UnmarshalRead(r io.Reader, v any) error {
	buf := takeBuffer()
	defer giveBuffer(buf)
	if _, err := buf.ReadFrom(r); err != nil {
		return err
	}
	return c.Unmarshal(buf.Bytes(), v)
}

// bodyBuffers holds the buffers request bodies are decoded from and answers
// encoded into.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBodyBuffer keeps one large body from pinning its buffer in the pool.
const maxPooledBodyBuffer = 1 << 20

func takeBuffer() *bytes.Buffer { return bodyBuffers.Get().(*bytes.Buffer) }

func giveBuffer(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledBodyBuffer {
		buf.Reset()
		bodyBuffers.Put(buf)
	}
}

func init() {
	runtime.SetJSONCodec(requestBodyCodec{})
	openapi3filter.RegisterBodyDecoder("application/json", decodeValidatedBody)
}

// writeJSON writes status and v as encoding/json's Encoder would (the same
// bytes: HTML escaping, compacted raw payloads, trailing newline), encoded by
// goccy/go-json in less than half the time on a 100-message pop. The answer
// is encoded into a pooled buffer and sent with its length: Marshal's copy
// plus the newline's append allocated each answer twice over.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	buf := takeBuffer()
	defer giveBuffer(buf)
	if err := encodeJSON(buf, v); err != nil {
		return err
	}
	return sendJSON(w, status, buf)
}

// encodeJSON is writeJSON's encoding step.
func encodeJSON(buf *bytes.Buffer, v any) error { return gojson.NewEncoder(buf).Encode(v) }

// sendJSON is writeJSON's sending step: the encoded answer with its length.
func sendJSON(w http.ResponseWriter, status int, buf *bytes.Buffer) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, err := w.Write(buf.Bytes())
	return err
}

// popAnswer is the 200 answer of the three pop operations.
type popAnswer gen.PopResponse

func (a popAnswer) VisitPopQueueResponse(w http.ResponseWriter) error {
	return writeJSON(w, http.StatusOK, gen.PopResponse(a))
}

func (a popAnswer) VisitPopPartitionResponse(w http.ResponseWriter) error {
	return writeJSON(w, http.StatusOK, gen.PopResponse(a))
}

func (a popAnswer) VisitPopDiscoverResponse(w http.ResponseWriter) error {
	return writeJSON(w, http.StatusOK, gen.PopResponse(a))
}

// popDelivery is a pop's 200 answer on its way to a client that may leave
// before it is sent: see Server.deliverPop.
type popDelivery struct {
	s   *Server
	r   *http.Request
	pop *gen.PopResponse
}

func (d popDelivery) VisitPopQueueResponse(w http.ResponseWriter) error {
	return d.s.deliverPop(w, d.r, d.pop)
}

func (d popDelivery) VisitPopPartitionResponse(w http.ResponseWriter) error {
	return d.s.deliverPop(w, d.r, d.pop)
}

func (d popDelivery) VisitPopDiscoverResponse(w http.ResponseWriter) error {
	return d.s.deliverPop(w, d.r, d.pop)
}

// ackBatchAnswer is the 200 answer of an ack batch (one result per item; 7 %
// of the broker's CPU on the consume path when encoding/json wrote it).
type ackBatchAnswer gen.AckBatch200JSONResponse

func (a ackBatchAnswer) VisitAckBatchResponse(w http.ResponseWriter) error {
	return writeJSON(w, http.StatusOK, gen.AckBatch200JSONResponse(a))
}
