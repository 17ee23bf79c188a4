package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// pushOfSize is a one-item push body of exactly size bytes.
func pushOfSize(queue string, size int) string {
	head, tail := `{"items":[{"queue":"`+queue+`","payload":"`, `"}]}`
	return head + strings.Repeat("x", size-len(head)-len(tail)) + tail
}

// sendPart opens a connection from the loopback address from (another client
// to the broker's per-client share) and sends a push of body with its
// declared length and only its first sent bytes.
func sendPart(t *testing.T, port int, from, body string, sent int) net.Conn {
	t.Helper()
	dialer := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conn, err := dialer.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	head := fmt.Sprintf("POST /api/v1/push HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	if _, err := io.WriteString(conn, head+body[:sent]); err != nil {
		t.Fatal(err)
	}
	return conn
}

// bodyBudget reads the broker's body budget from /metrics.
func (b *broker) bodyBudget(t *testing.T) (held, waiting float64) {
	t.Helper()
	var metrics struct {
		BodyBytes struct{ Held, Waiting float64 } `json:"bodyBytes"`
	}
	if status, err := b.do("GET", "/metrics", nil, &metrics); err != nil || status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", status, err)
	}
	return metrics.BodyBytes.Held, metrics.BodyBytes.Waiting
}

func (b *broker) waitForBodyBudget(t *testing.T, what string, done func(held, waiting float64) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for held, waiting := b.bodyBudget(t); !done(held, waiting); held, waiting = b.bodyBudget(t) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v bytes held, %v bodies waiting", what, held, waiting)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The broker's body budget serves waiting bodies in arrival order, and a
// waiting body whose client hangs up stops waiting at once (the broker's
// http.Server keeps each request's connection for it to watch): a small push
// behind it is then answered well within the ten-second wait.
func TestBrokerLetsInTheBodyBehindAWaiterWhoseClientHungUp(t *testing.T) {
	const maxBody = 1 << 20
	b := startBroker(t, newDatabase(t), freePort(t), t.TempDir(),
		fmt.Sprintf("LANES_MAX_BODY_BYTES=%d", maxBody), fmt.Sprintf("LANES_MAX_INFLIGHT_BODY_BYTES=%d", 2*maxBody),
		"LANES_ADMISSION_MAX_WAIT_MS=10000")
	b.waitHealth(t, http.StatusOK, 30*time.Second)
	full := pushOfSize("q", maxBody)
	sendPart(t, b.Port, "127.0.0.2", full, maxBody-1000) // 1 MiB being read
	sendPart(t, b.Port, "127.0.0.3", full, 10)           // 256 KiB more
	b.waitForBodyBudget(t, "two stalled bodies", func(held, _ float64) bool { return held == maxBody+256<<10 })
	leaving := sendPart(t, b.Port, "127.0.0.4", full, 10) // its rest does not fit: it waits
	b.waitForBodyBudget(t, "a body of the cap to wait", func(_, waiting float64) bool { return waiting == 1 })

	small := make(chan int, 1)
	go func() {
		resp, err := http.Post(b.URL+"/api/v1/push", "application/json", strings.NewReader(pushOfSize("q", 1000)))
		if err != nil {
			small <- 0
			return
		}
		_ = resp.Body.Close()
		small <- resp.StatusCode
	}()
	b.waitForBodyBudget(t, "a small push to wait behind it", func(_, waiting float64) bool { return waiting == 2 || len(small) > 0 })
	if len(small) > 0 {
		t.Fatalf("a small push after a waiting body of the cap was answered %d first", <-small)
	}

	_ = leaving.Close()
	select {
	case status := <-small:
		if status != http.StatusCreated {
			t.Fatalf("the small push: %d; want 201", status)
		}
	case <-time.After(2 * time.Second):
		held, waiting := b.bodyBudget(t)
		t.Fatalf("the small push still waits 2 s after the client ahead of it hung up (%v held, %v waiting)", held, waiting)
	}
}
