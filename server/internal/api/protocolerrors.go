package api

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/lanesmq/lanes/server/internal/api/gen"
)

// JSONProtocolErrors wraps l so that the errors net/http answers itself, for
// a request it cannot parse (a bad percent-escape such as %zz in the path, a
// malformed header), headers past MaxHeaderBytes, a transfer coding it does
// not know or an HTTP version it does not speak, carry the JSON error envelope
// like every other error. net/http answers such requests before any handler
// runs and offers no hook, so the answer is rewritten on its way to the
// connection.
func JSONProtocolErrors(l net.Listener) net.Listener { return protocolErrorListener{l} }

type protocolErrorListener struct{ net.Listener }

func (l protocolErrorListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return protocolErrorConn{c}, nil
}

type protocolErrorConn struct{ net.Conn }

// CloseWrite passes on the half-close net/http sends before closing a
// connection whose request body it left unread: without it, that close resets
// the connection and the client may never read the answer (a 413).
func (c protocolErrorConn) CloseWrite() error {
	if hc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return nil
}

func (c protocolErrorConn) Write(b []byte) (int, error) {
	answer, ok := jsonProtocolError(b)
	if !ok {
		return c.Conn.Write(b)
	}
	if _, err := c.Conn.Write(answer); err != nil {
		return 0, err
	}
	return len(b), nil
}

// plainErrorHead is what follows the status line of net/http's own error
// answers. A handler's answer cannot start this way: net/http writes its
// headers sorted, Connection before Content-Type.
const plainErrorHead = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// protocolErrorCodes are the statuses net/http answers itself, with the wire
// code and message of each (a 400 says net/http's reason when it gives one).
var protocolErrorCodes = map[int]struct{ code, message string }{
	http.StatusBadRequest: {CodeBadRequest,
		"the request line or a header could not be parsed (a bad percent-escape in the path, for one)"},
	http.StatusRequestHeaderFieldsTooLarge: {CodeHeadersTooLarge,
		"the request's headers are larger than the broker accepts (1 MiB in all)"},
	http.StatusNotImplemented: {CodeNotImplemented,
		"the request's Transfer-Encoding is not supported: send a Content-Length or chunked body"},
	http.StatusHTTPVersionNotSupported: {CodeHTTPVersionNotSupported,
		"the request's HTTP version is not supported: speak HTTP/1.0, HTTP/1.1 or HTTP/2"},
}

// jsonProtocolError returns the JSON version of one of net/http's own
// plain-text error answers, or false when b is anything else. Such an answer
// is written in one piece: "HTTP/1.1 <status> <text>[: reason]" plainErrorHead
// and a plain-text body.
func jsonProtocolError(b []byte) ([]byte, bool) {
	const proto = "HTTP/1.1 "
	end := bytes.Index(b, []byte("\r\n"))
	if !bytes.HasPrefix(b, []byte(proto)) || end < len(proto)+3 || !bytes.HasPrefix(b[end:], []byte(plainErrorHead)) {
		return nil, false
	}
	status, err := strconv.Atoi(string(b[len(proto) : len(proto)+3]))
	if err != nil {
		return nil, false
	}
	known, ok := protocolErrorCodes[status]
	if !ok {
		return nil, false
	}
	statusLine := proto + strconv.Itoa(status) + " " + http.StatusText(status)
	if !bytes.HasPrefix(b, []byte(statusLine)) {
		return nil, false
	}
	message := known.message
	if reason := strings.TrimPrefix(string(b[len(statusLine):end]), ": "); status == http.StatusBadRequest && reason != "" {
		message = reason
	}
	if status == http.StatusBadRequest {
		message = "malformed request: " + message
	}
	body, err := json.Marshal(gen.Error{Error: message, Code: known.code})
	if err != nil {
		return nil, false
	}
	head := statusLine + "\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) +
		"\r\nConnection: close\r\n\r\n"
	return append([]byte(head), body...), true
}

// NetConn is the connection c wraps, for watchForHangUp.
func (c protocolErrorConn) NetConn() net.Conn { return c.Conn }
