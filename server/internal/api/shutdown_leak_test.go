package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/spool"
)

// TestShutdownEndsEveryBrokerGoroutine runs a broker wired as cmd/lanes wires it (every
// background loop on, a spool, long polls parked on a queue and on a namespace), shuts it down
// in cmd/lanes's order, and requires that none of its goroutines is left: no parked pop,
// waiter, timers/retention/KV loop, spool drain, lag collector or maintenance refresh. Not
// parallel, so the other tests' goroutines are the ones running before it (ignored).
func TestShutdownEndsEveryBrokerGoroutine(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	pool := newEnginePool(t, testDSN)
	eng := engine.New(pool, engine.Config{})
	sp, err := spool.Open(spool.Options{Dir: t.TempDir(), Push: eng.ReplayPush, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(eng, Options{Version: "test", MaxBodyBytes: 1 << 20, Spool: sp})
	h, err := srv.Handler()
	if err != nil {
		t.Fatal(err)
	}
	loopsCtx, stopLoops := context.WithCancel(context.Background())
	defer stopLoops()
	eng.StartRetention(10 * time.Millisecond)
	eng.StartTimers(10 * time.Millisecond)
	eng.StartKVSweeper(10 * time.Millisecond)
	go sp.Run(loopsCtx)
	go srv.RunLagCollector(loopsCtx, 10*time.Millisecond, 100)
	go srv.RunMaintenanceRefresh(loopsCtx)

	httpServer := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	httpServer.RegisterOnShutdown(eng.ReleaseParkedPops)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- httpServer.Serve(JSONProtocolErrors(listener)) }()
	base := "http://" + listener.Addr().String()

	q := uniqueQueue(t)
	tr := &http.Transport{}
	client := &http.Client{Transport: tr}
	parked := []string{
		"/api/v1/pop/queue/" + q + "?wait=true&timeout=30000",
		"/api/v1/pop/queue/" + q + "?wait=true&timeout=30000&consumerGroup=g",
		"/api/v1/pop?namespace=" + q + "&wait=true&timeout=30000",
	}
	answers := make(chan int, len(parked))
	for _, path := range parked {
		go func() {
			resp, err := client.Get(base + path)
			if err != nil {
				answers <- 0
				return
			}
			_ = resp.Body.Close()
			answers <- resp.StatusCode
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for eng.ParkedPops() < len(parked) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pops parked", eng.ParkedPops(), len(parked))
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a few turns of every loop

	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := httpServer.Shutdown(shutdownCtx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	for range parked {
		if status := <-answers; status != http.StatusNoContent {
			t.Errorf("a parked pop answered %d at shutdown, want 204", status)
		}
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("serve: %v", err)
	}
	stopLoops()
	_ = sp.Close()
	eng.Shutdown(shutdownCtx)
	pool.Close()
	tr.CloseIdleConnections()
	goleak.VerifyNone(t, ignore)
}
