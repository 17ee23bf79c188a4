package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/testdb"
)

// testDSN is one database shared by the package's tests; tests use their own queue names.
var testDSN string

func TestMain(m *testing.M) {
	// Not UTC, as on many hosts: pgx scans times in the local zone, and the
	// wire gives them in UTC, so a missed conversion shows in the answers.
	time.Local = time.FixedZone("UTC-5", -5*60*60)
	os.Exit(testdb.Main(m, &testDSN, engine.ApplySchema))
}

// newEnginePool opens a pool on dsn configured as the broker's own (engine.ConfigurePool).
func newEnginePool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	engine.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

// testBroker is a real broker: engine on PostgreSQL behind the real handler on a real listener.
type testBroker struct {
	URL    string
	Engine *engine.Engine
	Pool   *pgxpool.Pool
}

// wantBadRequest sends method path with body ("" for none) and fails the test
// unless the broker answers 400 with code and an error message holding about.
func (b *testBroker) wantBadRequest(t *testing.T, method, path, body, code, about string) {
	t.Helper()
	var payload any
	if body != "" {
		payload = body
	}
	var e errorBody
	status, _ := b.call(t, method, path, payload, &e)
	if status != http.StatusBadRequest || e.Code != code || e.Error == "" || !strings.Contains(e.Error, about) {
		t.Fatalf("want 400 %s about %q, got %d %+v", code, about, status, e)
	}
}

// fireDueTimers fires every due timer of the shared database, this test's and
// any other test's, until none is left.
func (b *testBroker) fireDueTimers(t testing.TB) {
	t.Helper()
	for {
		n, err := b.Engine.FireDueTimers(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
}

func newTestBroker(t testing.TB) *testBroker {
	t.Helper()
	pool := newEnginePool(t, testDSN)
	eng := engine.New(pool, engine.Config{})
	h, err := NewServer(eng, Options{Version: "test", MaxBodyBytes: 1 << 20}).Handler()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = JSONProtocolErrors(srv.Listener)
	srv.Start()
	t.Cleanup(func() { srv.Close(); eng.Close(); pool.Close() })
	return &testBroker{URL: srv.URL, Engine: eng, Pool: pool}
}

var queueSeq atomic.Int64

func uniqueQueue(t testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return fmt.Sprintf("%s-%d-%d", name, time.Now().UnixNano()%1e6, queueSeq.Add(1))
}

// call sends a request with a JSON (or raw string) body and decodes the JSON answer into out.
func (b *testBroker) call(t testing.TB, method, path string, body any, out any) (int, http.Header) {
	t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	default:
		buf, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, b.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, resp.Header
}

// getOK answers the body and headers of a GET that must answer 200.
func (b *testBroker) getOK(t testing.TB, path string) ([]byte, http.Header) {
	t.Helper()
	resp, err := http.Get(b.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, raw)
	}
	return raw, resp.Header
}

// errorBody is the JSON error envelope.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// segmentsOf counts the segments stored for queue.
func (b *testBroker) segmentsOf(t testing.TB, queue string) int {
	t.Helper()
	var n int
	if err := b.Pool.QueryRow(t.Context(), `SELECT count(*) FROM lanes.segments s JOIN lanes.partitions p ON p.id = s.partition_id
		JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $1`, queue).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
