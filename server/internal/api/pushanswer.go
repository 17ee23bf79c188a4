package api

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/google/uuid"

	"github.com/lanesmq/lanes/server/internal/engine"
)

// pushAnswer is the 201 answer of a push: the engine's results, written as
// encoding/json writes []gen.PushResult (TestPushAnswerBytesAreEncodingJSONs)
// straight into a pooled buffer. Building the []gen.PushResult, a message id
// string per item, and encoding it took 5–7% of the broker's CPU under
// pushes.
type pushAnswer []engine.PushResult

func (a pushAnswer) VisitPushResponse(w http.ResponseWriter) error {
	buf := takeBuffer()
	defer giveBuffer(buf)
	buf.Write(appendPushAnswer(buf.AvailableBuffer(), a))
	return sendJSON(w, http.StatusCreated, buf)
}

// appendPushAnswer appends the answer's JSON and a newline, as
// json.Encoder.Encode does, with gen.PushResult's members in its order.
func appendPushAnswer(dst []byte, results []engine.PushResult) []byte {
	dst = append(dst, '[')
	for i, r := range results {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '{')
		if r.Error != "" {
			dst = append(dst, `"error":`...)
			dst = appendJSONString(dst, r.Error)
			dst = append(dst, ',')
		}
		dst = append(dst, `"index":`...)
		dst = strconv.AppendInt(dst, int64(r.Index), 10)
		dst = append(dst, `,"message_id":"`...)
		dst = appendUUID(dst, r.MessageID)
		dst = append(dst, `","queueName":`...)
		dst = appendJSONString(dst, r.Queue)
		dst = append(dst, `,"status":`...)
		dst = appendJSONString(dst, string(r.Status))
		dst = append(dst, `,"transaction_id":`...)
		dst = appendJSONString(dst, r.TransactionID)
		dst = append(dst, '}')
	}
	return append(dst, ']', '\n')
}

// appendUUID appends id's canonical text, uuid.UUID.String's.
func appendUUID(dst []byte, id uuid.UUID) []byte {
	dst = hex.AppendEncode(dst, id[0:4])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, id[4:6])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, id[6:8])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, id[8:10])
	dst = append(dst, '-')
	return hex.AppendEncode(dst, id[10:])
}

// appendJSONString appends s quoted as encoding/json quotes it. Printable
// ASCII other than the characters it escapes (", \ and, as HTML, <, > and &)
// is copied; any other string, rare in names and ids, is left to
// encoding/json itself.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			quoted, _ := json.Marshal(s) // a string always encodes
			return append(dst, quoted...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
