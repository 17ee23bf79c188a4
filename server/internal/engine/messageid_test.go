package engine

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestMessageIDsAreVersion7AndStrictlyIncreasing(t *testing.T) {
	before := time.Now().Truncate(time.Millisecond)
	var prev uuid.UUID
	seen := make(map[uuid.UUID]bool)
	for i := range 20000 {
		id := NewMessageID()
		if id.Version() != 7 || id.Variant() != uuid.RFC4122 {
			t.Fatalf("id %d (%s): version %d variant %v, want 7 and RFC 4122", i, id, id.Version(), id.Variant())
		}
		if i > 0 && bytes.Compare(prev[:], id[:]) >= 0 {
			t.Fatalf("id %d (%s) does not sort after the one before (%s)", i, id, prev)
		}
		if seen[id] {
			t.Fatalf("id %s minted twice", id)
		}
		seen[id] = true
		prev = id
	}
	sec, nsec := prev.Time().UnixTime()
	if at := time.Unix(sec, nsec); at.Before(before) || at.After(time.Now().Add(time.Second)) {
		t.Fatalf("the last id carries %v, minted between %v and now", at, before)
	}
}

// With a clock that stands still or steps back, ids keep increasing: the
// fraction counts on, into the next millisecond when it overflows.
func TestMessageIDsIncreaseWhenTheClockDoesNot(t *testing.T) {
	clock := time.UnixMilli(1_800_000_000_000)
	s := newMessageIDSource(func() time.Time { return clock })
	first := s.next()
	var prev = first
	for i := range 5000 {
		if i == 2500 {
			clock = clock.Add(-time.Second)
		}
		id := s.next()
		if bytes.Compare(prev[:], id[:]) >= 0 {
			t.Fatalf("id %d (%s) does not sort after %s under a stalled clock", i, id, prev)
		}
		prev = id
	}
	sec, _ := first.Time().UnixTime()
	if sec != 1_800_000_000 {
		t.Fatalf("first id carries second %d, want 1800000000", sec)
	}
	// 5,001 ids from one millisecond overflow its 4,096 fractions into the next.
	if got, _ := prev.Time().UnixTime(); got != sec {
		t.Fatalf("last id carries second %d, want %d", got, sec)
	}
	if ms := int64(prev[0])<<40 | int64(prev[1])<<32 | int64(prev[2])<<24 | int64(prev[3])<<16 | int64(prev[4])<<8 | int64(prev[5]); ms != clock.Add(time.Second).UnixMilli()+1 {
		t.Fatalf("last id carries millisecond %d, want %d", ms, clock.Add(time.Second).UnixMilli()+1)
	}
}

func BenchmarkNewMessageID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = NewMessageID()
	}
}
