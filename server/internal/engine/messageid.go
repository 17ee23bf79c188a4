package engine

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"

	"github.com/google/uuid"
)

// NewMessageID mints a UUIDv7: time-ordered, so ids sort as messages arrive.
// A push mints one per message, and uuid.NewV7FromReader cost 260 ns an id
// in profiles (two mutexes, a buffered reader behind an interface, an
// allocation), 5% of the broker's CPU under batch pushes.
func NewMessageID() uuid.UUID { return messageIDs.next() }

var messageIDs = newMessageIDSource(time.Now)

// messageIDSource lays ids out as google/uuid's v7 does (RFC 9562 method 3):
// 48 bits of Unix milliseconds, the fraction of the millisecond in 12 bits
// (one more than the last id's when the clock has not moved past it, so ids
// of one broker increase strictly), then 62 random bits. The random bits come
// from crypto/rand 4 KiB at a time: message ids are identifiers, not secrets
// (lease ids read crypto/rand directly).
type messageIDSource struct {
	mu     sync.Mutex
	now    func() time.Time
	last   int64 // milliseconds<<12 | fraction of the last id
	random [4096]byte
	used   int // bytes of random already taken
}

func newMessageIDSource(now func() time.Time) *messageIDSource {
	s := &messageIDSource{now: now}
	s.used = len(s.random) // empty: the first id fills it
	return s
}

func (s *messageIDSource) next() uuid.UUID {
	var id uuid.UUID
	s.mu.Lock()
	nanos := s.now().UnixNano()
	millis := nanos / int64(time.Millisecond)
	stamp := millis<<12 | (nanos-millis*int64(time.Millisecond))>>8
	if stamp <= s.last {
		stamp = s.last + 1
	}
	s.last = stamp
	if s.used+8 > len(s.random) {
		if _, err := rand.Read(s.random[:]); err != nil {
			panic(err) // crypto/rand.Read does not fail on supported platforms
		}
		s.used = 0
	}
	copy(id[8:], s.random[s.used:s.used+8])
	s.used += 8
	s.mu.Unlock()

	var head [8]byte
	binary.BigEndian.PutUint64(head[:], uint64(stamp>>12)<<16)
	copy(id[:6], head[:6])
	id[6] = 0x70 | byte(stamp>>8)&0x0f // version 7, then the fraction's high bits
	id[7] = byte(stamp)
	id[8] = id[8]&0x3f | 0x80 // RFC 9562 variant
	return id
}
