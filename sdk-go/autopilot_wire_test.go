package lanes

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPopWireAutopilot checks the pop query byte for byte (docs/consuming.md §2).
func TestPopWireAutopilot(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		envOff bool
		build  func(q QueueBuilder) QueueBuilder
		path   string
		query  string
	}{
		{"defaults", false, func(q QueueBuilder) QueueBuilder { return q }, "/api/v1/pop/queue/orders", "autopilot=true&wait=true&timeout=30000"},
		{"group", false, func(q QueueBuilder) QueueBuilder { return q.Group("billing") }, "/api/v1/pop/queue/orders", "autopilot=true&wait=true&timeout=30000&consumerGroup=billing"},
		{"batch pinned", false, func(q QueueBuilder) QueueBuilder { return q.Batch(10) }, "/api/v1/pop/queue/orders", "autopilot=true&batch=10&wait=true&timeout=30000"},
		{"width pinned", false, func(q QueueBuilder) QueueBuilder { return q.Partitions(1) }, "/api/v1/pop/queue/orders", "autopilot=true&wait=true&timeout=30000&partitions=1"},
		{"both pinned", false, func(q QueueBuilder) QueueBuilder { return q.Batch(10).Partitions(4) }, "/api/v1/pop/queue/orders", "batch=10&wait=true&timeout=30000&partitions=4"},
		{"off", false, func(q QueueBuilder) QueueBuilder { return q.Autopilot(false) }, "/api/v1/pop/queue/orders", "batch=1&wait=true&timeout=30000"},
		{"off pinned", false, func(q QueueBuilder) QueueBuilder { return q.Autopilot(false).Batch(5).Partitions(3) }, "/api/v1/pop/queue/orders", "batch=5&wait=true&timeout=30000&partitions=3"},
		{"off width 1", false, func(q QueueBuilder) QueueBuilder { return q.Autopilot(false).Partitions(1) }, "/api/v1/pop/queue/orders", "batch=1&wait=true&timeout=30000"},
		{"env off", true, func(q QueueBuilder) QueueBuilder { return q }, "/api/v1/pop/queue/orders", "batch=1&wait=true&timeout=30000"},
		{"env off, explicit on", true, func(q QueueBuilder) QueueBuilder { return q.Autopilot(true) }, "/api/v1/pop/queue/orders", "autopilot=true&wait=true&timeout=30000"},
		{"no wait, mode", false, func(q QueueBuilder) QueueBuilder { return q.Wait(false).Group("g").SubscriptionMode("all") }, "/api/v1/pop/queue/orders", "autopilot=true&wait=false&timeout=30000&consumerGroup=g&subscriptionMode=all"},
		{"everything", false, func(q QueueBuilder) QueueBuilder {
			return q.Batch(7).Partitions(2).Timeout(5 * time.Second).Group("a b").LeaseSeconds(9).SubscriptionMode("new").SubscriptionFrom("now").ServerAutoAck(true)
		}, "/api/v1/pop/queue/orders", "batch=7&wait=true&timeout=5000&consumerGroup=a+b&partitions=2&leaseSeconds=9&subscriptionMode=new&subscriptionFrom=now&autoAck=true"},
		{"partition route", false, func(q QueueBuilder) QueueBuilder { return q.Partition("c-42").Partitions(8) }, "/api/v1/pop/queue/orders/partition/c-42", "autopilot=true&wait=true&timeout=30000"},
		{"partition route batch", false, func(q QueueBuilder) QueueBuilder { return q.Partition("c-42").Batch(3) }, "/api/v1/pop/queue/orders/partition/c-42", "batch=3&wait=true&timeout=30000"},
		{"partition route off", false, func(q QueueBuilder) QueueBuilder { return q.Partition("c-42").Autopilot(false) }, "/api/v1/pop/queue/orders/partition/c-42", "batch=1&wait=true&timeout=30000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var opts []Option
			if tc.envOff {
				// stands in for LANES_SDK_POP_AUTOPILOT=off (see TestAutopilotEnv for the variable)
				opts = append(opts, WithPopAutopilot(false))
			}
			c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }, opts...)
			_, err := tc.build(c.Queue("orders")).Pop(context.Background())
			require.NoError(t, err)
			require.Equal(t, tc.path, fb.reqs[0].URL.Path)
			require.Equal(t, tc.query, fb.reqs[0].URL.RawQuery)
		})
	}
}

func TestPopWireDiscovery(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	_, err := c.Namespace("billing").Task("invoice").Wait(false).Pop(context.Background())
	require.NoError(t, err)
	require.Equal(t, "/api/v1/pop", fb.reqs[0].URL.Path)
	require.Equal(t, "autopilot=true&wait=false&timeout=30000&namespace=billing&task=invoice", fb.reqs[0].URL.RawQuery)
}

// TestAutopilotEnv reads LANES_SDK_POP_AUTOPILOT once at construction (not parallel: env).
func TestAutopilotEnv(t *testing.T) {
	for _, v := range []string{"off", " OFF ", "false", "0", "no", "Disabled"} {
		t.Setenv("LANES_SDK_POP_AUTOPILOT", v)
		c, err := New(WithURL("http://x:1"))
		require.NoError(t, err)
		require.False(t, c.autopilot, v)
		require.Equal(t, "batch=1&wait=true&timeout=30000", c.Queue("q").popQuery())
		t.Setenv("LANES_SDK_POP_AUTOPILOT", "on")
		require.False(t, c.autopilot, "read once")
	}
	t.Setenv("LANES_SDK_POP_AUTOPILOT", "")
	c, err := New(WithURL("http://x:1"))
	require.NoError(t, err)
	require.True(t, c.autopilot)
}

func TestPopEchoAndPacing(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `{"success":true,"queue":"q","partition":"Default","partitionId":"p","leaseId":"L","consumerGroup":"__QUEUE_MODE__",`+
			`"messages":[{"id":"i","transactionId":"t","traceId":null,"data":{"a":1},"producerSub":null,"createdAt":"2026-01-01T00:00:00Z","partitionId":"p","partition":"Default","leaseId":"L","consumerGroup":"__QUEUE_MODE__"}],`+
			`"partitionsClaimed":1,"autopilot":{"partitions":3,"batch":100,"waitMs":40}}`)
	})
	r, err := c.Queue("q").PopResult(context.Background())
	require.NoError(t, err)
	require.Equal(t, &AutopilotEcho{Partitions: 3, Batch: 100, WaitMs: ptr(40)}, r.Autopilot)
	require.Len(t, r.Messages, 1)
	var v map[string]int
	require.NoError(t, r.Messages[0].Decode(&v))
	require.Equal(t, 1, v["a"])
	require.Equal(t, "q", r.Messages[0].Queue)
	require.Equal(t, 1, fb.count())
}

// Timeout(0) makes the broker answer a waiting pop at once, so the loop paces its empty pops as
// without wait instead of spinning on them.
func TestEmptyPopsArePacedWhenTheTimeoutIsZero(t *testing.T) {
	t.Parallel()
	c, fb, _ := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 350*time.Millisecond)
	defer cancel()
	for _, err := range c.Queue("q").Wait(true).Timeout(0).Messages(ctx) {
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	require.Less(t, fb.count(), 10, "empty pops with timeout 0 must pause between polls")
}
