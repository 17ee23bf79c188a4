package lanes

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A long poll answered empty in under a tenth of its timeout pauses 100 ms, doubling on each
// such answer in a row up to 2 s; one that waited resets the streak.
func TestEmptyPauseAfterFastEmptyLongPolls(t *testing.T) {
	t.Parallel()
	p := poller{q: QueueBuilder{wait: true, timeout: time.Second}}
	fast, waited := 5*time.Millisecond, time.Second
	var got []time.Duration
	for _, elapsed := range []time.Duration{fast, fast, fast, fast, fast, fast, fast, waited, fast} {
		got = append(got, p.emptyPause(elapsed, time.Second))
	}
	ms := time.Millisecond
	require.Equal(t, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 2000 * ms, 2000 * ms, 0, 100 * ms}, got)

	nonWaiting := poller{q: QueueBuilder{wait: false}}
	require.Equal(t, 100*ms, nonWaiting.emptyPause(fast, 0))
}

// A broker (or proxy) that answers every long poll 204 at once does not make an idle consume
// loop or iterator spin: in 1.6 s they send a handful of pops, not thousands.
func TestFastEmptyLongPollsArePaced(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"consume", "iterator"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusNoContent)
			})
			q := c.Queue("q").Wait(true).Timeout(time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 1600*time.Millisecond)
			defer cancel()
			if how == "consume" {
				err := q.Run(ctx, func(context.Context, *Message) error { return nil })
				require.ErrorIs(t, err, context.DeadlineExceeded)
			} else {
				for m, err := range q.Messages(ctx) {
					t.Fatalf("unexpected %v %v", m, err)
				}
			}
			// pops at about 0, 0.1, 0.3, 0.7 and 1.5 s
			t.Logf("%s: %d pops in 1.6 s", how, fb.count())
			require.GreaterOrEqual(t, fb.count(), 3)
			require.LessOrEqual(t, fb.count(), 8)
		})
	}
}

// ackFake answers pops with popTwoPartitions, then 204, and every ack with ackStatus.
func ackFake(t *testing.T, ackStatus int, opts ...Option) *Client {
	t.Helper()
	var pops atomic.Int64
	c, _, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/v1/ack") {
			writeJSON(w, ackStatus, `{"error":"scripted","code":"scripted"}`)
			return
		}
		if pops.Add(1) == 1 {
			writeJSON(w, 200, popTwoPartitions)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}, append([]Option{WithRetryAttempts(0)}, opts...)...)
	return c
}

// An ack answered 403, 413, another 4xx (but 408, 409, 429) or 501 ends the consumer with that
// error, as the same answer to a pop does; any other failed ack goes to OnError and the loop goes on.
func TestConsumeAckErrorsFollowThePopTerminalRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status   int
		terminal bool
	}{{403, true}, {413, true}, {400, true}, {404, true}, {501, true}, {408, false}, {409, false}, {503, false}} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			t.Parallel()
			c := ackFake(t, tc.status)
			var mu sync.Mutex
			var reported []error
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cons, err := c.Queue("q").Wait(false).
				OnError(func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }).
				Consume(ctx, func(context.Context, *Message) error { return nil })
			require.NoError(t, err)
			select {
			case <-cons.Done():
			case <-time.After(time.Second):
			}
			mu.Lock()
			defer mu.Unlock()
			require.NotEmpty(t, reported)
			var ae *APIError
			require.ErrorAs(t, reported[0], &ae)
			require.Equal(t, tc.status, ae.Status)
			if tc.terminal {
				require.ErrorAs(t, cons.Err(), &ae, "the consumer ended with the ack's error")
				require.Equal(t, tc.status, ae.Status)
				return
			}
			select {
			case <-cons.Done():
				t.Fatalf("a %d ack ended the consumer: %v", tc.status, cons.Err())
			default:
			}
		})
	}
}

// The iterator yields a terminal ack error and ends; a transient one goes to OnError and the
// iteration goes on.
func TestMessagesAckErrorsFollowThePopTerminalRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status   int
		terminal bool
	}{{403, true}, {400, true}, {501, true}, {409, false}, {503, false}} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			t.Parallel()
			c := ackFake(t, tc.status)
			var reported, yielded []error
			handled := 0
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			for m, err := range c.Queue("q").Wait(false).OnError(func(err error) { reported = append(reported, err) }).Messages(ctx) {
				if err != nil {
					yielded = append(yielded, err)
					continue
				}
				require.NotNil(t, m)
				handled++
			}
			require.Equal(t, 4, handled)
			var ae *APIError
			if tc.terminal {
				require.Len(t, yielded, 1)
				require.ErrorAs(t, yielded[0], &ae)
				require.Equal(t, tc.status, ae.Status)
				require.Empty(t, reported)
				return
			}
			require.Empty(t, yielded, "a transient ack error is never yielded")
			require.Len(t, reported, 1)
			require.ErrorAs(t, reported[0], &ae)
			require.Equal(t, tc.status, ae.Status)
		})
	}
}

// Without OnError, loop and iterator errors are logged at warning level, one line each with the
// operation, on the client's logger, else on slog.Default().
func TestLoopErrorsWithoutOnErrorAreLoggedAsWarnings(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
	run := func(opts ...Option) {
		c := ackFake(t, 503, opts...)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		for _, err := range c.Queue("q").Wait(false).Messages(ctx) {
			require.NoError(t, err)
		}
	}
	run(WithLogger(logger))
	mu.Lock()
	require.Equal(t, 1, strings.Count(buf.String(), "level=WARN"), buf.String())
	require.Contains(t, buf.String(), "op=ack")
	require.Contains(t, buf.String(), "503")
	buf.Reset()
	mu.Unlock()

	prev := slog.Default()
	slog.SetDefault(logger)
	t.Cleanup(func() { slog.SetDefault(prev) })
	run()
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, strings.Count(buf.String(), "level=WARN"), buf.String())
	require.Contains(t, buf.String(), "op=ack")
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// The long poll of a pop with idle time left is cut to it, rounded up to whole milliseconds so
// it never becomes 0 (which would not wait at all); a pop that does not park keeps its timeout.
func TestCutLongPollRoundsUpToWholeMilliseconds(t *testing.T) {
	t.Parallel()
	q := QueueBuilder{wait: true, timeout: 5 * time.Second}
	require.Equal(t, time.Millisecond, cutLongPoll(q, 300*time.Microsecond))
	require.Equal(t, 300*time.Millisecond, cutLongPoll(q, 299200*time.Microsecond))
	require.Equal(t, 300*time.Millisecond, cutLongPoll(q, 300*time.Millisecond))
	require.Equal(t, 5*time.Second, cutLongPoll(q, time.Minute))
	require.Equal(t, time.Duration(0), cutLongPoll(QueueBuilder{wait: true}, time.Second), "Timeout(0) does not wait")
	require.Equal(t, 5*time.Second, cutLongPoll(QueueBuilder{timeout: 5 * time.Second}, time.Second), "Wait(false) is sent as it was")
}
