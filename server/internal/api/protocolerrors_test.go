package api

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// rawRequest sends request text as is (Go's client would refuse a bad
// escape) and reads the answer.
func rawRequest(t *testing.T, baseURL, request string) (*http.Response, errorBody) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(baseURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(request)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e errorBody
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("answer is not the JSON envelope: %v (status %d, Content-Type %q)", err, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return resp, e
}

// A bad percent-escape got net/http's plain-text 400 (it answers before any
// handler); a "." or ".." segment got a bodiless 301 to another resource.
// Headers past 1 MiB, an unknown transfer coding and an HTTP version net/http
// does not speak got its plain-text 431, 501 and 505.
func TestUnparsableAndDotSegmentPathsAnswerTheJSONEnvelope(t *testing.T) {
	b := newTestBroker(t)
	hugeHeader := "X-Big: " + strings.Repeat("a", 1<<20+8<<10) + "\r\n"
	cases := []struct {
		name, request string
		status        int
		code          string
	}{
		{"bad escape", "GET /api/v1/resources/queues/%zz HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusBadRequest, CodeBadRequest},
		{"no Host header", "GET /api/v1/resources/queues HTTP/1.1\r\n\r\n", http.StatusBadRequest, CodeBadRequest},
		{"dot-dot segment", "DELETE /api/v1/consumer-groups/g1/queues/.. HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusBadRequest, CodeBadRequest},
		{"escaped dot segment", "GET /api/v1/resources/queues/%2e HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusBadRequest, CodeBadRequest},
		{"headers past 1 MiB", "GET /api/v1/resources/queues HTTP/1.1\r\nHost: x\r\n" + hugeHeader + "\r\n",
			http.StatusRequestHeaderFieldsTooLarge, CodeHeadersTooLarge},
		{"unknown transfer coding", "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
			http.StatusNotImplemented, CodeNotImplemented},
		{"HTTP/3 on a TCP connection", "GET /api/v1/resources/queues HTTP/3.0\r\nHost: x\r\n\r\n",
			http.StatusHTTPVersionNotSupported, CodeHTTPVersionNotSupported},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, e := rawRequest(t, b.URL, c.request)
			if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/json" || e.Code != c.code || e.Error == "" {
				t.Fatalf("want a JSON %d %s, got %d %q %+v", c.status, c.code, resp.StatusCode, resp.Header.Get("Content-Type"), e)
			}
		})
	}
	// The listener leaves every other answer alone.
	resp, e := rawRequest(t, b.URL, "GET /api/v1/no-such-route HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != http.StatusNotFound || e.Code != CodeNoSuchRoute {
		t.Fatalf("unknown route: %d %+v", resp.StatusCode, e)
	}
}

// A body refused as too large while the client is still sending it: the
// client reads the 413 and then a clean end of stream. The listener hid the
// connection's CloseWrite, so net/http closed at once and the client got a
// reset, often before it could read the answer.
func TestATooLargeBodyStillArrivingGetsThe413AndACleanClose(t *testing.T) {
	b := newTestBroker(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	head := "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n"
	if _, err := conn.Write([]byte(head)); err != nil {
		t.Fatal(err)
	}
	// Keep sending body bytes after the broker has answered, as a client
	// streaming a large upload does.
	chunk := make([]byte, 64<<10)
	sendUntil := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(sendUntil) {
		_ = conn.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := conn.Write(chunk); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	answer, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("reading the answer: %v after %q; want the 413 then a clean end of stream", err, answer)
	}
	if !strings.HasPrefix(string(answer), "HTTP/1.1 413 ") || !strings.Contains(string(answer), CodePayloadTooLarge) {
		t.Fatalf("answer %q; want a 413 payload_too_large", answer)
	}
}
