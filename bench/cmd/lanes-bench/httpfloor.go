package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"
)

// httpFloorEnv, set to a listen address, makes this binary serve the HTTP
// floor there instead of running the harness: the http-floor scenario starts
// it so as a child process, and reads the address it bound from its first
// line of output.
const httpFloorEnv = "LANES_BENCH_HTTP_FLOOR_ADDR"

// floorAnswer is a push-b1 answer, byte for byte the size Lanes sends.
var floorAnswer = []byte(`[{"index":0,"message_id":"01a23afe-c016-7e2b-a773-77328cbd7d65","transaction_id":"0-0-0","queueName":"bench-push-b1-1764748800","status":"queued"}]` + "\n")

// serveHTTPFloorIfAsked serves the HTTP floor and reports true when this
// process was started as the http-floor scenario's child (httpFloorEnv set).
func serveHTTPFloorIfAsked() bool {
	addr := os.Getenv(httpFloorEnv)
	if addr == "" {
		return false
	}
	if err := serveHTTPFloor(addr, os.Stdout); err != nil {
		fatalf("http floor: %v", err)
	}
	return true
}

// serveHTTPFloor answers every request as a push that stored its one item,
// after reading the body: Go's net/http server, as the broker uses, and
// nothing else (no routing, validation, JSON or database).
func serveHTTPFloor(addr string, out io.Writer) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, ln.Addr().String())
	return http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(floorAnswer)))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(floorAnswer)
	}))
}

// httpFloorScenario drives push-b1's load (producers closed-loop clients, one
// one-item push body each) against serveHTTPFloor in a child process: the
// request rate HTTP/1.1 alone reaches on this machine with this load
// generator, which bounds what any broker behind Go's HTTP server can answer
// to push-b1. The server's CPU is reported in the broker column.
func (h *harness) httpFloorScenario(producers int) (Result, error) {
	exe, err := os.Executable()
	if err != nil {
		return Result{}, err
	}
	cmd := exec.CommandContext(context.Background(), exe) // stopped by the deferred Kill
	cmd.Env = append(os.Environ(), httpFloorEnv+"=127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return Result{}, err
	}
	if err := cmd.Start(); err != nil {
		return Result{}, err
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return Result{}, fmt.Errorf("http floor server: %w", err)
	}
	url := "http://" + strings.TrimSpace(line) + "/api/v1/push"
	body, err := json.Marshal(map[string]any{"items": []pushItem{{Queue: "bench-http-floor", Partition: "p0",
		TransactionID: "0-0-0", Payload: benchPayload{Body: payloadBody}}}})
	if err != nil {
		return Result{}, err
	}

	ctx, cancel := context.WithTimeout(context.Background(), h.o.duration)
	defer cancel()
	var answered atomic.Int64
	var firstErr firstError
	lat := &recorder{}
	var wg sync.WaitGroup
	serverT0, selfT0 := procTicks(cmd.Process.Pid), procTicks(os.Getpid())
	start := time.Now()
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			for ctx.Err() == nil {
				req.Header.SetMethod(http.MethodPost)
				req.SetRequestURI(url)
				req.Header.SetContentType("application/json")
				req.SetBodyRaw(body)
				t0 := time.Now()
				if err := h.http.Do(req, resp); err != nil {
					firstErr.set(err)
					return
				}
				if resp.StatusCode() != http.StatusCreated {
					firstErr.set(fmt.Errorf("http floor answered %d", resp.StatusCode()))
					return
				}
				lat.add(time.Since(t0))
				answered.Add(1)
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	r := Result{Scenario: "http-floor", System: "http", Available: true, Messages: answered.Load(), Seconds: secs,
		MsgPerSec: float64(answered.Load()) / secs, LatencyMs: lat.percentiles(),
		BrokerCPUCores:  float64(procTicks(cmd.Process.Pid)-serverT0) / clockTicks / secs,
		HarnessCPUCores: float64(procTicks(os.Getpid())-selfT0) / clockTicks / secs, LoadAvg: loadAvg(),
		Description: fmt.Sprintf("HTTP alone: %d closed-loop clients send push-b1's one-item push to a Go net/http server (a child process) "+
			"that reads the body and answers a push-sized 201, nothing else; what no broker behind Go's HTTP server can pass on "+
			"push-b1 here (broker CPU = that server's)", producers)}
	return r, firstErr.get()
}
