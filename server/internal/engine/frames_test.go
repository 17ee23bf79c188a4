package engine

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/google/uuid"
)

func framesOf(n int, payloadSize int) []*Frame {
	out := make([]*Frame, n)
	for i := range out {
		out[i] = &Frame{MessageID: uuid.New(), TransactionID: fmt.Sprintf("t%d", i), TraceID: "trace", ProducerSub: "sub",
			Payload: bytes.Repeat([]byte{'x'}, payloadSize)}
	}
	return out
}

func TestSegmenterCutsAtTheMessageAndByteCaps(t *testing.T) {
	cases := []struct {
		name       string
		n, payload int
		wantCounts []int
	}{
		{"one short segment", 7, 10, []int{7}},
		{"exactly the message cap", segmentMaxMessages, 10, []int{segmentMaxMessages}},
		{"past the message cap", 2*segmentMaxMessages + 50, 10, []int{segmentMaxMessages, segmentMaxMessages, 50}},
		// a segment is closed once it reaches the byte cap, so it holds at most one message past it
		{"past the byte cap", 5, 12 << 10, []int{3, 2}},
		{"one message over the byte cap", 2, segmentMaxBytes + 1, []int{1, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			frames := framesOf(c.n, c.payload)
			s := newSegmenter(16) // too small on purpose: the buffer grows under cut segments
			for _, f := range frames {
				s.add(f)
			}
			var counts []int
			next := 0
			for _, cut := range s.segments() {
				if cut.first != next {
					t.Fatalf("segment starts at message %d, want %d", cut.first, next)
				}
				decoded, err := decodeFrames(cut.frames, cut.count)
				if err != nil || len(decoded) != cut.count {
					t.Fatalf("segment at %d: %d frames decoded for count %d (%v)", cut.first, len(decoded), cut.count, err)
				}
				for i, f := range decoded {
					if want := frames[cut.first+i]; f.MessageID != want.MessageID || f.TransactionID != want.TransactionID {
						t.Fatalf("message %d decoded as %s, want %s", cut.first+i, f.TransactionID, want.TransactionID)
					}
				}
				counts = append(counts, cut.count)
				next += cut.count
			}
			if !slices.Equal(counts, c.wantCounts) {
				t.Fatalf("segment sizes %v, want %v", counts, c.wantCounts)
			}
		})
	}
}

func TestDecodeSpanReadsOnlyTheClaimedOffsets(t *testing.T) {
	frames := framesOf(10, 20)
	var blob []byte
	for _, f := range frames {
		blob = appendFrame(blob, f)
	}
	const base, end = 40, 49
	for _, c := range []struct{ from, to, wantFirst, wantLast int64 }{
		{40, 49, 40, 49}, // the whole segment
		{43, 45, 43, 45}, // inside it
		{30, 41, 40, 41}, // a span starting in an earlier segment
		{47, 60, 47, 49}, // a span ending in a later one
		{49, 49, 49, 49},
	} {
		got, err := decodeSpan(blob, base, end, c.from, c.to)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, f := range got {
			ids = append(ids, f.TransactionID)
		}
		var want []string
		for off := c.wantFirst; off <= c.wantLast; off++ {
			want = append(want, frames[off-base].TransactionID)
		}
		if !slices.Equal(ids, want) {
			t.Fatalf("span [%d, %d]: %v, want %v", c.from, c.to, ids, want)
		}
	}
	if _, err := decodeSpan(blob[:len(blob)-3], base, end, 40, 49); err == nil {
		t.Fatal("a truncated segment decoded without error")
	}
	if _, err := decodeSpan(blob[:len(blob)-3], base, end, 40, 45); err != nil {
		t.Fatalf("a span ending before the truncated frame: %v", err)
	}
}

// A span's strings share one allocation: a string each cost a pop as many
// allocations as it delivered messages.
func TestDecodeSpanAllocatesItsStringsOnce(t *testing.T) {
	frames := framesOf(100, 20)
	frames[7].TraceID, frames[8].ProducerSub = "", "" // absent strings take no room
	var blob []byte
	for _, f := range frames {
		blob = appendFrame(blob, f)
	}
	dst := make([]Frame, 0, len(frames))
	var err error
	allocs := testing.AllocsPerRun(20, func() { dst, err = appendSpan(dst[:0], blob, 0, 99, 0, 99) })
	if err != nil {
		t.Fatal(err)
	}
	if allocs > 1 {
		t.Fatalf("decoding 100 frames allocated %.0f times, want once", allocs)
	}
	for i, f := range dst {
		want := frames[i]
		if f.MessageID != want.MessageID || f.TransactionID != want.TransactionID || f.TraceID != want.TraceID ||
			f.ProducerSub != want.ProducerSub || !bytes.Equal(f.Payload, want.Payload) {
			t.Fatalf("frame %d decoded as %+v, want %+v", i, f, *want)
		}
	}
}
