package lanes

import (
	"context"
	"iter"
)

// The dead-letter, message and queue listings are too long to hold whole, so they have no
// whole-listing call; the All iterators walk them a page at a time instead, holding one page.
// Each page after the first starts after the broker's key (nextAfter), which rows replayed,
// pushed, consumed or deleted between two pages do not move, as they move an offset. A broker
// that names no key (one before keyed paging) is followed by offset, as the whole-listing calls
// follow it: the dead letters and messages while a page says it is truncated (nextOffset), or,
// from a broker before that flag, while a page is full; the queues while the rows so far are
// fewer than the page's total. An offset skips or repeats rows that come or go meanwhile, which
// such a broker leaves no way around; stopping after one page would instead lose the rest.

// walkPage is the page size the All iterators ask for unless the query sets Limit: the
// broker's own default page, small enough that a page of message payloads stays a few MB.
const walkPage = 100

// walkPages yields the rows of page after page from start, fetch(at) answering one page's rows
// and where the next starts (more false after the last). It stops when the caller breaks, and
// yields an error once (a page's, or ctx's when it ends between two pages), then stops.
func walkPages[T any](ctx context.Context, start pagePlace, fetch func(at pagePlace) (rows []T, next pagePlace, more bool, err error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		for at := start; ; {
			if err := ctx.Err(); err != nil {
				yield(zero, err)
				return
			}
			rows, next, more, err := fetch(at)
			if err != nil {
				yield(zero, err)
				return
			}
			for _, row := range rows {
				if !yield(row, nil) {
					return
				}
			}
			if !more {
				return
			}
			at = next
		}
	}
}

// walkLimit is the page size a walk asks for: limit, else walkPage.
func walkLimit(limit int) int {
	if limit > 0 {
		return limit
	}
	return walkPage
}

// truncatedNext is where the page after a dead-letter or message page starts: bodyNext's rule
// when the page says whether it was cut (truncated), else (a broker before the flag, which
// pages at limit only) at the offset after its rows while it is full.
func truncatedNext(at pagePlace, page bodyPlaces, rows, limit int) (pagePlace, bool, error) {
	if page.truncated != nil {
		return bodyNext(at, page)
	}
	if at.after != "" || rows < limit {
		return pagePlace{}, false, nil
	}
	next, err := nextByOffset(at, at.offset+rows)
	return next, err == nil, err
}

// queuesNext is where the page after a queue-list page starts: after its nextAfter, which the
// broker sends while more queues follow; without one (an older broker) at the offset after its
// rows while they are fewer than total, the count of every matching queue.
func queuesNext(at pagePlace, nextAfter *string, rows int, total *int) (pagePlace, bool, error) {
	if nextAfter != nil && *nextAfter != "" {
		next, err := nextByKey(at, *nextAfter)
		return next, err == nil, err
	}
	if at.after != "" || rows == 0 || total == nil || at.offset+rows >= *total {
		return pagePlace{}, false, nil
	}
	next, err := nextByOffset(at, at.offset+rows)
	return next, err == nil, err
}

// AllDLQ walks every dead letter q selects, newest first, page by page (q.Limit rows a page,
// 100 when 0; q.After or q.Offset where the walk starts):
//
//	for m, err := range client.Admin().AllDLQ(ctx, lanes.DLQQuery{Queue: "orders"}) {
//		if err != nil {
//			return err // the walk has ended
//		}
//		handle(m)
//	}
//
// Dead letters replayed, deleted or filed while it walks are neither repeated nor skipped among
// those that stay (new ones newer than the walk's place are not listed). Breaking out sends no
// further request; an error (a page's, or ctx's) is yielded once and ends the walk.
func (a Admin) AllDLQ(ctx context.Context, q DLQQuery) iter.Seq2[DLQMessage, error] {
	limit := walkLimit(q.Limit)
	return walkPages(ctx, pagePlace{offset: q.Offset, after: q.After}, func(at pagePlace) ([]DLQMessage, pagePlace, bool, error) {
		page := q
		page.Limit, page.Offset, page.After = limit, at.offset, at.after
		list, err := a.ListDLQ(ctx, page)
		if err != nil {
			return nil, pagePlace{}, false, err
		}
		next, more, err := truncatedNext(at, bodyPlaces{list.Truncated, list.NextOffset, list.NextAfter}, len(list.Messages), limit)
		return list.Messages, next, more, err
	})
}

// All walks every dead letter the builder selects, newest first, as Admin.AllDLQ: its Limit is
// the page size (100 when unset).
//
//	for m, err := range client.Queue("orders").DLQ("billing").All(ctx) { ... }
func (b DLQBuilder) All(ctx context.Context) iter.Seq2[DLQMessage, error] {
	return b.c.Admin().AllDLQ(ctx, b.q)
}

// AllMessages walks every message q selects, newest first, page by page as AllDLQ (q.Limit rows
// a page, 100 when 0). A page the broker cut short at its answer byte budget is continued after
// its last message. Messages pushed while it walks sort before its place and are not listed.
func (a Admin) AllMessages(ctx context.Context, q MessageQuery) iter.Seq2[MessageListItem, error] {
	limit := walkLimit(q.Limit)
	return walkPages(ctx, pagePlace{offset: q.Offset, after: q.After}, func(at pagePlace) ([]MessageListItem, pagePlace, bool, error) {
		page := q
		page.Limit, page.Offset, page.After = limit, at.offset, at.after
		list, err := a.ListMessages(ctx, page)
		if err != nil {
			return nil, pagePlace{}, false, err
		}
		next, more, err := truncatedNext(at, bodyPlaces{list.Truncated, list.NextOffset, list.NextAfter}, len(list.Messages), limit)
		return list.Messages, next, more, err
	})
}

// AllQueues walks every queue q selects, by name, page by page as AllDLQ (q.Limit rows a page,
// 100 when 0).
func (a Admin) AllQueues(ctx context.Context, q QueueQuery) iter.Seq2[QueueSummary, error] {
	limit := walkLimit(q.Limit)
	return walkPages(ctx, pagePlace{offset: q.Offset, after: q.After}, func(at pagePlace) ([]QueueSummary, pagePlace, bool, error) {
		page := q
		page.Limit, page.Offset, page.After = limit, at.offset, at.after
		list, err := a.ListQueues(ctx, page)
		if err != nil {
			return nil, pagePlace{}, false, err
		}
		next, more, err := queuesNext(at, list.NextAfter, len(list.Queues), &list.Total)
		return list.Queues, next, more, err
	})
}

// AllQueueStatus walks every queue q selects with its message counts, by name, page by page as
// AllQueues.
func (a Admin) AllQueueStatus(ctx context.Context, q StatusQuery) iter.Seq2[QueueSummary, error] {
	limit := walkLimit(q.Limit)
	return walkPages(ctx, pagePlace{offset: q.Offset, after: q.After}, func(at pagePlace) ([]QueueSummary, pagePlace, bool, error) {
		page := q
		page.Limit, page.Offset, page.After = limit, at.offset, at.after
		list, err := a.ListQueueStatus(ctx, page)
		if err != nil {
			return nil, pagePlace{}, false, err
		}
		next, more, err := queuesNext(at, list.NextAfter, len(list.Queues), list.Pagination.Total)
		return list.Queues, next, more, err
	})
}
