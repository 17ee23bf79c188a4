//nolint:bodyclose // every response is handed to Client.decode (via Client.result), which closes the body.
package lanes

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/lanesmq/lanes/sdk-go/internal/gen"
)

// The broker answers the group, lagging, label, KV namespace and partition listings a page at a
// time (10,000 rows unless asked otherwise) and says when more follow; the calls that return a
// whole listing follow those pages from the first, so a caller never gets a silently cut one.
// Where the broker names the next page by key (X-Lanes-Next-After: the group, lagging and
// one-group listings; nextAfter: a queue's partitions in its detail, depth and status, the
// labels and the KV namespaces), they follow the key, since an offset skips or repeats rows when
// rows before it come or go between two pages; else (an older broker) the offset.

// wholeListingPage is the page those calls ask for, the largest the broker answers: every page
// costs the broker a fixed part (a queue status's totals, a pass over the group list's keys),
// and paging through 100,000 partitions' status took 61 s at 1,000 rows a page, 7 s at 10,000.
const wholeListingPage = 10000

// pagePlace is where a listing page starts: after the row key after names when the broker
// gave a key, else at offset.
type pagePlace struct {
	offset int
	after  string
}

// headerNext is where the page after one answered as a bare array or keyed by queue starts, by
// its X-Lanes-Truncated, X-Lanes-Next-After and X-Lanes-Next-Offset headers; more is false when
// none follows.
func headerNext(resp *http.Response, at pagePlace) (next pagePlace, more bool, err error) {
	if resp == nil || resp.Header.Get("X-Lanes-Truncated") != "true" {
		return pagePlace{}, false, nil
	}
	if after := resp.Header.Get("X-Lanes-Next-After"); after != "" || at.after != "" {
		next, err := nextByKey(at, after)
		return next, err == nil, err
	}
	offset, err := strconv.Atoi(resp.Header.Get("X-Lanes-Next-Offset"))
	if err != nil {
		return pagePlace{}, false, &UnexpectedAnswerError{Message: fmt.Sprintf("a truncated listing page with X-Lanes-Next-Offset %q", resp.Header.Get("X-Lanes-Next-Offset"))}
	}
	next, err = nextByOffset(at, offset)
	return next, err == nil, err
}

// bodyNext is headerNext for a listing answered as an object, by its truncated, nextAfter and
// nextOffset fields; a truncated page with neither ends the listing, as a broker before paging
// sends none: its page is the whole listing.
func bodyNext(at pagePlace, page bodyPlaces) (next pagePlace, more bool, err error) {
	if page.truncated == nil || !*page.truncated {
		return pagePlace{}, false, nil
	}
	var after string
	if page.nextAfter != nil {
		after = *page.nextAfter
	}
	if after != "" || at.after != "" {
		next, err := nextByKey(at, after)
		return next, err == nil, err
	}
	if page.nextOffset == nil {
		return pagePlace{}, false, nil
	}
	next, err = nextByOffset(at, *page.nextOffset)
	return next, err == nil, err
}

// nextByKey is the page after the one at at, by the key after it named ("" for none, which a
// page asked for by key must not name).
func nextByKey(at pagePlace, after string) (pagePlace, error) {
	if after == "" {
		return pagePlace{}, &UnexpectedAnswerError{Message: "a truncated listing page asked for by key names no key for the next"}
	}
	if after == at.after {
		return pagePlace{}, &UnexpectedAnswerError{Message: fmt.Sprintf("a listing page after %q says the next starts after it again", after)}
	}
	return pagePlace{after: after}, nil
}

// nextByOffset is the page after the one at at, by the offset it named.
func nextByOffset(at pagePlace, offset int) (pagePlace, error) {
	if offset <= at.offset {
		return pagePlace{}, &UnexpectedAnswerError{Message: fmt.Sprintf("a listing page at offset %d says the next starts at %d", at.offset, offset)}
	}
	return pagePlace{offset: offset}, nil
}

// headerPaged fetches every page of a listing answered as a bare array or keyed by queue; fetch
// sends the request for the page at offset or after (nil when not sent), add takes each page's
// rows.
func headerPaged[T any](c *Client, ctx context.Context, fetch func(offset *int, after *string) (*httpResp, error), add func(T)) error {
	var at pagePlace
	for {
		var resp *http.Response
		page, err := call[T](c, ctx, func() (*httpResp, error) {
			r, err := fetch(ptrIfPositive(at.offset), ptrUnlessZero(at.after))
			resp = r
			return r, err
		})
		if err != nil {
			return err
		}
		add(*page)
		next, more, err := headerNext(resp, at)
		if err != nil || !more {
			return err
		}
		at = next
	}
}

// bodyPlaces are the paging fields of a listing page answered as an object (nextAfter nil
// where the listing has none).
type bodyPlaces struct {
	truncated  *bool
	nextOffset *int
	nextAfter  *string
}

// bodyPaged is headerPaged for a listing answered as an object, whose paging signal is in its
// truncated, nextAfter and nextOffset fields: add takes each page and returns those fields.
func bodyPaged[T any](c *Client, ctx context.Context, fetch func(offset *int, after *string) (*httpResp, error), add func(*T) bodyPlaces) error {
	var at pagePlace
	for {
		page, err := call[T](c, ctx, func() (*httpResp, error) { return fetch(ptrIfPositive(at.offset), ptrUnlessZero(at.after)) })
		if err != nil {
			return err
		}
		next, more, err := bodyNext(at, add(page))
		if err != nil || !more {
			return err
		}
		at = next
	}
}

// ListConsumerGroups lists every (group, queue) row, by group then queue name.
func (a Admin) ListConsumerGroups(ctx context.Context) ([]ConsumerGroupSummary, error) {
	out := []ConsumerGroupSummary{}
	err := headerPaged(a.c, ctx, func(offset *int, after *string) (*httpResp, error) {
		return a.c.gen.ListConsumerGroups(ctx, &gen.ListConsumerGroupsParams{Limit: ptr(wholeListingPage), Offset: offset, After: after})
	}, func(page []ConsumerGroupSummary) { out = append(out, page...) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetConsumerGroup returns a group's cursors keyed by queue.
func (a Admin) GetConsumerGroup(ctx context.Context, group string) (ConsumerGroupDetail, error) {
	if err := checkGroupNamed(group); err != nil {
		return nil, err
	}
	out := ConsumerGroupDetail{}
	err := headerPaged(a.c, ctx, func(offset *int, after *string) (*httpResp, error) {
		return a.c.gen.GetConsumerGroup(ctx, group, &gen.GetConsumerGroupParams{Limit: ptr(wholeListingPage), Offset: offset, After: after})
	}, func(page ConsumerGroupDetail) {
		for queue, detail := range page { // a queue's partitions may span two pages
			if seen, ok := out[queue]; ok {
				detail.Partitions = append(seen.Partitions, detail.Partitions...)
			}
			out[queue] = detail
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LaggingConsumerGroups lists partitions whose oldest unconsumed message is older than minLag.
func (a Admin) LaggingConsumerGroups(ctx context.Context, minLag time.Duration) ([]LaggingConsumerGroup, error) {
	out := []LaggingConsumerGroup{}
	err := headerPaged(a.c, ctx, func(offset *int, after *string) (*httpResp, error) {
		return a.c.gen.ListLaggingConsumerGroups(ctx, &gen.ListLaggingConsumerGroupsParams{
			MinLagSeconds: ptr(int(minLag / time.Second)), Limit: ptr(wholeListingPage), Offset: offset, After: after})
	}, func(page []LaggingConsumerGroup) { out = append(out, page...) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetQueue returns a queue's detail with every partition.
func (a Admin) GetQueue(ctx context.Context, queue string) (*QueueDetail, error) {
	var out *QueueDetail
	err := bodyPaged(a.c, ctx, func(offset *int, after *string) (*httpResp, error) {
		return a.c.gen.GetQueue(ctx, queue, &gen.GetQueueParams{Limit: ptr(wholeListingPage), Offset: offset, After: after})
	}, func(page *QueueDetail) bodyPlaces {
		if out == nil {
			out = page
		} else {
			out.Partitions = append(out.Partitions, page.Partitions...)
		}
		return bodyPlaces{page.Truncated, page.NextOffset, page.NextAfter}
	})
	if err != nil {
		return nil, err
	}
	out.Truncated, out.NextOffset, out.NextAfter = ptr(false), nil, nil
	return out, nil
}

// QueueDepth returns pending counts (group "" = queue mode) with every partition.
func (a Admin) QueueDepth(ctx context.Context, queue, group string) (*QueueDepth, error) {
	if err := checkGroup(group); err != nil {
		return nil, err
	}
	var out *QueueDepth
	err := bodyPaged(a.c, ctx, func(offset *int, after *string) (*httpResp, error) {
		return a.c.gen.GetQueueDepth(ctx, queue, &gen.GetQueueDepthParams{Group: ptrUnlessZero(group), Limit: ptr(wholeListingPage),
			Offset: offset, After: after})
	}, func(page *QueueDepth) bodyPlaces {
		if out == nil {
			out = page
		} else {
			out.Partitions = append(out.Partitions, page.Partitions...)
		}
		return bodyPlaces{page.Truncated, page.NextOffset, page.NextAfter}
	})
	if err != nil {
		return nil, err
	}
	out.Truncated, out.NextOffset, out.NextAfter = ptr(false), nil, nil
	return out, nil
}

// QueueStatus is the live state of one queue; includePartitions adds one entry per partition.
// An unknown queue is an *APIError with status 404.
func (a Admin) QueueStatus(ctx context.Context, queue string, includePartitions bool) (*QueueStatus, error) {
	var out *QueueStatus
	err := bodyPaged(a.c, ctx, func(offset *int, after *string) (*httpResp, error) {
		return a.c.gen.GetQueueStatus(ctx, queue, &gen.GetQueueStatusParams{IncludePartitions: ptrUnlessZero(includePartitions),
			Limit: ptr(wholeListingPage), Offset: offset, After: after})
	}, func(page *QueueStatus) bodyPlaces {
		if out == nil {
			out = page
		} else if page.Partitions != nil {
			*out.Partitions = append(*out.Partitions, *page.Partitions...)
		}
		return bodyPlaces{page.Truncated, page.NextOffset, page.NextAfter}
	})
	if err != nil {
		return nil, err
	}
	out.Truncated, out.NextOffset, out.NextAfter = ptr(false), nil, nil
	return out, nil
}

// Namespaces summarizes every namespace label: its queues, partitions and message counts.
func (a Admin) Namespaces(ctx context.Context) (*NamespaceList, error) {
	out := &NamespaceList{Namespaces: []gen.NamespaceSummary{}}
	err := bodyPaged(a.c, ctx, func(offset *int, after *string) (*httpResp, error) {
		return a.c.gen.ListNamespaces(ctx, &gen.ListNamespacesParams{Limit: ptr(wholeListingPage), Offset: offset, After: after})
	}, func(page *NamespaceList) bodyPlaces {
		out.Namespaces = append(out.Namespaces, page.Namespaces...)
		return bodyPlaces{page.Truncated, page.NextOffset, page.NextAfter}
	})
	if err != nil {
		return nil, err
	}
	out.Truncated = ptr(false)
	return out, nil
}

// Tasks summarizes every task label like Namespaces.
func (a Admin) Tasks(ctx context.Context) (*TaskList, error) {
	out := &TaskList{Tasks: []gen.TaskSummary{}}
	err := bodyPaged(a.c, ctx, func(offset *int, after *string) (*httpResp, error) {
		return a.c.gen.ListTasks(ctx, &gen.ListTasksParams{Limit: ptr(wholeListingPage), Offset: offset, After: after})
	}, func(page *TaskList) bodyPlaces {
		out.Tasks = append(out.Tasks, page.Tasks...)
		return bodyPlaces{page.Truncated, page.NextOffset, page.NextAfter}
	})
	if err != nil {
		return nil, err
	}
	out.Truncated = ptr(false)
	return out, nil
}

// KVNamespaces lists every KV namespace with its live key count
// (GET /api/v1/resources/kv/namespaces).
func (c *Client) KVNamespaces(ctx context.Context) (*KVNamespaceList, error) {
	var out *KVNamespaceList
	err := bodyPaged(c, ctx, func(offset *int, after *string) (*httpResp, error) {
		return c.gen.ListKvNamespaces(ctx, &gen.ListKvNamespacesParams{Limit: ptr(wholeListingPage), Offset: offset, After: after})
	}, func(page *KVNamespaceList) bodyPlaces {
		if out == nil {
			out = page
		} else {
			out.Namespaces = append(out.Namespaces, page.Namespaces...)
		}
		return bodyPlaces{page.Truncated, page.NextOffset, page.NextAfter}
	})
	if err != nil {
		return nil, err
	}
	out.Truncated, out.NextOffset, out.NextAfter = ptr(false), nil, nil
	return out, nil
}
