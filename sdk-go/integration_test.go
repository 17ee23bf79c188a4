package lanes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// These tests run against a real broker and PostgreSQL: LANES_TEST_URL (set by `make test`
// through scripts/test-broker.sh). Without it they fail, never pass silently.

type bundle struct {
	c     *lanes.Client
	queue string
	ctx   context.Context
}

var nonWord = regexp.MustCompile(`[^a-zA-Z0-9]+`)

// testBrokerURL is LANES_TEST_URL; without it the test fails.
func testBrokerURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("LANES_TEST_URL")
	if url == "" {
		t.Fatal("LANES_TEST_URL is not set: start a broker from the repository root (scripts/test-broker.sh start) and export LANES_TEST_URL=$(scripts/test-broker.sh url), or run `make test`")
	}
	return url
}

func setup(t *testing.T) bundle {
	t.Helper()
	c, err := lanes.New(lanes.WithURL(testBrokerURL(t)))
	require.NoError(t, err)
	closeWhenDone(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	name := strings.ToLower(nonWord.ReplaceAllString(t.Name(), "-"))
	q := fmt.Sprintf("sdkgo-%s-%d", name, time.Now().UnixNano())
	return bundle{c: c, queue: q, ctx: ctx}
}

func pushN(t *testing.T, b bundle, partition string, n int, prefix string) {
	t.Helper()
	items := make([]lanes.Item, n)
	for i := range items {
		items[i] = lanes.Item{Data: map[string]any{"p": partition, "i": i}, TransactionID: fmt.Sprintf("%s-%s-%d", prefix, partition, i)}
	}
	res, err := b.c.Queue(b.queue).Partition(partition).Push(b.ctx, items...)
	require.NoError(t, err)
	require.Len(t, res, n)
}

func TestITPushPopAck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.c.Queue(b.queue)
	res, err := q.Partition("customer-42").Push(b.ctx, lanes.Data(map[string]int{"orderId": 1}), lanes.Data(2), lanes.Item{Data: "three", TransactionID: "fixed-3"})
	require.NoError(t, err)
	require.Len(t, res, 3)
	for i, r := range res {
		require.Equal(t, lanes.StatusQueued, r.Status)
		require.Equal(t, i, r.Index)
		require.Equal(t, b.queue, r.Queue)
		require.NotEmpty(t, r.MessageID)
	}
	require.Equal(t, "fixed-3", res[2].TransactionID)
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-7`, res[0].TransactionID, "UUIDv7 minted")

	dup, err := q.Partition("customer-42").Push(b.ctx, lanes.Item{Data: "again", TransactionID: "fixed-3"})
	require.NoError(t, err)
	require.Equal(t, lanes.StatusDuplicate, dup[0].Status)
	require.Equal(t, res[2].MessageID, dup[0].MessageID)

	msgs, err := q.Wait(false).Batch(10).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, msgs, 3)
	require.Equal(t, res[0].TransactionID, msgs[0].TransactionID)
	require.Equal(t, "customer-42", msgs[0].Partition)
	var v map[string]int
	require.NoError(t, msgs[0].Decode(&v))
	require.Equal(t, 1, v["orderId"])

	acks, err := b.c.Ack(b.ctx, msgs, lanes.AckCompleted)
	require.NoError(t, err)
	require.Len(t, acks, 3)
	for _, a := range acks {
		require.True(t, a.Success)
	}
	again, err := q.Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Empty(t, again)
}

// One Ack over messages of two consumer groups sends one batch per group and answers in the
// caller's order; a lease-less ack and a failed ack with a reason go through the same calls.
func TestITAckAcrossGroupsKeepsOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 2, "groups")
	popAll := func(group string) []*lanes.Message {
		msgs, err := b.c.Queue(b.queue).Group(group).SubscriptionMode("all").Wait(false).Batch(10).Pop(b.ctx)
		require.NoError(t, err)
		require.Len(t, msgs, 2, group)
		return msgs
	}
	billing, audit := popAll("billing"), popAll("audit")
	mixed := []*lanes.Message{billing[0], audit[0], billing[1], audit[1]}
	acks, err := b.c.Ack(b.ctx, mixed, lanes.AckCompleted)
	require.NoError(t, err)
	require.Len(t, acks, len(mixed))
	for i, a := range acks {
		require.True(t, a.Success, "ack %d", i)
		require.Equal(t, i, a.Index)
		require.Equal(t, mixed[i].TransactionID, a.TransactionID)
	}
	for _, g := range []string{"billing", "audit"} {
		left, err := b.c.Queue(b.queue).Group(g).Wait(false).Pop(b.ctx)
		require.NoError(t, err)
		require.Empty(t, left, g)
	}

	pushN(t, b, "a", 1, "leaseless")
	one, err := b.c.Queue(b.queue).Group("billing").Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, one, 1)
	acks, err = b.c.Ack(b.ctx, one, lanes.AckDLQ, lanes.AckOpts{WithoutLease: true, Error: "poison"})
	require.NoError(t, err)
	require.True(t, acks[0].Success)
	require.True(t, acks[0].DLQ)
	dead, err := b.c.Admin().ListDLQ(b.ctx, lanes.DLQQuery{Queue: b.queue, Group: "billing"})
	require.NoError(t, err)
	require.Len(t, dead.Messages, 1)
	require.Equal(t, one[0].TransactionID, dead.Messages[0].TransactionId)
	require.Equal(t, "poison", *dead.Messages[0].ErrorMessage)
}

func TestITPopWaitAndSingleAck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.c.Queue(b.queue)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _ = q.Push(context.Background(), lanes.Data("late"))
	}()
	start := time.Now()
	msgs, err := q.Wait(true).Timeout(10 * time.Second).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.Less(t, time.Since(start), 8*time.Second)
	acks, err := b.c.Ack(b.ctx, msgs[:1], lanes.AckCompleted)
	require.NoError(t, err)
	require.True(t, acks[0].Success)
	// a bad ack is a result, not a transport error
	_, err = b.c.Ack(b.ctx, []*lanes.Message{{TransactionID: "never-pushed", PartitionID: msgs[0].PartitionID, ConsumerGroup: msgs[0].ConsumerGroup}}, lanes.AckFailed)
	var ae *lanes.AckError
	require.ErrorAs(t, err, &ae)
}

func TestITRenewAndAutopilotOff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 2, "r")
	r, err := b.c.Queue(b.queue).Autopilot(false).Wait(false).PopResult(b.ctx)
	require.NoError(t, err)
	require.Len(t, r.Messages, 1, "autopilot off restores batch 1")
	require.Nil(t, r.Autopilot)
	rr, err := b.c.RenewMessages(b.ctx, 30, r.Messages...)
	require.NoError(t, err)
	require.Len(t, rr, 1)
	require.True(t, rr[0].Success)
	require.NotNil(t, rr[0].NewExpiresAt)
	gone, err := b.c.Renew(b.ctx, 30, "00000000-0000-0000-0000-000000000000")
	require.NoError(t, err)
	require.False(t, gone[0].Success)
}

func TestITAutopilotDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 5, "ap")
	r, err := b.c.Queue(b.queue).Wait(false).PopResult(b.ctx)
	require.NoError(t, err)
	require.NotEmpty(t, r.Messages)
	if r.Autopilot == nil {
		t.Log("broker did not echo autopilot (server side not built yet, or LANES_POP_AUTOPILOT=off)")
		return
	}
	require.GreaterOrEqual(t, r.Autopilot.Batch, 1)
	require.Len(t, r.Messages, 5)
}

func TestITConsumeOrderWithConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	parts := []string{"p0", "p1", "p2", "p3"}
	for _, p := range parts {
		pushN(t, b, p, 25, "o")
	}
	var mu sync.Mutex
	seen := map[string][]int{}
	var inflight, maxInflight atomic.Int32
	cons, err := b.c.Queue(b.queue).Group("billing").SubscriptionMode("all").Batch(5).Partitions(1).
		Concurrency(4).Limit(100).Each().
		Consume(b.ctx, func(ctx context.Context, m *lanes.Message) error {
			n := inflight.Add(1)
			defer inflight.Add(-1)
			for {
				old := maxInflight.Load()
				if n <= old || maxInflight.CompareAndSwap(old, n) {
					break
				}
			}
			var v struct {
				P string `json:"p"`
				I int    `json:"i"`
			}
			if err := m.Decode(&v); err != nil {
				return err
			}
			time.Sleep(2 * time.Millisecond)
			mu.Lock()
			seen[v.P] = append(seen[v.P], v.I)
			mu.Unlock()
			return nil
		})
	require.NoError(t, err)
	select {
	case <-cons.Done():
	case <-b.ctx.Done():
		t.Fatal("consumer did not reach its limit")
	}
	require.NoError(t, cons.Err())
	total := 0
	for _, p := range parts {
		want := make([]int, 25)
		for i := range want {
			want[i] = i
		}
		require.Equal(t, want, seen[p], "order within partition %s", p)
		total += len(seen[p])
	}
	require.Equal(t, 100, total)
	require.Greater(t, maxInflight.Load(), int32(1), "workers ran in parallel")
	// everything acked: the group has nothing left
	left, err := b.c.Queue(b.queue).Group("billing").Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Empty(t, left)
}

func TestITNackOnErrorAndPanic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 1, "n")
	var calls atomic.Int32
	var txns sync.Map
	cons, err := b.c.Queue(b.queue).Wait(true).Timeout(2*time.Second).Limit(3).
		Consume(b.ctx, func(ctx context.Context, m *lanes.Message) error {
			n := calls.Add(1)
			txns.Store(n, m.TransactionID)
			switch n {
			case 1:
				return errors.New("boom")
			case 2:
				panic("kaboom")
			}
			return nil
		})
	require.NoError(t, err)
	<-cons.Done()
	require.NoError(t, cons.Err())
	require.Equal(t, int32(3), calls.Load())
	t1, _ := txns.Load(int32(1))
	t3, _ := txns.Load(int32(3))
	require.Equal(t, t1, t3, "the failed message was redelivered")
	left, err := b.c.Queue(b.queue).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Empty(t, left)
}

func TestITRenewLeaseSlowHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 1, "s")
	var errs []error
	var mu sync.Mutex
	var calls atomic.Int32
	cons, err := b.c.Queue(b.queue).Wait(false).LeaseSeconds(1).RenewLease(true, 300*time.Millisecond).Limit(1).
		OnError(func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }).
		Consume(b.ctx, func(ctx context.Context, m *lanes.Message) error {
			calls.Add(1)
			// meanwhile a competing pop must not get the message: the lease is renewed
			time.Sleep(1500 * time.Millisecond)
			other, err := b.c.Queue(b.queue).Wait(false).Pop(ctx)
			if err != nil {
				return err
			}
			if len(other) != 0 {
				return errors.New("lease expired under a slow handler")
			}
			time.Sleep(1000 * time.Millisecond)
			return nil
		})
	require.NoError(t, err)
	<-cons.Done()
	require.NoError(t, cons.Err())
	mu.Lock()
	require.Empty(t, errs)
	mu.Unlock()
	require.Equal(t, int32(1), calls.Load())
	left, err := b.c.Queue(b.queue).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Empty(t, left, "acked under the renewed lease")
}

// TestITRenewLeaseByDefault: with no renewal option set, a handler slower than its 1 s lease
// keeps the message (a second consumer gets nothing) and acks it; RenewLease(false, 0) turns the
// renewal off, and then the second consumer does get it.
func TestITRenewLeaseByDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.c.Queue(b.queue).Wait(false).LeaseSeconds(1).Limit(1)
	pushN(t, b, "a", 1, "default")
	stolen, errs := runSlowHandler(t, b, q)
	require.Zero(t, stolen, "a second consumer got the message under a running handler")
	require.Empty(t, errs)
	left, err := b.c.Queue(b.queue).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Empty(t, left, "acked under the renewed lease")

	pushN(t, b, "b", 1, "off")
	stolen, _ = runSlowHandler(t, b, q.RenewLease(false, 0))
	require.Equal(t, 1, stolen, "without renewal the 1 s lease expires under the handler")
}

// runSlowHandler consumes one message with a handler that outlives a 1 s lease and meanwhile lets
// a second consumer pop; it returns how many messages that consumer got and the loop's errors.
func runSlowHandler(t *testing.T, b bundle, q lanes.QueueBuilder) (int, []error) {
	t.Helper()
	var mu sync.Mutex
	var errs []error
	stolen := 0
	cons, err := q.OnError(func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }).
		Consume(b.ctx, func(ctx context.Context, m *lanes.Message) error {
			time.Sleep(1500 * time.Millisecond)
			other, err := b.c.Queue(b.queue).Wait(false).Pop(ctx)
			if err != nil {
				return err
			}
			stolen = len(other)
			time.Sleep(1000 * time.Millisecond)
			return nil
		})
	require.NoError(t, err)
	<-cons.Done()
	require.NoError(t, cons.Err())
	mu.Lock()
	defer mu.Unlock()
	return stolen, errs
}

func TestITSoftStopFinishesAndReleases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 3, "soft")
	started := make(chan struct{})
	release := make(chan struct{})
	var handled atomic.Int32
	cons, err := b.c.Queue(b.queue).Batch(3).Wait(false).LeaseSeconds(120).
		Consume(b.ctx, func(ctx context.Context, m *lanes.Message) error {
			if handled.Add(1) == 1 {
				close(started)
				<-release
			}
			return ctx.Err()
		})
	require.NoError(t, err)
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- cons.Stop(b.ctx) }()
	time.Sleep(200 * time.Millisecond)
	select {
	case <-cons.Done():
		t.Fatal("soft stop must wait for the in-flight handler")
	default:
	}
	close(release)
	require.NoError(t, <-stopped)
	require.NoError(t, cons.Err())
	require.Equal(t, int32(1), handled.Load())
	// the first was acked; the two others were released at once (no 120 s lease wait)
	rest, err := b.c.Queue(b.queue).Batch(10).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, rest, 2)
	require.Equal(t, "soft-a-1", rest[0].TransactionID)
}

// TestITStopWithAPopInFlight: a consumer stopped while its long-poll pop is parked leaves nothing
// leased: a message pushed after the stop goes to the next consumer at once, not after the 60 s
// lease of a pop nobody handles.
func TestITStopWithAPopInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.c.Queue(b.queue).LeaseSeconds(60)
	cons, err := q.Timeout(10*time.Second).Consume(b.ctx, func(context.Context, *lanes.Message) error {
		return errors.New("the stopped consumer must not handle anything")
	})
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond) // the pop is parked on the broker
	require.NoError(t, cons.Stop(b.ctx))
	pushN(t, b, "a", 1, "late")
	start := time.Now()
	got, err := q.Timeout(5 * time.Second).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Less(t, time.Since(start), 4*time.Second)
}

func TestITHardStopCancelsHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 1, "hard")
	started := make(chan struct{})
	var cause error
	cons, err := b.c.Queue(b.queue).Wait(false).LeaseSeconds(120).
		Consume(b.ctx, func(ctx context.Context, m *lanes.Message) error {
			close(started)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return ctx.Err()
		})
	require.NoError(t, err)
	<-started
	require.NoError(t, cons.StopAndCancel(b.ctx))
	require.ErrorIs(t, cause, lanes.ErrConsumerStopped)
	// released with `retry`: redelivered at once
	again, err := b.c.Queue(b.queue).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, "hard-a-0", again[0].TransactionID)
}

func TestITIdleTimeoutAndContextCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cons, err := b.c.Queue(b.queue).Wait(true).Timeout(time.Second).IdleTimeout(300*time.Millisecond).
		Consume(b.ctx, func(context.Context, *lanes.Message) error { return nil })
	require.NoError(t, err)
	select {
	case <-cons.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("idle timeout did not stop the consumer")
	}
	require.NoError(t, cons.Err())

	ctx, cancel := context.WithCancel(b.ctx)
	cons, err = b.c.Queue(b.queue).Consume(ctx, func(context.Context, *lanes.Message) error { return nil })
	require.NoError(t, err)
	cancel()
	<-cons.Done()
	require.ErrorIs(t, cons.Err(), context.Canceled)
}

// IdleTimeout does not stop a consumer whose handler is still working through a batch: idle
// time counts from the end of the last handling, as in the TypeScript and Python SDKs. Here
// one pop of 6 messages takes about 600 ms to handle, twice the idle timeout.
func TestITIdleTimeoutWaitsForRunningHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 6, "idlebusy")
	var handled atomic.Int64
	start := time.Now()
	cons, err := b.c.Queue(b.queue).Batch(6).Wait(false).IdleTimeout(300*time.Millisecond).
		Consume(b.ctx, func(context.Context, *lanes.Message) error {
			time.Sleep(100 * time.Millisecond)
			handled.Add(1)
			return nil
		})
	require.NoError(t, err)
	select {
	case <-cons.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("idle timeout did not stop the consumer")
	}
	require.NoError(t, cons.Err())
	require.Equal(t, int64(6), handled.Load(), "every message of the batch was handled")
	require.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond, "idle counted from the end of the handling")
	left, err := b.c.Queue(b.queue).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Empty(t, left, "all six were acked")
}

// Canceling the ctx given to Consume is a hard stop like StopAndCancel: the handler that returns
// the cancellation has its message released with `retry`, not nacked `failed` (which spent a
// retry, here the only one: retryLimit 0 would have dead-lettered it).
func TestITContextCancelReleasesInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.c.Queue(b.queue).Configure(b.ctx, lanes.QueueOptions{RetryLimit: ptrTo(0)})
	require.NoError(t, err)
	pushN(t, b, "a", 1, "ctxcancel")
	shutdown := errors.New("shutting down")
	for _, tc := range []struct {
		name   string
		cancel func(ctx context.Context) (context.Context, func())
		err    error // Err(): the ctx's cause
	}{
		{"cancel", func(ctx context.Context) (context.Context, func()) { return context.WithCancel(ctx) }, context.Canceled},
		{"cancel cause", func(ctx context.Context) (context.Context, func()) {
			cctx, cancel := context.WithCancelCause(ctx)
			return cctx, func() { cancel(shutdown) }
		}, shutdown},
	} {
		ctx, cancel := tc.cancel(b.ctx)
		started := make(chan struct{})
		var once sync.Once
		cons, err := b.c.Queue(b.queue).Wait(false).LeaseSeconds(120).
			Consume(ctx, func(hctx context.Context, m *lanes.Message) error {
				once.Do(func() { close(started) })
				<-hctx.Done()
				return hctx.Err()
			})
		require.NoError(t, err, tc.name)
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: handler not called", tc.name)
		}
		cancel()
		<-cons.Done()
		require.ErrorIs(t, cons.Err(), tc.err, tc.name)
		// released with `retry`: redelivered at once and not dead-lettered
		again, err := b.c.Queue(b.queue).Wait(false).Pop(b.ctx)
		require.NoError(t, err, tc.name)
		require.Len(t, again, 1, tc.name)
		require.Equal(t, "ctxcancel-a-0", again[0].TransactionID, tc.name)
		_, err = b.c.Ack(b.ctx, again, lanes.AckRetry)
		require.NoError(t, err, tc.name)
	}
}

func TestITConsumeBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 4, "cb")
	var got atomic.Int32
	cons, err := b.c.Queue(b.queue).Batch(4).Wait(false).Limit(4).
		ConsumeBatch(b.ctx, func(ctx context.Context, ms []*lanes.Message) error {
			got.Add(int32(len(ms)))
			return nil
		})
	require.NoError(t, err)
	<-cons.Done()
	require.NoError(t, cons.Err())
	require.Equal(t, int32(4), got.Load())
}

// A slice larger than what is left of Limit is cut to the budget: the handler gets exactly n
// messages, the rest is released with `retry` at once, and the consumer ends (it used to release
// the whole slice and pop it again forever, never calling the handler).
func TestITConsumeBatchLimitCutsSlice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 10, "cbl")
	var calls, got atomic.Int32
	var first []string
	cons, err := b.c.Queue(b.queue).Batch(10).Wait(false).LeaseSeconds(120).Limit(5).
		ConsumeBatch(b.ctx, func(ctx context.Context, ms []*lanes.Message) error {
			if calls.Add(1) == 1 {
				for _, m := range ms {
					first = append(first, m.TransactionID)
				}
			}
			got.Add(int32(len(ms)))
			return nil
		})
	require.NoError(t, err)
	select {
	case <-cons.Done():
	case <-time.After(5 * time.Second):
		require.NoError(t, cons.StopAndCancel(b.ctx))
		t.Fatalf("Limit(5) with a 10-message slice did not end the consumer (handler calls %d)", calls.Load())
	}
	require.NoError(t, cons.Err())
	require.Equal(t, int32(1), calls.Load())
	require.Equal(t, int32(5), got.Load())
	require.Equal(t, []string{"cbl-a-0", "cbl-a-1", "cbl-a-2", "cbl-a-3", "cbl-a-4"}, first)
	// the other five were released with `retry` (no 120 s lease wait) and come next
	rest, err := b.c.Queue(b.queue).Batch(10).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, rest, 5)
	require.Equal(t, "cbl-a-5", rest[0].TransactionID)
}

func TestITBufferFlushOnClose(t *testing.T) {
	t.Parallel()
	b := setup(t)
	buf := b.c.Queue(b.queue).Partition("buf").Buffer(lanes.BufferOptions{MessageCount: 1000, FlushInterval: time.Hour})
	for i := 0; i < 10; i++ {
		require.NoError(t, buf.Push(b.ctx, lanes.Data(i)))
	}
	require.Equal(t, 10, buf.Len())
	require.NoError(t, b.c.Close(b.ctx))
	require.Equal(t, 0, buf.Len())
	msgs, err := b.c.Queue(b.queue).Batch(50).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, msgs, 10)
}

func TestITBufferFlushOnCount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	buf := b.c.Queue(b.queue).Buffer(lanes.BufferOptions{MessageCount: 5, FlushInterval: time.Hour})
	for i := 0; i < 5; i++ {
		require.NoError(t, buf.Push(b.ctx, lanes.Data(i)))
	}
	require.Eventually(t, func() bool { return buf.Len() == 0 }, 5*time.Second, 20*time.Millisecond)
}

// A producer faster than a round trip leaves several full batches waiting:
// the flusher sends them one after the other (it deadlocked on the second),
// and Close sends the rest within its deadline.
func TestITBufferSendsEveryFullBatchWaiting(t *testing.T) {
	t.Parallel()
	b := setup(t)
	buf := b.c.Queue(b.queue).Partition("buf").Buffer(lanes.BufferOptions{MessageCount: 50, FlushInterval: time.Hour})
	for i := 0; i < 250; i++ {
		require.NoError(t, buf.Push(b.ctx, lanes.Data(i)))
	}
	closeCtx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, b.c.Close(closeCtx))
	require.Equal(t, 0, buf.Len())
	msgs, err := b.c.Queue(b.queue).Batch(500).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, msgs, 250)
}

func TestITConfigureAndGetQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.c.Queue(b.queue).Configure(b.ctx, lanes.QueueOptions{RetryLimit: ptrTo(5), LeaseTime: ptrTo(90)})
	require.NoError(t, err)
	require.True(t, res.Configured)
	require.Equal(t, b.queue, res.Queue)
	d, err := b.c.Admin().GetQueue(b.ctx, b.queue)
	require.NoError(t, err)
	require.NotNil(t, d)
}

func TestITTransactionPipeline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out := b.queue + "-out"
	pushN(t, b, "a", 1, "tx")
	msgs, err := b.c.Queue(b.queue).Group("invoicing").SubscriptionMode("all").Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	res, err := b.c.Transaction().
		Queue(out).Partition("c-42").Push(lanes.Data(map[string]bool{"invoiced": true})).
		Ack(msgs[0], lanes.AckCompleted, "invoicing").
		Commit(b.ctx)
	require.NoError(t, err)
	require.True(t, res.Success)
	got, err := b.c.Queue(out).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, got, 1)
	left, err := b.c.Queue(b.queue).Group("invoicing").Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Empty(t, left)

	// a stale lease rolls the bundle back, with a reason
	_, err = b.c.Transaction().Queue(out).Push(lanes.Data(1)).Ack(msgs[0], lanes.AckCompleted, "invoicing").Commit(b.ctx)
	var te *lanes.TransactionError
	require.ErrorAs(t, err, &te)
	require.NotEmpty(t, te.Reason)
}

func TestITSeekReplays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 2, "seek")
	msgs, err := b.c.Queue(b.queue).Group("audit").SubscriptionMode("all").Batch(10).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	_, err = b.c.Ack(b.ctx, msgs, lanes.AckCompleted)
	require.NoError(t, err)
	_, err = b.c.Admin().SeekConsumerGroup(b.ctx, "audit", b.queue, lanes.SeekToTime(time.Now().Add(-time.Hour)))
	require.NoError(t, err)
	again, err := b.c.Queue(b.queue).Group("audit").Batch(10).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, again, 2)
	groups, err := b.c.Admin().ListConsumerGroups(b.ctx)
	require.NoError(t, err)
	require.NotEmpty(t, groups)
}

func TestITDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 1, "dlq")
	msgs, err := b.c.Queue(b.queue).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	acks, err := b.c.Ack(b.ctx, msgs, lanes.AckDLQ, lanes.AckOpts{Error: "poison"})
	require.NoError(t, err)
	require.True(t, acks[0].DLQ)
	list, err := b.c.Admin().ListDLQ(b.ctx, lanes.DLQQuery{Queue: b.queue})
	require.NoError(t, err)
	require.Len(t, list.Messages, 1)
	_, err = b.c.Admin().ReplayDLQ(b.ctx, list.Messages[0].Id, "", "")
	require.NoError(t, err)
	back, err := b.c.Queue(b.queue).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, back, 1)
}

// Paging the dead letters by After (the page's NextAfter) while each page is replayed gives every
// dead letter once; by Offset the second page skips as many rows as the first replayed.
func TestITDeadLettersPagedByKeyWhileReplayed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 4, "dlqkey")
	var msgs []*lanes.Message
	for range 4 { // one pop and ack each: four failure times, newest last
		popped, err := b.c.Queue(b.queue).Batch(1).Wait(false).Pop(b.ctx)
		require.NoError(t, err)
		require.Len(t, popped, 1)
		_, err = b.c.Ack(b.ctx, popped, lanes.AckDLQ, lanes.AckOpts{Error: "poison"})
		require.NoError(t, err)
		msgs = append(msgs, popped...)
	}
	ids := func(l *lanes.DLQList) []string {
		out := []string{}
		for _, m := range l.Messages {
			out = append(out, m.TransactionId)
		}
		return out
	}
	first, err := b.c.Queue(b.queue).DLQ("").Limit(2).Get(b.ctx)
	require.NoError(t, err)
	require.Len(t, first.Messages, 2)
	require.NotNil(t, first.NextAfter)
	seen := ids(first)
	for _, m := range first.Messages {
		_, err = b.c.Admin().ReplayDLQ(b.ctx, m.Id, "", "")
		require.NoError(t, err)
	}
	byOffset, err := b.c.Admin().ListDLQ(b.ctx, lanes.DLQQuery{Queue: b.queue, Limit: 2, Offset: 2})
	require.NoError(t, err)
	require.Empty(t, byOffset.Messages, "by offset the second page skips the two rows after the replayed ones")
	second, err := b.c.Queue(b.queue).DLQ("").Limit(2).After(*first.NextAfter).Get(b.ctx)
	require.NoError(t, err)
	require.False(t, *second.Truncated)
	seen = append(seen, ids(second)...)
	require.ElementsMatch(t, []string{msgs[0].TransactionID, msgs[1].TransactionID, msgs[2].TransactionID, msgs[3].TransactionID}, seen)
	require.Equal(t, msgs[3].TransactionID, seen[0], "newest failure first")
}

// A message pushed between two pages of the message listing sorts first: the second page by
// Offset repeats a row, the second page by After (the page's NextAfter) starts where the first ended.
func TestITMessagesPagedByKeyWhilePushed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 4 { // one push each: four segments, newest last
		pushN(t, b, "a", 1, fmt.Sprintf("msgkey%d", i))
	}
	ids := func(l *lanes.MessageList) []string {
		out := []string{}
		for _, m := range l.Messages {
			out = append(out, m.TransactionId)
		}
		return out
	}
	first, err := b.c.Admin().ListMessages(b.ctx, lanes.MessageQuery{Queue: b.queue, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"msgkey3-a-0", "msgkey2-a-0"}, ids(first))
	require.NotNil(t, first.NextAfter)
	pushN(t, b, "a", 1, "msgkey4")
	byOffset, err := b.c.Admin().ListMessages(b.ctx, lanes.MessageQuery{Queue: b.queue, Limit: 2, Offset: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"msgkey2-a-0", "msgkey1-a-0"}, ids(byOffset), "by offset the second page repeats a row")
	second, err := b.c.Admin().ListMessages(b.ctx, lanes.MessageQuery{Queue: b.queue, Limit: 2, After: *first.NextAfter})
	require.NoError(t, err)
	require.Equal(t, []string{"msgkey1-a-0", "msgkey0-a-0"}, ids(second))
	require.False(t, *second.Truncated)
}

// A DLQ time window given in a non-UTC zone filters like the same instants in UTC, even in a zone
// whose offset has seconds (RFC 3339 offsets have none, so such a time must be sent in UTC).
func TestITDeadLetterWindowInAnyZone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 1, "dlqzone")
	msgs, err := b.c.Queue(b.queue).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	_, err = b.c.Ack(b.ctx, msgs, lanes.AckDLQ, lanes.AckOpts{Error: "poison"})
	require.NoError(t, err)
	all, err := b.c.Admin().ListDLQ(b.ctx, lanes.DLQQuery{Queue: b.queue})
	require.NoError(t, err)
	require.Len(t, all.Messages, 1)
	failedAt := all.Messages[0].FailedAt

	east, west := time.FixedZone("UTC+5", 5*3600), time.FixedZone("UTC-5", -5*3600)
	oddSeconds := time.FixedZone("LMT+0:00:45", 45) // like the local mean times of old tz rules
	for _, zone := range []*time.Location{time.UTC, east, west, oddSeconds} {
		before, after := failedAt.Add(-10*time.Second).In(zone), failedAt.Add(10*time.Second).In(zone)
		inside, err := b.c.Admin().ListDLQ(b.ctx, lanes.DLQQuery{Queue: b.queue, From: before, To: after})
		require.NoError(t, err, zone.String())
		require.Len(t, inside.Messages, 1, "window around failedAt in %s", zone)
		later, err := b.c.Admin().ListDLQ(b.ctx, lanes.DLQQuery{Queue: b.queue, From: after})
		require.NoError(t, err, zone.String())
		require.Empty(t, later.Messages, "from after failedAt in %s", zone)
		earlier, err := b.c.Admin().ListDLQ(b.ctx, lanes.DLQQuery{Queue: b.queue, To: before})
		require.NoError(t, err, zone.String())
		require.Empty(t, earlier.Messages, "to before failedAt in %s", zone)
	}
}

func TestITMessages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 1, "msg")
	list, err := b.c.Admin().ListMessages(b.ctx, lanes.MessageQuery{Queue: b.queue})
	require.NoError(t, err)
	require.NotNil(t, list)
}

// The message listing takes every filter the route has, as TS's listMessages does: namespace and
// task labels, and the createdAt window, without which a message older than the broker's default
// hour could not be listed at all.
func TestITMessagesFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ns, task := b.queue+"-ns", b.queue+"-task"
	_, err := b.c.Admin().ConfigureQueueLabels(b.ctx, b.queue, ns, task, lanes.QueueOptions{}, lanes.ConfigureReplace)
	require.NoError(t, err)
	pushN(t, b, "a", 1, "msgfilter")
	all, err := b.c.Admin().ListMessages(b.ctx, lanes.MessageQuery{Queue: b.queue})
	require.NoError(t, err)
	require.Len(t, all.Messages, 1)
	createdAt := all.Messages[0].CreatedAt

	count := func(q lanes.MessageQuery) int {
		t.Helper()
		list, err := b.c.Admin().ListMessages(b.ctx, q)
		require.NoError(t, err)
		return len(list.Messages)
	}
	require.Equal(t, 1, count(lanes.MessageQuery{Namespace: ns}), "its namespace")
	require.Equal(t, 0, count(lanes.MessageQuery{Namespace: ns + "-other"}), "another namespace")
	require.Equal(t, 1, count(lanes.MessageQuery{Task: task}), "its task")
	require.Equal(t, 0, count(lanes.MessageQuery{Task: task + "-other"}), "another task")
	require.Equal(t, 1, count(lanes.MessageQuery{Queue: b.queue, From: createdAt.Add(-2 * time.Hour)}), "from before it")
	require.Equal(t, 0, count(lanes.MessageQuery{Queue: b.queue, From: createdAt.Add(time.Second)}), "from after it")
	require.Equal(t, 0, count(lanes.MessageQuery{Queue: b.queue, From: createdAt.Add(-2 * time.Hour), To: createdAt.Add(-2 * time.Minute)}),
		"to two minutes before it")
}

func TestITKV(t *testing.T) {
	t.Parallel()
	b := setup(t)
	kv := b.c.KV(b.queue)
	_, err := kv.Put(b.ctx, "k1", map[string]int{"v": 1}, lanes.Forever)
	require.NoError(t, err)
	got, err := kv.Get(b.ctx, "k1")
	require.NoError(t, err)
	require.NotNil(t, got.Found)
	require.True(t, *got.Found)
}

// The KV ttl rule of all three SDKs: only lanes.Forever means no expiry; a ttl of 0 or below (a
// computed time.Until that reached or went past its end) is sent as such and refused (400,
// nothing written), never kept forever; a sub-second ttl is 1 s.
func TestITKVTTLZeroOrNegativeIsRefusedAndSubSecondIsOneSecond(t *testing.T) {
	t.Parallel()
	b := setup(t)
	kv := b.c.KV(b.queue)
	for _, ttl := range []time.Duration{0, -500 * time.Millisecond, -5 * time.Second} {
		_, err := kv.Put(b.ctx, "k", 1, ttl)
		require.ErrorIs(t, err, lanes.ErrBadRequest, "ttl %v", ttl)
		_, err = kv.PutExpect(b.ctx, "k", 1, ttl, 0)
		require.ErrorIs(t, err, lanes.ErrBadRequest, "ttl %v", ttl)
		_, err = kv.PutIfAbsent(b.ctx, "k", 1, ttl)
		require.ErrorIs(t, err, lanes.ErrBadRequest, "ttl %v", ttl)
		_, err = kv.Incr(b.ctx, "n", 1, ttl, lanes.KVIncrOpts{})
		require.ErrorIs(t, err, lanes.ErrBadRequest, "ttl %v", ttl)
		_, err = kv.Batch(b.ctx, lanes.KVPut(b.queue, "k", 1, ttl))
		require.ErrorIs(t, err, lanes.ErrBadRequest, "ttl %v", ttl)
	}
	for _, key := range []string{"k", "n"} {
		got, err := kv.Get(b.ctx, key)
		require.NoError(t, err)
		require.False(t, *got.Found, key)
	}
	put, err := kv.Put(b.ctx, "k", 1, lanes.Forever)
	require.NoError(t, err)
	require.Nil(t, put.ExpiresAt)
	before := time.Now()
	put, err = kv.Put(b.ctx, "short", 1, 300*time.Millisecond)
	require.NoError(t, err)
	require.True(t, *put.Applied)
	require.NotNil(t, put.ExpiresAt, "a sub-second ttl expires")
	require.WithinDuration(t, before.Add(time.Second), *put.ExpiresAt, 1500*time.Millisecond)
}

// DecodeKV reads a KV value as the T asked for, as Message.Decode reads a payload: a counter as
// an int with every digit, a row of GetMany, a stored object; no value is ErrNoKVValue.
func TestITKVDecode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	kv := b.c.KV(b.queue)

	const big = 1<<53 + 1 // a float64 would read 9007199254740992
	res, err := kv.Incr(b.ctx, "hits", big, lanes.Forever, lanes.KVIncrOpts{})
	require.NoError(t, err)
	hits, err := lanes.DecodeKV[int](res.Value)
	require.NoError(t, err)
	require.Equal(t, big, hits)

	type order struct {
		ID    string   `json:"id"`
		Lines []string `json:"lines"`
	}
	_, err = kv.Put(b.ctx, "order", order{ID: "o-1", Lines: []string{"a", "b"}}, lanes.Forever)
	require.NoError(t, err)
	got, err := kv.Get(b.ctx, "order")
	require.NoError(t, err)
	o, err := lanes.DecodeKV[order](got.Value)
	require.NoError(t, err)
	require.Equal(t, order{ID: "o-1", Lines: []string{"a", "b"}}, o)

	many, err := kv.GetMany(b.ctx, "hits", "order")
	require.NoError(t, err)
	require.Len(t, *many.Rows, 2)
	row, err := lanes.DecodeKV[int]((*many.Rows)[0].Value)
	require.NoError(t, err)
	require.Equal(t, big, row)

	missing, err := kv.Get(b.ctx, "nope")
	require.NoError(t, err)
	require.False(t, *missing.Found)
	_, err = lanes.DecodeKV[int](missing.Value)
	require.ErrorIs(t, err, lanes.ErrNoKVValue)
	_, err = lanes.DecodeKV[int](many.Value)
	require.ErrorIs(t, err, lanes.ErrNoKVValue, "a getMany result's values are in its rows")

	_, err = lanes.DecodeKV[int](got.Value)
	var typeErr *json.UnmarshalTypeError
	require.ErrorAs(t, err, &typeErr, "an object is not an int")
}

// TestITKVHelpers: the named KV helpers (parity with sdk-js's Kv) against the broker.
func TestITKVHelpers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	kv := b.c.KV(b.queue)

	// PutIfAbsent writes once; the second call reports the existing value.
	first, err := kv.PutIfAbsent(b.ctx, "once", "a", lanes.Forever)
	require.NoError(t, err)
	require.True(t, *first.Applied)
	again, err := kv.PutIfAbsent(b.ctx, "once", "b", time.Hour)
	require.NoError(t, err)
	require.False(t, *again.Applied)
	require.Equal(t, lanes.KVReasonExists, *again.Reason)
	require.JSONEq(t, `"a"`, string(again.Value))

	// PutExpect: 0 = must not exist; N = version must be N.
	created, err := kv.PutExpect(b.ctx, "cas", 1, lanes.Forever, 0)
	require.NoError(t, err)
	require.True(t, *created.Applied)
	require.Equal(t, 1, *created.Version)
	stale, err := kv.PutExpect(b.ctx, "cas", 2, lanes.Forever, 7)
	require.NoError(t, err)
	require.False(t, *stale.Applied)
	require.Equal(t, lanes.KVReasonVersion, *stale.Reason)
	moved, err := kv.PutExpect(b.ctx, "cas", 2, time.Hour, 1)
	require.NoError(t, err)
	require.True(t, *moved.Applied)
	require.Equal(t, 2, *moved.Version)
	require.NotNil(t, moved.ExpiresAt)

	// Incr creates at 0, adds, and refuses to cross a bound.
	n, err := kv.Incr(b.ctx, "count", 5, lanes.Forever, lanes.KVIncrOpts{})
	require.NoError(t, err)
	require.True(t, *n.Applied)
	require.JSONEq(t, `5`, string(n.Value))
	n, err = kv.Incr(b.ctx, "count", -2, lanes.Forever, lanes.KVIncrOpts{Min: ptrTo(0), Max: ptrTo(10)})
	require.NoError(t, err)
	require.True(t, *n.Applied)
	require.JSONEq(t, `3`, string(n.Value))
	n, err = kv.Incr(b.ctx, "count", 8, lanes.Forever, lanes.KVIncrOpts{Max: ptrTo(10)})
	require.NoError(t, err)
	require.False(t, *n.Applied)
	require.Equal(t, lanes.KVReasonLimit, *n.Reason)
	n, err = kv.Incr(b.ctx, "count", -4, lanes.Forever, lanes.KVIncrOpts{Min: ptrTo(0)})
	require.NoError(t, err)
	require.False(t, *n.Applied)
	require.Equal(t, lanes.KVReasonLimit, *n.Reason)
	got, err := kv.Get(b.ctx, "count")
	require.NoError(t, err)
	require.JSONEq(t, `3`, string(got.Value), "a refused incr leaves the value")

	// GetMany: rows for the keys that exist, the rest missing.
	many, err := kv.GetMany(b.ctx, "once", "cas", "nope")
	require.NoError(t, err)
	require.Len(t, *many.Rows, 2)
	require.Equal(t, []string{"nope"}, *many.Missing)

	// GetPrefix pages with Limit / NextAfter.
	for i := range 5 {
		_, err := kv.Put(b.ctx, fmt.Sprintf("user:%d", i), i, lanes.Forever)
		require.NoError(t, err)
	}
	var keys []string
	opts := lanes.KVPrefixOpts{Limit: 2}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		page, err := kv.GetPrefix(b.ctx, "user:", opts)
		require.NoError(t, err)
		for _, r := range *page.Rows {
			keys = append(keys, r.Key)
			require.NotEmpty(t, r.Value)
		}
		if page.Truncated == nil || !*page.Truncated {
			break
		}
		opts.After = *page.NextAfter
	}
	require.Equal(t, []string{"user:0", "user:1", "user:2", "user:3", "user:4"}, keys)
	only, err := kv.GetPrefix(b.ctx, "user:", lanes.KVPrefixOpts{KeysOnly: true, After: "user:3"})
	require.NoError(t, err)
	require.Len(t, *only.Rows, 1)
	require.Equal(t, "user:4", (*only.Rows)[0].Key)
	require.Empty(t, (*only.Rows)[0].Value)

	// The op builders run in a batch too.
	res, err := kv.Batch(b.ctx,
		lanes.KVPutExpect(b.queue, "cas", 3, lanes.Forever, 2),
		lanes.KVIncr(b.queue, "count", 1, lanes.Forever, lanes.KVIncrOpts{}),
		lanes.KVGetMany(b.queue, "cas", "count"))
	require.NoError(t, err)
	require.Len(t, res, 3)
	require.True(t, *res[0].Applied)
	require.JSONEq(t, `4`, string(res[1].Value))
	require.Len(t, *res[2].Rows, 2)
}

// TestITNumbersNoFloat64Holds: a json.RawMessage or json.Number value crosses the SDK exactly. A
// bundle's push of 1e400 pops as sent (as Push does), and a KV value 1e400 or a 30-digit integer
// is stored; the put's answer and a later Get both show jsonb's form of it.
func TestITNumbersNoFloat64Holds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	kv := b.c.KV(b.queue)
	huge := "1" + strings.Repeat("0", 400) // 1e400 as numeric prints it

	put, err := kv.Put(b.ctx, "huge", json.RawMessage(`1e400`), lanes.Forever)
	require.NoError(t, err)
	require.True(t, *put.Applied)
	require.Equal(t, huge, string(put.Value))
	got, err := kv.Get(b.ctx, "huge")
	require.NoError(t, err)
	require.Equal(t, huge, string(got.Value))

	long := json.Number("123456789012345678901234567890")
	put, err = kv.Put(b.ctx, "long", long, lanes.Forever)
	require.NoError(t, err)
	require.Equal(t, string(long), string(put.Value))
	got, err = kv.Get(b.ctx, "long")
	require.NoError(t, err)
	require.Equal(t, string(long), string(got.Value))

	res, err := b.c.Transaction().Queue(b.queue).Push(lanes.Data(json.RawMessage(`1e400`))).
		KV(lanes.KVPut(b.queue, "rider", json.RawMessage(`-1E+400`), lanes.Forever)).Commit(b.ctx)
	require.NoError(t, err)
	require.Len(t, res.KV, 1)
	require.Equal(t, "-"+huge, string(res.KV[0].Value))
	msgs, err := b.c.Queue(b.queue).Batch(10).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.Equal(t, `1e400`, string(msgs[0].Data))
}

// TestITKVPutIfAbsentInATransaction: not required (the wire default, as in the other SDKs), an
// existing key leaves the put unapplied and the bundle commits; required, it rolls back.
// Counters are int64 on the broker: Value keeps every digit past 2^53 (a float64 would round
// 2^53+1), and a sum past int64 is applied false, reason limit, not a wrap.
func TestITKVIncrKeepsInt64Precision(t *testing.T) {
	t.Parallel()
	b := setup(t)
	kv := b.c.KV(b.queue)
	n, err := kv.Incr(b.ctx, "n", 1<<53-1, lanes.Forever, lanes.KVIncrOpts{})
	require.NoError(t, err)
	require.Equal(t, "9007199254740991", string(n.Value))
	n, err = kv.Incr(b.ctx, "n", 2, lanes.Forever, lanes.KVIncrOpts{})
	require.NoError(t, err)
	require.Equal(t, "9007199254740993", string(n.Value))
	got, err := kv.Get(b.ctx, "n")
	require.NoError(t, err)
	require.Equal(t, "9007199254740993", string(got.Value))

	top, err := kv.Incr(b.ctx, "top", math.MaxInt64, lanes.Forever, lanes.KVIncrOpts{Max: ptrTo(math.MaxInt64)})
	require.NoError(t, err)
	require.Equal(t, "9223372036854775807", string(top.Value))
	over, err := kv.Incr(b.ctx, "top", 1, lanes.Forever, lanes.KVIncrOpts{})
	require.NoError(t, err)
	require.False(t, *over.Applied)
	require.Equal(t, lanes.KVReasonLimit, *over.Reason)
	require.Equal(t, "9223372036854775807", string(over.Value))
	low, err := kv.Incr(b.ctx, "low", math.MinInt64, lanes.Forever, lanes.KVIncrOpts{})
	require.NoError(t, err)
	require.Equal(t, "-9223372036854775808", string(low.Value))
	under, err := kv.Incr(b.ctx, "low", -1, lanes.Forever, lanes.KVIncrOpts{})
	require.NoError(t, err)
	require.False(t, *under.Applied)
	require.Equal(t, lanes.KVReasonLimit, *under.Reason)
}

func TestITKVPutIfAbsentInATransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.c.KV(b.queue).Put(b.ctx, "k", "first", lanes.Forever)
	require.NoError(t, err)

	res, err := b.c.Transaction().Queue(b.queue).Push(lanes.Data(1)).
		KV(lanes.KVPutIfAbsent(b.queue, "k", "second", lanes.Forever, false)).Commit(b.ctx)
	require.NoError(t, err)
	require.Len(t, res.KV, 1)
	require.False(t, *res.KV[0].Applied)

	_, err = b.c.Transaction().Queue(b.queue).Push(lanes.Data(2)).
		KV(lanes.KVPutIfAbsent(b.queue, "k", "third", lanes.Forever, true)).Commit(b.ctx)
	var txErr *lanes.TransactionError
	require.ErrorAs(t, err, &txErr)
	require.Equal(t, lanes.ReasonKVPrecondition, txErr.Reason)

	got, err := b.c.KV(b.queue).Get(b.ctx, "k")
	require.NoError(t, err)
	require.JSONEq(t, `"first"`, string(got.Value))
	msgs, err := b.c.Queue(b.queue).Batch(10).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, msgs, 1, "only the bundle that committed pushed")
	require.JSONEq(t, "1", string(msgs[0].Data))
}

// TestITKVValueThatCannotBeEncodedSendsNothing: a KVPut, KVPutIfAbsent or KVPutExpect whose value
// json.Marshal refuses makes KV.Batch and Commit return *InvalidKVValueError naming the op,
// before any request, so neither the rider nor the bundle's push is stored.
func TestITKVValueThatCannotBeEncodedSendsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	via := &countingTransport{}
	c, err := lanes.New(lanes.WithURL(os.Getenv("LANES_TEST_URL")), lanes.WithHTTPClient(&http.Client{Transport: via}))
	require.NoError(t, err)
	for _, bad := range []lanes.KVOperation{
		lanes.KVPut(b.queue, "nan", math.NaN(), lanes.Forever),
		lanes.KVPutIfAbsent(b.queue, "chan", make(chan int), lanes.Forever, false),
		lanes.KVPutExpect(b.queue, "inf", math.Inf(1), lanes.Forever, 0),
		lanes.KVPut(b.queue, "utf8", []string{"a\xffb"}, lanes.Forever), // encoding/json would store U+FFFD
	} {
		_, err := c.KV(b.queue).Batch(b.ctx, lanes.KVGet(b.queue, "k"), bad)
		var ve *lanes.InvalidKVValueError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, 1, ve.Index)
		require.Equal(t, *bad.Key, ve.Key)
		require.Regexp(t, "json: unsupported|not UTF-8", err.Error())

		_, err = c.Transaction().Queue(b.queue).Push(lanes.Data(1)).
			KV(lanes.KVPut(b.queue, "ok", 1, lanes.Forever)).KV(bad).Commit(b.ctx)
		require.ErrorAs(t, err, &ve)
		require.Equal(t, 1, ve.Index)
	}
	_, err = c.KV(b.queue).PutIfAbsent(b.ctx, "direct", math.NaN(), lanes.Forever)
	var ve *lanes.InvalidKVValueError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "direct", ve.Key)
	require.Zero(t, via.requests.Load(), "nothing was sent")

	msgs, err := b.c.Queue(b.queue).Batch(10).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Empty(t, msgs)
	got, err := b.c.KV(b.queue).GetMany(b.ctx, "ok", "nan", "chan", "inf", "utf8", "direct")
	require.NoError(t, err)
	require.Empty(t, *got.Rows)
}

// TestITKVDeleteExpect: a conditional delete applies only at the expected version, in a batch
// too; an expect below 1 is refused by the broker with a stable code and deletes nothing.
func TestITKVDeleteExpect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	kv := b.c.KV(b.queue)
	_, err := kv.Put(b.ctx, "k", "v1", lanes.Forever)
	require.NoError(t, err)
	moved, err := kv.PutExpect(b.ctx, "k", "v2", lanes.Forever, 1)
	require.NoError(t, err)
	require.Equal(t, 2, *moved.Version)

	stale, err := kv.DeleteExpect(b.ctx, "k", 1)
	require.NoError(t, err)
	require.False(t, *stale.Applied)
	require.Equal(t, lanes.KVReasonVersion, *stale.Reason)
	_, err = kv.DeleteExpect(b.ctx, "k", 0)
	var ae *lanes.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, 400, ae.Status)
	require.Equal(t, "kv_bad_request", ae.Code)
	got, err := kv.Get(b.ctx, "k")
	require.NoError(t, err)
	require.True(t, *got.Found, "neither the stale nor the refused delete removed the key")

	gone, err := kv.DeleteExpect(b.ctx, "k", 2)
	require.NoError(t, err)
	require.True(t, *gone.Applied)
	got, err = kv.Get(b.ctx, "k")
	require.NoError(t, err)
	require.False(t, *got.Found)

	_, err = kv.Put(b.ctx, "j", 1, lanes.Forever)
	require.NoError(t, err)
	res, err := kv.Batch(b.ctx, lanes.KVDeleteExpect(b.queue, "j", 5), lanes.KVDeleteExpect(b.queue, "j", 1))
	require.NoError(t, err)
	require.False(t, *res[0].Applied)
	require.True(t, *res[1].Applied)
}

// TestITKVList: namespace listing and the key listing route.
func TestITKVList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	kv := b.c.KV(b.queue)
	for _, k := range []string{"a:1", "a:2", "a:3", "b:1"} {
		_, err := kv.Put(b.ctx, k, k, lanes.Forever)
		require.NoError(t, err)
	}
	nss, err := b.c.KVNamespaces(b.ctx)
	require.NoError(t, err)
	found := false
	for _, n := range nss.Namespaces {
		if n.Namespace != nil && *n.Namespace == b.queue {
			found = true
			require.Equal(t, 4, *n.Keys)
		}
	}
	require.True(t, found, "namespace %s listed", b.queue)

	all, err := kv.List(b.ctx, lanes.KVListQuery{})
	require.NoError(t, err)
	require.Len(t, all.Rows, 4)
	require.False(t, all.Truncated)

	page, err := kv.List(b.ctx, lanes.KVListQuery{Prefix: "a:", Limit: 2, KeysOnly: true})
	require.NoError(t, err)
	require.Len(t, page.Rows, 2)
	require.True(t, page.Truncated)
	require.Empty(t, page.Rows[0].Value)
	next, err := kv.List(b.ctx, lanes.KVListQuery{Prefix: "a:", After: *page.NextAfter})
	require.NoError(t, err)
	require.Len(t, next.Rows, 1)
	require.Equal(t, "a:3", next.Rows[0].Key)
	require.JSONEq(t, `"a:3"`, string(next.Rows[0].Value))
}

func TestITTimers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tm := b.c.Timers(b.queue)
	res, err := tm.Schedule(b.ctx, "t1", time.Hour, []byte(`{"x":1}`))
	require.NoError(t, err)
	require.True(t, res.Ok)
	got, err := tm.Get(b.ctx, "t1")
	require.NoError(t, err)
	require.Equal(t, `{"x":1}`, string(*got.Payload), "a read timer's payload is its JSON bytes")
	c, err := tm.Cancel(b.ctx, "t1")
	require.NoError(t, err)
	require.NotNil(t, c)
}

// Batch sends several timer ops, for any queue, in one request, as TS's and Python's
// timers(q).batch do, and answers one result per op in order.
func TestITTimersBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := b.queue + "-other"
	res, err := b.c.Timers(b.queue).Batch(b.ctx,
		lanes.TimerSchedule(b.queue, "a", time.Hour, []byte(`{"n":1}`)),
		lanes.TimerSchedule(other, "b", time.Hour, nil),
		lanes.TimerCancel(b.queue, "never-scheduled"))
	require.NoError(t, err)
	require.Len(t, res, 3)
	require.Equal(t, []string{"a", "b", "never-scheduled"}, []string{res[0].TimerKey, res[1].TimerKey, res[2].TimerKey})
	require.Equal(t, []string{b.queue, other}, []string{res[0].Queue, res[1].Queue})
	require.True(t, res[0].Ok)
	require.True(t, res[1].Ok)
	got, err := b.c.Timers(other).Get(b.ctx, "b")
	require.NoError(t, err)
	require.True(t, got.Found)
}

// TestITTimersRescheduleAndPartition: Partition, Reschedule and ListPrefix (parity with sdk-js).
func TestITTimersRescheduleAndPartition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tm := b.c.Timers(b.queue)
	res, err := tm.Partition("p-7").Schedule(b.ctx, "job:1", time.Hour, []byte(`{"n":1}`))
	require.NoError(t, err)
	require.True(t, res.Ok)
	got, err := tm.Get(b.ctx, "job:1")
	require.NoError(t, err)
	require.Equal(t, "p-7", *got.Partition)

	res, err = tm.Partition("p-8").Reschedule(b.ctx, "job:1", 2*time.Hour, []byte(`{"n":2}`))
	require.NoError(t, err)
	require.True(t, res.Ok)
	require.Equal(t, "rescheduled", string(res.Status))
	got, err = tm.Get(b.ctx, "job:1")
	require.NoError(t, err)
	require.Equal(t, "p-8", *got.Partition)

	_, err = tm.Schedule(b.ctx, "job:2", time.Hour, nil)
	require.NoError(t, err)
	_, err = tm.Schedule(b.ctx, "other", time.Hour, nil)
	require.NoError(t, err)
	first, err := tm.ListPrefix(b.ctx, "job:", 1, "")
	require.NoError(t, err)
	require.Len(t, *first.Rows, 1)
	require.Equal(t, "job:1", *(*first.Rows)[0].TimerKey)
	require.True(t, *first.Truncated)
	next, err := tm.ListPrefix(b.ctx, "job:", 0, *first.NextAfter)
	require.NoError(t, err)
	require.Len(t, *next.Rows, 1)
	require.Equal(t, "job:2", *(*next.Rows)[0].TimerKey)
	all, err := tm.List(b.ctx, 0, "")
	require.NoError(t, err)
	require.Len(t, *all.Rows, 3)

	// A rescheduled timer fires into its partition.
	_, err = tm.Partition("p-9").Reschedule(b.ctx, "job:1", 0, []byte(`{"n":3}`))
	require.NoError(t, err)
	var msgs []*lanes.Message
	require.Eventually(t, func() bool {
		msgs, err = b.c.Queue(b.queue).Partition("p-9").Wait(false).Pop(b.ctx)
		return err == nil && len(msgs) == 1
	}, 20*time.Second, 200*time.Millisecond)
	require.Equal(t, "p-9", msgs[0].Partition)
	require.JSONEq(t, `{"n":3}`, string(msgs[0].Data))

	// A fixed transaction id reaches the fired message.
	_, err = tm.Partition("p-10").TransactionID("fired-once").Schedule(b.ctx, "job:3", 0, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		msgs, err = b.c.Queue(b.queue).Partition("p-10").Wait(false).Pop(b.ctx)
		return err == nil && len(msgs) == 1
	}, 20*time.Second, 200*time.Millisecond)
	require.Equal(t, "fired-once", msgs[0].TransactionID)
}

func ptrTo[T any](v T) *T { return &v }

// TestITMessagesIterator: the pull iterator acks what was handled when the next message is
// requested, and leaving the loop releases the message in hand at once (no lease wait).
func TestITMessagesIterator(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 4, "it")
	q := b.c.Queue(b.queue).Group("g").SubscriptionMode("all").Batch(4).Wait(false).LeaseSeconds(120)
	var errs []error
	q = q.OnError(func(err error) { errs = append(errs, err) })
	var seen []string
	for m, err := range q.Messages(b.ctx) {
		require.NoError(t, err)
		seen = append(seen, m.TransactionID)
		if len(seen) == 2 {
			break // it-a-0 handled; it-a-1 in hand
		}
	}
	require.Equal(t, []string{"it-a-0", "it-a-1"}, seen)
	require.Empty(t, errs)

	// released with retry: redelivered now from it-a-1, not after the 120 s lease
	seen = nil
	for m, err := range q.Limit(3).Messages(b.ctx) {
		require.NoError(t, err)
		seen = append(seen, m.TransactionID)
	}
	require.Equal(t, []string{"it-a-1", "it-a-2", "it-a-3"}, seen)
	require.Empty(t, errs)
	left, err := q.Pop(b.ctx)
	require.NoError(t, err)
	require.Empty(t, left, "all handled messages were acked completed")

	// an empty long poll ends quietly when ctx is canceled, and IdleTimeout ends the iteration
	ctx, cancel := context.WithTimeout(b.ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	for m, err := range q.Wait(true).Timeout(10 * time.Second).Messages(ctx) {
		t.Fatalf("unexpected %v %v", m, err)
	}
	require.Less(t, time.Since(start), 5*time.Second)
	for m, err := range q.IdleTimeout(50 * time.Millisecond).Messages(b.ctx) {
		t.Fatalf("unexpected %v %v", m, err)
	}
}

// With no renewal options the consumer does not know the lease: it renews 1 s after the pop
// and then at a third of the lease the broker's answer shows, so a 7 s handler on a queue whose
// leaseTime is 3 s keeps its message: handled once, acked, never redelivered to another consumer.
func TestITDefaultRenewalKeepsAShortLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.c.Queue(b.queue).Configure(b.ctx, lanes.QueueOptions{LeaseTime: ptrTo(3)})
	require.NoError(t, err)
	pushN(t, b, "a", 1, "lease")
	var handled atomic.Int32
	var loopErrs []error
	var mu sync.Mutex
	slow, err := b.c.Queue(b.queue).Limit(1).
		OnError(func(err error) { mu.Lock(); loopErrs = append(loopErrs, err); mu.Unlock() }).
		Consume(b.ctx, func(ctx context.Context, m *lanes.Message) error {
			handled.Add(1)
			time.Sleep(7 * time.Second)
			return nil
		})
	require.NoError(t, err)
	time.Sleep(500 * time.Millisecond)
	other, err := b.c.Queue(b.queue).Consume(b.ctx, func(ctx context.Context, m *lanes.Message) error {
		handled.Add(1)
		return nil
	})
	require.NoError(t, err)
	select {
	case <-slow.Done():
	case <-b.ctx.Done():
		t.Fatal("the slow consumer did not finish")
	}
	time.Sleep(time.Second) // time for a redelivery, were the message released
	require.NoError(t, other.Stop(b.ctx))
	require.Equal(t, int32(1), handled.Load(), "handled once: the lease never expired")
	mu.Lock()
	require.Empty(t, loopErrs)
	mu.Unlock()
	left, err := b.c.Queue(b.queue).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Empty(t, left, "acked")
}

// countingTransport counts the requests a client sends through it.
type countingTransport struct{ requests atomic.Int64 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.requests.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

func TestITWithHTTPClientCarriesEveryCallAndKVGetReadsInABatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	via := &countingTransport{}
	c, err := lanes.New(lanes.WithURL(os.Getenv("LANES_TEST_URL")), lanes.WithHTTPClient(&http.Client{Transport: via}))
	require.NoError(t, err)
	kv := c.KV(b.queue)
	_, err = kv.Put(b.ctx, "k", map[string]any{"n": 7}, lanes.Forever)
	require.NoError(t, err)
	res, err := kv.Batch(b.ctx, lanes.KVGet(b.queue, "k"), lanes.KVGet(b.queue, "missing"))
	require.NoError(t, err)
	require.Len(t, res, 2)
	require.True(t, *res[0].Found)
	require.JSONEq(t, `{"n":7}`, string(res[0].Value))
	require.False(t, *res[1].Found)
	require.Equal(t, int64(2), via.requests.Load(), "the put and the batch both go through the given http.Client")
}

// agentTransport records the User-Agent of each request it carries to the broker.
type agentTransport struct {
	mu     sync.Mutex
	agents []string
}

func (a *agentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	a.mu.Lock()
	a.agents = append(a.agents, r.Header.Get("User-Agent"))
	a.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

// Every request names the SDK, as TS's and Python's do, unless WithHeader names another agent.
func TestITRequestsNameTheSDKAsUserAgent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		opts []lanes.Option
		want string
	}{
		{nil, "lanes-mq-go/0.0.0"},
		{[]lanes.Option{lanes.WithHeader("user-agent", "billing/2.1")}, "billing/2.1"},
	} {
		via := &agentTransport{}
		opts := append([]lanes.Option{lanes.WithURL(os.Getenv("LANES_TEST_URL")), lanes.WithHTTPClient(&http.Client{Transport: via})}, tc.opts...)
		c, err := lanes.New(opts...)
		require.NoError(t, err)
		_, err = c.Queue(b.queue).Push(b.ctx, lanes.Data(1))
		require.NoError(t, err)
		_, err = c.Health(b.ctx)
		require.NoError(t, err)
		require.Equal(t, []string{tc.want, tc.want}, via.agents)
	}
}

// A transaction's ack carries the failure reason, as client.Ack's AckOpts.Error and TS's and
// Python's transaction ack `error` do: the dead letter shows it.
func TestITTransactionAckWithErrorStoresTheReason(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "", 1, "tx-dlq")
	msgs, err := b.c.Queue(b.queue).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	res, err := b.c.Transaction().AckWith(msgs[0], lanes.AckDLQ, lanes.AckOpts{Error: "poison"}).Commit(b.ctx)
	require.NoError(t, err)
	require.True(t, res.Success)
	dead, err := b.c.Admin().ListDLQ(b.ctx, lanes.DLQQuery{Queue: b.queue})
	require.NoError(t, err)
	require.Len(t, dead.Messages, 1)
	require.Equal(t, msgs[0].TransactionID, dead.Messages[0].TransactionId)
	require.NotNil(t, dead.Messages[0].ErrorMessage)
	require.Equal(t, "poison", *dead.Messages[0].ErrorMessage)

	_, err = b.c.Transaction().AckWith(msgs[0], lanes.AckDLQ, lanes.AckOpts{WithoutLease: true}).Commit(b.ctx)
	require.ErrorContains(t, err, "lease-less")
}
