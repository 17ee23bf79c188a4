package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/spool"
)

// resilientBroker is a test broker with the resilience options wired as main.go does.
type resilientBroker struct {
	*testBroker
	Server *Server
	Spool  *spool.Spool
}

// newBrokerWith starts a broker on dsn; a non-empty spoolDir gives it a spool
// (its drain is not started: tests drive it or call runDrain).
func newBrokerWith(t testing.TB, dsn string, opts Options, spoolDir string) *resilientBroker {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dsn, "pool_max_conns=") {
		cfg.MaxConns = 10
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ecfg := engine.Config{}
	if opts.Admission != nil {
		ecfg.AdmitPopCheck = opts.Admission.Pop.Acquire
		ecfg.AdmitPopRecheck = opts.Admission.Pop.TryAcquire
	}
	eng := engine.New(pool, ecfg)
	b := &resilientBroker{}
	if spoolDir != "" {
		sp, err := spool.Open(spool.Options{Dir: spoolDir, Push: eng.ReplayPush, Paused: func() bool { return b.Server.PushMaintenance() }})
		if err != nil {
			t.Fatal(err)
		}
		b.Spool = sp
		opts.Spool = sp
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	opts.Version = "test"
	b.Server = NewServer(eng, opts)
	h, err := b.Server.Handler()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnContext = ConnContext
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		eng.Close()
		pool.Close()
		if b.Spool != nil {
			_ = b.Spool.Close()
		}
	})
	b.testBroker = &testBroker{URL: srv.URL, Engine: eng, Pool: pool}
	return b
}

// runDrain runs the spool's background drain until the test ends.
func (b *resilientBroker) runDrain(t testing.TB) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.Spool.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// doAs calls a route with a bearer token, fails the test unless it answers
// 200 or 201, and decodes the answer into out (when not nil).
func (b *testBroker) doAs(t testing.TB, token, method, path, body string, out any) {
	t.Helper()
	req, err := http.NewRequest(method, b.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	if out != nil {
		decodeJSON(t, resp, out)
	}
}

// callAs is call with an Authorization header.
func (b *testBroker) callAs(t testing.TB, token, method, path, body string) (int, errorBody, http.Header) {
	t.Helper()
	var rd *strings.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	var req *http.Request
	var err error
	if rd != nil {
		req, err = http.NewRequest(method, b.URL+path, rd)
	} else {
		req, err = http.NewRequest(method, b.URL+path, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e errorBody
	if resp.StatusCode >= 400 {
		decodeJSON(t, resp, &e)
	}
	return resp.StatusCode, e, resp.Header
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func decodeJSON(t testing.TB, resp *http.Response, out any) {
	t.Helper()
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("decode %q: %v", raw, err)
	}
}
