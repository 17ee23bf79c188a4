// Command adapter-go is the Go SDK's conformance adapter: it reads cases as JSON Lines on
// stdin, runs each step through the public API of github.com/lanesmq/lanes/sdk-go, and writes
// one result line per case on stdout. It never speaks HTTP itself. Protocol: docs/conformance.md.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

type caseIn struct {
	Case    string            `json:"case"`
	Run     string            `json:"run"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	Client  clientOpts        `json:"client"`
	Steps   []stepIn          `json:"steps"`
}

type clientOpts struct {
	RetryAttempts   *int              `json:"retryAttempts"`
	RetryDelayMs    *int              `json:"retryDelayMs"`
	MaxRetryDelayMs *int              `json:"maxRetryDelayMs"`
	Max429Attempts  *int              `json:"max429Attempts"`
	MaxRetryAfterMs *int              `json:"maxRetryAfterMs"`
	TimeoutMs       *int              `json:"timeoutMs"`
	PopAutopilot    *bool             `json:"popAutopilot"`
	Env             map[string]string `json:"env"`
	// URLs replaces the case's url with several brokers in order (the runner has put the
	// case's url in place of "${url}").
	URLs               []string `json:"urls"`
	HealthRetryAfterMs *int     `json:"healthRetryAfterMs"`
	BearerToken        string   `json:"bearerToken"`
	// BearerTokenFunc is the prefix of the tokens a token function gives: prefix1, prefix2, …
	// one per call, so a case sees when the SDK asked for one.
	BearerTokenFunc string            `json:"bearerTokenFunc"`
	Headers         map[string]string `json:"headers"`
	// HeadersInOrder are extra headers given one WithHeader call each, in order (a map has
	// none), for a case naming one header in two letter cases.
	HeadersInOrder [][2]string `json:"headersInOrder"`
	// CallerTransport gives the client an *http.Client of the adapter's (WithHTTPClient) that
	// stamps each request it carries with callerTransportHeader.
	CallerTransport bool `json:"callerTransport"`
	// CaptureLogs gives the client a logger (WithLogger) whose records the logs step reads.
	CaptureLogs bool `json:"captureLogs"`
}

type stepIn struct {
	ID         string          `json:"id"`
	Op         string          `json:"op"`
	Args       json.RawMessage `json:"args"`
	Background *struct {
		AfterMs int `json:"afterMs"`
	} `json:"background"`
}

type stepOut struct {
	ID     string         `json:"id"`
	Result map[string]any `json:"result"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var c caseIn
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			_ = out.Encode(map[string]any{"error": "bad case line: " + err.Error()})
			continue
		}
		steps, err := runCase(c)
		res := map[string]any{"case": c.Case, "steps": steps}
		if err != nil {
			res["error"] = err.Error()
		}
		_ = out.Encode(res)
	}
}

// state is what one case's steps share: the client, saved message sets, dead letters, the
// messages a message walk handed over, listing pages' nextAfter keys, time marks, and walks left
// open for a walkResume.
type state struct {
	client *lanes.Client
	saved  map[string][]*lanes.Message
	dlq    map[string][]lanes.DLQMessage
	walked map[string][]lanes.MessageListItem
	pages  map[string]*string
	marks  map[string]time.Time
	walks  map[string]*openWalk
	logged *logRecorder // the client's logger with captureLogs, else nil
}

func newClient(c caseIn, logged *logRecorder) (*lanes.Client, error) {
	o := c.Client
	urls := []string{c.URL}
	if len(o.URLs) > 0 {
		urls = o.URLs
	}
	opts := []lanes.Option{lanes.WithURL(urls...)}
	for k, v := range c.Headers {
		opts = append(opts, lanes.WithHeader(k, v))
	}
	for k, v := range o.Headers {
		opts = append(opts, lanes.WithHeader(k, v))
	}
	for _, kv := range o.HeadersInOrder {
		opts = append(opts, lanes.WithHeader(kv[0], kv[1]))
	}
	if logged != nil {
		opts = append(opts, lanes.WithLogger(slog.New(recordingHandler{to: logged})))
	}
	if o.CallerTransport {
		opts = append(opts, lanes.WithHTTPClient(&http.Client{Transport: &stampingTransport{}}))
	}
	if o.BearerToken != "" {
		opts = append(opts, lanes.WithBearerToken(o.BearerToken))
	}
	if o.BearerTokenFunc != "" {
		var calls atomic.Int64
		opts = append(opts, lanes.WithBearerTokenFunc(func(context.Context) (string, error) {
			return fmt.Sprintf("%s%d", o.BearerTokenFunc, calls.Add(1)), nil
		}))
	}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	if o.HealthRetryAfterMs != nil {
		opts = append(opts, lanes.WithHealthRetryAfter(ms(*o.HealthRetryAfterMs)))
	}
	if o.RetryAttempts != nil {
		opts = append(opts, lanes.WithRetryAttempts(*o.RetryAttempts))
	}
	if o.RetryDelayMs != nil {
		opts = append(opts, lanes.WithRetryDelay(ms(*o.RetryDelayMs)))
	}
	if o.MaxRetryDelayMs != nil {
		opts = append(opts, lanes.WithMaxRetryDelay(ms(*o.MaxRetryDelayMs)))
	}
	if o.Max429Attempts != nil {
		opts = append(opts, lanes.WithMax429Attempts(*o.Max429Attempts))
	}
	if o.MaxRetryAfterMs != nil {
		opts = append(opts, lanes.WithMaxRetryAfter(ms(*o.MaxRetryAfterMs)))
	}
	if o.TimeoutMs != nil {
		opts = append(opts, lanes.WithTimeout(ms(*o.TimeoutMs)))
	}
	if o.PopAutopilot != nil {
		opts = append(opts, lanes.WithPopAutopilot(*o.PopAutopilot))
	}
	// Environment read by the constructor (LANES_SDK_POP_AUTOPILOT) is set around it only.
	restore := map[string]*string{}
	for k, v := range o.Env {
		if old, ok := os.LookupEnv(k); ok {
			restore[k] = &old
		} else {
			restore[k] = nil
		}
		_ = os.Setenv(k, v)
	}
	defer func() {
		for k, v := range restore {
			if v == nil {
				_ = os.Unsetenv(k)
			} else {
				_ = os.Setenv(k, *v)
			}
		}
	}()
	return lanes.New(opts...)
}

// closeClient closes the case's client in the middle of the case (the case's end closes it again,
// which is safe), so the steps after it run on a closed client.
func (s *state) closeClient(ctx context.Context, _ struct{}) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := s.client.Close(ctx)
	return withErr(map[string]any{"ok": err == nil}, err), nil
}

// callerTransportHeader is what the caller's transport (client option callerTransport) adds to
// each request it carries: how many it has carried, that one included, so a case sees that every
// request and retry went through it.
const callerTransportHeader = "X-Lanes-Caller-Transport"

type stampingTransport struct{ carried atomic.Int64 }

func (t *stampingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context()) // a RoundTripper must not change the request it was given
	r.Header.Set(callerTransportHeader, strconv.FormatInt(t.carried.Add(1), 10))
	return http.DefaultTransport.RoundTrip(r)
}

func runCase(c caseIn) ([]stepOut, error) {
	var logged *logRecorder
	if c.Client.CaptureLogs {
		logged = &logRecorder{}
	}
	client, err := newClient(c, logged)
	if err != nil {
		return nil, fmt.Errorf("lanes.New: %w", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.Close(ctx)
	}()
	st := &state{client: client, saved: map[string][]*lanes.Message{}, dlq: map[string][]lanes.DLQMessage{}, walked: map[string][]lanes.MessageListItem{}, pages: map[string]*string{}, marks: map[string]time.Time{}, walks: map[string]*openWalk{}, logged: logged}
	registry := st.steps()
	runStep := func(s stepIn, start time.Time) map[string]any {
		var (
			res map[string]any
			err error
		)
		if run, ok := registry[s.Op]; ok {
			res, err = run(context.Background(), s.Args)
		} else {
			res = map[string]any{"unsupported": s.Op}
		}
		if err != nil {
			res = map[string]any{"adapterError": err.Error()}
		}
		if res == nil {
			res = map[string]any{}
		}
		res["elapsedMs"] = time.Since(start).Milliseconds()
		return res
	}
	steps := make([]stepOut, len(c.Steps))
	var background sync.WaitGroup // background steps (a push only: it shares no saved state)
	for i, s := range c.Steps {
		steps[i].ID = s.ID
		start := time.Now()
		if s.Background != nil {
			background.Add(1)
			go func() {
				defer background.Done()
				time.Sleep(time.Duration(s.Background.AfterMs) * time.Millisecond)
				steps[i].Result = runStep(s, start)
			}()
			continue
		}
		steps[i].Result = runStep(s, start)
	}
	background.Wait()
	for _, w := range st.walks {
		w.stop()
	}
	return steps, nil
}

// ---------------------------------------------------------------------------------------------
// errors

func withErr(out map[string]any, err error) map[string]any {
	if err != nil {
		out["error"] = errKind(err)
	}
	return out
}

// errKind maps an SDK error to the protocol's neutral shape.
func errKind(err error) map[string]any {
	var (
		pe  *lanes.PushError
		ae  *lanes.AckError
		te  *lanes.TransactionError
		api *lanes.APIError
		ou  *lanes.OutcomeUnknownError
		he  *lanes.HandlerError
		ue  *lanes.UnsentError
		ie  *lanes.InvalidItemError
	)
	switch {
	case errors.As(err, &ue):
		return map[string]any{"kind": "unsent", "unsent": ue.Unsent, "message": err.Error()}
	case errors.As(err, &he):
		ids := make([]string, 0, len(he.Messages))
		for _, m := range he.Messages {
			ids = append(ids, m.TransactionID)
		}
		return map[string]any{"kind": "handler", "transactionIds": ids, "message": err.Error()}
	case errors.As(err, &ou):
		// The kind of the last attempt's failure; timeout as the error itself reports it.
		out := errKind(ou.Err)
		delete(out, "timeout")
		if errors.Is(err, lanes.ErrTimeout) {
			out["timeout"] = true
		}
		out["outcomeUnknown"] = true
		out["attempts"] = ou.Attempts
		out["message"] = err.Error()
		return out
	case errors.Is(err, lanes.ErrClientClosed):
		return map[string]any{"kind": "client_closed", "message": err.Error()}
	case errors.As(err, &ie):
		return map[string]any{"kind": "invalid_item", "index": ie.Index, "message": err.Error()}
	case errors.As(err, &pe):
		return map[string]any{"kind": "push", "message": err.Error()}
	case errors.As(err, &ae):
		return map[string]any{"kind": "ack", "message": err.Error()}
	case errors.As(err, &te):
		out := map[string]any{"kind": "transaction", "reason": te.Reason, "message": err.Error()}
		if te.KVReason != "" {
			out["kvReason"] = te.KVReason
		}
		if te.FailedIndex != nil {
			out["failedIndex"] = *te.FailedIndex
		}
		return out
	case errors.As(err, &api):
		kind := map[int]string{429: "rate_limited", 403: "forbidden", 413: "payload_too_large", 404: "not_found", 501: "not_implemented"}[api.Status]
		if kind == "" {
			kind = "api"
		}
		out := map[string]any{"kind": kind, "status": api.Status, "code": api.Code, "message": api.Message,
			"terminal": api.Terminal(), "attempts": api.Attempts}
		if api.RetryAfter > 0 {
			out["retryAfterMs"] = api.RetryAfter.Round(time.Millisecond).Milliseconds()
		}
		return out
	case errors.Is(err, lanes.ErrConnection):
		out := map[string]any{"kind": "connection", "message": err.Error()}
		var ce *lanes.ConnectionError
		if errors.As(err, &ce) {
			out["attempts"] = ce.Attempts
		}
		if errors.Is(err, lanes.ErrTimeout) {
			out["timeout"] = true
		}
		return out
	default:
		return map[string]any{"kind": "other", "message": strings.TrimSpace(err.Error())}
	}
}
