package lanes_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// Every stop of a consume loop or iterator cuts its pop by half-close, as a soft stop does: a
// hard stop, the end of the ctx given to Consume (signal.NotifyContext's shutdown) and the end of
// an iterator's ctx. They canceled the pop, and an answer the broker wrote just before (held
// 600 ms in the proxy) was lost with its connection: its message stayed leased for the whole
// 60 s lease. Now the answer arrives, is released with `retry`, and a fresh pop gets it at once.
func TestITEveryStopReleasesAnAnswerTheBrokerAlreadyWrote(t *testing.T) {
	t.Parallel()
	consume := func(t *testing.T, b bundle, c *lanes.Client, ctx context.Context, handled func(*lanes.Message)) *lanes.Consumer {
		cons, err := c.Queue(b.queue).LeaseSeconds(60).Timeout(20*time.Second).Autopilot(false).
			Consume(ctx, func(_ context.Context, m *lanes.Message) error {
				handled(m)
				return nil
			})
		require.NoError(t, err)
		return cons
	}
	// iterate ranges over the queue's messages until ctx ends; the channel closes when the range has.
	iterate := func(ctx context.Context, b bundle, c *lanes.Client, autoAck bool, handled func(*lanes.Message)) <-chan struct{} {
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			msgs := c.Queue(b.queue).LeaseSeconds(60).Timeout(20 * time.Second).Autopilot(false).
				AutoAck(autoAck).Messages(ctx)
			for m, err := range msgs {
				if err == nil {
					handled(m)
				}
			}
		}()
		return ended
	}
	t.Run("StopAndCancel", func(t *testing.T) {
		t.Parallel()
		stopWithAnAnswerOnItsWay(t, func(b bundle, c *lanes.Client, handled func(*lanes.Message)) func() {
			cons := consume(t, b, c, b.ctx, handled)
			return func() { require.NoError(t, cons.StopAndCancel(b.ctx)) }
		})
	})
	t.Run("the Consume ctx ends", func(t *testing.T) {
		t.Parallel()
		stopWithAnAnswerOnItsWay(t, func(b bundle, c *lanes.Client, handled func(*lanes.Message)) func() {
			ctx, cancel := context.WithCancel(b.ctx)
			cons := consume(t, b, c, ctx, handled)
			return func() {
				cancel()
				<-cons.Done()
			}
		})
	})
	for _, autoAck := range []bool{true, false} {
		name := "the iterator's ctx ends"
		if !autoAck {
			name += " under AutoAck(false)"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			stopWithAnAnswerOnItsWay(t, func(b bundle, c *lanes.Client, handled func(*lanes.Message)) func() {
				ctx, cancel := context.WithCancel(b.ctx)
				ended := iterate(ctx, b, c, autoAck, handled)
				return func() {
					cancel()
					<-ended
				}
			})
		})
	}
	// Close right after the cancel, before the range has ended, as a program that shuts down
	// does: Close touches no connection in use, so the cut pop's answer arrives and is released.
	t.Run("the iterator's ctx ends and the client closes at once", func(t *testing.T) {
		t.Parallel()
		stopWithAnAnswerOnItsWay(t, func(b bundle, c *lanes.Client, handled func(*lanes.Message)) func() {
			ctx, cancel := context.WithCancel(b.ctx)
			ended := iterate(ctx, b, c, true, handled)
			return func() {
				cancel()
				require.NoError(t, c.Close(b.ctx))
				<-ended
			}
		})
	})
}

// stopWithAnAnswerOnItsWay starts a consumer through start on a client behind a proxy that holds
// each answer 600 ms, lets its long poll park, pushes a message, and calls the returned stop
// 200 ms later, when the broker wrote the answer and the proxy holds it. The stop must end
// within the answer's way, hand nothing over, and leave the message to a fresh pop at once.
func stopWithAnAnswerOnItsWay(t *testing.T, start func(b bundle, c *lanes.Client, handled func(*lanes.Message)) (stop func())) {
	t.Helper()
	stopWithAnAnswerOnItsWayOn(t, func() *lanes.Client {
		proxy := startSlowAnswerProxy(t, 600*time.Millisecond, nil)
		c, err := lanes.New(lanes.WithURL(proxy.url()))
		require.NoError(t, err)
		closeWhenDone(t, c)
		return c
	}, start)
}

// stopWithAnAnswerOnItsWayOn is stopWithAnAnswerOnItsWay on the client newClient makes, whose
// answers reach it 600 ms after the broker wrote them.
func stopWithAnAnswerOnItsWayOn(t *testing.T, newClient func() *lanes.Client, start func(b bundle, c *lanes.Client, handled func(*lanes.Message)) (stop func())) {
	t.Helper()
	b := setup(t)
	c := newClient()
	var mu sync.Mutex
	var handled []string
	stop := start(b, c, func(m *lanes.Message) {
		mu.Lock()
		handled = append(handled, m.TransactionID)
		mu.Unlock()
	})
	time.Sleep(time.Second) // the long poll is parked on the broker
	pushN(t, b, "a", 1, "late")
	time.Sleep(200 * time.Millisecond) // the broker wrote the answer; the proxy holds it
	stopped := time.Now()
	stop()
	require.Less(t, time.Since(stopped), 2*time.Second, "the stop waits for the answer on its way, not the long poll")
	mu.Lock()
	require.Empty(t, handled, "a stopped consumer hands nothing over")
	mu.Unlock()

	requireReleasedAtOnce(t, b)
}
