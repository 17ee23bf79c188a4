package lanes_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// kindSentinels are the sentinels that tell a failed call's kind apart: each error below must
// match exactly one of them (ErrTimeout also matches ErrConnection, as TS's APITimeoutError is an
// APIConnectionError).
var kindSentinels = map[string]error{
	"ErrBadRequest": lanes.ErrBadRequest, "ErrUnauthorized": lanes.ErrUnauthorized,
	"ErrForbidden": lanes.ErrForbidden, "ErrNotFound": lanes.ErrNotFound,
	"ErrConflict": lanes.ErrConflict, "ErrPayloadTooLarge": lanes.ErrPayloadTooLarge,
	"ErrRateLimited": lanes.ErrRateLimited, "ErrInternalServer": lanes.ErrInternalServer,
	"ErrNotImplemented": lanes.ErrNotImplemented, "ErrTimeout": lanes.ErrTimeout,
	"ErrConnection": lanes.ErrConnection,
}

func requireKinds(t *testing.T, err error, want ...string) {
	t.Helper()
	require.Error(t, err)
	var got []string
	for name, s := range kindSentinels {
		if errors.Is(err, s) {
			got = append(got, name)
		}
	}
	require.ElementsMatch(t, want, got, "error %v", err)
}

// scriptFaults sets a fault script on the test broker (scripts/test-broker.sh serves them when
// auth is off) and returns a client whose requests it applies to, with no retries.
func scriptFaults(t *testing.T, rules string, opts ...lanes.Option) *lanes.Client {
	t.Helper()
	base := testBrokerURL(t)
	run := fmt.Sprintf("sdkgo-%d", time.Now().UnixNano())
	req, err := http.NewRequest(http.MethodPut, base+"/__test/faults/"+run, strings.NewReader(`{"rules":`+rules+`}`))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode,
		"the test broker serves no fault scripts: start it with scripts/test-broker.sh (LANES_TEST_FAULTS on)")
	t.Cleanup(func() {
		del, _ := http.NewRequest(http.MethodDelete, base+"/__test/faults/"+run, nil)
		if r, err := http.DefaultClient.Do(del); err == nil {
			_ = r.Body.Close()
		}
	})
	all := append([]lanes.Option{lanes.WithURL(base), lanes.WithHeader("X-Lanes-Test-Run", run),
		lanes.WithRetryAttempts(0), lanes.WithMax429Attempts(0)}, opts...)
	c, err := lanes.New(all...)
	require.NoError(t, err)
	closeWhenDone(t, c)
	return c
}

// The broker's own 400 and 404 each match one sentinel.
func TestITErrorKindsOfBrokerAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.c.Queue(b.queue).Push(b.ctx, lanes.Item{Data: 1, TransactionID: strings.Repeat("x", 1025)})
	requireKinds(t, err, "ErrBadRequest")
	var apiErr *lanes.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "bad_request", apiErr.Code)
	require.Equal(t, "items[0].transactionId is longer than 1024 bytes", apiErr.Message, "the broker's text alone")

	_, err = b.c.Admin().GetQueue(b.ctx, b.queue+"-absent")
	requireKinds(t, err, "ErrNotFound")
}

// Every status the SDKs name, answered by the broker's fault scripts, matches its one sentinel:
// a 409 and a 5xx are told apart from the rest, and 501 is not a 5xx that may pass.
func TestITErrorKindsByStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		header string
		want   string
	}{
		{400, "", "ErrBadRequest"},
		{401, "", "ErrUnauthorized"},
		{403, "", "ErrForbidden"},
		{404, "", "ErrNotFound"},
		{409, "", "ErrConflict"},
		{413, "", "ErrPayloadTooLarge"},
		{429, `"Retry-After":"3600"`, "ErrRateLimited"},
		{500, "", "ErrInternalServer"},
		{503, "", "ErrInternalServer"},
		{501, "", "ErrNotImplemented"},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			t.Parallel()
			rules := fmt.Sprintf(`[{"method":"POST","path":"/api/v1/push","responses":[{"status":%d,"headers":{%s}}]}]`, tc.status, tc.header)
			c := scriptFaults(t, rules)
			_, err := c.Queue("sdkgo-kinds").Push(context.Background(), lanes.Data(1))
			requireKinds(t, err, tc.want)
			var apiErr *lanes.APIError
			require.ErrorAs(t, err, &apiErr)
			require.Equal(t, tc.status, apiErr.Status)
			// As TS's and Python's terminal: every 4xx but 429.
			require.Equal(t, tc.status/100 == 4 && tc.status != 429, apiErr.Terminal())
		})
	}
}

// An *APIError says how many attempts the call made, as TS's and Python's attempts do: one for
// an answer the policy does not retry, 1 + WithRetryAttempts when every retry got a 5xx.
func TestITAPIErrorCountsTheAttempts(t *testing.T) {
	t.Parallel()
	c := scriptFaults(t, `[{"method":"POST","path":"/api/v1/push","responses":[{"status":503,"times":3}]},
		{"method":"GET","path":"/api/v1/resources/overview","responses":[{"status":400}]}]`,
		lanes.WithRetryAttempts(2), lanes.WithRetryDelay(time.Millisecond))
	_, err := c.Queue("sdkgo-attempts").Push(context.Background(), lanes.Data(1))
	var apiErr *lanes.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, 503, apiErr.Status)
	require.Equal(t, 3, apiErr.Attempts)
	_, err = c.Admin().Overview(context.Background())
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, 400, apiErr.Status)
	require.Equal(t, 1, apiErr.Attempts)
}

// A write that is not idempotent (a KV incr) whose attempt timed out is ErrOutcomeUnknown and
// still ErrTimeout and ErrConnection: a caller handling timeouts handles it, in every SDK.
func TestITTimedOutWriteOfUnknownOutcomeIsATimeout(t *testing.T) {
	t.Parallel()
	c := scriptFaults(t, `[{"method":"POST","path":"/api/v1/kv","responses":[{"status":200,"delayMs":3000}]}]`,
		lanes.WithTimeout(200*time.Millisecond))
	_, err := c.KV("sdkgo-kinds").Incr(context.Background(), "counter", 1, lanes.Forever, lanes.KVIncrOpts{})
	require.ErrorIs(t, err, lanes.ErrOutcomeUnknown)
	requireKinds(t, err, "ErrTimeout", "ErrConnection")
}

// An attempt that times out is ErrTimeout (and ErrConnection); a refused connection is
// ErrConnection alone.
func TestITErrorKindsWithoutAnswer(t *testing.T) {
	t.Parallel()
	c := scriptFaults(t, `[{"method":"GET","path":"/api/v1/resources/overview","responses":[{"status":200,"delayMs":3000}]}]`,
		lanes.WithTimeout(200*time.Millisecond))
	_, err := c.Admin().Overview(context.Background())
	requireKinds(t, err, "ErrTimeout", "ErrConnection")
	var ce *lanes.ConnectionError
	require.ErrorAs(t, err, &ce)
	require.True(t, ce.Timeout())

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	dead, err := lanes.New(lanes.WithURL(closed), lanes.WithRetryAttempts(2), lanes.WithRetryDelay(time.Millisecond))
	require.NoError(t, err)
	closeWhenDone(t, dead)
	_, err = dead.Admin().Overview(context.Background())
	requireKinds(t, err, "ErrConnection")
	require.ErrorAs(t, err, &ce)
	require.False(t, ce.Timeout())
	require.Equal(t, 3, ce.Attempts, "as TS's and Python's attempts")
}

// Queue(q).Depth and Queue(q).DLQ(g)…Get read what Admin's QueueDepth and ListDLQ read, for
// the builder's queue and group, as TS's queue(q).depth() and queue(q).dlq(g)…get().
func TestITQueueDepthAndDLQBuilders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, p := range []string{"a", "b", "c"} {
		pushN(t, b, p, 1, "dd")
	}
	depth, err := b.c.Queue(b.queue).Group("billing").Depth(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, depth.Pending)
	require.Equal(t, "billing", *depth.Group)

	for range 3 {
		msgs, err := b.c.Queue(b.queue).Group("billing").SubscriptionMode("all").Batch(1).Wait(false).Pop(b.ctx)
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		_, err = b.c.Ack(b.ctx, msgs, lanes.AckDLQ, lanes.AckOpts{Error: "poison"})
		require.NoError(t, err)
	}

	page, err := b.c.Queue(b.queue).Group("billing").DLQ("").Limit(2).Get(b.ctx)
	require.NoError(t, err)
	require.Len(t, page.Messages, 2)
	rest, err := b.c.Queue(b.queue).DLQ("billing").Limit(2).Offset(2).Get(b.ctx)
	require.NoError(t, err)
	require.Len(t, rest.Messages, 1)
	none, err := b.c.Queue(b.queue).DLQ("other").Get(b.ctx)
	require.NoError(t, err)
	require.Empty(t, none.Messages)
	other, err := b.c.Queue(b.queue).DLQ("billing").Partition("b").Get(b.ctx)
	require.NoError(t, err)
	require.Len(t, other.Messages, 1)
	require.Equal(t, "b", other.Messages[0].Partition)
	window, err := b.c.Queue(b.queue).DLQ("billing").From(time.Now().Add(time.Hour)).Get(b.ctx)
	require.NoError(t, err)
	require.Empty(t, window.Messages)
	window, err = b.c.Queue(b.queue).DLQ("billing").From(time.Now().Add(-time.Hour)).To(time.Now().Add(time.Hour)).Get(b.ctx)
	require.NoError(t, err)
	require.Len(t, window.Messages, 3)
	require.Equal(t, "billing", page.Messages[0].ConsumerGroup)
	require.Equal(t, "poison", *page.Messages[0].ErrorMessage)
}

// A message listing of payloads larger than the broker's answer byte budget
// (4 MiB by default, each payload counted twice) comes one message a page:
// following NextOffset while Truncated lists every message once.
func TestITAMessageListingCutByTheByteBudgetSaysWhereTheRestStarts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := strings.Repeat("x", 3<<19)
	for i := range 3 {
		_, err := b.c.Queue(b.queue).Push(b.ctx, lanes.Item{Data: big, TransactionID: fmt.Sprintf("big-%d", i)})
		require.NoError(t, err)
	}
	var got []string
	offset := 0
	for pages := 1; ; pages++ {
		page, err := b.c.Admin().ListMessages(b.ctx, lanes.MessageQuery{Queue: b.queue, Limit: 10, Offset: offset})
		require.NoError(t, err)
		require.Equal(t, 1, len(page.Messages), "page %d", pages) // not Len: it would print the payloads
		got = append(got, page.Messages[0].TransactionId)
		require.NotNil(t, page.Truncated)
		if !*page.Truncated {
			require.Nil(t, page.NextOffset)
			require.Equal(t, 3, pages)
			break
		}
		offset = *page.NextOffset
	}
	require.Equal(t, []string{"big-2", "big-1", "big-0"}, got)
}

// The broker answers the group, lagging and partition listings 10,000 rows a page at most; the
// Admin calls that return a whole listing follow the pages, so a queue of 10,003 partitions comes
// whole, each partition once, in name order. The lagging listing spans every group on the broker,
// whose rows the parallel tests change between two pages: it is followed by key, which they do
// not shift (by offset, a CI run lost rows that way).
func TestITAdminListingsFollowThePagesOfAWideQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// 10,003 partitions, a seek over them and four listings of two pages each take 8 s alone and
	// more than setup's 60 s beside the rest of the suite on a loaded 2-core machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	b.ctx = ctx
	const partitions = 10003
	want := make([]string, partitions)
	for from := 0; from < partitions; from += 5000 { // a transaction carries 10,000 operations at most
		tx := b.c.Transaction()
		for i := from; i < min(from+5000, partitions); i++ {
			want[i] = fmt.Sprintf("p%05d", i)
			tx.Queue(b.queue).Partition(want[i]).Push(lanes.Data(i))
		}
		_, err := tx.Commit(b.ctx)
		require.NoError(t, err)
	}
	group := b.queue + "-g"
	_, err := b.c.Admin().SeekConsumerGroup(b.ctx, group, b.queue, lanes.SeekToTime(time.Unix(0, 0)))
	require.NoError(t, err)

	detail, err := b.c.Admin().GetQueue(b.ctx, b.queue)
	require.NoError(t, err)
	var names []string
	for _, p := range detail.Partitions {
		names = append(names, p.Name)
	}
	requireSameNames(t, want, names, "queue detail")

	depth, err := b.c.Admin().QueueDepth(b.ctx, b.queue, group)
	require.NoError(t, err)
	names = nil
	for _, p := range depth.Partitions {
		names = append(names, p.Partition)
	}
	requireSameNames(t, want, names, "queue depth")
	require.Equal(t, partitions, depth.Pending)

	status, err := b.c.Admin().QueueStatus(b.ctx, b.queue, true)
	require.NoError(t, err)
	names = nil
	for _, p := range *status.Partitions {
		names = append(names, p.Name)
	}
	requireSameNames(t, want, names, "queue status")

	cursors, err := b.c.Admin().GetConsumerGroup(b.ctx, group)
	require.NoError(t, err)
	names = nil
	for _, p := range cursors[b.queue].Partitions {
		names = append(names, p.Partition)
	}
	requireSameNames(t, want, names, "one group")

	lagging, err := b.c.Admin().LaggingConsumerGroups(b.ctx, 0)
	require.NoError(t, err)
	names = nil
	for _, r := range lagging {
		if r.ConsumerGroup == group {
			names = append(names, r.PartitionName)
		}
	}
	requireSameNames(t, want, names, "lagging")
}

// requireSameNames wants got equal to want, naming the first difference rather than printing
// a thousand names.
func requireSameNames(t *testing.T, want, got []string, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i := range want {
		require.Equal(t, want[i], got[i], "%s: name %d", what, i)
	}
}
