package lanes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// walkSpy is a transport that counts the requests to path, sends a malformed `after` on the
// request numbered badAfterAt (a real 400 from the broker), and, to play a broker before keyed
// paging, drops the answers' nextAfter (dropKey) and truncated (dropTruncated) fields.
type walkSpy struct {
	path          string
	requests      atomic.Int32
	keyed         atomic.Int32
	badAfterAt    int32
	dropKey       bool
	dropTruncated bool
}

func (s *walkSpy) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Path != s.path {
		return http.DefaultTransport.RoundTrip(req)
	}
	n := s.requests.Add(1)
	q := req.URL.Query()
	if q.Has("after") {
		s.keyed.Add(1)
	}
	if n == s.badAfterAt {
		q.Set("after", "not-a-key")
		req.URL.RawQuery = q.Encode()
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || (!s.dropKey && !s.dropTruncated) || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, err
	}
	if s.dropKey {
		delete(body, "nextAfter")
	}
	if s.dropTruncated {
		delete(body, "truncated")
		delete(body, "nextOffset")
	}
	raw, err = json.Marshal(body)
	if err != nil {
		return nil, err
	}
	resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(raw)), int64(len(raw))
	resp.Header.Del("Content-Length")
	return resp, nil
}

// spyClient is a client whose requests go through spy.
func spyClient(t *testing.T, spy *walkSpy) *lanes.Client {
	t.Helper()
	c, err := lanes.New(lanes.WithURL(testBrokerURL(t)), lanes.WithHTTPClient(&http.Client{Transport: spy}), lanes.WithRetryAttempts(0))
	require.NoError(t, err)
	closeWhenDone(t, c)
	return c
}

// fileDeadLetters files n dead letters on b's queue, one failure each, and returns their
// transaction ids newest first (the listing's order).
func fileDeadLetters(t *testing.T, b bundle, n int) []string {
	t.Helper()
	pushN(t, b, "a", n, "walk")
	var newestFirst []string
	for range n {
		popped, err := b.c.Queue(b.queue).Batch(1).Wait(false).Pop(b.ctx)
		require.NoError(t, err)
		require.Len(t, popped, 1)
		_, err = b.c.Ack(b.ctx, popped, lanes.AckDLQ, lanes.AckOpts{Error: "poison"})
		require.NoError(t, err)
		newestFirst = append([]string{popped[0].TransactionID}, newestFirst...)
	}
	return newestFirst
}

// collect is every row of seq, by key, stopping at the first error.
func collect[T any](t *testing.T, seq func(func(T, error) bool), key func(T) string) []string {
	t.Helper()
	out := []string{}
	for row, err := range seq {
		require.NoError(t, err)
		out = append(out, key(row))
	}
	return out
}

func dlqID(m lanes.DLQMessage) string          { return m.TransactionId }
func messageID(m lanes.MessageListItem) string { return m.TransactionId }
func queueName(q lanes.QueueSummary) string    { return q.Name }

// The walks give every row of a listing longer than a page once, in the listing's order, page
// by page by key; the builder's walk takes its filters and page size.
func TestITTheWalksGiveEveryRowOnceInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := fileDeadLetters(t, b, 7)
	spy := &walkSpy{path: "/api/v1/dlq"}
	c := spyClient(t, spy)

	require.Equal(t, want, collect(t, c.Queue(b.queue).DLQ("").Limit(3).All(b.ctx), dlqID))
	require.EqualValues(t, 3, spy.requests.Load(), "7 rows by 3 a page")
	require.EqualValues(t, 2, spy.keyed.Load(), "the pages after the first by key")
	require.Equal(t, want, collect(t, c.Admin().AllDLQ(b.ctx, lanes.DLQQuery{Queue: b.queue, Limit: 2}), dlqID))
	require.Empty(t, collect(t, c.Queue(b.queue).DLQ("").Partition("other").All(b.ctx), dlqID), "the filters apply")
	require.Equal(t, want, collect(t, c.Queue(b.queue).DLQ("").All(b.ctx), dlqID), "the default page")

	messages := collect(t, c.Admin().AllMessages(b.ctx, lanes.MessageQuery{Queue: b.queue, Limit: 2}), messageID)
	one, err := c.Admin().ListMessages(b.ctx, lanes.MessageQuery{Queue: b.queue, Limit: 1000})
	require.NoError(t, err)
	require.Len(t, one.Messages, 7)
	require.Equal(t, collectPage(one.Messages, messageID), messages)
}

func collectPage[T any](rows []T, key func(T) string) []string {
	out := []string{}
	for _, r := range rows {
		out = append(out, key(r))
	}
	return out
}

// Dead letters replayed or deleted between two pages of a walk move no row of the rest: each
// one that stayed comes once, in order (by offset, replaying the first page skipped the next).
func TestITTheDeadLetterWalkFollowsTheKeyWhileRowsAreReplayedAndDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	all := fileDeadLetters(t, b, 8)
	list, err := b.c.Admin().ListDLQ(b.ctx, lanes.DLQQuery{Queue: b.queue, Limit: 1000})
	require.NoError(t, err)
	byTx := map[string]lanes.DLQMessage{}
	for _, m := range list.Messages {
		byTx[m.TransactionId] = m
	}
	gone := all[5]
	got := []string{}
	for m, err := range b.c.Queue(b.queue).DLQ("").Limit(3).All(b.ctx) {
		require.NoError(t, err)
		got = append(got, m.TransactionId)
		if len(got) == 3 { // the first page is done: replay it, delete a row of a later page
			for _, tx := range got {
				_, err := b.c.Admin().ReplayDLQ(b.ctx, byTx[tx].Id, "", "")
				require.NoError(t, err)
			}
			_, err := b.c.Admin().DeleteMessage(b.ctx, byTx[gone].PartitionId, gone)
			require.NoError(t, err)
		}
	}
	want := append(append([]string{}, all[:5]...), all[6:]...)
	require.Equal(t, want, got)
}

// Messages pushed between two pages of a walk sort before its place: the walk lists the
// messages it started with, once each (by offset, the next page repeated one per push).
func TestITTheMessageWalkFollowsTheKeyWhileMessagesArePushed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 7 { // one push each: seven segments, newest last
		pushN(t, b, "a", 1, fmt.Sprintf("walk%d", i))
	}
	want := []string{}
	for i := 6; i >= 0; i-- {
		want = append(want, fmt.Sprintf("walk%d-a-0", i))
	}
	got := []string{}
	for m, err := range b.c.Admin().AllMessages(b.ctx, lanes.MessageQuery{Queue: b.queue, Limit: 3}) {
		require.NoError(t, err)
		got = append(got, m.TransactionId)
		if len(got) == 3 || len(got) == 6 {
			pushN(t, b, "a", 1, fmt.Sprintf("late%d", len(got)))
		}
	}
	require.Equal(t, want, got)
}

// A message page the broker's byte budget cut short (truncated with fewer rows than the limit)
// is continued after its last message, so no message past the cut is lost.
func TestITTheMessageWalkContinuesAPageTheByteBudgetCut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := strings.Repeat("x", 1200*1024) // counted twice in a message listing: three such pass 4 MiB
	for i := range 4 {
		_, err := b.c.Queue(b.queue).Partition("a").Push(b.ctx, lanes.Item{Data: big, TransactionID: fmt.Sprintf("big%d", i)})
		require.NoError(t, err)
	}
	first, err := b.c.Admin().ListMessages(b.ctx, lanes.MessageQuery{Queue: b.queue, Limit: 100})
	require.NoError(t, err)
	require.Less(t, len(first.Messages), 4, "the budget cuts the page")
	require.True(t, *first.Truncated)
	got := collect(t, b.c.Admin().AllMessages(b.ctx, lanes.MessageQuery{Queue: b.queue}), messageID)
	require.Equal(t, []string{"big3", "big2", "big1", "big0"}, got)
}

// configureQueues creates n queues named prefix-0… labeled namespace, and returns their names.
func configureQueues(t *testing.T, b bundle, namespace, prefix string, n int) []string {
	t.Helper()
	names := []string{}
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		_, err := b.c.Admin().ConfigureQueueLabels(b.ctx, name, namespace, "", lanes.QueueOptions{}, lanes.ConfigureReplace)
		require.NoError(t, err)
		names = append(names, name)
		t.Cleanup(func() { _, _ = b.c.Admin().DeleteQueue(b.ctx, name) })
	}
	return names
}

// The queue walks list every queue the filters select, by name, once each, while two queues
// already listed are deleted and one sorting before the walk's place is created between two
// pages (by offset, the next page skipped a queue).
func TestITTheQueueWalksFollowTheKeyWhileQueuesComeAndGo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	namespace := b.queue + "-ns"
	names := configureQueues(t, b, namespace, b.queue+"-q", 7)
	walks := map[string]func(lanes.Admin) func(func(lanes.QueueSummary, error) bool){
		"AllQueues": func(a lanes.Admin) func(func(lanes.QueueSummary, error) bool) {
			return a.AllQueues(b.ctx, lanes.QueueQuery{Namespace: namespace, Limit: 3})
		},
		"AllQueueStatus": func(a lanes.Admin) func(func(lanes.QueueSummary, error) bool) {
			return a.AllQueueStatus(b.ctx, lanes.StatusQuery{Namespace: namespace, Limit: 3})
		},
	}
	for name, walk := range walks {
		require.Equal(t, names, collect(t, walk(b.c.Admin()), queueName), name)
	}
	for name, walk := range walks {
		want := collect(t, walk(b.c.Admin()), queueName)
		got := []string{}
		for q, err := range walk(b.c.Admin()) {
			require.NoError(t, err)
			got = append(got, q.Name)
			if len(got) == 3 {
				for _, gone := range got[:2] {
					_, err := b.c.Admin().DeleteQueue(b.ctx, gone)
					require.NoError(t, err)
				}
				configureQueues(t, b, namespace, b.queue+"-a-"+name, 1)
			}
		}
		require.Equal(t, want, got, name)
	}
}

// Breaking out of a walk sends no further request; a page that fails ends the walk with its
// error, yielded once.
func TestITAWalkStopsOnBreakAndYieldsAPageErrorOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := fileDeadLetters(t, b, 5)

	spy := &walkSpy{path: "/api/v1/dlq"}
	c := spyClient(t, spy)
	for _, err := range c.Queue(b.queue).DLQ("").Limit(2).All(b.ctx) {
		require.NoError(t, err)
		break
	}
	for m, err := range c.Queue(b.queue).DLQ("").Limit(2).All(b.ctx) {
		require.NoError(t, err)
		if m.TransactionId == want[1] { // the last row of the first page
			break
		}
	}
	require.EqualValues(t, 2, spy.requests.Load(), "one page each")

	failing := &walkSpy{path: "/api/v1/dlq", badAfterAt: 2}
	got, errs := []string{}, []error{}
	for m, err := range spyClient(t, failing).Queue(b.queue).DLQ("").Limit(2).All(b.ctx) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		got = append(got, m.TransactionId)
	}
	require.Equal(t, want[:2], got)
	require.Len(t, errs, 1)
	var apiErr *lanes.APIError
	require.True(t, errors.As(errs[0], &apiErr), "%v", errs[0])
	require.Equal(t, http.StatusBadRequest, apiErr.Status)
	require.EqualValues(t, 2, failing.requests.Load())

	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	counted := &walkSpy{path: "/api/v1/dlq"}
	got, errs = []string{}, []error{}
	for m, err := range spyClient(t, counted).Queue(b.queue).DLQ("").Limit(2).All(ctx) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		got = append(got, m.TransactionId)
		cancel() // between two pages: the walk ends with ctx's error, asking for no page
	}
	require.Equal(t, want[:2], got)
	require.Len(t, errs, 1)
	require.ErrorIs(t, errs[0], context.Canceled)
	require.EqualValues(t, 1, counted.requests.Load())
}

// From a broker that names no key the walks follow the offset: the dead letters while a page
// says it is truncated, or, before that flag, while a page is full; the queues while fewer
// than the total came.
func TestITTheWalksFollowTheOffsetFromABrokerWithoutKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := fileDeadLetters(t, b, 7)
	for _, spy := range []*walkSpy{
		{path: "/api/v1/dlq", dropKey: true},
		{path: "/api/v1/dlq", dropKey: true, dropTruncated: true},
	} {
		require.Equal(t, want, collect(t, spyClient(t, spy).Queue(b.queue).DLQ("").Limit(3).All(b.ctx), dlqID))
		require.Zero(t, spy.keyed.Load())
		require.EqualValues(t, 3, spy.requests.Load())
	}
	exact := &walkSpy{path: "/api/v1/dlq", dropKey: true, dropTruncated: true}
	require.Equal(t, want, collect(t, spyClient(t, exact).Queue(b.queue).DLQ("").Limit(7).All(b.ctx), dlqID))
	require.EqualValues(t, 2, exact.requests.Load(), "a full last page takes one more, empty, page")

	namespace := b.queue + "-ns"
	names := configureQueues(t, b, namespace, b.queue+"-q", 5)
	spy := &walkSpy{path: "/api/v1/resources/queues", dropKey: true}
	require.Equal(t, names, collect(t, spyClient(t, spy).Admin().AllQueues(b.ctx, lanes.QueueQuery{Namespace: namespace, Limit: 2}), queueName))
	require.Zero(t, spy.keyed.Load())
	require.EqualValues(t, 3, spy.requests.Load())
}
