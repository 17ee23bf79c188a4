package engine

import (
	"encoding/binary"
	"encoding/json"
	"errors"

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
// take the varint lengths, so a segment's blob is allocated once.
func framesSize(slots []pushSlot, group []int) int {
	n := 0
	for _, si := range group {
		it := slots[si].item
		n += 16 + 4*binary.MaxVarintLen16 + len(it.TransactionID) + len(it.TraceID) + len(it.ProducerSub) + len(it.Payload)
	}
	return n
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
		if len(blob) < 16 {
			return nil, errCorruptFrame
		}
		var f Frame
		copy(f.MessageID[:], blob[:16])
		blob = blob[16:]
		var fields [4][]byte
		for i := range fields {
			n, k := binary.Uvarint(blob)
			if k <= 0 || uint64(len(blob)-k) < n {
				return nil, errCorruptFrame
			}
			fields[i] = blob[k : k+int(n)]
			blob = blob[k+int(n):]
		}
		f.TransactionID = string(fields[0])
		f.TraceID = string(fields[1])
		f.ProducerSub = string(fields[2])
		f.Payload = fields[3]
		frames = append(frames, f)
	}
	return frames, nil
}
