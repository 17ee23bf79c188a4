package api

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/lanesmq/lanes/server/internal/engine"
)

// replayDeadLetters replays every dead letter of page.
func (b *testBroker) replayDeadLetters(t *testing.T, page listingPage) {
	t.Helper()
	for _, m := range page.Messages {
		var res replayBody
		if status, _ := b.call(t, "POST", "/api/v1/dlq/"+m.ID+"/replay", nil, &res); status != http.StatusOK || res.Result != "moved" {
			t.Fatalf("replay %s: %d %+v", m.TransactionID, status, res)
		}
	}
}

// A tool that pages through the dead letters and replays each page removes
// (or deletes) the rows before the next page's start: by offset the next page skips as many
// rows; by key it starts where the first ended. A dead letter filed between two
// pages sorts first (newest failure) and makes the offset repeat a row instead.
func TestDeadLettersReplayedOrFiledBetweenPagesShiftTheOffsetButNotTheKey(t *testing.T) {
	for name, c := range map[string]struct {
		between         func(t *testing.T, b *testBroker, q string, first listingPage)
		byOffset, byKey []string
	}{
		"replayed": {
			between:  func(t *testing.T, b *testBroker, _ string, first listingPage) { b.replayDeadLetters(t, first) },
			byOffset: []string{"m1", "m0"},
			byKey:    []string{"m3", "m2"},
		},
		"deleted": {
			between: func(t *testing.T, b *testBroker, _ string, first listingPage) {
				for _, m := range first.Messages {
					if status, _ := b.call(t, "DELETE", "/api/v1/messages/"+m.PartitionID+"/"+m.TransactionID, nil, nil); status != http.StatusOK {
						t.Fatalf("delete %s: %d", m.TransactionID, status)
					}
				}
			},
			byOffset: []string{"m1", "m0"},
			byKey:    []string{"m3", "m2"},
		},
		"filed": {
			between:  func(t *testing.T, b *testBroker, q string, _ listingPage) { b.deadLetter(t, q, "p9", "m6") },
			byOffset: []string{"m4", "m3"},
			byKey:    []string{"m3", "m2"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			b := newTestBroker(t)
			q := uniqueQueue(t)
			for i := range 6 {
				b.deadLetter(t, q, fmt.Sprintf("p%d", i%2), fmt.Sprintf("m%d", i))
			}
			path := "/api/v1/dlq?queue=" + url.QueryEscape(q)
			wantSecondPages(t, b, path, []string{"m5", "m4"}, func(first listingPage) { c.between(t, b, q, first) }, c.byOffset, c.byKey)
		})
	}
}

// Paging by key gives every dead letter once, in the listing's order, at any
// page size and with every filter: rows that failed at the same instant (in
// id order) and rows a microsecond apart included.
func TestPagingDeadLettersByKeyGivesEveryRowOnceInOrder(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	for i := range 9 {
		b.deadLetter(t, q, fmt.Sprintf("p%d", i%2), fmt.Sprintf("m%d", i))
	}
	// m2…m5 fail at one instant, m6 a microsecond later, m7 a microsecond after m6.
	if _, err := b.Pool.Exec(t.Context(), `UPDATE lanes.dlq d SET failed_at = CASE d.transaction_id
			WHEN 'm6' THEN '2026-01-01 00:00:00.000001+00' WHEN 'm7' THEN '2026-01-01 00:00:00.000002+00'
			ELSE '2026-01-01 00:00:00+00' END::timestamptz
		FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
		WHERE d.partition_id = p.id AND q.name = $1 AND d.transaction_id IN ('m2', 'm3', 'm4', 'm5', 'm6', 'm7')`, q); err != nil {
		t.Fatal(err)
	}
	base := "/api/v1/dlq?queue=" + url.QueryEscape(q)
	for _, filter := range []string{"", "&partition=p1", "&consumerGroup=__QUEUE_MODE__",
		"&from=2025-12-31T23:00:00Z&to=2026-01-01T00:00:00.000001Z"} {
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

// A page the byte budget cuts before its limit names its last row sent as
// the key: paging by key returns every row once, each page within the budget.
func TestADeadLetterListingPagedByKeyStopsAtTheByteBudget(t *testing.T) {
	b := newTestBrokerWith(t, engine.Config{ListMaxBytes: listBudget})
	q := uniqueQueue(t)
	big := strings.Repeat("x", 30_000)
	for i := range 7 {
		b.deadLetterPayload(t, q, fmt.Sprintf("p%d", i%2), fmt.Sprintf("big-%d", i), big)
	}
	b.deadLetterPayload(t, q, "p0", "huge", strings.Repeat("y", 3*listBudget/2))
	for i := range 3 {
		b.deadLetterPayload(t, q, "p1", fmt.Sprintf("small-%d", i), i)
	}
	wantBudgetPagesByKey(t, b, "/api/v1/dlq?queue="+url.QueryEscape(q),
		"small-2", "small-1", "small-0", "huge", "big-6", "big-5", "big-4", "big-3", "big-2", "big-1", "big-0")
}

// An after sent with an offset, or one that is not a key of the dead-letter
// listing, answers 400 bad_request.
func TestABadDeadLetterAfterAnswers400BadRequest(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.deadLetter(t, q, "p", "m0")
	b.deadLetter(t, q, "p", "m1")
	path := "/api/v1/dlq?queue=" + url.QueryEscape(q)
	good := getBodyKeyPage(t, b, path+"&limit=1").NextAfter
	if good == nil {
		t.Fatal("the first page of 1 names no nextAfter")
	}
	id := "0190c5a4-6f5e-7b3c-8d2e-1a2b3c4d5e6f"
	b.wantBadAfters(t, path,
		"offset=0&after="+url.QueryEscape(*good),
		"offset=1&after="+url.QueryEscape(*good),
		"after=",
		"after=%21%21%21",
		"after="+base64.RawURLEncoding.EncodeToString([]byte(`[1767225600000000,"`+id+`"]`)),
		"after="+listKey("1767225600000000"),
		"after="+listKey("1767225600000000", id, "x"),
		"after="+listKey("2026-01-01T00:00:00Z", id),
		"after="+listKey("1.7672256e15", id),
		"after="+listKey("", id),
		"after="+listKey("99999999999999999999", id),
		"after="+listKey("-9223372036854775808", id),
		"after="+listKey("1767225600000000", "not-a-uuid"),
		"after="+listKey("1767225600000000", ""),
	)
}
