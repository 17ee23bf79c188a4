package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/lanesmq/lanes/server/internal/admission"
	"github.com/lanesmq/lanes/server/internal/auth"
)

// stallBody opens a connection that sends a request's headers and the first
// ten bytes of its body, then stalls.
func stallBody(t *testing.T, brokerURL, path, body string) net.Conn {
	t.Helper()
	return stallBodyAfter(t, brokerURL, path, body, 10)
}

// stallBodyAfter is stallBody sending the first sent bytes of the body.
func stallBodyAfter(t *testing.T, brokerURL, path, body string, sent int) net.Conn {
	t.Helper()
	return stallRequestBody(t, brokerURL, http.MethodPost, path, body, sent)
}

// stallRequestBody sends method and path with the first sent bytes of body,
// and leaves the rest unsent.
func stallRequestBody(t *testing.T, brokerURL, method, path, body string, sent int) net.Conn {
	t.Helper()
	conn, host := dialBroker(t, brokerURL)
	head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", method, path, host, len(body))
	if _, err := io.WriteString(conn, head+body[:sent]); err != nil {
		t.Fatal(err)
	}
	return conn
}

// twoSlotBudget is an admission controller whose every class has two slots
// and a waiting line that gives up after half a second.
func twoSlotBudget() *admission.Controller {
	limits := admission.Limits{InFlight: 2, Waiting: 10, MaxWait: 500 * time.Millisecond}
	return &admission.Controller{
		Push: admission.NewClass("push", limits),
		Pop:  admission.NewClass("pop", limits),
		Ack:  admission.NewClass("ack", limits),
	}
}

func TestStalledBodiesHoldNoAdmissionSlot(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{Admission: twoSlotBudget(), BodyReadTimeout: time.Minute}, "")
	q := uniqueQueue(t)
	txn, partition, lease := b.pushAndPop(t, q)
	// Four times the ack and push budgets, stalled part-way through their bodies.
	stalledAck := `{"transactionId":"t","partitionId":"00000000-0000-0000-0000-000000000000"}`
	stalledPush := `{"items":[{"queue":"` + q + `","payload":1}]}`
	for range 8 {
		stallBody(t, b.URL, "/api/v1/ack", stalledAck)
		stallBody(t, b.URL, "/api/v1/push", stalledPush)
	}
	time.Sleep(200 * time.Millisecond) // every stalled request is inside the broker

	var acked []map[string]any
	status, _ := b.call(t, "POST", "/api/v1/ack", map[string]any{"transactionId": txn, "partitionId": partition, "leaseId": lease}, &acked)
	if status != http.StatusOK || len(acked) != 1 || acked[0]["success"] != true {
		t.Fatalf("ack behind 8 stalled ack bodies: %d %+v; want 200 (a stalled body must hold no ack slot)", status, acked)
	}
	var pushed []pushResult
	status, _ = b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": 2}}}, &pushed)
	if status != http.StatusCreated || len(pushed) != 1 || pushed[0].Status != "queued" {
		t.Fatalf("push behind 8 stalled push bodies: %d %+v; want 201 queued", status, pushed)
	}
	var e errorBody
	status, _ = b.call(t, "POST", "/api/v1/lease/"+lease+"/extend", map[string]any{"seconds": 5}, &e)
	if status == http.StatusTooManyRequests {
		t.Fatalf("lease extend behind stalled ack bodies: %d %+v", status, e)
	}
}

func TestABodyThatStallsPastTheDeadlineIs408AndClosesTheConnection(t *testing.T) {
	const deadline = 700 * time.Millisecond
	b := newBrokerWith(t, testDSN, Options{BodyReadTimeout: deadline}, "")
	q := uniqueQueue(t)
	for _, path := range []string{"/api/v1/push", "/api/v1/configure"} {
		start := time.Now()
		conn := stallBody(t, b.URL, path, `{"queue":"`+q+`","items":[{"queue":"`+q+`","payload":1}]}`)
		_ = conn.SetReadDeadline(time.Now().Add(10 * deadline))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: no answer to a stalled body within %s: %v", path, 10*deadline, err)
		}
		var e errorBody
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			t.Fatalf("%s: decode the answer: %v", path, err)
		}
		waited := time.Since(start)
		if resp.StatusCode != http.StatusRequestTimeout || e.Code != CodeRequestTimeout || !strings.Contains(e.Error, "LANES_BODY_READ_TIMEOUT_MS") {
			t.Fatalf("%s: stalled body answered %d %+v; want 408 request_timeout naming the setting", path, resp.StatusCode, e)
		}
		if waited < deadline || waited > 5*deadline {
			t.Fatalf("%s: stalled body answered after %s; the deadline is %s", path, waited, deadline)
		}
		if !resp.Close {
			t.Fatalf("%s: the 408 keeps the connection open; it must close it", path)
		}
	}
	var n int
	if err := b.Pool.QueryRow(t.Context(), `SELECT count(*) FROM lanes.queues WHERE name = $1`, q).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a stalled body stored something: queue rows %d (%v)", n, err)
	}
	// A body that arrives in time is served as before, on the same broker.
	if status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": 1}}}, nil); status != http.StatusCreated {
		t.Fatalf("push after the stalled ones: %d", status)
	}
}

// The token bucket ran only once the body was in, so a client over its rate
// could still fill the body budget with bodies it never finished. It now
// runs first: the stalled push is refused at once and takes no room.
func TestARateLimitedClientIsRefusedBeforeItsBodyTakesRoom(t *testing.T) {
	budget := admission.NewByteBudget(4<<20, time.Second)
	limits := twoSlotBudget()
	limits.Clients = admission.NewClientLimiter(0.01, 1)
	b := newBrokerWith(t, testDSN, Options{Admission: limits, BodyBudget: budget, BodyReadTimeout: time.Minute}, "")
	q := uniqueQueue(t)
	if status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": 1}}}, nil); status != http.StatusCreated {
		t.Fatalf("first push: %d", status)
	}
	conn := stallBody(t, b.URL, "/api/v1/push", pushOfSize(q, 1<<20))
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a rate-limited client's stalled push: %v (its body was waited for)", err)
	}
	var e errorBody
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || e.Code != admission.ReasonRateLimited {
		t.Fatalf("stalled push past the rate: %d %+v; want 429 rate_limited", resp.StatusCode, e)
	}
	if held := budget.Stats().Held; held != 0 {
		t.Fatalf("body bytes held after the refusal: %d; want 0", held)
	}
}

// A body sent to an operation that declares none was read whole, up to
// LANES_MAX_BODY_BYTES, and thrown away: four 100 MB bodies to a GET took
// 300 MB. Past ignoredBodyLimit it is now refused from its declared length,
// or from its first bytes when chunked, without waiting for the rest.
func TestABodyToAnOperationWithoutOneIsRefusedUnread(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{MaxBodyBytes: 64 << 20, BodyReadTimeout: time.Minute}, "")
	u, err := url.Parse(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	large := strings.Repeat("x", 2*ignoredBodyLimit)
	for name, request := range map[string]string{
		"declared": "GET /api/v1/resources/queues HTTP/1.1\r\nHost: " + u.Host + "\r\nContent-Length: 10000000\r\n\r\nxx",
		"chunked": "GET /api/v1/resources/queues HTTP/1.1\r\nHost: " + u.Host + "\r\nTransfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n", len(large), large),
	} {
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, request); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s body to a GET, the rest never sent: no answer (%v); want 413 at once", name, err)
		}
		var e errorBody
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusRequestEntityTooLarge || e.Code != CodePayloadTooLarge || !strings.Contains(e.Error, "takes no request body") {
			t.Fatalf("%s body to a GET: %d %+v; want 413 payload_too_large saying the operation takes no body", name, resp.StatusCode, e)
		}
	}
	// The "{}" some clients send with a POST that declares no body is still served.
	var e errorBody
	status, _ := b.call(t, "POST", "/api/v1/messages/0190a0a0-0000-7000-8000-000000000000/t/retry", map[string]any{}, &e)
	if status != http.StatusNotFound {
		t.Fatalf("retry of a missing message with a {} body: %d %+v; want 404", status, e)
	}
}

// A body sent to a path or method no operation serves was capped as one to an
// operation without a body, so a large one answered 413 "takes no request
// body" where the mistake is the route. It is now answered 404 or 405 at once,
// unread, whatever its length or framing.
func TestABodyToNoOperationIsAnsweredByTheRouteUnread(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{MaxBodyBytes: 64 << 20, BodyReadTimeout: time.Minute}, "")
	u, err := url.Parse(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	large := strings.Repeat("x", 2*ignoredBodyLimit)
	for name, c := range map[string]struct {
		request string
		status  int
		code    string
	}{
		"unknown path, declared length": {"POST /api/v1/nosuch HTTP/1.1\r\nHost: " + u.Host + "\r\nContent-Length: 10000000\r\n\r\nxx", http.StatusNotFound, CodeNoSuchRoute},
		"unknown path, chunked": {"POST /api/v1/nosuch HTTP/1.1\r\nHost: " + u.Host + "\r\nTransfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n", len(large), large), http.StatusNotFound, CodeNoSuchRoute},
		"method the path does not serve": {"PUT /api/v1/resources/queues HTTP/1.1\r\nHost: " + u.Host + "\r\nContent-Length: 10000000\r\n\r\nxx", http.StatusMethodNotAllowed, CodeMethod},
	} {
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, c.request); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: no answer (%v); want %d at once", name, err, c.status)
		}
		var e errorBody
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != c.status || e.Code != c.code {
			t.Fatalf("%s: %d %+v; want %d %s", name, resp.StatusCode, e, c.status, c.code)
		}
		if !resp.Close {
			t.Errorf("%s: the connection stays open with the body unread; want Connection: close", name)
		}
	}
}

// A body's buffer grows no larger than the body (plus the byte that tells it
// ended): bytes.Buffer.ReadFrom doubled a 100 MB body's buffer to 128 MiB.
func TestABodyBufferEndsNoLargerThanItsBody(t *testing.T) {
	for _, size := range []int{1, 100_000, 3_000_000} {
		var buf bytes.Buffer
		body := iotest.HalfReader(strings.NewReader(strings.Repeat("x", size))) // arrives in pieces, as from a socket
		if err := readBounded(&buf, body, size+1); err != nil {
			t.Fatal(err)
		}
		if buf.Len() != size || buf.Cap() > max(size+1, bodyPrealloc) {
			t.Errorf("%d-byte body: read %d bytes into a buffer of %d; want all of it in at most %d", size, buf.Len(), buf.Cap(), max(size+1, bodyPrealloc))
		}
	}
}

// A body refused without being read closes its connection at once, as the
// refusal says (Connection: close). net/http otherwise drains a declared
// body of up to 256 KiB after the answer, without a deadline, so a client
// that never sent its body held the connection and its goroutine for ever.
func TestARefusedUnreadBodyClosesItsConnection(t *testing.T) {
	const maxBody, budgetBytes = 1 << 20, 2 << 20
	budget := admission.NewByteBudget(budgetBytes, 200*time.Millisecond)
	b := newBrokerWith(t, testDSN, Options{MaxBodyBytes: maxBody, BodyBudget: budget, BodyReadTimeout: time.Minute}, "")
	q := uniqueQueue(t)

	answeredThenClosed := func(name string, conn net.Conn, wantStatus int) {
		t.Helper()
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		reader := bufio.NewReader(conn)
		resp, err := http.ReadResponse(reader, nil)
		if err != nil {
			t.Fatalf("%s: no answer (%v)", name, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != wantStatus || !resp.Close {
			t.Fatalf("%s: %d close %v; want %d with Connection: close", name, resp.StatusCode, resp.Close, wantStatus)
		}
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := reader.ReadByte(); err != io.EOF {
			t.Fatalf("%s: after the answer the connection gave %v; want it closed (EOF) at once", name, err)
		}
	}

	// Declared past what an operation without a body accepts, never sent.
	answeredThenClosed("5,000-byte body declared to a GET",
		stallRequestBody(t, b.URL, http.MethodGet, "/api/v1/resources/queues", strings.Repeat("x", 5000), 0),
		http.StatusRequestEntityTooLarge)

	// Refused for want of room in the body budget, never sent.
	almostAll := maxBody - bodyReserveStep/2
	stallBodyAfter(t, b.URL, "/api/v1/push", pushOfSize(q, maxBody), almostAll)
	stallBodyAfter(t, b.URL, "/api/v1/push", pushOfSize(q, maxBody), almostAll)
	waitForHeld(t, budget, budgetBytes)
	answeredThenClosed("100 KiB push with the budget full",
		stallBodyAfter(t, b.URL, "/api/v1/push", pushOfSize(q, 100<<10), 0),
		http.StatusTooManyRequests)
}

// A request refused before its body is read (no token, a role too low, the
// client over its rate) waits for that body at most LANES_BODY_READ_TIMEOUT_MS.
// net/http reads a declared body of up to 256 KiB before writing the refusal,
// without a deadline: a client that stalled got no answer, and held the
// connection, for ever. A client that sends its body keeps its connection.
func TestARequestRefusedBeforeItsBodyWaitsForItAtMostTheReadTimeout(t *testing.T) {
	const readTimeout = 500 * time.Millisecond
	v, err := auth.NewVerifier(auth.Config{Secret: []byte(testSecret)})
	if err != nil {
		t.Fatal(err)
	}
	limits := twoSlotBudget()
	limits.Clients = admission.NewClientLimiter(0.01, 1)
	withAuth := newBrokerWith(t, testDSN, Options{Auth: v, BodyReadTimeout: readTimeout}, "")
	limited := newBrokerWith(t, testDSN, Options{Admission: limits, BodyReadTimeout: readTimeout}, "")
	q := uniqueQueue(t)
	if status, _ := limited.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": 1}}}, nil); status != http.StatusCreated {
		t.Fatalf("first push: %d", status)
	}
	push := pushOfSize(q, 1000)
	readOnly := "Authorization: Bearer " + hsToken(t, "ro", auth.RoleReadOnly)
	for _, c := range []struct {
		name, brokerURL, header string
		status                  int
	}{
		{"push without a token", withAuth.URL, "", http.StatusUnauthorized},
		{"push with a read-only token", withAuth.URL, readOnly, http.StatusForbidden},
		{"push past the client's rate", limited.URL, "", http.StatusTooManyRequests},
	} {
		conn := postHead(t, c.brokerURL, "/api/v1/push", push, c.header)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		reader := bufio.NewReader(conn)
		resp, err := http.ReadResponse(reader, nil)
		if err != nil {
			t.Fatalf("%s, its body never sent: no answer (%v); want %d within the body read timeout", c.name, err, c.status)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != c.status || !resp.Close {
			t.Fatalf("%s, its body never sent: %d close %v; want %d with Connection: close", c.name, resp.StatusCode, resp.Close, c.status)
		}
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := reader.ReadByte(); err != io.EOF {
			t.Fatalf("%s: after the answer the connection gave %v; want it closed (EOF)", c.name, err)
		}

		// Sent whole, the same refusal keeps the connection for the next request.
		conn = postHead(t, c.brokerURL, "/api/v1/push", push, c.header)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		reader = bufio.NewReader(conn)
		for i := range 2 {
			if _, err := io.WriteString(conn, push); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(reader, nil)
			if err != nil {
				t.Fatalf("%s sent whole, request %d: %v", c.name, i+1, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != c.status || resp.Close {
				t.Fatalf("%s sent whole, request %d: %d close %v; want %d on a kept connection", c.name, i+1, resp.StatusCode, resp.Close, c.status)
			}
			if i == 0 {
				if _, err := io.WriteString(conn, postHeadText(t, c.brokerURL, "/api/v1/push", push, c.header)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// postHeadText is the head of a POST of body to path, with one more header
// line unless header is empty.
func postHeadText(t *testing.T, brokerURL, path, body, header string) string {
	t.Helper()
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	if header != "" {
		header += "\r\n"
	}
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, u.Host, header, len(body))
}

// postHead opens a connection and sends the head of a POST of body, none of
// the body.
func postHead(t *testing.T, brokerURL, path, body, header string) net.Conn {
	t.Helper()
	conn, _ := dialBroker(t, brokerURL)
	if _, err := io.WriteString(conn, postHeadText(t, brokerURL, path, body, header)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// dialBroker opens a raw connection to the broker at brokerURL, closed when
// the test ends, and returns it with the broker's host:port.
func dialBroker(t *testing.T, brokerURL string) (net.Conn, string) {
	t.Helper()
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, u.Host
}
