package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestCheckStoredText(t *testing.T) {
	cases := []struct {
		value string
		max   int
		ok    bool
	}{
		{"orders", MaxNameBytes, true},
		{"café", MaxNameBytes, true},
		{strings.Repeat("x", MaxNameBytes), MaxNameBytes, true},
		{strings.Repeat("x", MaxNameBytes+1), MaxNameBytes, false},
		{"a\x00b", 0, false},
		{"a\xffb", 0, false},
		{strings.Repeat("x", 10000), 0, true},
	}
	for _, c := range cases {
		err := CheckStoredText("f", c.value, c.max)
		var bad *InvalidInputError
		if (err == nil) != c.ok || (err != nil && !errors.As(err, &bad)) {
			t.Errorf("CheckStoredText(%.20q, %d) = %v, want ok=%v", c.value, c.max, err, c.ok)
		}
	}
}

func TestJSONBProblem(t *testing.T) {
	for doc, refused := range map[string]bool{
		`"a\u0000b"`:             true,
		`{"k\u0000":1}`:          true,
		`"a\\u0000b"`:            false, // an escaped backslash, then text
		`"a\\\u0000"`:            true,
		`"\u00001"`:              true,
		`"\u0001"`:               false,
		`{"a":[1,"\u000a"]}`:     false,
		`"ends with \\"`:         false,
		`"\\\\u0000 and more"`:   false,
		`"\ud83d\ude00"`:         false,
		`"\uD83D\uDE00x"`:        false,
		`"\ud800"`:               true,
		`"\ud800\u0041"`:         true,
		`"\udc00\ud800"`:         true,
		`"x\\ud800"`:             false,
		`1e400`:                  false,
		`1e131071`:               false,
		`1e131072`:               true,
		`12.5e131070`:            false,
		`1e-16383`:               false,
		`1e-16384`:               true,
		`0e-16384`:               true,
		`0e200000`:               false,
		`1e-99999999999`:         true,
		`[-0.0,1.50,"1e-99999"]`: false,
	} {
		if got := jsonbProblem([]byte(doc)) != ""; got != refused {
			t.Errorf("jsonbProblem(%s) refuses: %v, want %v", doc, got, refused)
		}
	}
}

// A data error in a coalesced commit fails only the request that caused it:
// the members are committed one by one. The bad request here skips the input
// checks (Push would reject it) to stand for a value they do not catch.
func TestGroupCommitDataErrorFailsOnlyItsRequest(t *testing.T) {
	e := newEngine(t)
	q := queueName(t)
	newRequest := func(it PushItem) *pushRequest {
		if err := normalizePushItem(&it, 0); err != nil && !strings.Contains(it.Queue, "\x00") {
			t.Fatal(err)
		}
		if it.Partition == "" {
			it.Partition = DefaultPartition
		}
		return newPushRequest(context.Background(), []PushItem{it}, false)
	}
	good1 := newRequest(PushItem{Queue: q, Partition: "p1", TransactionID: "t1", Payload: raw(1)})
	bad := newRequest(PushItem{Queue: q + "\x00", Partition: "p1", TransactionID: "t2", Payload: raw(1)})
	good2 := newRequest(PushItem{Queue: q, Partition: "p2", TransactionID: "t3", Payload: raw(1)})
	e.pusher.commitBatch([]*pushRequest{good1, bad, good2})
	if err := <-good1.done; err != nil {
		t.Fatalf("first innocent request: %v", err)
	}
	if err := <-good2.done; err != nil {
		t.Fatalf("second innocent request: %v", err)
	}
	if err := <-bad.done; !isDataError(err) {
		t.Fatalf("bad request: want its data error, got %v", err)
	}
	if good1.results[0].Status != PushQueued || good2.results[0].Status != PushQueued {
		t.Fatalf("verdicts %+v %+v", good1.results[0], good2.results[0])
	}
	popped := mustPop(t, e, PopRequest{Queue: q, Batch: 10, AutoAck: true})
	popped2 := mustPop(t, e, PopRequest{Queue: q, Batch: 10, AutoAck: true})
	if n := len(popped.Messages) + len(popped2.Messages); n != 2 {
		t.Fatalf("stored %d messages, want 2", n)
	}
}

// A valid ack item is checked without building its field names: building
// them for every item was a tenth of the broker's CPU on the consume path.
func TestAckTextCheckOfAValidItemAllocatesNothing(t *testing.T) {
	item := AckItem{TransactionID: "0192f1e2-7c3b-7d4e-8f90-123456789abc", PartitionID: "0190a1b2-0000-7000-8000-000000000000",
		Status: "completed", Group: "billing", LeaseID: "7d6f0f5e-3c1e-4c57-9a1e-2f4f4c1b8a10"}
	allocs := testing.AllocsPerRun(100, func() {
		if err := checkAckText(&item, "acknowledgments", 42); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("checking a valid ack item allocated %.0f times, want none", allocs)
	}
}

// A push item's text checks refuse each field with the message that names it
// in its list, as they did when the names were built for every item.
func TestPushTextCheckNamesTheRefusedField(t *testing.T) {
	long := strings.Repeat("x", MaxTransactionIDBytes+1)
	cases := []struct {
		item PushItem
		want string
	}{
		{PushItem{Queue: " ", Partition: "p"}, "items[3].queue must be a non-empty string"},
		{PushItem{Queue: "..", Partition: "p"}, `items[3].queue must not be "." or "..": URL clients drop such path segments`},
		{PushItem{Queue: "q\x00", Partition: "p"}, `items[3].queue must not contain a NUL character (\u0000)`},
		{PushItem{Queue: "q", Partition: " "}, "items[3].partition must hold more than white space"},
		{PushItem{Queue: "q", Partition: "p\xff"}, "items[3].partition must be valid UTF-8"},
		{PushItem{Queue: "q", Partition: strings.Repeat("p", MaxNameBytes+1)}, "items[3].partition is longer than 512 bytes"},
		{PushItem{Queue: "q", Partition: "p", TransactionID: long}, "items[3].transactionId is longer than 1024 bytes"},
		{PushItem{Queue: "q", Partition: "p", TraceID: "t\x00"}, `items[3].traceId must not contain a NUL character (\u0000)`},
	}
	for _, c := range cases {
		for _, list := range []string{"items", "operations"} {
			want := strings.Replace(c.want, "items", list, 1)
			err := checkPushText(&c.item, list, 3)
			var bad *InvalidInputError
			if !errors.As(err, &bad) || err.Error() != want || bad.Field != strings.SplitN(want, " ", 2)[0] {
				t.Errorf("%+v in %s: got %v, want %q", c.item, list, err, want)
			}
		}
	}
}

// A valid push item is checked without building its field names: building
// them for every item (six allocations) was 7% of the broker's CPU under batch pushes.
func TestPushTextCheckOfAValidItemAllocatesNothing(t *testing.T) {
	item := PushItem{Queue: "orders", Partition: "customer-42", TransactionID: "0192f1e2-7c3b-7d4e-8f90-123456789abc", TraceID: "trace-1"}
	allocs := testing.AllocsPerRun(100, func() {
		if err := checkPushText(&item, "items", 42); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("checking a valid push item allocated %.0f times, want none", allocs)
	}
}
