package api

import (
	"bytes"
	"encoding/json"
	"net"
	"strconv"
	"strings"

	"github.com/lanesmq/lanes/server/internal/api/gen"
)

// JSONProtocolErrors wraps l so that the 400 net/http writes itself, for a
// request it cannot parse (a bad percent-escape such as %zz in the path, a
// malformed header), carries the JSON error envelope like every other error.
// net/http answers such requests before any handler runs and offers no hook,
// so the answer is rewritten on its way to the connection.
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

// jsonProtocolError returns the JSON version of net/http's plain-text 400, or
// false when b is anything else. That 400 is written in one piece:
// "HTTP/1.1 400 Bad Request[: reason]" plainErrorHead "400 Bad Request[: reason]".
func jsonProtocolError(b []byte) ([]byte, bool) {
	const statusLine = "HTTP/1.1 400 Bad Request"
	if !bytes.HasPrefix(b, []byte(statusLine)) {
		return nil, false
	}
	end := bytes.Index(b, []byte("\r\n"))
	if end < 0 || !bytes.HasPrefix(b[end:], []byte(plainErrorHead)) {
		return nil, false
	}
	reason := strings.TrimPrefix(string(b[len(statusLine):end]), ": ")
	if reason == "" {
		reason = "the request line or a header could not be parsed (a bad percent-escape in the path, for one)"
	}
	body, err := json.Marshal(gen.Error{Error: "malformed request: " + reason, Code: CodeBadRequest})
	if err != nil {
		return nil, false
	}
	head := statusLine + "\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) +
		"\r\nConnection: close\r\n\r\n"
	return append([]byte(head), body...), true
}
