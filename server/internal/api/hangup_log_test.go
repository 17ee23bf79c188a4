package api

import (
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/testlog"
)

// hangUpBroker is a broker whose slog lines (debug included) and net/http's
// own error log both go to the returned buffer.
func hangUpBroker(t *testing.T) (*testBroker, *testlog.Buffer) {
	t.Helper()
	out := &testlog.Buffer{}
	logger := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	pool := newEnginePool(t, testDSN)
	eng := engine.New(pool, engine.Config{})
	h, err := NewServer(eng, Options{Version: "test", MaxBodyBytes: 1 << 20, Logger: logger}).Handler()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = smallSendBuffers{srv.Listener}
	srv.Config.ErrorLog = log.New(out, "net/http: ", 0)
	srv.Start()
	t.Cleanup(func() { srv.Close(); eng.Close(); pool.Close() })
	return &testBroker{URL: srv.URL, Engine: eng, Pool: pool}, out
}

// smallSendBuffers gives each accepted connection a small send buffer, so a
// large answer to a client that reads nothing blocks the broker's write at
// once instead of filling megabytes of loopback buffers first.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetWriteBuffer(4096)
	}
	return conn, err
}

// sendAndHangUp sends a GET and closes the connection without reading the
// answer, as a scraper that timed out or a killed consumer does.
func sendAndHangUp(t *testing.T, base, path string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: lanes\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
}

// sendStallAndReset sends a GET, reads nothing while the broker writes into a
// small receive window, then resets the connection: the broker's write in
// progress fails, as for a consumer killed mid-answer.
func sendStallAndReset(t *testing.T, base, path string) {
	t.Helper()
	// The receive buffer is set before connecting, so the window it opens stays small.
	dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := dialer.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	tcp := conn.(*net.TCPConn)
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: lanes\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	_ = tcp.SetLinger(0)
	_ = conn.Close()
}

// TestClientHangingUpMidAnswerLogsNoError: a client that closes its
// connection while the broker writes a large answer (a Prometheus scrape, a
// pop of a large batch) is no server fault. It used to log ERROR "database
// unavailable" (the failed write is a network error, which the responder took
// for PostgreSQL's) and then write a 500 after the 200 already sent
// (net/http: "superfluous response.WriteHeader call"). Now it logs at debug
// only, and the pop's claim is given back.
func TestClientHangingUpMidAnswerLogsNoError(t *testing.T) {
	b, out := hangUpBroker(t)
	queue := uniqueQueue(t)
	pushLargeBatch(t, b, queue)
	pop := "/api/v1/pop/queue/" + queue + "?batch=200&consumerGroup=hangup&subscriptionMode=all"
	for range 20 {
		sendAndHangUp(t, b.URL, "/metrics/prometheus")
		sendAndHangUp(t, b.URL, pop)
	}
	sendStallAndReset(t, b.URL, strings.Replace(pop, "=hangup&", "=stalled&", 1))
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "path=/api/v1/pop/queue/") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the last hang-ups' lines
	got := out.String()
	t.Log(got)
	for _, wrong := range []string{"level=ERROR", "level=WARN", "superfluous", "database unavailable"} {
		if strings.Contains(got, wrong) {
			t.Fatalf("a client hanging up logged %q:\n%s", wrong, got)
		}
	}
	for _, want := range []string{"path=/metrics/prometheus", "client left during a pop", "path=/api/v1/pop/queue/"} {
		if !strings.Contains(got, want) {
			t.Fatalf("no hang-up reached the broker mid-answer (%q); the test proves nothing:\n%s", want, got)
		}
	}
}

// pushLargeBatch pushes 200 messages of 4 KB to queue's partition p: a pop
// of them answers some 800 KB, more than the socket buffers take at once.
func pushLargeBatch(t *testing.T, b *testBroker, queue string) {
	t.Helper()
	payload := strings.Repeat("x", 4000)
	items := make([]map[string]any, 200)
	for i := range items {
		items[i] = map[string]any{"queue": queue, "partition": "p", "payload": map[string]any{"i": i, "pad": payload}}
	}
	if status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": items}, nil); status != http.StatusCreated {
		t.Fatalf("push: %d", status)
	}
}
