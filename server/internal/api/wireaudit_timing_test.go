package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/engine"
)

// The reference's statements about behavior over time (long polls, leases,
// the ack window), checked on the wire against a real broker: what a client
// written against the reference sees from Lanes once time passes.

// rawPop sends a GET pop and returns its status, headers, body and how long it took.
func rawPop(t *testing.T, b *testBroker, path string) (int, http.Header, string, time.Duration) {
	t.Helper()
	start := time.Now()
	resp, err := http.Get(b.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(raw), time.Since(start)
}

// popRoutes are the three pop routes of a queue q in namespace ns, partition p.
func popRoutes(q, ns, p string) map[string]string {
	return map[string]string{
		"queue":     "/api/v1/pop/queue/" + url.PathEscape(q) + "?",
		"partition": "/api/v1/pop/queue/" + url.PathEscape(q) + "/partition/" + url.PathEscape(p) + "?",
		"discovery": "/api/v1/pop?namespace=" + url.QueryEscape(ns) + "&",
	}
}

func TestAnExpiredLongPollAnswersABare204OnEveryPopRoute(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	ns := q + "-ns"
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"namespace": ns}}, nil)
	for route, path := range popRoutes(q, ns, "p") {
		status, header, body, took := rawPop(t, b, path+"wait=true&timeout=400")
		if status != http.StatusNoContent || body != "" || header.Get("Content-Length") != "" {
			t.Fatalf("%s: expired wait answered %d %q Content-Length %q, want a bare 204", route, status, body, header.Get("Content-Length"))
		}
		if took < 350*time.Millisecond || took > 3*time.Second {
			t.Fatalf("%s: expired wait took %v, want about its 400 ms timeout", route, took)
		}
	}
}

func TestATimeoutWithoutWaitAnswersAtOnce(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	status, _, _, took := rawPop(t, b, "/api/v1/pop/queue/"+q+"?timeout=5000")
	if status != http.StatusNoContent || took > 2*time.Second {
		t.Fatalf("timeout without wait: %d after %v, want 204 at once", status, took)
	}
}

// parkedPop starts a long poll and returns a channel with its answer.
func parkedPop(t *testing.T, b *testBroker, path string) <-chan groupPopAnswer {
	out := make(chan groupPopAnswer, 1)
	go func() {
		// Not b.call: a test may not fail from another goroutine.
		var a groupPopAnswer
		resp, err := http.Get(b.URL + path)
		if err == nil {
			a.status = resp.StatusCode
			_ = json.NewDecoder(resp.Body).Decode(&a.pop)
			resp.Body.Close()
		}
		out <- a
	}()
	time.Sleep(300 * time.Millisecond) // parked by now
	return out
}

type groupPopAnswer struct {
	status int // 0: the request failed
	pop    groupPop
}

func TestALongPollWakesOnAPushInItsScopeOnly(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	ns := q + "-ns"
	other := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"namespace": ns}}, nil)
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": other, "options": map[string]any{"namespace": other + "-ns"}}, nil)
	for route, path := range popRoutes(q, ns, "p") {
		t.Run(route, func(t *testing.T) {
			group := "g-" + route
			answer := parkedPop(t, b, path+"wait=true&timeout=10000&consumerGroup="+group)
			// Out of scope: another queue's push, and (for the partition route) another partition's.
			b.push(t, other, "p", route+"-elsewhere")
			if route == "partition" {
				b.push(t, q, "q", route+"-other-partition")
			}
			select {
			case a := <-answer:
				t.Fatalf("a push out of scope answered the wait: %d %v", a.status, a.pop.txns())
			case <-time.After(700 * time.Millisecond):
			}
			pushed := time.Now()
			b.push(t, q, "p", route+"-here")
			a := <-answer
			woke := time.Since(pushed)
			if a.status != http.StatusOK || !sameStrings(a.pop.txns(), []string{route + "-here"}) || woke > 2*time.Second {
				t.Fatalf("wait answered %d %v %v after the push, want the pushed message at once", a.status, a.pop.txns(), woke)
			}
		})
	}
}

func TestAWokenLongPollHonorsAutoAckAndLeaseSeconds(t *testing.T) {
	b := newTestBroker(t)

	q := uniqueQueue(t)
	answer := parkedPop(t, b, "/api/v1/pop/queue/"+q+"?wait=true&timeout=10000&autoAck=true")
	b.push(t, q, "p", "auto")
	if a := <-answer; a.status != http.StatusOK || a.pop.LeaseID != "" || !sameStrings(a.pop.txns(), []string{"auto"}) {
		t.Fatalf("autoAck wait: %d lease %q %v, want the message under no lease", a.status, a.pop.LeaseID, a.pop.txns())
	}
	if status, _, _, _ := rawPop(t, b, "/api/v1/pop/queue/"+q); status != http.StatusNoContent {
		t.Fatalf("an autoAck'd message came back: %d", status)
	}

	q = uniqueQueue(t)
	answer = parkedPop(t, b, "/api/v1/pop/queue/"+q+"?wait=true&timeout=10000&leaseSeconds=1")
	b.push(t, q, "p", "leased")
	first := <-answer
	if first.status != http.StatusOK || first.pop.LeaseID == "" {
		t.Fatalf("leased wait: %d %+v", first.status, first.pop)
	}
	if status, _, _, _ := rawPop(t, b, "/api/v1/pop/queue/"+q); status != http.StatusNoContent {
		t.Fatalf("a leased message was delivered twice inside its lease: %d", status)
	}
	time.Sleep(1300 * time.Millisecond)
	again := b.pop(t, "/api/v1/pop/queue/"+q)
	if !sameStrings(again.txns(), []string{"leased"}) || again.LeaseID == first.pop.LeaseID {
		t.Fatalf("after the 1 s lease: %v lease %q, want the message again under a new lease", again.txns(), again.LeaseID)
	}
}

// queueLeaseTime reads the queue's leaseTime option from the queue detail.
func queueLeaseTime(t *testing.T, b *testBroker, q string) any {
	t.Helper()
	var detail struct {
		Options map[string]any `json:"options"`
	}
	if status, _ := b.call(t, "GET", "/api/v1/resources/queues/"+url.PathEscape(q), nil, &detail); status != http.StatusOK {
		t.Fatalf("queue detail: %d", status)
	}
	return detail.Options["leaseTime"]
}

func TestLeaseTimeDefaultsTo60ForAPushedQueueAnd300ForAConfiguredOne(t *testing.T) {
	b := newTestBroker(t)
	pushed := uniqueQueue(t)
	b.push(t, pushed, "p", "m")
	if got := queueLeaseTime(t, b, pushed); got != float64(60) {
		t.Fatalf("push-created queue leaseTime %v, want 60", got)
	}
	configured := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": configured, "options": map[string]any{}}, nil)
	if got := queueLeaseTime(t, b, configured); got != float64(300) {
		t.Fatalf("configured queue leaseTime %v, want 300", got)
	}
}

func TestAnAckAfterLeaseExpiryFailsWithTheLeaseAndCommitsWithout(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	popped := b.pushPop(t, q, "leaseSeconds=1", "m0", "m1")
	pid := popped.Messages[0].PartitionID
	time.Sleep(1300 * time.Millisecond)

	stale := b.ackBatch(t, pid, "", ackItem{"m0", "completed", popped.LeaseID})
	if stale[0].Success || stale[0].Error == nil || !strings.Contains(*stale[0].Error, "invalid or expired lease") {
		t.Fatalf("ack with the expired lease: %+v, want invalid or expired lease", stale[0])
	}
	leaseless := b.ackBatch(t, pid, "", ackItem{"m0", "completed", ""})
	if !leaseless[0].Success || leaseless[0].Noop {
		t.Fatalf("lease-less ack after expiry: %+v, want it to commit", leaseless[0])
	}
	// The cursor moved past m0: the expired span redelivers from m1.
	again := b.pop(t, "/api/v1/pop/queue/"+q+"?batch=10")
	if !sameStrings(again.txns(), []string{"m1"}) {
		t.Fatalf("after a lease-less ack of m0: %v, want m1", again.txns())
	}
	// The first lease's ack fails against the new holder's lease too.
	late := b.ackBatch(t, pid, "", ackItem{"m1", "completed", popped.LeaseID})
	if late[0].Success {
		t.Fatalf("an ack with the expired lease passed under the new lease: %+v", late[0])
	}
}

type leaseExtendAnswer struct {
	LeaseID        string  `json:"leaseId"`
	Success        bool    `json:"success"`
	Renewed        int     `json:"renewed"`
	NewExpiresAt   *string `json:"newExpiresAt"`
	ExpiresAt      *string `json:"expiresAt"`
	LeaseExpiresAt *string `json:"lease_expires_at"`
}

func TestLeaseExtendOfAnExpiredReleasedOrUnknownLeaseRenewsNothing(t *testing.T) {
	b := newTestBroker(t)
	wantNothing := func(t *testing.T, what, lease string) {
		t.Helper()
		var ext leaseExtendAnswer
		status, _ := b.call(t, "POST", "/api/v1/lease/"+url.PathEscape(lease)+"/extend", map[string]any{"seconds": 60}, &ext)
		if status != http.StatusOK || ext.Success || ext.Renewed != 0 || ext.LeaseID != lease ||
			ext.NewExpiresAt != nil || ext.ExpiresAt != nil || ext.LeaseExpiresAt != nil {
			t.Fatalf("extend of %s lease: %d %+v, want 200 success:false renewed:0 and null expiries", what, status, ext)
		}
	}

	q := uniqueQueue(t)
	expired := b.pushPop(t, q, "leaseSeconds=1", "e")
	time.Sleep(1300 * time.Millisecond)
	wantNothing(t, "an expired", expired.LeaseID)
	// Not resurrected: the message redelivers to the next pop.
	if again := b.pop(t, "/api/v1/pop/queue/"+q); !sameStrings(again.txns(), []string{"e"}) {
		t.Fatalf("after extending an expired lease: %v, want e redelivered", again.txns())
	}

	q = uniqueQueue(t)
	released := b.pushPop(t, q, "", "r")
	b.ackBatch(t, released.Messages[0].PartitionID, "", ackItem{"r", "completed", released.LeaseID})
	wantNothing(t, "a released", released.LeaseID)

	wantNothing(t, "an unknown", "no-such-lease")
}

func TestLeaseExtendNeverShortensALease(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	popped := b.pushPop(t, q, "leaseSeconds=100", "m")
	var ext struct {
		Success   bool       `json:"success"`
		ExpiresAt *time.Time `json:"expiresAt"`
	}
	b.call(t, "POST", "/api/v1/lease/"+popped.LeaseID+"/extend", map[string]any{"seconds": 1}, &ext)
	if !ext.Success || ext.ExpiresAt == nil || time.Until(*ext.ExpiresAt) < 90*time.Second {
		t.Fatalf("extend by 1 s of a 100 s lease: %+v, want it kept at about 100 s", ext)
	}
}

func TestAnAckOfATransactionIdPurgedByRetentionIsUnresolvable(t *testing.T) {
	b := newTestBroker(t)
	kept, swept, widened := uniqueQueue(t), uniqueQueue(t), uniqueQueue(t)
	// retentionSeconds without retentionEnabled deletes nothing.
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": kept, "options": map[string]any{"retentionSeconds": 1}}, nil)
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": swept, "options": map[string]any{
		"retentionEnabled": true, "retentionSeconds": 1, "dedupWindowSeconds": 1}}, nil)
	// completedRetentionSeconds widens the ack window past 900 s.
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": widened, "options": map[string]any{
		"retentionEnabled": true, "retentionSeconds": 1, "completedRetentionSeconds": 3600, "dedupWindowSeconds": 1}}, nil)
	b.push(t, kept, "p", "kept")
	b.push(t, widened, "p", "old-widened")
	held := b.pop(t, "/api/v1/pop/queue/"+widened+"?leaseSeconds=1")
	b.push(t, swept, "expired", "old-expired")
	b.push(t, swept, "live", "old-live")
	expired := b.pop(t, "/api/v1/pop/queue/"+swept+"/partition/expired?leaseSeconds=1")
	live := b.pop(t, "/api/v1/pop/queue/"+swept+"/partition/live?leaseSeconds=600")
	time.Sleep(1200 * time.Millisecond)
	b.push(t, swept, "expired", "fresh")
	b.push(t, swept, "live", "fresh")
	b.push(t, widened, "p", "fresh")

	count := func(sql string, args ...any) int {
		var n int
		if err := b.Pool.QueryRow(t.Context(), sql, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	pids := []string{expired.Messages[0].PartitionID, live.Messages[0].PartitionID, held.Messages[0].PartitionID}
	oldTxns := func() int {
		return count(`SELECT count(*) FROM lanes.txns WHERE partition_id = ANY($1::uuid[]) AND transaction_id LIKE 'old-%'`, pids)
	}
	b.Engine.StartRetention(100 * time.Millisecond)
	waitFor(t, 40*time.Second, "retention to delete the expired segments", func() bool {
		return b.segmentsOf(t, swept) == 2 && b.segmentsOf(t, widened) == 1
	})
	if oldTxns() != 3 {
		t.Fatal("the transaction ids went with their segments, before the 900 s ack window")
	}
	// A quarter of an hour later (GREATEST(1 s dedup, 0 s completed, 900 s)) the ids are purged.
	for _, table := range []string{"lanes.txns SET created_at = created_at", "lanes.txns_expiry SET purge_after = purge_after"} {
		if _, err := b.Pool.Exec(t.Context(), `UPDATE `+table+` - interval '20 minutes' WHERE partition_id = ANY($1::uuid[])`, pids); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 40*time.Second, "retention to purge the transaction ids", func() bool { return oldTxns() == 1 })
	got := b.ackBatch(t, pids[2], "", ackItem{"old-widened", "completed", ""})
	if !got[0].Success {
		t.Fatalf("ack of an id inside the completedRetentionSeconds window: %+v, want it to resolve", got[0])
	}

	got = b.ackBatch(t, pids[0], "", ackItem{"old-expired", "completed", ""})
	if got[0].Success || got[0].Error == nil || !strings.HasPrefix(*got[0].Error, "unresolvable: ") {
		t.Fatalf("ack of a purged id: %+v, want unresolvable", got[0])
	}
	// Under a live lease, another broker cannot resolve the purged id either;
	// the broker that granted the lease still knows what it delivered
	// (docs/wire-compatibility.md): there the leased ack commits.
	other := newTestBroker(t)
	if got := other.ackBatch(t, pids[1], "", ackItem{"old-live", "completed", live.LeaseID}); got[0].Success || got[0].Error == nil ||
		!strings.HasPrefix(*got[0].Error, "unresolvable: ") {
		t.Fatalf("leased ack of a purged id at another broker: %+v, want unresolvable", got[0])
	}
	if got := b.ackBatch(t, pids[1], "", ackItem{"old-live", "completed", live.LeaseID}); !got[0].Success || !got[0].LeaseReleased {
		t.Fatalf("leased ack of a purged id at the granting broker: %+v, want it committed", got[0])
	}
	// The id is free again: pushing it after the window stores a new message.
	b.push(t, swept, "expired", "old-expired")
	if b.segmentsOf(t, kept) != 1 {
		t.Fatal("retentionSeconds deleted a segment of a queue without retentionEnabled")
	}
}

func TestALongPollGetsWhatBecomesAvailableWithoutAPush(t *testing.T) {
	b := newTestBroker(t)
	cases := []struct {
		name    string
		options map[string]any
		prepare func(t *testing.T, q string) // leaves a message that becomes available about 1 s later
	}{
		{"an expired lease redelivers", nil, func(t *testing.T, q string) {
			b.push(t, q, "p", "m")
			b.pop(t, "/api/v1/pop/queue/"+q+"?leaseSeconds=1")
		}},
		{"delayedProcessing passes", map[string]any{"delayedProcessing": 1}, func(t *testing.T, q string) {
			b.push(t, q, "p", "m")
		}},
		{"windowBuffer passes", map[string]any{"windowBuffer": 1}, func(t *testing.T, q string) {
			b.push(t, q, "p", "m")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := uniqueQueue(t)
			if c.options != nil {
				b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": c.options}, nil)
			}
			c.prepare(t, q)
			start := time.Now()
			var p groupPop
			status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?wait=true&timeout=8000", nil, &p)
			if took := time.Since(start); status != http.StatusOK || !sameStrings(p.txns(), []string{"m"}) || took > 4*time.Second {
				t.Fatalf("long poll: %d %v after %v, want m within a few seconds of becoming available", status, p.txns(), took)
			}
		})
	}
}

func TestADuplicateOfAMessageRetentionDeletedAnswersTheOriginalsID(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{
		"retentionEnabled": true, "retentionSeconds": 1}}, nil)
	var first []pushResult
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": 1, "transactionId": "once"}}}, &first)
	time.Sleep(1200 * time.Millisecond)
	b.push(t, q, "Default", "later")
	b.Engine.StartRetention(100 * time.Millisecond)
	waitFor(t, 40*time.Second, "retention to delete the first segment", func() bool {
		return b.segmentsOf(t, q) == 1
	})
	var again []pushResult
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": 1, "transactionId": "once"}}}, &again)
	if len(again) != 1 || again[0].Status != "duplicate" {
		t.Fatalf("a push inside the dedup window of a deleted message: %+v, want duplicate", again)
	}
	if id := again[0].MessageID; id != first[0].MessageID && id != "00000000-0000-0000-0000-000000000000" {
		t.Fatalf("duplicate's message_id %s, want the original's %s or the all-zeros id", id, first[0].MessageID)
	}
	t.Logf("duplicate of a deleted message answers message_id %s (original %s)", again[0].MessageID, first[0].MessageID)
}

func TestPushMaintenanceSpoolsWithoutTurningDBHealthyFalse(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{}, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go b.Server.RunMaintenanceRefresh(ctx) // as main.go starts it
	b.runDrain(t)
	t.Cleanup(func() { b.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}, nil) })
	var buffers struct {
		Pending   int  `json:"pending"`
		DBHealthy bool `json:"dbHealthy"`
	}
	readBuffers := func() {
		if status, _ := b.call(t, "GET", "/api/v1/status/buffers", nil, &buffers); status != http.StatusOK {
			t.Fatalf("buffer status: %d", status)
		}
	}
	waitFor(t, 5*time.Second, "dbHealthy", func() bool { readBuffers(); return buffers.DBHealthy })

	q := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": true}, nil)
	var res []pushResult
	if status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": 1, "transactionId": "m"}}}, &res); status != http.StatusCreated || res[0].Status != "buffered" {
		t.Fatalf("push under maintenance: %d %+v", status, res)
	}
	time.Sleep(600 * time.Millisecond) // past a maintenance read
	if readBuffers(); buffers.Pending != 1 || !buffers.DBHealthy {
		t.Fatalf("buffer status under push maintenance: %+v, want the push pending and dbHealthy true", buffers)
	}
	b.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}, nil)
	waitFor(t, 10*time.Second, "the drain", func() bool { readBuffers(); return buffers.Pending == 0 })
	if got := b.pop(t, "/api/v1/pop/queue/"+q); !sameStrings(got.txns(), []string{"m"}) {
		t.Fatalf("after the drain: %v", got.txns())
	}
}

func TestATransactionIdIsKeptWhileItsMessageIsRetained(t *testing.T) {
	passes := make(chan struct{}, 100)
	b := newTestBrokerWith(t, engine.Config{OnRetentionPass: func(engine.RetentionStats, time.Duration, error) {
		select {
		case passes <- struct{}{}:
		default:
		}
	}})
	q := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"dedupWindowSeconds": 1}}, nil)
	b.push(t, q, "p", "old")
	popped := b.pop(t, "/api/v1/pop/queue/"+q+"?leaseSeconds=1")
	pid := popped.Messages[0].PartitionID
	// Past every window: the id is 20 minutes old.
	if _, err := b.Pool.Exec(t.Context(), `UPDATE lanes.txns SET created_at = created_at - interval '20 minutes' WHERE partition_id = $1`, pid); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the lease expires
	b.Engine.StartRetention(100 * time.Millisecond)
	for range 3 {
		<-passes
	}
	if got := b.ackBatch(t, pid, "", ackItem{"old", "completed", ""}); !got[0].Success || got[0].Noop {
		t.Fatalf("ack of a retained message past the window: %+v, want it committed", got[0])
	}
}

func TestAnEmptyPopAfterRetentionDoesNotSealOverADelayedMessage(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	// The delayed message becomes visible after 2 s and is deleted after 4 s.
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{
		"retentionEnabled": true, "retentionSeconds": 4, "delayedProcessing": 2}}, nil)
	b.push(t, q, "p", "deleted")
	time.Sleep(4200 * time.Millisecond)
	b.push(t, q, "p", "delayed")
	b.Engine.StartRetention(100 * time.Millisecond)
	waitFor(t, 40*time.Second, "retention to delete the first segment", func() bool {
		return b.segmentsOf(t, q) == 1
	})
	if status, _, _, _ := rawPop(t, b, "/api/v1/pop/queue/"+q+"?batch=10"); status != http.StatusNoContent {
		t.Fatalf("pop before the delay passed: %d, want 204", status)
	}
	var p groupPop
	status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=10&wait=true&timeout=8000", nil, &p)
	if status != http.StatusOK || !sameStrings(p.txns(), []string{"delayed"}) {
		t.Fatalf("once the delay passed: %d %v, want the delayed message (the empty pop must not seal over it)", status, p.txns())
	}
}
