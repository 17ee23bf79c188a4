package engine

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits on identifiers PostgreSQL stores in B-tree indexed text columns. An
// index entry holds at most ~2704 bytes (a third of a page), and a name that
// fails the index fails the whole transaction it is written in: for a push,
// every request coalesced into the same group commit. The limits keep every
// composite key (kv (namespace, key), timers (queue, timer_key), txns
// (partition_id, transaction_id)) well under that, with room to spare.
const (
	// MaxNameBytes bounds queue, partition, consumer group, namespace and task
	// names (RabbitMQ allows 255 bytes, Kafka 249 characters).
	MaxNameBytes = 512
	// MaxTransactionIDBytes bounds transaction ids (dedup keys); UUIDs and
	// usual idempotency keys are well under it.
	MaxTransactionIDBytes = 1024
)

// CheckStoredText rejects a value PostgreSQL cannot store in a text column: a
// NUL byte or invalid UTF-8 (the database encoding is UTF8), or more than
// maxBytes bytes (0: no length limit). field names the input in the message.
func CheckStoredText(field, value string, maxBytes int) error {
	if msg := storedTextProblem(value, maxBytes); msg != "" {
		return invalid(field, "%s %s", field, msg)
	}
	return nil
}

// storedTextProblem says what is wrong with value as stored text, or "".
func storedTextProblem(value string, maxBytes int) string {
	switch {
	case maxBytes > 0 && len(value) > maxBytes:
		return "is longer than " + strconv.Itoa(maxBytes) + " bytes"
	case strings.IndexByte(value, 0) >= 0:
		return "must not contain a NUL character (\\u0000)"
	case !utf8.ValidString(value):
		return "must be valid UTF-8"
	}
	return ""
}

// checkCodedText is CheckStoredText for routes whose input errors carry their
// own wire code (KV, timers).
func checkCodedText(code, field, value string, maxBytes int) error {
	if msg := storedTextProblem(value, maxBytes); msg != "" {
		return codedInvalid(code, "%s %s", field, msg)
	}
	return nil
}

// checkName is CheckStoredText for queue, partition, group, namespace and task
// names, which also refuses "." and "..": names travel as URL path segments,
// and URL clients (fetch, httpx, curl) remove such segments, so the queue or
// group could never be addressed.
func checkName(field, value string) error {
	if msg := nameProblem(value); msg != "" {
		return invalid(field, "%s %s", field, msg)
	}
	return nil
}

// checkRequiredName is checkName for a name a request must give (the queue of
// a push or a configure, a replay's target), which must hold more than white
// space.
func checkRequiredName(field, value string) error {
	if strings.TrimSpace(value) == "" {
		return invalid(field, "%s must be a non-empty string", field)
	}
	return checkName(field, value)
}

// checkOptionalName is checkName for a name a request may leave empty (the
// default partition, queue mode, a discovery pop's queue) but which, when
// given, must hold more than white space, as a pushed queue's must.
func checkOptionalName(field, value string) error {
	if msg := optionalNameProblem(value); msg != "" {
		return invalid(field, "%s %s", field, msg)
	}
	return nil
}

// optionalNameProblem says what is wrong with value as a name a request may
// leave empty, or "".
func optionalNameProblem(value string) string {
	if msg := blankNameProblem(value); msg != "" {
		return msg
	}
	return nameProblem(value)
}

// blankNameProblem refuses a name of white space only, which reads as no name
// in listings and logs; "" is no name, and the caller says what it means.
func blankNameProblem(value string) string {
	if value != "" && strings.TrimSpace(value) == "" {
		return "must hold more than white space"
	}
	return ""
}

// CheckGroupAddress refuses a consumer group of white space only on a route
// that names a group without creating it (acks, the group's detail, deletes
// and subscription, the depth and DLQ filters), as pops and seeks refuse it:
// such a name could only reach a group of its own, which no route creates.
func CheckGroupAddress(field, value string) error {
	if msg := blankNameProblem(value); msg != "" {
		return invalid(field, "%s %s", field, msg)
	}
	return nil
}

// nameProblem says what is wrong with value as a name, or "".
func nameProblem(value string) string {
	if msg := dotNameProblem(value); msg != "" {
		return msg
	}
	return storedTextProblem(value, MaxNameBytes)
}

// dotNameProblem refuses "." and "..", which no URL path segment can carry:
// URL clients remove them before sending.
func dotNameProblem(value string) string {
	if value == "." || value == ".." {
		return `must not be "." or "..": URL clients drop such path segments`
	}
	return ""
}

// checkTransactionID is CheckStoredText for a transaction id.
func checkTransactionID(field, value string) error {
	return CheckStoredText(field, value, MaxTransactionIDBytes)
}

// Digits PostgreSQL's numeric, which jsonb keeps numbers in, holds before and
// after the decimal point.
const (
	numericMaxIntegerDigits  = 131072
	numericMaxFractionDigits = 16383
)

// jsonbProblem says why jsonb would refuse valid JSON doc, or "": a NUL
// character (\u0000), a surrogate escape that is not half of a pair, or a
// number beyond numeric's digits (1e-20000).
func jsonbProblem(doc []byte) string {
	inString := false
	for i := 0; i < len(doc); i++ {
		c := doc[i]
		switch {
		case inString && c == '\\':
			if doc[i+1] != 'u' {
				i++ // the escaped character
				continue
			}
			unit, _ := strconv.ParseUint(string(doc[i+2:i+6]), 16, 16)
			switch {
			case unit == 0:
				return "must not contain a NUL character (\\u0000)"
			case unit >= 0xDC00 && unit <= 0xDFFF:
				return "must not contain a lone surrogate escape (\\udc00-\\udfff without \\ud800-\\udbff before it)"
			case unit >= 0xD800 && unit <= 0xDBFF:
				if i+12 > len(doc) || doc[i+6] != '\\' || doc[i+7] != 'u' {
					return "must not contain a lone surrogate escape (\\ud800-\\udbff without \\udc00-\\udfff after it)"
				}
				low, _ := strconv.ParseUint(string(doc[i+8:i+12]), 16, 16)
				if low < 0xDC00 || low > 0xDFFF {
					return "must not contain a lone surrogate escape (\\ud800-\\udbff without \\udc00-\\udfff after it)"
				}
				i += 11 // the pair
				continue
			}
			i += 5 // the escape
		case c == '"':
			inString = !inString
		case !inString && (c == '-' || (c >= '0' && c <= '9')):
			start := i
			for i+1 < len(doc) && strings.IndexByte("+-.0123456789eE", doc[i+1]) >= 0 {
				i++
			}
			if !numericHolds(string(doc[start : i+1])) {
				return fmt.Sprintf("holds a number beyond PostgreSQL numeric's %d digits before and %d after the decimal point",
					numericMaxIntegerDigits, numericMaxFractionDigits)
			}
		}
	}
	return ""
}

// numericHolds reports whether numeric takes the valid JSON number n: the
// digits written after the point, less the exponent, are its scale; a
// nonzero number's integer digits, plus the exponent, its integer digits.
func numericHolds(n string) bool {
	mantissa, exponent := n, int64(0)
	if e := strings.IndexAny(n, "eE"); e >= 0 {
		exp, err := strconv.ParseInt(n[e+1:], 10, 32)
		if err != nil {
			return false // beyond any digit count numeric holds
		}
		mantissa, exponent = n[:e], exp
	}
	integer, fraction, _ := strings.Cut(strings.TrimPrefix(mantissa, "-"), ".")
	if int64(len(fraction))-exponent > numericMaxFractionDigits {
		return false
	}
	if strings.Trim(integer+fraction, "0") == "" {
		return true // zero: no integer digits whatever the exponent
	}
	return int64(len(strings.TrimLeft(integer, "0")))+exponent <= numericMaxIntegerDigits
}
