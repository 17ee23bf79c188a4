package engine

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"

	"github.com/google/uuid"
)

// Frame is one message inside a segment.
type Frame struct {
	MessageID     uuid.UUID
	TransactionID string
	TraceID       string
	ProducerSub   string
	Payload       json.RawMessage
}

// A segment's frames column is the concatenation of its frames, each encoded as
//
//	16 bytes message id | uvarint-prefixed transaction id | uvarint-prefixed trace id |
//	uvarint-prefixed producer sub | uvarint-prefixed payload JSON
//
// Binary rather than JSON so a push stores bytes without PostgreSQL parsing them.

func appendFrame(dst []byte, f *Frame) []byte {
	dst = append(dst, f.MessageID[:]...)
	dst = appendBytes(dst, []byte(f.TransactionID))
	dst = appendBytes(dst, []byte(f.TraceID))
	dst = appendBytes(dst, []byte(f.ProducerSub))
	dst = appendBytes(dst, f.Payload)
	return dst
}

// framesSize is the encoded size of the frames of slots[group...], give or
// take the varint lengths, so a write's frames are allocated once.
func framesSize(slots []pushSlot, group []int) int {
	n := 0
	for _, si := range group {
		it := slots[si].item
		n += 16 + 4*binary.MaxVarintLen16 + len(it.TransactionID) + len(it.TraceID) + len(it.ProducerSub) + len(it.Payload)
	}
	return n
}

// A segment is closed once it holds segmentMaxMessages messages or
// segmentMaxBytes of frames, and the partition's next message of the same
// write starts another. A claim reads whole segments, so this bounds what a
// pop reads beyond its batch: a group commit that gathered 800 messages for
// one partition into one segment made each 100-message pop of it read, send
// and decode up to eight times what it delivered.
const (
	segmentMaxMessages = 100
	segmentMaxBytes    = 32 << 10
)

// segmenter cuts the frames one write appends for a partition into segments.
// The segments share one buffer; each is a full slice expression of it, so
// appending to the buffer never changes a segment already cut.
type segmenter struct {
	buf    []byte
	start  int // where the open segment begins in buf
	count  int // messages in the open segment
	cut    []segmentCut
	frames int // messages appended in all
}

// segmentCut is one segment of a write: its first message (counted in the
// write from 0), its message count and its frames.
type segmentCut struct {
	first, count int
	frames       []byte
}

func newSegmenter(capacity int) *segmenter {
	return &segmenter{buf: make([]byte, 0, capacity)}
}

// add appends one message's frame, closing the open segment first if it is full.
func (s *segmenter) add(f *Frame) {
	if s.count > 0 && (s.count >= segmentMaxMessages || len(s.buf)-s.start >= segmentMaxBytes) {
		s.close()
	}
	s.buf = appendFrame(s.buf, f)
	s.count++
	s.frames++
}

// close cuts the open segment, if it holds anything.
func (s *segmenter) close() {
	if s.count == 0 {
		return
	}
	s.cut = append(s.cut, segmentCut{first: s.frames - s.count, count: s.count, frames: s.buf[s.start:len(s.buf):len(s.buf)]})
	s.start, s.count = len(s.buf), 0
}

// segments closes the open segment and returns every segment of the write.
func (s *segmenter) segments() []segmentCut {
	s.close()
	return s.cut
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

var errCorruptFrame = errors.New("corrupt segment frame")

// decodeFrames decodes every frame of a segment. The payload slices alias blob.
func decodeFrames(blob []byte, count int) ([]Frame, error) {
	frames := make([]Frame, 0, count)
	for len(blob) > 0 {
		f, rest, err := splitFrame(blob)
		if err != nil {
			return nil, err
		}
		frames = append(frames, f.frame())
		blob = rest
	}
	return frames, nil
}

// decodeSpan decodes the frames of the segment holding offsets base..end
// that lie in [from, to] (see appendSpan).
func decodeSpan(blob []byte, base, end, from, to int64) ([]Frame, error) {
	return appendSpan(make([]Frame, 0, max(0, min(to, end)-max(from, base)+1)), blob, base, end, from, to)
}

// appendSpan appends to dst the frames of the segment holding offsets
// base..end that lie in [from, to]: the frames before from are skipped
// without copying their strings and reading stops after to. A claim's first
// and last segments usually hold more than its span. The payload slices alias
// blob; the frames' strings share one allocation (a string each cost a pop as
// many allocations as it delivered messages).
func appendSpan(dst []Frame, blob []byte, base, end, from, to int64) ([]Frame, error) {
	off := base
	for ; len(blob) > 0 && off < from; off++ {
		_, rest, err := splitFrame(blob)
		if err != nil {
			return nil, err
		}
		blob = rest
	}
	textBytes := 0
	for o, rest := off, blob; len(rest) > 0 && o <= to; o++ {
		f, next, err := splitFrame(rest)
		if err != nil {
			return nil, err
		}
		textBytes += len(f.fields[0]) + len(f.fields[1]) + len(f.fields[2])
		rest = next
	}
	var text strings.Builder
	text.Grow(textBytes)
	for ; len(blob) > 0 && off <= to; off++ {
		f, rest, _ := splitFrame(blob) // split without error above
		dst = append(dst, f.frameIn(&text))
		blob = rest
	}
	return dst, nil
}

// rawFrame is one encoded frame split into its fields, which alias the segment.
type rawFrame struct {
	id     []byte
	fields [4][]byte // transaction id, trace id, producer sub, payload
}

func (r *rawFrame) frame() Frame {
	var f Frame
	copy(f.MessageID[:], r.id)
	f.TransactionID = string(r.fields[0])
	f.TraceID = string(r.fields[1])
	f.ProducerSub = string(r.fields[2])
	f.Payload = r.fields[3]
	return f
}

// frameIn is frame with its strings appended to text, whose bytes never
// change once written, so each string can be a slice of it.
func (r *rawFrame) frameIn(text *strings.Builder) Frame {
	var f Frame
	copy(f.MessageID[:], r.id)
	f.TransactionID = appendText(text, r.fields[0])
	f.TraceID = appendText(text, r.fields[1])
	f.ProducerSub = appendText(text, r.fields[2])
	f.Payload = r.fields[3]
	return f
}

func appendText(text *strings.Builder, b []byte) string {
	if len(b) == 0 {
		return ""
	}
	text.Write(b)
	all := text.String() // no copy: the builder's bytes so far
	return all[len(all)-len(b):]
}

// splitFrame splits the first frame off blob.
func splitFrame(blob []byte) (rawFrame, []byte, error) {
	var r rawFrame
	if len(blob) < 16 {
		return r, nil, errCorruptFrame
	}
	r.id, blob = blob[:16], blob[16:]
	for i := range r.fields {
		n, k := binary.Uvarint(blob)
		if k <= 0 || uint64(len(blob)-k) < n {
			return r, nil, errCorruptFrame
		}
		r.fields[i] = blob[k : k+int(n)]
		blob = blob[k+int(n):]
	}
	return r, blob, nil
}
