package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// limitBody reads every request body whole, under the body read deadline
// and the size cap, before admission and the handlers see it: a client that
// stalls part-way through its body then holds a goroutine and the bytes it
// sent, never an admission slot or a database connection. A body over the cap
// answers 413, one that does not arrive in time 408.
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > s.opts.MaxBodyBytes {
			writeError(w, http.StatusRequestEntityTooLarge, CodePayloadTooLarge,
				fmt.Sprintf("request body is %d bytes; the limit is %d (LANES_MAX_BODY_BYTES)", r.ContentLength, s.opts.MaxBodyBytes))
			return
		}
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		// Push and ack bodies are read into a pooled buffer: neither the
		// validator nor the handler keeps them (the decoder copies what it
		// keeps), and a fresh buffer per body was 9% of the broker's
		// allocations under pop + ack. Other bodies stay in the request
		// context for rawBody, so they get their own buffer.
		hot := isHotPathBody(r)
		buf := new(bytes.Buffer)
		if hot {
			buf = takeBuffer()
			defer giveBuffer(buf)
		}
		if !s.receiveBody(w, r, buf) {
			return
		}
		body := buf.Bytes()
		setJSONContentType(r)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if hot {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), rawBodyKey{}, body)))
	})
}

// bodyPrealloc bounds the buffer reserved from a declared Content-Length
// before the bytes arrive, so a client that declares a large body and stalls
// pins no more than what it sent; larger bodies grow the buffer as they come.
const bodyPrealloc = 64 << 10

// receiveBody reads r's body into buf, up to one byte past the cap, and
// reports whether it did; if not, it has answered. The connection's read
// deadline is BodyReadTimeout from now while it reads, and is left passed
// after a timeout, so the connection closes once the 408 is written.
func (s *Server) receiveBody(w http.ResponseWriter, r *http.Request, buf *bytes.Buffer) bool {
	deadlines := http.NewResponseController(w)
	if s.opts.BodyReadTimeout > 0 {
		// Writers that cannot set deadlines (test recorders) read without one.
		_ = deadlines.SetReadDeadline(time.Now().Add(s.opts.BodyReadTimeout))
	}
	if r.ContentLength > 0 {
		buf.Grow(int(min(r.ContentLength, bodyPrealloc)) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(io.LimitReader(r.Body, s.opts.MaxBodyBytes+1))
	var netErr net.Error
	switch {
	case errors.As(err, &netErr) && netErr.Timeout():
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestTimeout, CodeRequestTimeout,
			fmt.Sprintf("request body not received within %s (LANES_BODY_READ_TIMEOUT_MS)", s.opts.BodyReadTimeout))
		return false
	case err != nil:
		writeError(w, http.StatusBadRequest, CodeBadRequest, "reading body: "+err.Error())
		return false
	}
	if s.opts.BodyReadTimeout > 0 {
		_ = deadlines.SetReadDeadline(time.Time{})
	}
	if int64(buf.Len()) > s.opts.MaxBodyBytes {
		writeBodyTooLarge(w, s.opts.MaxBodyBytes)
		return false
	}
	return true
}

// writeBodyTooLarge answers a body found past the cap while it was read. Like
// the 400s of the other caps, it names the setting to raise.
func writeBodyTooLarge(w http.ResponseWriter, limit int64) {
	writeError(w, http.StatusRequestEntityTooLarge, CodePayloadTooLarge,
		fmt.Sprintf("request body exceeds the limit of %d bytes (LANES_MAX_BODY_BYTES)", limit))
}

// setJSONContentType has the body parsed as JSON whatever the Content-Type
// says (set only when it differs: Set allocates, on every request).
func setJSONContentType(r *http.Request) {
	if r.Header.Get("Content-Type") != "application/json" {
		r.Header.Set("Content-Type", "application/json")
	}
}

type rawBodyKey struct{}

// rawBody returns the request body bytes for handlers that need more than the
// generated types keep (absent versus null in configure).
func rawBody(ctx context.Context) []byte {
	b, _ := ctx.Value(rawBodyKey{}).([]byte)
	return b
}
