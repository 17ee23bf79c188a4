package lanes_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// errorLog collects what a consumer or iterator reports to OnError.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) { l.mu.Lock(); l.errs = append(l.errs, err); l.mu.Unlock() }

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// The iterator renews the lease of the message in hand by default, as the consume loop does: a
// loop body slower than the 1 s lease keeps its message (a second consumer gets nothing), acks
// it, and no renewal runs after the ack. RenewLease(false, 0) turns the renewal off.
func TestITMessagesRenewLeaseByDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.c.Queue(b.queue).Wait(false).LeaseSeconds(1).Limit(1)
	slowBody := func(q lanes.QueueBuilder) (stolen int, errs []error) {
		var log errorLog
		for _, err := range q.OnError(log.add).Messages(b.ctx) {
			require.NoError(t, err)
			time.Sleep(1500 * time.Millisecond)
			other, err := b.c.Queue(b.queue).Wait(false).Pop(b.ctx)
			require.NoError(t, err)
			stolen = len(other)
			time.Sleep(time.Second)
		}
		time.Sleep(1500 * time.Millisecond) // a renewal still running after the ack would fail here
		return stolen, log.all()
	}

	pushN(t, b, "a", 1, "renewed")
	stolen, errs := slowBody(q)
	require.Zero(t, stolen, "a second consumer got the message in hand")
	require.Empty(t, errs)
	left, err := b.c.Queue(b.queue).Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	require.Empty(t, left, "acked under the renewed lease")

	pushN(t, b, "b", 1, "off")
	stolen, _ = slowBody(q.RenewLease(false, 0))
	require.Equal(t, 1, stolen, "without renewal the 1 s lease expires under the loop body")
}

// Under server auto-ack a pop asks for no more than what is left of Limit, so messages beyond
// it stay queued instead of being committed and lost.
func TestITServerAutoAckPopCappedAtLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 5, "cap")
	q := b.c.Queue(b.queue).Wait(false).Batch(10).ServerAutoAck(true).Limit(2)

	var handled []*lanes.Message
	var mu sync.Mutex
	require.NoError(t, q.Run(b.ctx, func(ctx context.Context, m *lanes.Message) error {
		mu.Lock()
		handled = append(handled, m)
		mu.Unlock()
		return nil
	}))
	require.Len(t, handled, 2)

	n := 0
	for _, err := range q.Limit(1).IdleTimeout(2 * time.Second).Messages(b.ctx) {
		require.NoError(t, err)
		n++
	}
	require.Equal(t, 1, n)

	left, err := b.c.Queue(b.queue).Wait(false).Batch(10).Pop(b.ctx)
	require.NoError(t, err)
	require.Len(t, left, 2, "the messages beyond the Limits are still queued")
}

// Under server auto-ack a soft stop still hands every popped message to the handler (they are
// committed; nothing can release them), while a hard stop reports how many it dropped.
func TestITServerAutoAckStops(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, hard bool) (handled int, errs []error) {
		b := setup(t)
		pushN(t, b, "a", 5, "stop")
		var log errorLog
		first := make(chan struct{})
		var mu sync.Mutex
		cons, err := b.c.Queue(b.queue).Wait(false).Batch(5).ServerAutoAck(true).OnError(log.add).
			Consume(b.ctx, func(ctx context.Context, m *lanes.Message) error {
				mu.Lock()
				handled++
				if handled == 1 {
					close(first)
				}
				mu.Unlock()
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(100 * time.Millisecond):
					return nil
				}
			})
		require.NoError(t, err)
		<-first
		if hard {
			require.NoError(t, cons.StopAndCancel(b.ctx))
		} else {
			require.NoError(t, cons.Stop(b.ctx))
		}
		require.NoError(t, cons.Err())
		mu.Lock()
		defer mu.Unlock()
		return handled, log.all()
	}
	t.Run("soft", func(t *testing.T) {
		t.Parallel()
		handled, errs := run(t, false)
		require.Equal(t, 5, handled, "every committed message is handed over")
		require.Empty(t, errs)
	})
	t.Run("hard", func(t *testing.T) {
		t.Parallel()
		handled, errs := run(t, true)
		require.Equal(t, 1, handled)
		require.Len(t, errs, 1)
		var drop *lanes.AutoAckDroppedError
		require.ErrorAs(t, errs[0], &drop)
		require.Equal(t, 4, drop.Count)
	})
}

// An iterator left early under server auto-ack reports the popped messages it never handed over.
func TestITServerAutoAckIteratorLeftEarlyReportsDropped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 5, "left")
	var log errorLog
	for _, err := range b.c.Queue(b.queue).Wait(false).Batch(5).ServerAutoAck(true).OnError(log.add).Messages(b.ctx) {
		require.NoError(t, err)
		break
	}
	errs := log.all()
	require.Len(t, errs, 1)
	var drop *lanes.AutoAckDroppedError
	require.True(t, errors.As(errs[0], &drop), "%v", errs[0])
	require.Equal(t, 4, drop.Count)
}

// popsLeft pops (with a lease, so nothing is committed) until the queue answers empty and
// returns how many messages it held.
func popsLeft(t *testing.T, b bundle) int {
	t.Helper()
	n := 0
	for {
		msgs, err := b.c.Queue(b.queue).Wait(false).Batch(100).Partitions(16).Pop(b.ctx)
		require.NoError(t, err)
		if len(msgs) == 0 {
			return n
		}
		n += len(msgs)
	}
}

// Under server auto-ack the workers reserve Limit before they pop, so four workers on four
// partitions pop exactly Limit messages between them: the handler gets 5 and the other 35 stay
// queued (before, each worker popped the whole remainder at once and up to 15 were lost).
func TestITServerAutoAckLimitSharedByWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, p := range []string{"a", "b", "c", "d"} {
		pushN(t, b, p, 10, "share")
	}
	var handled atomic.Int64
	var log errorLog
	err := b.c.Queue(b.queue).ServerAutoAck(true).Limit(5).Concurrency(4).Timeout(2*time.Second).OnError(log.add).
		Run(b.ctx, func(ctx context.Context, m *lanes.Message) error {
			handled.Add(1)
			time.Sleep(20 * time.Millisecond)
			return nil
		})
	require.NoError(t, err)
	require.EqualValues(t, 5, handled.Load())
	require.Empty(t, log.all())
	require.Equal(t, 35, popsLeft(t, b), "only Limit messages were committed")
}

// popQueries records the query of every pop sent through it to the real broker.
type popQueries struct {
	mu      sync.Mutex
	queries []string
}

func (p *popQueries) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.Contains(r.URL.Path, "/pop/") {
		p.mu.Lock()
		p.queries = append(p.queries, r.URL.RawQuery)
		p.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (p *popQueries) batches() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, q := range p.queries {
		for _, kv := range strings.Split(q, "&") {
			if strings.HasPrefix(kv, "batch=") {
				out = append(out, kv)
			}
		}
	}
	return out
}

// Under server auto-ack a pop asks for what is left of Limit only up to the batch it would take
// anyway: Batch when set, the automatic 100 under autopilot, 1 with autopilot off. A Limit above
// the broker's 10 000 no longer sends an invalid batch (a 400 that ended the consumer).
func TestITServerAutoAckBatchCappedAtPopBatch(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		build func(q lanes.QueueBuilder) lanes.QueueBuilder
		batch string
	}{
		{"limit above the broker's bound", func(q lanes.QueueBuilder) lanes.QueueBuilder { return q.Limit(20000) }, "batch=100"},
		{"limit above the automatic batch", func(q lanes.QueueBuilder) lanes.QueueBuilder { return q.Limit(500) }, "batch=100"},
		{"limit below it", func(q lanes.QueueBuilder) lanes.QueueBuilder { return q.Limit(2) }, "batch=2"},
		{"batch pinned", func(q lanes.QueueBuilder) lanes.QueueBuilder { return q.Batch(3).Limit(500) }, "batch=3"},
		{"autopilot off", func(q lanes.QueueBuilder) lanes.QueueBuilder { return q.Autopilot(false).Limit(500) }, "batch=1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			pushN(t, b, "a", 2, "cap")
			rec := &popQueries{}
			c, err := lanes.New(lanes.WithURL(os.Getenv("LANES_TEST_URL")), lanes.WithHTTPClient(&http.Client{Transport: rec}))
			require.NoError(t, err)
			var handled atomic.Int64
			q := tc.build(c.Queue(b.queue).Wait(false).ServerAutoAck(true).IdleTimeout(time.Second))
			require.NoError(t, q.Run(b.ctx, func(ctx context.Context, m *lanes.Message) error { handled.Add(1); return nil }))
			require.EqualValues(t, 2, handled.Load())
			batches := rec.batches()
			require.NotEmpty(t, batches)
			require.Equal(t, tc.batch, batches[0])
		})
	}
}

// Under server auto-ack a soft stop lets a long poll in flight answer instead of cutting it
// (a cut pop may lose messages the broker committed): a message pushed after Stop began
// reaches the handler, and Stop ends once it is handled.
func TestITServerAutoAckSoftStopKeepsPopInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var handled atomic.Int64
	cons, err := b.c.Queue(b.queue).ServerAutoAck(true).Timeout(10*time.Second).
		Consume(b.ctx, func(ctx context.Context, m *lanes.Message) error { handled.Add(1); return nil })
	require.NoError(t, err)
	time.Sleep(500 * time.Millisecond) // the pop is parked on the empty queue
	stopped := make(chan error, 1)
	go func() { stopped <- cons.Stop(b.ctx) }()
	time.Sleep(300 * time.Millisecond)
	pushN(t, b, "a", 1, "late")
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(8 * time.Second):
		t.Fatal("Stop did not return once the pop in flight answered")
	}
	require.EqualValues(t, 1, handled.Load(), "the message the pop committed was handed over")
	require.Zero(t, popsLeft(t, b))
}

// Stop and StopAndCancel called from inside a handler request the stop and return at once
// (the end waits for that very handler): the consumer then ends with Err() nil.
func TestITStopFromHandler(t *testing.T) {
	t.Parallel()
	for _, hard := range []bool{false, true} {
		t.Run(map[bool]string{false: "soft", true: "hard"}[hard], func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			pushN(t, b, "a", 3, "self")
			self := make(chan *lanes.Consumer, 1)
			stopErr := make(chan error, 1)
			var handled atomic.Int64
			cons, err := b.c.Queue(b.queue).Wait(false).Consume(b.ctx, func(ctx context.Context, m *lanes.Message) error {
				if handled.Add(1) > 1 {
					return nil
				}
				c := <-self
				stopCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				if hard {
					stopErr <- c.StopAndCancel(stopCtx)
				} else {
					stopErr <- c.Stop(stopCtx)
				}
				return nil
			})
			require.NoError(t, err)
			self <- cons
			require.NoError(t, <-stopErr)
			select {
			case <-cons.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the consumer did not end")
			}
			require.NoError(t, cons.Err())
			require.EqualValues(t, 1, handled.Load(), "nothing is handed over after the stop")
			require.Equal(t, 2, popsLeft(t, b), "the handled message is acked, the rest released")
		})
	}
}

// Stop called from OnError on the lease-renewal goroutine returns at once, as from a handler:
// the consumer's end waits for that renewal, so waiting for the end there only ran out Stop's
// context. The handler acks its message itself, so the next renewal finds the lease gone.
func TestITStopFromOnErrorOfARenewal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pushN(t, b, "a", 1, "self")
	self := make(chan *lanes.Consumer, 1)
	renewFailed := make(chan struct{})
	var once sync.Once
	type stopped struct {
		err  error
		took time.Duration
	}
	stopResult := make(chan stopped, 1)
	cons, err := b.c.Queue(b.queue).Wait(false).LeaseSeconds(5).RenewLease(true, 200*time.Millisecond).
		OnError(func(err error) {
			once.Do(func() {
				close(renewFailed)
				c := <-self
				stopCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				start := time.Now()
				stopResult <- stopped{c.Stop(stopCtx), time.Since(start)}
			})
		}).
		Consume(b.ctx, func(ctx context.Context, m *lanes.Message) error {
			if _, err := b.c.Ack(ctx, []*lanes.Message{m}, lanes.AckCompleted); err != nil {
				return err
			}
			<-renewFailed
			return nil
		})
	require.NoError(t, err)
	self <- cons
	select {
	case r := <-stopResult:
		require.NoError(t, r.err)
		require.Less(t, r.took, time.Second, "Stop from OnError waited for the end that waits for it")
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal failed")
	}
	select {
	case <-cons.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the consumer did not end")
	}
}

// Pop, Consume and Messages refuse a queue or partition named "." or ".." (which URL clients
// turn into another route, answered 404 no_such_route) with *InvalidNameError, sending nothing.
func TestITPopRefusesDotNames(t *testing.T) {
	t.Parallel()
	b := setup(t)
	via := &countingTransport{}
	c, err := lanes.New(lanes.WithURL(os.Getenv("LANES_TEST_URL")), lanes.WithHTTPClient(&http.Client{Transport: via}))
	require.NoError(t, err)
	for _, tc := range []struct {
		field string
		q     lanes.QueueBuilder
	}{
		{"queue", c.Queue(".")},
		{"queue", c.Queue("..")},
		{"partition", c.Queue(b.queue).Partition(".")},
		{"partition", c.Queue(b.queue).Partition("..")},
		{"partition", c.Queue(b.queue).Partition("")},
		{"partition", c.Queue(b.queue).Partition("  ")},
	} {
		q := tc.q.Wait(false)
		var bad *lanes.InvalidNameError
		_, err := q.Pop(b.ctx)
		require.ErrorAs(t, err, &bad)
		require.Equal(t, tc.field, bad.Field)
		_, err = q.Consume(b.ctx, func(context.Context, *lanes.Message) error { return nil })
		require.ErrorAs(t, err, &bad)
		for _, err := range q.Messages(b.ctx) {
			require.ErrorAs(t, err, &bad)
		}
	}
	require.Zero(t, via.requests.Load(), "nothing was sent")
}

// Every call that puts a name in its URL path refuses "." and ".." with *InvalidNameError,
// sending nothing: the URL resolution removes such a segment with the one before it, so
// Timers("..").Get(ctx, "status") read GET /api/v1/status as a timer, and the admin calls got
// the broker's 404 no_such_route, as Python's httpx once turned
// DeleteConsumerGroupForQueue(g, "..") into a delete of g on every queue.
func TestITDotNamesInAPathAreRefusedUnsent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	group := b.queue + "-g"
	_, err := b.c.Queue(b.queue).Push(b.ctx, lanes.Data(1))
	require.NoError(t, err)
	_, err = b.c.Queue(b.queue).Group(group).SubscriptionMode("all").Wait(false).Pop(b.ctx)
	require.NoError(t, err)
	via := &countingTransport{}
	c, err := lanes.New(lanes.WithURL(os.Getenv("LANES_TEST_URL")), lanes.WithHTTPClient(&http.Client{Transport: via}), lanes.WithRetryAttempts(0))
	require.NoError(t, err)
	admin := c.Admin()
	for _, tc := range []struct {
		call  string
		field string
		name  string
		do    func() error
	}{
		{"delete group for queue", "queue", "..", func() error { _, err := admin.DeleteConsumerGroupForQueue(b.ctx, group, "..", true); return err }},
		{"delete group for queue", "queue", ".", func() error { _, err := admin.DeleteConsumerGroupForQueue(b.ctx, group, ".", true); return err }},
		{"delete group", "group", "..", func() error { _, err := admin.DeleteConsumerGroup(b.ctx, "..", true); return err }},
		{"delete queue", "queue", "..", func() error { _, err := admin.DeleteQueue(b.ctx, ".."); return err }},
		{"queue status", "queue", "..", func() error { _, err := admin.QueueStatus(b.ctx, "..", false); return err }},
		{"seek", "queue", "..", func() error { _, err := admin.SeekConsumerGroup(b.ctx, group, "..", lanes.SeekToEnd()); return err }},
		{"delete message", "partitionId", "..", func() error { _, err := admin.DeleteMessage(b.ctx, "..", "t"); return err }},
		{"timer get", "queue", "..", func() error { _, err := c.Timers("..").Get(b.ctx, "status"); return err }},
		{"timer get", "queue", ".", func() error { _, err := c.Timers(".").Get(b.ctx, "k"); return err }},
		{"timer cancel", "key", "..", func() error { _, err := c.Timers(b.queue).Cancel(b.ctx, ".."); return err }},
	} {
		var bad *lanes.InvalidNameError
		require.ErrorAs(t, tc.do(), &bad, tc.call)
		require.Equal(t, tc.field, bad.Field, tc.call)
		require.Equal(t, tc.name, bad.Name, tc.call)
	}
	require.Zero(t, via.requests.Load(), "nothing was sent")
	detail, err := b.c.Admin().GetConsumerGroup(b.ctx, group)
	require.NoError(t, err)
	require.Contains(t, detail, b.queue)
}

// Every call that takes a consumer group refuses a group name of only white space with
// *InvalidNameError, sending nothing: the broker answers a pop or seek for one with 400 but
// would take an ack or a delete naming one as a group of its own. A route that names the group
// in its path refuses an empty one too.
func TestITGroupOfOnlyWhiteSpaceIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	via := &countingTransport{}
	c, err := lanes.New(lanes.WithURL(os.Getenv("LANES_TEST_URL")), lanes.WithHTTPClient(&http.Client{Transport: via}))
	require.NoError(t, err)
	requireBadGroup := func(name string, err error) {
		t.Helper()
		var bad *lanes.InvalidNameError
		require.ErrorAs(t, err, &bad, name)
		require.Equal(t, "group", bad.Field, name)
	}
	msg := &lanes.Message{TransactionID: "t", PartitionID: "00000000-0000-0000-0000-000000000000", ConsumerGroup: "g"}
	admin := c.Admin()
	for _, g := range []string{" ", "\t\n", "\u3000"} {
		for _, q := range []lanes.QueueBuilder{c.Queue(b.queue), c.Queue(b.queue).Partition("p"), c.Namespace(b.queue)} {
			q = q.Group(g).Wait(false)
			_, err := q.Pop(b.ctx)
			requireBadGroup("pop", err)
			_, err = q.Consume(b.ctx, func(context.Context, *lanes.Message) error { return nil })
			requireBadGroup("consume", err)
			for _, err := range q.Messages(b.ctx) {
				requireBadGroup("messages", err)
			}
		}
		_, err := c.Ack(b.ctx, []*lanes.Message{msg}, lanes.AckCompleted, lanes.AckOpts{Group: g})
		requireBadGroup("ack", err)
		_, err = c.Ack(b.ctx, []*lanes.Message{msg, msg}, lanes.AckCompleted, lanes.AckOpts{Group: g})
		requireBadGroup("ack batch", err)
		_, err = c.Transaction().Ack(msg, lanes.AckCompleted, g).Commit(b.ctx)
		requireBadGroup("transaction ack", err)
		_, err = c.Queue(b.queue).Group(g).Depth(b.ctx)
		requireBadGroup("depth", err)
		_, err = c.Queue(b.queue).DLQ(g).Get(b.ctx)
		requireBadGroup("dlq", err)
		_, err = admin.PurgeDLQ(b.ctx, b.queue, g)
		requireBadGroup("purge dlq", err)
	}
	for _, g := range []string{"", "  "} {
		_, err := admin.SeekConsumerGroup(b.ctx, g, b.queue, lanes.SeekToEnd())
		requireBadGroup("seek", err)
		_, err = admin.SeekConsumerGroupPartition(b.ctx, g, b.queue, "p", lanes.SeekToEnd())
		requireBadGroup("seek partition", err)
		_, err = admin.GetConsumerGroup(b.ctx, g)
		requireBadGroup("get group", err)
		_, err = admin.DeleteConsumerGroup(b.ctx, g, true)
		requireBadGroup("delete group", err)
		_, err = admin.DeleteConsumerGroupForQueue(b.ctx, g, b.queue, true)
		requireBadGroup("delete group for queue", err)
		_, err = admin.UpdateSubscription(b.ctx, g, time.Now())
		requireBadGroup("update subscription", err)
	}
	require.Zero(t, via.requests.Load(), "nothing was sent")
}

// edgeSpaceNames sit on the edge of the broker's white-space rule (Go's unicode.IsSpace, the
// Unicode White_Space property): JavaScript's trim() also strips U+FEFF and Python's strip()
// U+001C..U+001F, which the broker takes as names; U+0085 is white space to the broker.
var edgeSpaceNames = []string{
	"\t", "\n", "\v", "\f", "\r", " ", "\x1c", "\x1d", "\x1e", "\x1f", "\u0085", "\u00a0", "\u1680", "\u180e",
	"\u2000", "\u200a", "\u200b", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff", " \ufeff ", "\u0085\u3000",
}

// The SDK refuses a group or partition name as blank exactly when the broker answers 400 for
// it: a pop sent by hand asks the broker, a pop through the SDK must agree.
func TestITBlankNamesAreTheBrokers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	brokerRefuses := func(path string, query url.Values) bool {
		t.Helper()
		req, err := http.NewRequestWithContext(b.ctx, http.MethodGet, testBrokerURL(t)+path+"?"+query.Encode(), nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Contains(t, []int{http.StatusNoContent, http.StatusBadRequest}, resp.StatusCode, "%q", path)
		return resp.StatusCode == http.StatusBadRequest
	}
	requireAgrees := func(brokerRefused bool, err error, field, name string) {
		t.Helper()
		var bad *lanes.InvalidNameError
		if !brokerRefused {
			require.NoError(t, err, "%s %q: the broker takes it", field, name)
			return
		}
		require.ErrorAs(t, err, &bad, "%s %q: the broker refuses it", field, name)
		require.Equal(t, field, bad.Field)
	}
	refused := 0
	queuePath := "/api/v1/pop/queue/" + url.PathEscape(b.queue)
	for _, name := range edgeSpaceNames {
		brokerRefused := brokerRefuses(queuePath, url.Values{"wait": {"false"}, "consumerGroup": {name}})
		_, err := b.c.Queue(b.queue).Group(name).Wait(false).Pop(b.ctx)
		requireAgrees(brokerRefused, err, "group", name)

		brokerRefused = brokerRefuses(queuePath+"/partition/"+url.PathEscape(name), url.Values{"wait": {"false"}})
		_, err = b.c.Queue(b.queue).Partition(name).Wait(false).Pop(b.ctx)
		requireAgrees(brokerRefused, err, "partition", name)
		if brokerRefused {
			refused++
		}
	}
	require.NotZero(t, refused, "the table holds names the broker refuses")
	require.Less(t, refused, len(edgeSpaceNames), "and names it takes")
}
