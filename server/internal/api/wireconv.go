package api

import (
	"strings"

	"github.com/google/uuid"
)

// Small converters between the generated wire types' pointers and plain values.

// deref returns *p, or the zero value when p is nil.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// optional turns "" into a JSON null.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	p := new(string) // not &s, which moved s to the heap on every call
	*p = s
	return p
}

func int64Ptr(p *int) *int64 {
	if p == nil {
		return nil
	}
	v := int64(*p)
	return &v
}

// uuidTextLen is the length of a UUID's canonical text.
const uuidTextLen = 36

// appendUUIDText appends id's canonical text (uuid.UUID.String's) to text and
// returns it as a string that shares text's bytes, which a strings.Builder
// never changes once written: many ids then cost one allocation.
func appendUUIDText(text *strings.Builder, id uuid.UUID) string {
	var buf [uuidTextLen]byte
	return appendText(text, appendUUID(buf[:0], id))
}
