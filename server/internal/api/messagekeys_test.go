package api

import (
	"encoding/base64"
	"net/url"
	"slices"
	"testing"

	"github.com/lanesmq/lanes/server/internal/engine"
)

// Between two pages of the pending messages, a partition whose messages sort
// first is consumed (they leave the listing) or a message is pushed (it sorts
// first): the second page by offset skips or repeats rows, the second page by
// key starts where the first ended.
func TestMessagesConsumedOrPushedBetweenPagesShiftTheOffsetButNotTheKey(t *testing.T) {
	for name, c := range map[string]struct {
		between         func(t *testing.T, b *testBroker, q string)
		byOffset, byKey []string
	}{
		"consumed": {
			between: func(t *testing.T, b *testBroker, q string) {
				var popped popBody
				b.call(t, "GET", "/api/v1/pop/queue/"+q+"/partition/pa?batch=10&wait=false", nil, &popped)
				if len(popped.Messages) != 3 {
					t.Fatalf("pop pa: %+v", popped)
				}
				var acks []map[string]any
				for _, m := range popped.Messages {
					b.call(t, "POST", "/api/v1/ack", map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID,
						"leaseId": popped.LeaseID, "status": "completed"}, &acks)
				}
			},
			byOffset: []string{"b0"},
			byKey:    []string{"b2", "b1"},
		},
		"pushed": {
			between:  func(t *testing.T, b *testBroker, q string) { b.push(t, q, "pc", "c0") },
			byOffset: []string{"a1", "a0"},
			byKey:    []string{"a0", "b2"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			b := newTestBroker(t)
			q := uniqueQueue(t)
			for _, id := range []string{"b0", "b1", "b2"} {
				b.push(t, q, "pb", id)
			}
			for _, id := range []string{"a0", "a1", "a2"} {
				b.push(t, q, "pa", id)
			}
			path := "/api/v1/messages?status=pending&queue=" + url.QueryEscape(q)
			wantSecondPages(t, b, path, []string{"a2", "a1"}, func(listingPage) { c.between(t, b, q) }, c.byOffset, c.byKey)
		})
	}
}

// Paging the message listing by key gives every message once, in the
// listing's order, at any page size and with the filters: messages of one
// segment, segments of several partitions written at one instant (ordered by
// partition id) and segments a microsecond apart included.
func TestPagingMessagesByKeyGivesEveryRowOnceInOrder(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.push(t, q, "p0", "s0-0", "s0-1", "s0-2")
	b.push(t, q, "p1", "s1-0", "s1-1")
	b.push(t, q, "p2", "s2-0")
	b.push(t, q, "p0", "s3-0", "s3-1")
	b.push(t, q, "p1", "s4-0")
	b.push(t, q, "p2", "s5-0", "s5-1")
	var popped popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+q+"/partition/p0?batch=2&wait=false", nil, &popped) // s0-0, s0-1 processing
	// Every segment but the last two at one instant; those a microsecond and two later.
	if _, err := b.Pool.Exec(t.Context(), `UPDATE lanes.segments s SET created_at = now() - interval '1 minute'
			+ CASE WHEN s.end_offset = p.last_offset AND p.name = 'p2' THEN interval '2 microseconds'
			       WHEN s.end_offset = p.last_offset AND p.name = 'p1' THEN interval '1 microsecond' ELSE interval '0' END
		FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
		WHERE s.partition_id = p.id AND q.name = $1`, q); err != nil {
		t.Fatal(err)
	}
	base := "/api/v1/messages?queue=" + url.QueryEscape(q)
	for _, filter := range []string{"", "&partition=p0", "&status=pending", "&status=processing"} {
		whole := getBodyKeyPage(t, b, base+filter+"&limit=1000")
		if *whole.Truncated || len(whole.Messages) < 2 {
			t.Fatalf("%s: the whole listing %v truncated %v", filter, whole.ids(), *whole.Truncated)
		}
		for _, limit := range []int{1, 2, 3, len(whole.Messages) - 1, len(whole.Messages)} {
			if got := joinedIDs(bodyPagesByKey(t, b, base+filter, limit)); !slices.Equal(got, whole.ids()) {
				t.Fatalf("%s limit %d: paging by key gave\n%v\nthe whole listing is\n%v", filter, limit, got, whole.ids())
			}
		}
	}
}

// A page the byte budget cuts before its limit names its last message sent
// as the key: paging by key returns every message once, each page within the budget.
func TestAMessageListingPagedByKeyStopsAtTheByteBudget(t *testing.T) {
	b := newTestBrokerWith(t, engine.Config{ListMaxBytes: listBudget})
	q := uniqueQueue(t)
	wantBudgetPagesByKey(t, b, "/api/v1/messages?queue="+url.QueryEscape(q), pushBudgetMessages(t, b, q)...)
}

// The messages of a segment that does not decode are counted once as
// unreadable when paging by key, wherever the page ends: the key names the
// last message the page went through, readable or not.
func TestPagingMessagesByKeyCountsUnreadableMessagesOnce(t *testing.T) {
	b, _ := newLoggedBroker(t)
	q := uniqueQueue(t)
	b.push(t, q, "good", "g0")
	b.push(t, q, "bad", "x0", "x1", "x2")
	b.push(t, q, "good", "g1")
	b.corruptPartition(t, q, "bad")
	for _, limit := range []int{1, 2, 3, 4} {
		pages := bodyPagesByKey(t, b, "/api/v1/messages?queue="+url.QueryEscape(q), limit)
		unreadable := 0
		for _, p := range pages {
			for _, u := range p.Unreadable {
				unreadable += u.Messages
			}
		}
		if got := joinedIDs(pages); !slices.Equal(got, []string{"g1", "g0"}) || unreadable != 3 {
			t.Fatalf("limit %d: %v and %d unreadable, want [g1 g0] and 3", limit, got, unreadable)
		}
	}
}

// An after sent with an offset, or one that is not a key of the message
// listing (an empty or unreadable window included), answers 400 bad_request.
func TestABadMessageAfterAnswers400BadRequest(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.push(t, q, "p", "m0", "m1")
	path := "/api/v1/messages?queue=" + url.QueryEscape(q)
	good := getBodyKeyPage(t, b, path+"&limit=1").NextAfter
	if good == nil {
		t.Fatal("the first page of 1 names no nextAfter")
	}
	id := "0190c5a4-6f5e-7b3c-8d2e-1a2b3c4d5e6f"
	b.wantBadAfters(t, path,
		"offset=0&after="+url.QueryEscape(*good),
		"offset=3&after="+url.QueryEscape(*good),
		"after=",
		"after=%21%21%21",
		"after="+listKey("1767225600000000", id),
		"after="+listKey("1767225600000000", id, "7", "x"),
		"after="+listKey("1767225600000000", id, "7", "1767222000000000", "1767225660000000", "x"),
		"after="+listKey("1767225600000000", id, "7", "2026-01-01T00:00:00Z", "1767225660000000"),
		"after="+listKey("1767225600000000", id, "7", "1767222000000000", "-"),
		"after="+listKey("1767225600000000", id, "7", "1767225660000000", "1767225660000000"),
		"after="+listKey("1767225600000000", id, "7", "1767225660000000", "1767222000000000"),
		"after="+listKey("1767225600000000", id, "7", "-9223372036854775808", "1767225660000000"),
		"after="+listKey("2026-01-01T00:00:00Z", id, "7"),
		"after="+listKey("-9223372036854775808", id, "7"),
		"after="+listKey("1767225600000000", "not-a-uuid", "7"),
		"after="+listKey("1767225600000000", id, "7.5"),
		"after="+listKey("1767225600000000", id, ""),
		"after="+base64.RawURLEncoding.EncodeToString([]byte(`[1767225600000000,"`+id+`",7]`)),
	)
}
