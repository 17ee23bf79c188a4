package api

import (
	"encoding/json"
	"strings"
	"sync"

	"github.com/lanesmq/lanes/server/internal/api/gen"
)

// decodePlainPush decodes the push body producers send: one object holding
// "items", a non-empty array of objects whose members are "queue",
// "partition", "transactionId" and "traceId" as strings free of escapes and
// control characters, and "payload" as any JSON value but null; no member
// twice, nothing after the object. The general decoder allocated five times
// per item (a string per field, a pointer for each optional one, a copy of
// the payload), 6–7% of the broker's CPU under pushes; here the items'
// strings share one string, the payloads one byte slice. It reports false,
// leaving req as it was, for any other body, which then takes the general
// decoder: so every body decodes to what the general decoder gives it
// (FuzzPushBodyDecode).
func decodePlainPush(data []byte, req *gen.PushRequest) bool {
	s := pushBodyScanner{plainJSON{data: data}}
	if !s.consume('{') {
		return false
	}
	if key, ok := s.str(); !ok || string(key) != "items" || !s.consume(':') {
		return false
	}
	items, ok := s.pushItems()
	if !ok || !s.consume('}') {
		return false
	}
	s.skipSpace()
	if s.at != len(s.data) {
		return false
	}
	req.Items = items
	return true
}

// pushItems reads a non-empty array of push items, noting where their fields
// lie in the body, then copies them out together: the body's pooled buffer
// serves the next request.
func (s *pushBodyScanner) pushItems() ([]gen.PushItem, bool) {
	if !s.consume('[') {
		return nil, false
	}
	pooled := rawPushItemsPool.Get().(*[]rawPushItem)
	defer func() {
		if cap(*pooled) <= maxPooledRawPushItems {
			rawPushItemsPool.Put(pooled)
		}
	}()
	raw := (*pooled)[:0]
	for {
		if !s.consume('{') {
			return nil, false
		}
		var it rawPushItem
		for !s.consume('}') {
			if it.given != 0 && !s.consume(',') {
				return nil, false
			}
			key, ok := s.str()
			if !ok || !s.consume(':') {
				return nil, false
			}
			var field uint8
			switch string(key) {
			case "payload":
				field = payloadField
				if it.payload, ok = s.value(0); string(s.data[it.payload.start:it.payload.end]) == "null" {
					ok = false
				}
			case "queue":
				field = queueField
				it.queue, ok = s.plainSpan()
			case "partition":
				field = textField(partitionText)
				it.texts[partitionText], ok = s.plainSpan()
			case "transactionId":
				field = textField(transactionText)
				it.texts[transactionText], ok = s.plainSpan()
			case "traceId":
				field = textField(traceText)
				it.texts[traceText], ok = s.plainSpan()
			}
			if field == 0 || !ok || it.given&field != 0 {
				return nil, false
			}
			it.given |= field
		}
		raw = append(raw, it)
		*pooled = raw
		if s.consume(',') {
			continue
		}
		if !s.consume(']') {
			return nil, false
		}
		return copyOutOfBody(s.data, raw), true
	}
}

// rawPushItem is where a push item's fields lie in the body. It holds no
// pointers, so a body's items are gathered without the collector's write
// barriers, in a slice reused from body to body.
type rawPushItem struct {
	given          uint8 // the fields the item gives, payloadField | queueField | textField(…)
	queue, payload span
	texts          [3]span
}

// span is a field's bytes in the body, data[start:end].
type span struct{ start, end int }

var rawPushItemsPool = sync.Pool{New: func() any { return new([]rawPushItem) }}

// maxPooledRawPushItems keeps one huge push from pinning its slice in the pool.
const maxPooledRawPushItems = 4096

// The fields of a push item, as bits of rawPushItem.given.
const (
	payloadField = 1 << iota
	queueField
)

// The optional texts of a push item, which the wire model holds as pointers.
const (
	partitionText = iota
	transactionText
	traceText
)

func textField(text int) uint8 { return 4 << text }

// copyOutOfBody builds the items from data: all their strings in one string,
// the pointers to their optional texts into one slice, their payloads in one
// byte slice.
func copyOutOfBody(data []byte, raw []rawPushItem) []gen.PushItem {
	textBytes, payloadBytes, pointed := 0, 0, 0
	for _, it := range raw {
		textBytes += it.queue.end - it.queue.start
		for f, v := range it.texts {
			if it.given&textField(f) != 0 {
				pointed++
				textBytes += v.end - v.start
			}
		}
		payloadBytes += it.payload.end - it.payload.start
	}
	var text strings.Builder
	text.Grow(textBytes)
	targets := make([]string, 0, pointed) // never grows: the pointers stay valid
	payloads := make([]byte, 0, payloadBytes)
	items := make([]gen.PushItem, len(raw))
	for i, it := range raw {
		items[i].Queue = appendText(&text, data[it.queue.start:it.queue.end])
		pointers := [...]**string{&items[i].Partition, &items[i].TransactionId, &items[i].TraceId}
		for f, v := range it.texts {
			if it.given&textField(f) != 0 {
				targets = append(targets, appendText(&text, data[v.start:v.end]))
				*pointers[f] = &targets[len(targets)-1]
			}
		}
		if it.given&payloadField != 0 {
			start := len(payloads)
			payloads = append(payloads, data[it.payload.start:it.payload.end]...)
			items[i].Payload = json.RawMessage(payloads[start:len(payloads):len(payloads)])
		}
	}
	return items
}

// pushBodyScanner reads a push body: plain strings (plainJSON's) for names
// and ids, and any JSON value, checked against the grammar, for payloads.
type pushBodyScanner struct {
	plainJSON
}

// maxPlainPayloadDepth bounds the nesting the scanner follows; a deeper
// payload takes the general decoder.
const maxPlainPayloadDepth = 64

// plainSpan is str's span in the body.
func (s *pushBodyScanner) plainSpan() (span, bool) {
	v, ok := s.str()
	return span{s.at - 1 - len(v), s.at - 1}, ok
}

// value reads one JSON value and returns where its text lies.
func (s *pushBodyScanner) value(depth int) (span, bool) {
	s.skipSpace()
	start := s.at
	if s.at >= len(s.data) || depth > maxPlainPayloadDepth {
		return span{}, false
	}
	var ok bool
	switch c := s.data[s.at]; {
	case c == '{':
		ok = s.members(depth)
	case c == '[':
		ok = s.elements(depth)
	case c == '"':
		ok = s.skipString()
	case c == '-' || (c >= '0' && c <= '9'):
		ok = s.number()
	default:
		ok = s.literal("true") || s.literal("false") || s.literal("null")
	}
	return span{start, s.at}, ok
}

func (s *pushBodyScanner) members(depth int) bool {
	s.at++ // {
	if s.consume('}') {
		return true
	}
	for {
		s.skipSpace()
		if !s.skipString() || !s.consume(':') {
			return false
		}
		if _, ok := s.value(depth + 1); !ok {
			return false
		}
		if s.consume(',') {
			continue
		}
		return s.consume('}')
	}
}

func (s *pushBodyScanner) elements(depth int) bool {
	s.at++ // [
	if s.consume(']') {
		return true
	}
	for {
		if _, ok := s.value(depth + 1); !ok {
			return false
		}
		if s.consume(',') {
			continue
		}
		return s.consume(']')
	}
}

// skipString reads a string with any valid escapes (the body is valid UTF-8).
func (s *pushBodyScanner) skipString() bool {
	if s.at >= len(s.data) || s.data[s.at] != '"' {
		return false
	}
	for i := s.at + 1; i < len(s.data); i++ {
		if i += plainRun(s.data[i:]); i >= len(s.data) {
			return false
		}
		switch c := s.data[i]; {
		case c == '"':
			s.at = i + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if i+1 >= len(s.data) {
				return false
			}
			switch s.data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+5 >= len(s.data) || !isHex(s.data[i+2]) || !isHex(s.data[i+3]) || !isHex(s.data[i+4]) || !isHex(s.data[i+5]) {
					return false
				}
				i += 5
			default:
				return false
			}
		}
	}
	return false
}

// number reads a number as JSON spells it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *pushBodyScanner) number() bool {
	if s.data[s.at] == '-' {
		s.at++
	}
	if s.at < len(s.data) && s.data[s.at] == '0' {
		s.at++
	} else if !s.digits() {
		return false
	}
	if s.at < len(s.data) && s.data[s.at] == '.' {
		s.at++
		if !s.digits() {
			return false
		}
	}
	if s.at < len(s.data) && (s.data[s.at] == 'e' || s.data[s.at] == 'E') {
		s.at++
		if s.at < len(s.data) && (s.data[s.at] == '+' || s.data[s.at] == '-') {
			s.at++
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// digits reads one or more decimal digits.
func (s *pushBodyScanner) digits() bool {
	start := s.at
	for s.at < len(s.data) && s.data[s.at] >= '0' && s.data[s.at] <= '9' {
		s.at++
	}
	return s.at > start
}

func (s *pushBodyScanner) literal(word string) bool {
	if len(s.data)-s.at >= len(word) && string(s.data[s.at:s.at+len(word)]) == word {
		s.at += len(word)
		return true
	}
	return false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}
