package api

import (
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/mux"

	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/testlog"
)

// TestPanicAfterTheStatusWritesNothingMore: a handler that panics once its
// answer's status is out used to get a second status written by recovery
// (net/http: "superfluous response.WriteHeader call") after a body the client
// could take for whole. Now it logs one ERROR and the connection is aborted;
// a panic before the status still answers a JSON 500 internal_error.
func TestPanicAfterTheStatusWritesNothingMore(t *testing.T) {
	out := &testlog.Buffer{}
	pool := newEnginePool(t, testDSN)
	eng := engine.New(pool, engine.Config{})
	t.Cleanup(func() { eng.Close(); pool.Close() })
	s := NewServer(eng, Options{Version: "test", MaxBodyBytes: 1 << 20, Logger: slog.New(slog.NewTextHandler(out, nil))})
	panicky := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/after" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, `{"messages":[`)
			w.(http.Flusher).Flush()
		}
		panic("handler bug")
	})
	srv := httptest.NewUnstartedServer(s.observeAndRecover(panicky, mux.NewRouter()))
	srv.Config.ErrorLog = log.New(out, "net/http: ", 0)
	srv.Start()
	t.Cleanup(srv.Close)

	resp, err := http.Get(srv.URL + "/before")
	if err != nil {
		t.Fatal(err)
	}
	var e errorBody
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != http.StatusInternalServerError || e.Code != CodeInternal {
		t.Fatalf("panic before the status: want 500 %s, got %d %+v (%v)", CodeInternal, resp.StatusCode, e, err)
	}
	_ = resp.Body.Close()

	resp, err = http.Get(srv.URL + "/after")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || err == nil {
		t.Fatalf("panic after the status: want 200 and a body cut short (a read error), got %d %q, err %v", resp.StatusCode, body, err)
	}
	srv.Close() // waits for the handlers, so their log lines are in
	got := out.String()
	if n := strings.Count(got, "level=ERROR"); n != 2 || strings.Contains(got, "superfluous") {
		t.Fatalf("want one ERROR per panic and no second status, got:\n%s", got)
	}
	if !strings.Contains(got, "after its status was sent") {
		t.Fatalf("the panic after the status is not logged as such:\n%s", got)
	}
}
