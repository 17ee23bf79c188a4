package lanes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lanes "github.com/lanesmq/lanes/sdk-go"
)

// smallPages is a transport that asks the group-wide listings for pages of limit rows until two
// pages after the first that holds one of marker's rows, after which it calls between; so a few
// rows take several pages, and the rest (the other tests' rows) come in the SDK's own pages.
type smallPages struct {
	path      string // the listings' path prefix, "/api/v1/consumer-groups" when ""
	limit     string
	small     int // pages of limit rows still to ask for once marker was seen
	marker    string
	between   func()
	dropAfter bool // strip X-Lanes-Next-After, as a broker before keyed paging sends none
	keyed     atomic.Int32
}

func (s *smallPages) RoundTrip(req *http.Request) (*http.Response, error) {
	path := s.path
	if path == "" {
		path = "/api/v1/consumer-groups"
	}
	if !strings.HasPrefix(req.URL.Path, path) {
		return http.DefaultTransport.RoundTrip(req)
	}
	q := req.URL.Query()
	if s.between != nil || s.small > 0 {
		s.small--
		q.Set("limit", s.limit)
	}
	if q.Has("after") {
		s.keyed.Add(1)
	}
	req.URL.RawQuery = q.Encode()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	if s.dropAfter {
		resp.Header.Del("X-Lanes-Next-After")
	}
	if s.between != nil && bytes.Contains(raw, []byte(s.marker)) {
		s.between()
		s.between, s.small = nil, 2
	}
	return resp, nil
}

// The group and lagging listings span every group on the broker; when a group that sorts first
// loses its rows between two pages, an offset skips as many rows of the groups after it. The
// Admin calls follow the broker's key instead, so the later group's rows all come, once, in
// order; from a broker that gives no key they follow the offset. The groups' names start with
// "0-", so they sort before the other tests' groups, on the first pages.
func TestITTheGroupWideListingsFollowTheKeyWhileAnEarlierGroupLosesItsRows(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		dropAfter bool
	}{{"by key", false}, {"an older broker, by offset", true}} {
		t.Run(c.name, func(t *testing.T) { // one after the other: each deletes a group that sorts first
			b := setup(t)
			base := testBrokerURL(t)
			partitions := []string{"p0", "p1", "p2", "p3", "p4", "p5"}
			tx := b.c.Transaction()
			for i, p := range partitions {
				tx.Queue(b.queue).Partition(p).Push(lanes.Data(i))
			}
			_, err := tx.Commit(b.ctx)
			require.NoError(t, err)
			early, later := "0-"+b.queue+"-a", "0-"+b.queue+"-b"
			for _, g := range []string{early, later} {
				_, err := b.c.Admin().SeekConsumerGroup(b.ctx, g, b.queue, lanes.SeekToTime(time.Unix(0, 0)))
				require.NoError(t, err)
			}
			transport := &smallPages{limit: "4", small: 3, dropAfter: c.dropAfter}
			t.Cleanup(func() { // the next run's groups sort after these, which would take its first pages
				for _, g := range []string{early, later} {
					_, _ = b.c.Admin().DeleteConsumerGroup(context.Background(), g, true)
				}
			})
			client, err := lanes.New(lanes.WithURL(base), lanes.WithHTTPClient(&http.Client{Transport: transport}))
			require.NoError(t, err)
			closeWhenDone(t, client)
			deleteEarly := func() {
				req, err := http.NewRequest(http.MethodDelete, base+"/api/v1/consumer-groups/"+url.PathEscape(early), nil)
				require.NoError(t, err)
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				resp.Body.Close()
				require.Equal(t, http.StatusOK, resp.StatusCode)
			}

			if !c.dropAfter {
				transport.marker, transport.between = fmt.Sprintf(`"consumer_group":%q`, early), deleteEarly
			}
			lagging, err := client.Admin().LaggingConsumerGroups(b.ctx, 0)
			require.NoError(t, err)
			var got []string
			for _, r := range lagging {
				if r.ConsumerGroup == later {
					got = append(got, r.PartitionName)
				}
			}
			require.Equal(t, partitions, got, "the later group's lagging rows")

			if c.dropAfter {
				deleteEarly()
				transport.small = 3
			} else {
				// Seek the early group again: a row of the group list each, one row a page.
				_, err := b.c.Admin().SeekConsumerGroup(b.ctx, early, b.queue, lanes.SeekToTime(time.Unix(0, 0)))
				require.NoError(t, err)
				transport.limit = "1"
				transport.marker, transport.between = fmt.Sprintf(`"name":%q`, early), deleteEarly
			}
			groups, err := client.Admin().ListConsumerGroups(b.ctx)
			require.NoError(t, err)
			var names []string
			for _, g := range groups {
				if strings.HasPrefix(g.Name, "0-"+b.queue) {
					names = append(names, g.Name)
				}
			}
			if c.dropAfter {
				require.Equal(t, []string{later}, names)
				require.Zero(t, transport.keyed.Load(), "a page asked for by key from a broker that gave none")
			} else {
				require.Equal(t, []string{early, later}, names)
				require.NotZero(t, transport.keyed.Load(), "no page asked for by key")
			}
		})
	}
}

// partitionPages is a transport that asks a queue's partition listings (detail, depth, status)
// for pages of limit rows and, after the first page of each, calls between; dropAfter strips the
// nextAfter of every page, as a broker before keyed paging sends none.
type partitionPages struct {
	queue     string
	limit     string
	between   func()
	dropAfter bool
	keyed     atomic.Int32
}

func (s *partitionPages) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.Contains(req.URL.Path, "/queues/"+s.queue) {
		return http.DefaultTransport.RoundTrip(req)
	}
	q := req.URL.Query()
	q.Set("limit", s.limit)
	if q.Has("after") {
		s.keyed.Add(1)
	}
	first := !q.Has("after") && !q.Has("offset")
	req.URL.RawQuery = q.Encode()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if s.dropAfter {
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			return nil, err
		}
		delete(body, "nextAfter")
		if raw, err = json.Marshal(body); err != nil {
			return nil, err
		}
		resp.Header.Del("Content-Length")
		resp.ContentLength = int64(len(raw))
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	if first {
		s.between()
	}
	return resp, nil
}

// A push to a new partition that sorts first, between two pages of a queue's partitions, shifts
// every partition after it by one: an offset repeats a row. The Admin calls follow the broker's
// key (nextAfter) instead, so every partition comes once, in order; from a broker that gives no
// key they follow the offset (and repeat the row).
func TestITTheQueuePartitionListingsFollowTheKeyWhileAPartitionIsCreated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	partitions := []string{"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9"}
	for _, c := range []struct {
		name      string
		dropAfter bool
	}{{"by key", false}, {"an older broker, by offset", true}} {
		queue := b.queue + "-" + strings.ReplaceAll(c.name, " ", "-")
		tx := b.c.Transaction()
		for i, p := range partitions {
			tx.Queue(queue).Partition(p).Push(lanes.Data(i))
		}
		_, err := tx.Commit(b.ctx)
		require.NoError(t, err)
		created := 0
		createEarly := func() { // "0-…" sorts before "p…"
			created++
			_, err := b.c.Queue(queue).Partition(fmt.Sprintf("0-new-%02d", created)).Push(b.ctx, lanes.Item{Data: created})
			require.NoError(t, err)
		}
		transport := &partitionPages{queue: queue, limit: "4", between: createEarly, dropAfter: c.dropAfter}
		client, err := lanes.New(lanes.WithURL(testBrokerURL(t)), lanes.WithHTTPClient(&http.Client{Transport: transport}))
		require.NoError(t, err)
		closeWhenDone(t, client)
		check := func(call string, names []string) {
			var listed []string // the p… partitions, as listed
			for _, n := range names {
				if strings.HasPrefix(n, "p") {
					listed = append(listed, n)
				}
			}
			if c.dropAfter { // the first page's last row comes again on the second
				require.Len(t, listed, len(partitions)+1, "%s: %s: %v", c.name, call, listed)
				listed = slices.Compact(listed)
			}
			require.Equal(t, partitions, listed, "%s: %s", c.name, call)
		}

		detail, err := client.Admin().GetQueue(b.ctx, queue)
		require.NoError(t, err)
		var names []string
		for _, p := range detail.Partitions {
			names = append(names, p.Name)
		}
		check("GetQueue", names)

		depth, err := client.Admin().QueueDepth(b.ctx, queue, "")
		require.NoError(t, err)
		names = nil
		for _, p := range depth.Partitions {
			names = append(names, p.Partition)
		}
		check("QueueDepth", names)

		status, err := client.Admin().QueueStatus(b.ctx, queue, true)
		require.NoError(t, err)
		names = nil
		for _, p := range *status.Partitions {
			names = append(names, p.Name)
		}
		check("QueueStatus", names)
		require.False(t, *status.Truncated)
		require.Nil(t, status.NextAfter)

		if c.dropAfter {
			require.Zero(t, transport.keyed.Load(), "a page asked for by key from a broker that gave none")
		} else {
			require.NotZero(t, transport.keyed.Load(), "no page asked for by key")
		}
	}
}

// The namespace, task and KV namespace listings span the broker; when a label that sorts first
// goes between two pages (its one queue or key deleted), an offset skips a label after it. The
// calls follow the broker's key (nextAfter) instead, so every later label comes, once, in order.
// The labels start with "0-", so they sort before the other tests' labels, on the first pages.
func TestITTheLabelListingsFollowTheKeyWhileAnEarlierLabelGoes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct {
		name string
		list func(client *lanes.Client) []string
	}{
		{"namespaces", func(client *lanes.Client) []string {
			list, err := client.Admin().Namespaces(b.ctx)
			require.NoError(t, err)
			var out []string
			for _, n := range list.Namespaces {
				out = append(out, n.Namespace)
			}
			return out
		}},
		{"tasks", func(client *lanes.Client) []string {
			list, err := client.Admin().Tasks(b.ctx)
			require.NoError(t, err)
			var out []string
			for _, n := range list.Tasks {
				out = append(out, n.Task)
			}
			return out
		}},
		{"kv namespaces", func(client *lanes.Client) []string {
			list, err := client.KVNamespaces(b.ctx)
			require.NoError(t, err)
			var out []string
			for _, n := range list.Namespaces {
				out = append(out, *n.Namespace)
			}
			return out
		}},
	} {
		prefix := "0-" + b.queue + "-" + strings.ReplaceAll(c.name, " ", "-") + "-"
		labels := []string{prefix + "a", prefix + "b", prefix + "c"}
		var removeFirst func()
		for i, label := range labels {
			queue := fmt.Sprintf("%s-%s-%d", b.queue, strings.ReplaceAll(c.name, " ", "-"), i)
			switch c.name {
			case "kv namespaces":
				_, err := b.c.KV(label).Put(b.ctx, "k", i, lanes.Forever)
				require.NoError(t, err)
				if i == 0 {
					removeFirst = func() { _, err := b.c.KV(label).Delete(context.Background(), "k"); require.NoError(t, err) }
				}
			default:
				namespace, task := label, ""
				if c.name == "tasks" {
					namespace, task = "", label
				}
				_, err := b.c.Admin().ConfigureQueueLabels(b.ctx, queue, namespace, task, lanes.QueueOptions{}, lanes.ConfigureMerge)
				require.NoError(t, err)
				if i == 0 {
					removeFirst = func() { _, err := b.c.Admin().DeleteQueue(context.Background(), queue); require.NoError(t, err) }
				}
			}
		}
		path := "/api/v1/resources/" + map[string]string{"namespaces": "namespaces", "tasks": "tasks", "kv namespaces": "kv/namespaces"}[c.name]
		transport := &smallPages{path: path, limit: "1", marker: strconv.Quote(labels[0]), between: removeFirst}
		client, err := lanes.New(lanes.WithURL(testBrokerURL(t)), lanes.WithHTTPClient(&http.Client{Transport: transport}))
		require.NoError(t, err)
		closeWhenDone(t, client)
		var listed []string
		for _, label := range c.list(client) {
			if strings.HasPrefix(label, prefix) {
				listed = append(listed, label)
			}
		}
		require.Equal(t, labels, listed, c.name)
		require.NotZero(t, transport.keyed.Load(), "%s: no page asked for by key", c.name)
	}
}

// ListQueues and ListQueueStatus answer one page; paged with After (the page's NextAfter), a
// queue deleted before the page's end between two pages does not make the next page skip one.
func TestITTheQueueListsPageByKeyWhileAnEarlierQueueIsDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ns := b.queue + "-ns"
	queues := []string{b.queue + "-a", b.queue + "-b", b.queue + "-c"}
	for _, q := range queues {
		_, err := b.c.Admin().ConfigureQueueLabels(b.ctx, q, ns, "", lanes.QueueOptions{}, lanes.ConfigureMerge)
		require.NoError(t, err)
	}
	first, err := b.c.Admin().ListQueues(b.ctx, lanes.QueueQuery{Namespace: ns, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, queues[0], first.Queues[0].Name)
	require.NotNil(t, first.NextAfter)
	firstStatus, err := b.c.Admin().ListQueueStatus(b.ctx, lanes.StatusQuery{Namespace: ns, Limit: 1})
	require.NoError(t, err)
	require.NotNil(t, firstStatus.NextAfter)
	_, err = b.c.Admin().DeleteQueue(b.ctx, queues[0])
	require.NoError(t, err)

	second, err := b.c.Admin().ListQueues(b.ctx, lanes.QueueQuery{Namespace: ns, Limit: 1, After: *first.NextAfter})
	require.NoError(t, err)
	require.Equal(t, queues[1], second.Queues[0].Name, "the queue an offset of 1 would skip")
	require.Equal(t, 2, second.Total)
	secondStatus, err := b.c.Admin().ListQueueStatus(b.ctx, lanes.StatusQuery{Namespace: ns, Limit: 1, After: *firstStatus.NextAfter})
	require.NoError(t, err)
	require.Equal(t, queues[1], secondStatus.Queues[0].Name)
	last, err := b.c.Admin().ListQueues(b.ctx, lanes.QueueQuery{Namespace: ns, Limit: 1, After: *second.NextAfter})
	require.NoError(t, err)
	require.Equal(t, queues[2], last.Queues[0].Name)
	require.Nil(t, last.NextAfter)
}
