package engine

import (
	"bytes"
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
	if value != "" && strings.TrimSpace(value) == "" {
		return "must hold more than white space"
	}
	return nameProblem(value)
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

// jsonHasNULEscape reports whether valid JSON holds the escape \u0000, which
// jsonb rejects ("unsupported Unicode escape sequence"). In valid JSON a
// backslash occurs only inside strings and always starts an escape, so a
// scan that skips each escaped character cannot be misled by "\\u0000".
func jsonHasNULEscape(doc []byte) bool {
	for i := 0; i < len(doc); i++ {
		if doc[i] != '\\' || i+1 >= len(doc) {
			continue
		}
		if doc[i+1] == 'u' && i+6 <= len(doc) && string(doc[i+2:i+6]) == "0000" {
			return true
		}
		i++ // the escaped character
	}
	return false
}

// maxJSONBNumberChars bounds the number literals jsonbSurelyAccepts lets
// through; numeric holds far longer ones, but no payload needs more.
const maxJSONBNumberChars = 1000

// jsonbSurelyAccepts reports whether jsonb surely accepts valid JSON doc: no
// \u0000, no surrogate escape (jsonb refuses a lone one), and no number with
// an exponent or over maxJSONBNumberChars characters (numeric refuses 1e-20000).
// It may refuse JSON that jsonb would take; callers keep the text anyway.
func jsonbSurelyAccepts(doc []byte) bool {
	inString := false
	for i := 0; i < len(doc); i++ {
		c := doc[i]
		switch {
		case inString && c == '\\':
			if i+5 < len(doc) && doc[i+1] == 'u' {
				hex := strings.ToLower(string(doc[i+2 : i+6]))
				if hex == "0000" || (hex[0] == 'd' && hex[1] >= '8') {
					return false
				}
			}
			i++ // the escaped character
		case c == '"':
			inString = !inString
		case !inString && (c == '-' || (c >= '0' && c <= '9')):
			start := i
			for i+1 < len(doc) && strings.IndexByte("+-.0123456789eE", doc[i+1]) >= 0 {
				i++
			}
			number := doc[start : i+1]
			if len(number) > maxJSONBNumberChars || bytes.ContainsAny(number, "eE") {
				return false
			}
		}
	}
	return true
}
