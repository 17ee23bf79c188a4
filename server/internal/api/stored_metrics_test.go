package api

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// storedBySource reads lanes_messages_pushed_total for every source.
func storedBySource(t *testing.T, url string) map[string]float64 {
	t.Helper()
	got := scrape(t, url)
	out := map[string]float64{}
	for _, source := range []string{"push", "transaction", "timer", "replay", "spool"} {
		out[source] = got[`lanes_messages_pushed_total{source="`+source+`"}`]
	}
	return out
}

// Every path that stores messages moves lanes_messages_pushed_total{source}
// by exactly what it stored, and no other source: plain pushes (duplicates
// not counted), transaction bundles, timer fires, dead-letter replays, the
// spool's drain, and a push whose client left before its commit landed.
func TestEveryStoringPathCountsWhatItStored(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{}, t.TempDir())
	b.runDrain(t)
	q := uniqueQueue(t)
	// Timers other tests left due would fire with ours: fire them first.
	b.fireDueTimers(t)
	b.deadLetter(t, q, "dead", "dead-1")

	last := storedBySource(t, b.URL)
	expect := func(what, source string, n float64) {
		t.Helper()
		waitFor(t, 10*time.Second, what+" to be counted", func() bool { return storedBySource(t, b.URL)[source] >= last[source]+n })
		now := storedBySource(t, b.URL)
		for s, v := range now {
			want := last[s]
			if s == source {
				want += n
			}
			if v != want {
				t.Errorf("after %s: lanes_messages_pushed_total{source=%q} = %v, want %v", what, s, v, want)
			}
		}
		last = now
	}

	if status, _ := b.call(t, "POST", "/api/v1/push", pushItems(q, 3), nil); status != http.StatusCreated {
		t.Fatalf("push: %d", status)
	}
	b.call(t, "POST", "/api/v1/push", pushItems(q, 1), nil) // t0 again: a duplicate stores nothing
	expect("a push of 3 and a duplicate", "push", 3)

	var tx struct {
		Success bool `json:"success"`
	}
	b.call(t, "POST", "/api/v1/transaction", map[string]any{"operations": []map[string]any{
		{"type": "push", "queue": q, "partition": "tx", "transactionId": "tx-1", "payload": 1},
		{"type": "push", "queue": q, "partition": "tx", "transactionId": "tx-2", "payload": 2}}}, &tx)
	if !tx.Success {
		t.Fatal("transaction failed")
	}
	expect("a transaction bundle of 2 pushes", "transaction", 2)

	payload := base64.StdEncoding.EncodeToString([]byte(`{"timer":true}`))
	b.call(t, "POST", "/api/v1/timers", fmt.Sprintf(`{"operations":[
		{"op":"schedule","queue":%q,"timerKey":"k1","partition":"timers","delayMs":0,"payload":%q},
		{"op":"schedule","queue":%q,"timerKey":"k2","partition":"timers","delayMs":0,"payload":%q}]}`, q, payload, q, payload), nil)
	if n, err := b.Engine.FireDueTimers(t.Context()); err != nil || n != 2 {
		t.Fatalf("fire: %d %v", n, err)
	}
	expect("2 timers firing", "timer", 2)

	var list dlqList
	b.call(t, "GET", "/api/v1/dlq?queue="+q, nil, &list)
	if len(list.Messages) != 1 {
		t.Fatalf("dlq: %+v", list)
	}
	var replayed replayBody
	if status, _ := b.call(t, "POST", "/api/v1/dlq/"+list.Messages[0].ID+"/replay", nil, &replayed); status != 200 || replayed.Result != "moved" {
		t.Fatalf("replay: %d %+v", status, replayed)
	}
	expect("a dead-letter replay", "replay", 1)

	b.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": true}, nil)
	t.Cleanup(func() { b.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}, nil) })
	spooled := pushItems(q, 2)
	for i, it := range spooled["items"].([]map[string]any) {
		it["transactionId"] = fmt.Sprintf("spooled-%d", i)
	}
	var answers []pushResult
	b.call(t, "POST", "/api/v1/push", spooled, &answers)
	if len(answers) != 2 || answers[0].Status != "buffered" {
		t.Fatalf("push during maintenance: %+v", answers)
	}
	b.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}, nil)
	expect("the spool's drain of 2 buffered pushes", "spool", 2)

	// The client gives up while the commit waits on the partition lock; the
	// commit lands once the lock goes and is counted though nobody hears of it.
	release := lockPartition(t, b.testBroker, q, "p")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.URL+"/api/v1/push", strings.NewReader(
		fmt.Sprintf(`{"items":[{"queue":%q,"partition":"p","transactionId":"left-1","payload":1}]}`, q)))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("push behind the lock answered %d before the client left", resp.StatusCode)
	}
	time.Sleep(100 * time.Millisecond) // the broker sees the client leave
	release()
	expect("a push whose client left", "push", 1)
}
