package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"time"

	"github.com/lanesmq/lanes/server/internal/admission"
)

// limitBody reads every request body whole, under the body read deadline
// and the size cap, before the admission classes and the handlers see it (the
// client's token bucket runs first, so a limited client is refused before its
// body takes room): a client that stalls part-way through its body then holds
// a goroutine and the bytes it sent, never an admission slot or a database
// connection. A body over the cap answers 413, one that does not arrive in
// time 408. An operation that declares no request body is capped at
// ignoredBodyLimit instead. A request for no operation at all is answered
// 404 or 405 by the router with its body unread: that answer, not a 413,
// tells the client what it got wrong.
func (s *Server) limitBody(next http.Handler, bodyOf func(*http.Request) routeBody) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		route := bodyOf(r)
		if route == noRoute {
			closeUnread(w)
			r.Body = http.NoBody
			next.ServeHTTP(w, r)
			return
		}
		limit := s.bodyLimit(r, route)
		if r.ContentLength > limit.bytes {
			closeUnread(w)
			writeError(w, http.StatusRequestEntityTooLarge, CodePayloadTooLarge,
				fmt.Sprintf("request body is %d bytes; the limit is %d (%s)", r.ContentLength, limit.bytes, limit.why))
			return
		}
		if budget := s.opts.BodyBudget; budget != nil {
			// After the pooled buffer is given back: it holds the bytes until then.
			defer releaseAfterPop(r, s.reserveBody(r, budget, limit.bytes))
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
		if !s.receiveBody(w, r, buf, limit) {
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

// ignoredBodyLimit is the most body an operation that declares none accepts:
// room for the "{}" some clients send with every POST or DELETE, while a
// large body sent to a GET is refused from its length or its first bytes
// rather than read whole and thrown away.
const ignoredBodyLimit = 4 << 10

// bodyLimit is the cap on one request's body and what names it in a 413.
type bodyLimit struct {
	bytes int64
	why   string
}

func (s *Server) bodyLimit(r *http.Request, route routeBody) bodyLimit {
	if !isHotPathBody(r) && route == routeWithoutBody {
		return bodyLimit{ignoredBodyLimit, r.Method + " " + r.URL.Path + " takes no request body"}
	}
	return bodyLimit{s.opts.MaxBodyBytes, "LANES_MAX_BODY_BYTES"}
}

// reserveBody has r's body take room in the budget as its bytes arrive, a
// step ahead of them, charged to its client (clientKey): a sender that stalls
// holds what it sent plus one step, never the length it declared, and never
// more than its client's share, so it delays nobody but itself. Taking the
// declared length up front let two requests that sent one byte each fill the
// budget until their read deadline. A step is taken only while the rest of
// the body fits beside the bodies being read (admission.BodyRoom.Grow), so a
// burst always serves some of its bodies. A body without a length may be as
// large as the cap, and is counted so: counting less would let a burst of
// them fill the budget with parts none can finish. It returns the release of
// the room taken.
func (s *Server) reserveBody(r *http.Request, budget *admission.ByteBudget, limit int64) (release func()) {
	if r.ContentLength >= 0 {
		limit = r.ContentLength
	}
	grown := &growingReservation{room: budget.Body(clientKey(r), limit), ctx: r.Context(), body: r.Body, limit: limit}
	r.Body = grown
	return grown.room.Release
}

// writeBodyRejected answers a body refused for want of budget room. Its bytes
// were never read, so the connection closes rather than draining them.
func writeBodyRejected(w http.ResponseWriter, err error) {
	closeUnread(w)
	writeRejected(w, err)
}

// closeUnread has the connection close right after the answer, the rest of
// the body unread: net/http drains a declared body of up to 256 KiB after the
// handler, without a deadline, so a client that never sent it held the
// connection and its goroutine for ever. An expired read deadline ends that
// drain at once.
func closeUnread(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
}

// boundUnreadBody bounds the wait for r's body after a refusal that came
// before it was read (authentication, the client's rate). net/http reads a
// body of up to 256 KiB before writing the refusal, to keep the connection;
// without a deadline a client that never sent its body got no answer and held
// the connection for ever. Past BodyReadTimeout the refusal is written and the
// connection closes, as for a body the broker reads.
func (s *Server) boundUnreadBody(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || s.opts.BodyReadTimeout <= 0 {
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.opts.BodyReadTimeout))
}

// bodyReserveStep is how much room a body takes at a time.
const bodyReserveStep = 256 << 10

// growingReservation reads a body, taking budget room a step ahead of the
// bytes it lets through, up to limit (its declared length, else the size cap,
// past which it answers 413 anyway).
type growingReservation struct {
	room  admission.BodyRoom
	ctx   context.Context
	body  io.ReadCloser
	limit int64
	read  int64
}

func (g *growingReservation) Read(p []byte) (int, error) {
	held := g.room.Held()
	if g.read == held && held < g.limit {
		step := min(bodyReserveStep, g.limit-held)
		if !g.room.TryGrow(step) {
			if err := g.waitForRoom(step); err != nil {
				return 0, err
			}
		}
		held += step
	}
	if room := held - g.read; room > 0 && int64(len(p)) > room {
		p = p[:room]
	}
	n, err := g.body.Read(p)
	g.read += int64(n)
	if err == io.EOF {
		g.room.Received()
	}
	return n, err
}

func (g *growingReservation) Close() error { return g.body.Close() }

// waitForRoom waits for step more bytes of room (admission.BodyRoom.Grow),
// and stops waiting, giving the room back, if the client hangs up meanwhile:
// otherwise it would wait out its wait and hold up the bodies behind it.
func (g *growingReservation) waitForRoom(step int64) error {
	ctx, hungUp := context.WithCancelCause(g.ctx)
	defer hungUp(nil)
	go watchForHangUp(ctx, hungUp)
	err := g.room.Grow(ctx, step)
	if err != nil && errors.Is(context.Cause(ctx), errClientHungUp) {
		return errClientHungUp
	}
	return err
}

// bodyPrealloc bounds the buffer reserved from a declared Content-Length
// before the bytes arrive, so a client that declares a large body and stalls
// pins no more than what it sent; larger bodies grow the buffer as they come.
const bodyPrealloc = 64 << 10

// receiveBody reads r's body into buf, up to one byte past the cap, and
// reports whether it did; if not, it has answered. The connection's read
// deadline is BodyReadTimeout from now while it reads, and is left passed
// after a timeout, so the connection closes once the 408 is written.
func (s *Server) receiveBody(w http.ResponseWriter, r *http.Request, buf *bytes.Buffer, limit bodyLimit) bool {
	deadlines := http.NewResponseController(w)
	if s.opts.BodyReadTimeout > 0 {
		// Writers that cannot set deadlines (test recorders) read without one.
		_ = deadlines.SetReadDeadline(time.Now().Add(s.opts.BodyReadTimeout))
	}
	ceiling := limit.bytes
	if r.ContentLength >= 0 {
		ceiling = min(r.ContentLength, limit.bytes)
	}
	// One byte past the cap tells a body over it; the largest cap has no byte past it.
	if ceiling < math.MaxInt64 {
		ceiling++
	}
	err := readBounded(buf, r.Body, int(ceiling))
	if _, noRoom := admission.IsRejected(err); noRoom {
		writeBodyRejected(w, err)
		return false
	}
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
	if int64(buf.Len()) > limit.bytes {
		// Like the 400s of the other caps, it names the setting to raise. The
		// connection closes: net/http would otherwise read on, to drain the rest.
		closeUnread(w)
		writeError(w, http.StatusRequestEntityTooLarge, CodePayloadTooLarge,
			fmt.Sprintf("request body exceeds the limit of %d bytes (%s)", limit.bytes, limit.why))
		return false
	}
	return true
}

// readBounded reads body into buf until EOF or ceiling bytes. The buffer
// doubles as bytes.Buffer's would, from bodyPrealloc, but never past ceiling:
// bytes.Buffer.ReadFrom grew a 100 MB body's buffer to 128 MiB and kept the
// 64 MiB it outgrew, so memory was three times what the body budget counted.
func readBounded(buf *bytes.Buffer, body io.Reader, ceiling int) error {
	for buf.Len() < ceiling {
		if buf.Available() == 0 {
			grown := make([]byte, buf.Len(), min(max(2*buf.Cap(), bodyPrealloc), ceiling))
			copy(grown, buf.Bytes())
			*buf = *bytes.NewBuffer(grown)
		}
		room := buf.AvailableBuffer()[:min(buf.Available(), ceiling-buf.Len())]
		n, err := body.Read(room)
		buf.Write(room[:n])
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
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
