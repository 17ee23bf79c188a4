package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func mustKV(t testing.TB, e *Engine, ops ...KVOp) []KVResult {
	t.Helper()
	res, lost, err := e.KV(context.Background(), ops)
	if err != nil {
		t.Fatalf("kv: %v", err)
	}
	if lost != nil {
		t.Fatalf("kv: unexpected lost precondition %v", lost)
	}
	return res
}

func i64(v int64) *int64 { return &v }

func TestKVPutGetVersionsAndConditions(t *testing.T) {
	e := newEngine(t)
	ns := queueName(t)
	res := mustKV(t, e,
		KVOp{Op: KVPut, Namespace: ns, Key: "a", Value: raw(map[string]int{"n": 1}), Forever: true},
		KVOp{Op: KVGet, Namespace: ns, Key: "a"},
		KVOp{Op: KVPutIfAbsent, Namespace: ns, Key: "a", Value: raw(2), Forever: true},
		KVOp{Op: KVPut, Namespace: ns, Key: "a", Value: raw(3), Forever: true, Expect: i64(7)},
		KVOp{Op: KVPut, Namespace: ns, Key: "a", Value: raw(4), Forever: true, Expect: i64(1)},
		KVOp{Op: KVPut, Namespace: ns, Key: "missing", Value: raw(5), Forever: true, Expect: i64(1)},
		KVOp{Op: KVDelete, Namespace: ns, Key: "missing"},
		KVOp{Op: KVGet, Namespace: ns, Key: "missing"},
	)
	if !res[0].Applied || res[0].Version != 1 {
		t.Fatalf("put: %+v", res[0])
	}
	if !res[1].Found || string(res[1].Value) != `{"n":1}` || res[1].Version != 1 {
		t.Fatalf("get sees the earlier write of the same call: %+v", res[1])
	}
	want := []struct {
		applied bool
		reason  string
		version int64
	}{{false, KVReasonExists, 1}, {false, KVReasonVersion, 1}, {true, "", 2}, {false, KVReasonAbsent, 0}, {false, KVReasonAbsent, 0}}
	for i, w := range want {
		r := res[i+2]
		if r.Applied != w.applied || r.Reason != w.reason || r.Version != w.version {
			t.Fatalf("op %d: %+v, want %+v", i+2, r, w)
		}
	}
	if res[7].Found {
		t.Fatalf("get of a missing key: %+v", res[7])
	}
	// Persisted, and readable by a later call.
	got := mustKV(t, e, KVOp{Op: KVGetMany, Namespace: ns, Keys: []string{"a", "nope"}})
	if len(got[0].Rows) != 1 || string(got[0].Rows[0].Value) != "4" || got[0].Rows[0].Version != 2 ||
		len(got[0].Missing) != 1 || got[0].Missing[0] != "nope" {
		t.Fatalf("getMany: %+v", got[0])
	}
	del := mustKV(t, e, KVOp{Op: KVDelete, Namespace: ns, Key: "a", Expect: i64(1)}, KVOp{Op: KVDelete, Namespace: ns, Key: "a", Expect: i64(2)})
	if del[0].Applied || del[0].Reason != KVReasonVersion || !del[1].Applied {
		t.Fatalf("delete: %+v", del)
	}
	if again := mustKV(t, e, KVOp{Op: KVPutIfAbsent, Namespace: ns, Key: "a", Value: raw(1), TTLSeconds: 60}); !again[0].Applied || again[0].Version != 1 || again[0].ExpiresAt == nil {
		t.Fatalf("recreate after delete starts at version 1: %+v", again[0])
	}
}

func TestKVRequiredRollsBackTheWholeCall(t *testing.T) {
	e := newEngine(t)
	ns := queueName(t)
	mustKV(t, e, KVOp{Op: KVPut, Namespace: ns, Key: "taken", Value: raw("winner"), Forever: true})
	res, lost, err := e.KV(context.Background(), []KVOp{
		{Op: KVPut, Namespace: ns, Key: "side", Value: raw(1), Forever: true},
		{Op: KVPutIfAbsent, Namespace: ns, Key: "taken", Value: raw("loser"), Forever: true, Required: true},
	})
	if err != nil || lost == nil || lost.Index != 1 || lost.Reason != KVReasonExists || string(lost.Value) != `"winner"` {
		t.Fatalf("lost: %+v %v", lost, err)
	}
	if res[0].Applied || !res[0].RolledBack || res[0].Error == "" || res[0].Version != 0 || res[0].Value != nil {
		t.Fatalf("the earlier write reports the rollback and nothing it wrote: %+v", res[0])
	}
	if res[1].RolledBack || res[1].Reason != KVReasonExists || string(res[1].Value) != `"winner"` || res[1].Version != 1 {
		t.Fatalf("the failing op carries its reason and the committed winner: %+v", res[1])
	}
	// Lost to the call's own earlier write: that winner never commits, so
	// neither the error nor the result may show it.
	res, lost, err = e.KV(context.Background(), []KVOp{
		{Op: KVPut, Namespace: ns, Key: "fresh", Value: raw("mine"), Forever: true},
		{Op: KVPutIfAbsent, Namespace: ns, Key: "fresh", Value: raw("again"), Forever: true, Required: true},
	})
	if err != nil || lost == nil || lost.Reason != KVReasonExists || lost.Value != nil || lost.Version != 0 ||
		res[1].Value != nil || res[1].Version != 0 || res[1].UpdatedAt != nil {
		t.Fatalf("lost to its own write: %+v %+v %v", lost, res[1], err)
	}
	if got := mustKV(t, e, KVOp{Op: KVGet, Namespace: ns, Key: "side"}); got[0].Found {
		t.Fatal("a write of a failed call was committed")
	}
}

func TestKVIncrBoundsTypeAndTTL(t *testing.T) {
	e := newEngine(t)
	ns := queueName(t)
	res := mustKV(t, e,
		KVOp{Op: KVIncr, Namespace: ns, Key: "n", Delta: i64(5), TTLSeconds: 3600},
		KVOp{Op: KVIncr, Namespace: ns, Key: "n", Delta: i64(-2), Forever: true},
		KVOp{Op: KVIncr, Namespace: ns, Key: "n", Delta: i64(10), Forever: true, Max: i64(10)},
		KVOp{Op: KVPut, Namespace: ns, Key: "s", Value: raw("text"), Forever: true},
		KVOp{Op: KVIncr, Namespace: ns, Key: "s", Forever: true},
	)
	if !res[0].Applied || string(res[0].Value) != "5" || res[0].ExpiresAt == nil {
		t.Fatalf("incr creates with its TTL: %+v", res[0])
	}
	if !res[1].Applied || string(res[1].Value) != "3" || res[1].ExpiresAt == nil || !res[1].ExpiresAt.Equal(*res[0].ExpiresAt) {
		t.Fatalf("incr keeps the TTL set at creation: %+v", res[1])
	}
	if res[2].Applied || res[2].Reason != KVReasonLimit || string(res[2].Value) != "3" {
		t.Fatalf("max: %+v", res[2])
	}
	if res[4].Applied || res[4].Reason != KVReasonType {
		t.Fatalf("type: %+v", res[4])
	}
}

// A string that spells a number is still a string: Go's json.Number takes a quoted number, so
// incr used to turn the string "5" into the number 6.
func TestKVIncrOfANumericStringIsRefusedWithReasonType(t *testing.T) {
	e := newEngine(t)
	ns := queueName(t)
	res := mustKV(t, e,
		KVOp{Op: KVPut, Namespace: ns, Key: "s", Value: raw("5"), Forever: true},
		KVOp{Op: KVIncr, Namespace: ns, Key: "s", Delta: i64(1), Forever: true},
		KVOp{Op: KVGet, Namespace: ns, Key: "s"},
	)
	if res[1].Applied || res[1].Reason != KVReasonType {
		t.Fatalf("incr of the string \"5\": %+v", res[1])
	}
	if string(res[2].Value) != `"5"` || res[2].Version != 1 {
		t.Fatalf("the string changed: %s version %d", res[2].Value, res[2].Version)
	}
}

func TestKVExpiredKeysAreInvisibleAndSwept(t *testing.T) {
	e := newEngine(t)
	ns := queueName(t)
	mustKV(t, e, KVOp{Op: KVPut, Namespace: ns, Key: "short", Value: raw(1), TTLSeconds: 1},
		KVOp{Op: KVPut, Namespace: ns, Key: "long", Value: raw(2), Forever: true})
	time.Sleep(1100 * time.Millisecond)
	res := mustKV(t, e, KVOp{Op: KVGet, Namespace: ns, Key: "short"},
		KVOp{Op: KVGetPrefix, Namespace: ns, Prefix: "s"},
		KVOp{Op: KVIncr, Namespace: ns, Key: "short", Delta: i64(1), Forever: true})
	if res[0].Found || len(res[1].Rows) != 0 {
		t.Fatalf("an expired key is invisible: %+v", res[:2])
	}
	if !res[2].Applied || string(res[2].Value) != "1" || res[2].Version != 2 || res[2].ExpiresAt != nil {
		t.Fatalf("incr counts an expired key as 0 and its version on from the expired row's: %+v", res[2])
	}
	mustKV(t, e, KVOp{Op: KVPut, Namespace: ns, Key: "gone", Value: raw(1), TTLSeconds: 1})
	time.Sleep(1100 * time.Millisecond)
	page, err := e.KVList(context.Background(), KVListRequest{Namespace: ns, IncludeExpired: true})
	if err != nil || len(page.Rows) != 3 || !page.Rows[0].Expired {
		t.Fatalf("includeExpired lists the expired row first: %+v %v", page, err)
	}
	if n, err := e.SweepExpiredKV(context.Background()); err != nil || n < 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	page, err = e.KVList(context.Background(), KVListRequest{Namespace: ns, IncludeExpired: true})
	if err != nil || len(page.Rows) != 2 {
		t.Fatalf("after sweep: %+v %v", page, err)
	}
}

// The TTL-lock race: A's lock expires, B takes it, and A's renewal still
// holds the version it saw. Versions restarting at 1 after the expiry made
// that stale compare-and-set overwrite B.
func TestKVVersionKeepsCountingAcrossExpiry(t *testing.T) {
	e := newEngine(t)
	ns := queueName(t)
	first := mustKV(t, e, KVOp{Op: KVPut, Namespace: ns, Key: "lock", Value: raw("A"), TTLSeconds: 1})[0]
	if !first.Applied || first.Version != 1 {
		t.Fatalf("A takes the lock: %+v", first)
	}
	time.Sleep(1100 * time.Millisecond)
	taken := mustKV(t, e, KVOp{Op: KVPutIfAbsent, Namespace: ns, Key: "lock", Value: raw("B"), TTLSeconds: 60})[0]
	if !taken.Applied || taken.Version != 2 {
		t.Fatalf("B takes the expired lock: %+v, want applied at version 2", taken)
	}
	renew := mustKV(t, e, KVOp{Op: KVPut, Namespace: ns, Key: "lock", Value: raw("A-renew"), TTLSeconds: 60, Expect: i64(first.Version)})[0]
	if renew.Applied || renew.Reason != KVReasonVersion {
		t.Fatalf("A's stale renewal: %+v, want applied:false reason version", renew)
	}
	if got := mustKV(t, e, KVOp{Op: KVGet, Namespace: ns, Key: "lock"})[0]; string(got.Value) != `"B"` || got.Version != 2 {
		t.Fatalf("the lock: %+v, want B's value at version 2", got)
	}
}

// A compare-and-set holding the version from before an expiry no one wrote after finds the key
// absent, not at that version: the lock it guarded is lost (model.md, KV state).
func TestKVCompareAndSetOfAnExpiredKeyAnswersAbsent(t *testing.T) {
	e := newEngine(t)
	ns := queueName(t)
	first := mustKV(t, e, KVOp{Op: KVPut, Namespace: ns, Key: "lock", Value: raw("A"), TTLSeconds: 1})[0]
	time.Sleep(1100 * time.Millisecond)
	renew := mustKV(t, e, KVOp{Op: KVPut, Namespace: ns, Key: "lock", Value: raw("A-renew"), TTLSeconds: 60, Expect: i64(first.Version)})[0]
	if renew.Applied || renew.Reason != KVReasonAbsent {
		t.Fatalf("a renewal after the expiry: %+v, want applied:false reason absent", renew)
	}
	drop := mustKV(t, e, KVOp{Op: KVDelete, Namespace: ns, Key: "lock", Expect: i64(first.Version)})[0]
	if drop.Applied || drop.Reason != KVReasonAbsent {
		t.Fatalf("a release after the expiry: %+v, want applied:false reason absent", drop)
	}
}

func TestKVPrefixPagingAndNamespaces(t *testing.T) {
	e := newEngine(t)
	ns := queueName(t)
	var ops []KVOp
	for i := 0; i < 5; i++ {
		ops = append(ops, KVOp{Op: KVPut, Namespace: ns, Key: fmt.Sprintf("user:%d", i), Value: raw(i), Forever: true})
	}
	ops = append(ops, KVOp{Op: KVPut, Namespace: ns, Key: "users", Value: raw("not under user:"), Forever: true})
	mustKV(t, e, ops...)
	var keys []string
	after := ""
	for pages := 0; pages < 5; pages++ {
		res := mustKV(t, e, KVOp{Op: KVGetPrefix, Namespace: ns, Prefix: "user:", After: after, Limit: 2, KeysOnly: true})
		for _, r := range res[0].Rows {
			if r.Value != nil {
				t.Fatalf("keysOnly returned a value: %+v", r)
			}
			keys = append(keys, r.Key)
		}
		if !res[0].Truncated {
			break
		}
		after = res[0].NextAfter
	}
	if fmt.Sprint(keys) != "[user:0 user:1 user:2 user:3 user:4]" {
		t.Fatalf("prefix pages: %v", keys)
	}
	nss, _, err := e.KVNamespaces(context.Background(), RowPage{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, n := range nss {
		if n.Namespace == ns && n.Keys == 6 {
			found = true
		}
	}
	if !found {
		t.Fatalf("namespaces: %+v", nss)
	}
}

func TestKVBadInputHasCodes(t *testing.T) {
	e := newEngine(t)
	ns := queueName(t)
	cases := map[string]struct {
		op   KVOp
		code string
	}{
		"no expiry":   {KVOp{Op: KVPut, Namespace: ns, Key: "k", Value: raw(1)}, CodeKVExpiryNotSpecified},
		"both expiry": {KVOp{Op: KVIncr, Namespace: ns, Key: "k", TTLSeconds: 5, Forever: true}, CodeKVExpiryNotSpecified},
		"no prefix":   {KVOp{Op: KVGetPrefix, Namespace: ns}, CodeKVPrefixRequired},
		"no ns":       {KVOp{Op: KVGet, Key: "k"}, CodeKVBadRequest},
		"no key":      {KVOp{Op: KVGet, Namespace: ns}, CodeKVBadRequest},
		"no value":    {KVOp{Op: KVPut, Namespace: ns, Key: "k", Forever: true}, CodeKVBadRequest},
	}
	for name, c := range cases {
		_, _, err := e.KV(context.Background(), []KVOp{{Op: KVPut, Namespace: ns, Key: "first", Value: raw(1), Forever: true}, c.op})
		var coded *CodedInputError
		if !errors.As(err, &coded) || coded.Code != c.code {
			t.Fatalf("%s: %v, want code %s", name, err, c.code)
		}
	}
	if got := mustKV(t, e, KVOp{Op: KVGet, Namespace: ns, Key: "first"}); got[0].Found {
		t.Fatal("a rejected call wrote its valid op")
	}
}

// TestKVConcurrentPutIfAbsentHasOneWinner races writers of one absent key.
func TestKVConcurrentPutIfAbsentHasOneWinner(t *testing.T) {
	e := newEngine(t)
	ns := queueName(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	winners := 0
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, _, err := e.KV(context.Background(), []KVOp{{Op: KVPutIfAbsent, Namespace: ns, Key: "once", Value: raw(i), Forever: true},
				{Op: KVIncr, Namespace: ns, Key: "count", Forever: true}})
			if err != nil {
				t.Error(err)
				return
			}
			if res[0].Applied {
				mu.Lock()
				winners++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	got := mustKV(t, e, KVOp{Op: KVGet, Namespace: ns, Key: "count"})
	if winners != 1 || string(got[0].Value) != "12" {
		t.Fatalf("winners %d, count %s", winners, got[0].Value)
	}
}

// A value larger than a call's read budget still comes back, alone on its
// page, so paging moves past it: before, getPrefix and KVList answered an
// empty truncated page with no nextAfter at that key for ever, and getMany
// neither rows nor missing.
func TestKVPagesPassAValueLargerThanTheReadBudget(t *testing.T) {
	e := newEngine(t)
	ns := queueName(t)
	big := raw(strings.Repeat("x", kvMaxReadBytes+1))
	mustKV(t, e,
		KVOp{Op: KVPut, Namespace: ns, Key: "k/a", Value: raw(1), Forever: true},
		KVOp{Op: KVPut, Namespace: ns, Key: "k/b", Value: big, Forever: true},
		KVOp{Op: KVPut, Namespace: ns, Key: "k/c", Value: raw(3), Forever: true})
	var seen []string
	after := ""
	for range 5 {
		res := mustKV(t, e, KVOp{Op: KVGetPrefix, Namespace: ns, Prefix: "k/", After: after})[0]
		for _, r := range res.Rows {
			seen = append(seen, r.Key)
		}
		if !res.Truncated {
			break
		}
		if res.NextAfter == "" || res.NextAfter == after {
			t.Fatalf("getPrefix after %q: a truncated page with no way on (%+v keys %v)", after, res.NextAfter, seen)
		}
		after = res.NextAfter
	}
	if fmt.Sprint(seen) != "[k/a k/b k/c]" {
		t.Fatalf("getPrefix pages gave %v", seen)
	}
	seen, after = nil, ""
	for range 5 {
		page, err := e.KVList(context.Background(), KVListRequest{Namespace: ns, After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Rows {
			seen = append(seen, r.Key)
		}
		if !page.Truncated {
			break
		}
		if page.NextAfter == "" || page.NextAfter == after {
			t.Fatalf("list after %q: a truncated page with no way on", after)
		}
		after = page.NextAfter
	}
	if fmt.Sprint(seen) != "[k/a k/b k/c]" {
		t.Fatalf("list pages gave %v", seen)
	}
	many := mustKV(t, e, KVOp{Op: KVGetMany, Namespace: ns, Keys: []string{"k/b", "k/c"}})[0]
	if len(many.Rows) == 0 || many.Rows[0].Key != "k/b" {
		t.Fatalf("getMany of a big value first: %d rows, truncated %v", len(many.Rows), many.Truncated)
	}
}

// A write that waited for its key's lock judges expiry when it holds it: a
// key that expired meanwhile is absent to it, as it already was to readers
// (before, the wait's start decided, and an expect:1 put revived the key as
// version 2 after a GET had answered found:false).
func TestKVWriteJudgesExpiryAfterItsLockWait(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	ns := queueName(t)
	mustKV(t, e, KVOp{Op: KVPut, Namespace: ns, Key: "k", Value: raw(1), TTLSeconds: 1})
	holder, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int4, hashtext(length($2::text)::text || ':' || $2 || $3))`,
		int32(kvLockClass), ns, "k"); err != nil {
		t.Fatal(err)
	}
	done := make(chan KVResult, 1)
	go func() {
		res, _, err := e.KV(ctx, []KVOp{{Op: KVPut, Namespace: ns, Key: "k", Value: raw(2), TTLSeconds: 60, Expect: i64(1)}})
		if err != nil {
			t.Error(err)
			done <- KVResult{}
			return
		}
		done <- res[0]
	}()
	time.Sleep(1500 * time.Millisecond) // the key expires while the put waits
	if got := mustKV(t, e, KVOp{Op: KVGet, Namespace: ns, Key: "k"})[0]; got.Found {
		t.Fatalf("the key should read as expired: %+v", got)
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.Applied || res.Reason != "absent" {
		t.Fatalf("expect:1 on a key that expired during the lock wait: applied %v reason %q, want absent", res.Applied, res.Reason)
	}
}

func TestKVPrefixKeepsKeysThatContinueWithTheLastCodePoint(t *testing.T) {
	e := newEngine(t)
	ns := queueName(t)
	const last = "\U0010FFFF"
	var ops []KVOp
	for _, k := range []string{"a1", "a" + last, "a" + last + "z", "b", last, last + last + "q", "x\uD7FFq", "x\uE000"} {
		ops = append(ops, KVOp{Op: KVPut, Namespace: ns, Key: k, Value: raw(1), Forever: true})
	}
	mustKV(t, e, ops...)
	for _, c := range []struct {
		prefix string
		want   []string
	}{
		{"a", []string{"a1", "a" + last, "a" + last + "z"}},
		{"a" + last, []string{"a" + last, "a" + last + "z"}},
		{last, []string{last, last + last + "q"}}, // no key is past every key under this prefix
		{"x\uD7FF", []string{"x\uD7FFq"}},         // the next code point skips the surrogates
	} {
		res := mustKV(t, e, KVOp{Op: KVGetPrefix, Namespace: ns, Prefix: c.prefix, Limit: 100, KeysOnly: true})
		var got []string
		for _, r := range res[0].Rows {
			got = append(got, r.Key)
		}
		if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", c.want) || res[0].Truncated {
			t.Errorf("getPrefix %q: %q (truncated %v), want %q", c.prefix, got, res[0].Truncated, c.want)
		}
		page, err := e.KVList(context.Background(), KVListRequest{Namespace: ns, Prefix: c.prefix, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		got = nil
		for _, r := range page.Rows {
			got = append(got, r.Key)
		}
		if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", c.want) || page.Truncated {
			t.Errorf("list %q: %q (truncated %v), want %q", c.prefix, got, page.Truncated, c.want)
		}
	}
}
