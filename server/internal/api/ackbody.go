package api

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strings"

	"github.com/lanesmq/lanes/server/internal/api/gen"
)

// decodePlainAckBatch decodes the ack batch body consume loops send: one
// object holding "acknowledgments", an array of objects whose members are an
// item's string fields, and optionally "consumerGroup"; every string free of
// escapes and control characters, no member twice, nothing after the object.
// The general decoder allocated six times per item (a string per field and a
// pointer for each optional one), over half of the broker's allocations on
// the consume path; here the transaction ids share one string and a field
// repeating the previous item's value shares its string. It reports false,
// leaving req as it was, for any other body, which then takes the general
// decoder: so every body decodes to what the general decoder gives it.
func decodePlainAckBatch(data []byte, req *gen.AckBatchRequest) bool {
	p := plainJSON{data: data}
	var out gen.AckBatchRequest
	if !p.consume('{') {
		return false
	}
	for {
		key, ok := p.str()
		if !ok || !p.consume(':') {
			return false
		}
		switch string(key) {
		case "acknowledgments":
			if out.Acknowledgments != nil {
				return false
			}
			if out.Acknowledgments, ok = p.ackItems(); !ok {
				return false
			}
		case "consumerGroup":
			v, ok := p.str()
			if !ok || out.ConsumerGroup != nil {
				return false
			}
			group := string(v)
			out.ConsumerGroup = &group
		default:
			return false
		}
		if p.consume(',') {
			continue
		}
		if !p.consume('}') {
			return false
		}
		break
	}
	p.skipSpace()
	if p.at != len(p.data) || out.Acknowledgments == nil {
		return false
	}
	*req = out
	return true
}

// ackItems reads a non-empty array of ack items.
func (p *plainJSON) ackItems() ([]gen.AckItem, bool) {
	if !p.consume('[') {
		return nil, false
	}
	var txns strings.Builder
	txns.Grow(len(p.data) - p.at) // the ids take less than the rest of the body
	var partition repeatedText
	var lease, status, reason repeatedText
	// At most one item per '{' left (more braces only when an id holds one,
	// which costs capacity, nothing else): counting them costs less than
	// growing the slice five times for 100 items.
	items := make([]gen.AckItem, 0, bytes.Count(p.data[p.at:], []byte{'{'}))
	for {
		if !p.consume('{') {
			return nil, false
		}
		var it gen.AckItem
		var seen uint8
		for !p.consume('}') {
			if seen != 0 && !p.consume(',') {
				return nil, false
			}
			key, ok := p.str()
			if !ok || !p.consume(':') {
				return nil, false
			}
			v, ok := p.str()
			if !ok {
				return nil, false
			}
			var field uint8
			switch string(key) {
			case "transactionId":
				field, it.TransactionId = 1, appendText(&txns, v)
			case "partitionId":
				field, it.PartitionId = 2, partition.text(v)
			case "leaseId":
				field, it.LeaseId = 4, lease.pointer(v)
			case "status":
				field, it.Status = 8, status.pointer(v)
			case "error":
				field, it.Error = 16, reason.pointer(v)
			default:
				return nil, false
			}
			if seen&field != 0 {
				return nil, false
			}
			seen |= field
		}
		items = append(items, it)
		if p.consume(',') {
			continue
		}
		if !p.consume(']') {
			return nil, false
		}
		return items, true
	}
}

// appendText appends v to text and returns it as a string sharing text's
// bytes, which a strings.Builder never changes once written.
func appendText(text *strings.Builder, v []byte) string {
	start := text.Len()
	text.Write(v)
	return text.String()[start:]
}

// repeatedText is one field's last value: the items of a batch usually share
// their partition, lease and status, and then share one string.
type repeatedText struct {
	last *string
}

func (r *repeatedText) pointer(v []byte) *string {
	if r.last == nil || *r.last != string(v) {
		s := string(v)
		r.last = &s
	}
	return r.last
}

func (r *repeatedText) text(v []byte) string { return *r.pointer(v) }

// plainJSON reads the JSON of a plain body: strings without escapes, no
// numbers, literals or nesting beyond what its caller asks for.
type plainJSON struct {
	data []byte
	at   int
}

func (p *plainJSON) skipSpace() {
	for p.at < len(p.data) {
		switch p.data[p.at] {
		case ' ', '\t', '\n', '\r':
			p.at++
		default:
			return
		}
	}
}

// consume skips white space and then c, if c comes next.
func (p *plainJSON) consume(c byte) bool {
	p.skipSpace()
	if p.at < len(p.data) && p.data[p.at] == c {
		p.at++
		return true
	}
	return false
}

// str reads a string without escapes or control characters; its bytes alias
// the body.
func (p *plainJSON) str() ([]byte, bool) {
	if !p.consume('"') {
		return nil, false
	}
	i := p.at + plainRun(p.data[p.at:])
	if i >= len(p.data) || p.data[i] != '"' {
		return nil, false // an escape, a control character or no closing quote
	}
	v := p.data[p.at:i]
	p.at = i + 1
	return v, true
}

// plainRun is the length of s's prefix free of '"', '\\' and control
// characters. It tests eight bytes a step (the bit tricks of "Determine if a
// word has a byte less than n" in Bit Twiddling Hacks): scanning byte by byte
// was 43% of decoding a 100-item ack. The push body's scanner skips strings
// with it too.
func plainRun(s []byte) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := binary.LittleEndian.Uint64(s[i:])
		quote, backslash := w^(ones*'"'), w^(ones*'\\')
		// Each term sets a byte's high bit where w's byte is below 0x20, or
		// is '"' or '\\' (a zero byte of quote or backslash). A borrow can
		// flag bytes above a flagged one, never below it, so the lowest
		// flagged byte is the first one that stops the run.
		found := ((w-ones*0x20)&^w | (quote-ones)&^quote | (backslash-ones)&^backslash) & highs
		if found != 0 {
			return i + bits.TrailingZeros64(found)/8
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return i
}
