package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// parkedPopStack returns the stack of the goroutine parked in the engine's
// long poll ("" when none is).
func parkedPopStack(t *testing.T) string {
	t.Helper()
	var all bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&all, 2); err != nil {
		t.Fatal(err)
	}
	for stack := range strings.SplitSeq(all.String(), "\n\n") {
		if strings.Contains(stack, "[select") && strings.Contains(stack, "engine.(*Engine).popWaiting") {
			return stack
		}
	}
	return ""
}

// A parked long poll holds its goroutine for up to its timeout, and the
// garbage collector walks that goroutine's stack at every cycle. Parked
// inside the handler chain it held some 40 frames and 8 KB of a 16 KB stack
// (validation, routing, the generated handler); it now parks after they have
// returned, and still answers with the message pushed meanwhile.
func TestAParkedLongPollHoldsNoneOfTheHandlerChainsFrames(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	type answer struct {
		pop popBody
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		var a answer
		resp, err := http.Get(b.URL + "/api/v1/pop/queue/" + q + "?wait=true&timeout=10000")
		if a.err = err; err == nil {
			a.err = json.NewDecoder(resp.Body).Decode(&a.pop)
			resp.Body.Close()
		}
		answered <- a
	}()
	waitFor(t, 5*time.Second, "the long poll to park", func() bool { return b.Engine.ParkedPops() == 1 })
	var stack string
	waitFor(t, 5*time.Second, "the parked goroutine", func() bool { stack = parkedPopStack(t); return stack != "" })
	for _, deep := range []string{"nethttp-middleware", "gorilla/mux", "strictHandler", "strictMiddleware", "api.(*Server).PopQueue"} {
		if strings.Contains(stack, deep) {
			t.Errorf("the parked long poll still holds %s:\n%s", deep, stack)
		}
	}
	// Each frame is a function line and a file line.
	if frames := strings.Count(stack, "\n\t") / 2; frames > 16 {
		t.Errorf("the parked long poll holds %d frames:\n%s", frames, stack)
	}
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "transactionId": "m0", "payload": 1}}}, nil)
	select {
	case a := <-answered:
		if a.err != nil || len(a.pop.Messages) != 1 || a.pop.Messages[0].TransactionID != "m0" {
			t.Fatalf("the long poll answered %+v, %v", a.pop, a.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the long poll was not woken by the push")
	}
}
