package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/testdb"
)

// execOn runs one statement on b's pool (for testdb.StallNextClaim).
func execOn(b *testBroker) func(ctx context.Context, sql string) error {
	return func(ctx context.Context, sql string) error {
		_, err := b.Pool.Exec(ctx, sql)
		return err
	}
}

// pushThree pushes m0, m1 and m2 to partition p of q.
func pushThree(t *testing.T, b *testBroker, q string) {
	t.Helper()
	items := make([]map[string]any, 3)
	for i := range items {
		items[i] = map[string]any{"queue": q, "partition": "p", "transactionId": fmt.Sprintf("m%d", i), "payload": i}
	}
	if status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": items}, nil); status != http.StatusCreated {
		t.Fatal("push")
	}
}

// popAndLeave sends a pop whose client leaves after leaveAfter, and returns
// when it left; the pop must not have been answered by then.
func popAndLeave(t *testing.T, b *testBroker, path string, header http.Header, leaveAfter time.Duration) time.Time {
	t.Helper()
	leave := startPopToLeave(t, b, path, header)
	time.Sleep(leaveAfter)
	return leave()
}

// startPopToLeave sends a pop and returns how its client leaves: leave
// cancels the request, checks that the pop was not answered before, and
// returns when it left.
func startPopToLeave(t *testing.T, b *testBroker, path string, header http.Header) (leave func() time.Time) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.URL+path, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	answered := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("answered %d before the client left", resp.StatusCode)
		}
		answered <- err
	}()
	return func() time.Time {
		t.Helper()
		left := time.Now()
		cancel()
		if err := <-answered; !errors.Is(err, context.Canceled) {
			t.Fatalf("the client did not leave: %v", err)
		}
		return left
	}
}

// expectGivenBack checks what a claim given back leaves: another pop of the
// group gets m0, m1 and m2, each once, well before the 60 s lease would have
// expired; the group's retry budget is not charged; once they are acked the
// group has nothing left.
func expectGivenBack(t *testing.T, b *resilientBroker, q, group, popPath string, left time.Time) time.Duration {
	t.Helper()
	var again popBody
	waitFor(t, 10*time.Second, "the messages to be claimable again", func() bool {
		b.call(t, "GET", popPath, nil, &again)
		return len(again.Messages) > 0
	})
	took := time.Since(left)
	if took > 5*time.Second {
		t.Fatalf("the messages came back after %v: they waited for the lease instead of being given back", took)
	}
	seen := map[string]int{}
	acks := make([]map[string]any, 0, len(again.Messages))
	for _, m := range again.Messages {
		seen[m.TransactionID]++
		acks = append(acks, map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": again.LeaseID})
	}
	if len(again.Messages) != 3 || seen["m0"] != 1 || seen["m1"] != 1 || seen["m2"] != 1 {
		t.Fatalf("want m0, m1 and m2 once each, got %v", seen)
	}
	var retryCount int
	if err := b.Pool.QueryRow(context.Background(), `SELECT c.retry_count FROM lanes.consumers c
		JOIN lanes.partitions p ON p.id = c.partition_id JOIN lanes.queues qu ON qu.id = p.queue_id
		WHERE qu.name = $1 AND c.consumer_group = $2`, q, group).Scan(&retryCount); err != nil {
		t.Fatal(err)
	}
	if retryCount != 0 {
		t.Fatalf("giving the claim back charged the retry budget: retry_count %d", retryCount)
	}
	b.call(t, "POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks}, nil)
	var rest popBody
	if status, _ := b.call(t, "GET", popPath, nil, &rest); status != http.StatusNoContent {
		t.Fatalf("after the acks the group has nothing left: %d %+v", status, rest)
	}
	if n := b.Server.metrics.LeasesGivenBack(); n != 1 {
		t.Errorf("lanes_pop_leases_given_back_total = %d, want 1", n)
	}
	return took
}

// TestClientLeavingDuringTheClaimGetsTheClaimGivenBack: the client of a pop
// leaves while the claim is in its database round trip (held there by a real
// stall), before any answer exists. The claim still commits (a caller leaving
// does not interrupt it, or its outcome would be unknown) and the broker gives
// it back at once.
func TestClientLeavingDuringTheClaimGetsTheClaimGivenBack(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{}, "")
	q, group := uniqueQueue(t), fmt.Sprintf("leaver-%d", time.Now().UnixNano())
	pushThree(t, b.testBroker, q)
	popPath := "/api/v1/pop/queue/" + q + "?batch=10&subscriptionMode=all&consumerGroup=" + group
	testdb.StallNextClaim(t, execOn(b.testBroker), group, 1500*time.Millisecond)
	left := popAndLeave(t, b.testBroker, popPath, nil, 400*time.Millisecond)
	took := expectGivenBack(t, b, q, group, popPath, left)
	t.Logf("claim stalled 1.5 s in PostgreSQL, client left after 0.4 s: claimable again %v after it left (lease 60 s)", took.Round(time.Millisecond))
}

// TestClientLeavingBeforeTheAnswerIsSentGetsTheClaimGivenBack: the claim has
// committed and the handler has returned its answer (its client still there),
// but the client leaves before the answer is sent (a fault script holds it
// there, as encoding a large batch or a busy machine would). The broker sends
// nothing and gives the claim back at once.
func TestClientLeavingBeforeTheAnswerIsSentGetsTheClaimGivenBack(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{TestFaults: true}, "")
	q, group := uniqueQueue(t), "late-leaver"
	pushThree(t, b.testBroker, q)
	popPath := "/api/v1/pop/queue/" + q + "?batch=10&subscriptionMode=all&consumerGroup=" + group
	run := fmt.Sprintf("hold-answer-%d", time.Now().UnixNano())
	if status, _ := b.call(t, "PUT", faultsPrefix+run, map[string]any{"rules": []map[string]any{{
		"method": "GET", "path": "/api/v1/pop/queue/*", "responses": []map[string]any{{"pass": true, "holdAnswerMs": 5000}},
	}}}, nil); status != http.StatusNoContent {
		t.Fatalf("fault script: %d", status)
	}
	left := popAndLeave(t, b.testBroker, popPath, http.Header{FaultsRunHeader: {run}}, 500*time.Millisecond)
	took := expectGivenBack(t, b, q, group, popPath, left)
	t.Logf("answer held after the claim, client left after 0.5 s: claimable again %v after it left (lease 60 s)", took.Round(time.Millisecond))
}

// TestClaimOutlivingItsRequestDeadlineReachesItsClient: the pop's database
// deadline (300 ms) passes while its claim is held 1.5 s in PostgreSQL. The
// claim is not cut short (a cancel during COMMIT leaves its outcome unknown,
// and a claim that committed anyway stayed leased for nobody until the lease
// expired): it runs to its end and its client, still there, gets the batch.
func TestClaimOutlivingItsRequestDeadlineReachesItsClient(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{DBTimeout: 300 * time.Millisecond}, "")
	q, group := uniqueQueue(t), fmt.Sprintf("late-claim-%d", time.Now().UnixNano())
	pushThree(t, b.testBroker, q)
	popPath := "/api/v1/pop/queue/" + q + "?batch=10&subscriptionMode=all&consumerGroup=" + group
	testdb.StallNextClaimPastCancel(t, execOn(b.testBroker), group, 1500*time.Millisecond)
	var first popBody
	status, _ := b.call(t, "GET", popPath, nil, &first)
	if status != http.StatusOK || len(first.Messages) != 3 {
		var rest popBody
		time.Sleep(1500 * time.Millisecond) // the stall is over: the claim committed or never will
		restStatus, _ := b.call(t, "GET", popPath, nil, &rest)
		t.Fatalf("the pop whose claim outlived its deadline answered %d with %d messages; "+
			"a second pop then got %d with %d messages (the rest leased for nobody)", status, len(first.Messages), restStatus, len(rest.Messages))
	}
	acks := make([]map[string]any, 0, len(first.Messages))
	for _, m := range first.Messages {
		acks = append(acks, map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": first.LeaseID})
	}
	b.call(t, "POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks}, nil)
	if status, _ := b.call(t, "GET", popPath, nil, nil); status != http.StatusNoContent {
		t.Fatalf("after the acks the group has nothing left: %d", status)
	}
}

// TestClientLeavingAfterTheDeadlineDuringTheClaimGetsTheClaimGivenBack: the
// pop's database deadline (300 ms) passes while its claim is held 1.5 s in
// PostgreSQL, and its client gives up at 0.8 s. The claim commits for nobody;
// the broker gives it back at once instead of leaving it leased.
func TestClientLeavingAfterTheDeadlineDuringTheClaimGetsTheClaimGivenBack(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{DBTimeout: 300 * time.Millisecond}, "")
	q, group := uniqueQueue(t), fmt.Sprintf("late-leaver-%d", time.Now().UnixNano())
	pushThree(t, b.testBroker, q)
	popPath := "/api/v1/pop/queue/" + q + "?batch=10&subscriptionMode=all&consumerGroup=" + group
	testdb.StallNextClaimPastCancel(t, execOn(b.testBroker), group, 1500*time.Millisecond)
	impatient := &http.Client{Timeout: 800 * time.Millisecond}
	resp, err := impatient.Get(b.URL + popPath)
	if err == nil {
		resp.Body.Close()
	}
	left := time.Now()
	took := expectGivenBack(t, b, q, group, popPath, left)
	t.Logf("claim stalled 1.5 s, deadline 0.3 s, client left at 0.8 s: claimable again %v after it left (lease 60 s)", took.Round(time.Millisecond))
}

// TestClientLeavingAnAutoAckPopIsCounted: an autoAck pop commits its claim
// before answering, so messages whose client leaves before the answer are
// consumed for the group and never delivered (at-most-once, as documented).
// Nothing can be given back; the broker counts them
// (lanes_pop_auto_acked_undelivered_total) and logs a warning, so the loss
// shows on a dashboard.
func TestClientLeavingAnAutoAckPopIsCounted(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{TestFaults: true}, "")
	q, group := uniqueQueue(t), "auto-leaver"
	pushThree(t, b.testBroker, q)
	popPath := "/api/v1/pop/queue/" + q + "?batch=10&subscriptionMode=all&autoAck=true&consumerGroup=" + group
	run := fmt.Sprintf("hold-auto-answer-%d", time.Now().UnixNano())
	if status, _ := b.call(t, "PUT", faultsPrefix+run, map[string]any{"rules": []map[string]any{{
		"method": "GET", "path": "/api/v1/pop/queue/*", "responses": []map[string]any{{"pass": true, "holdAnswerMs": 5000}},
	}}}, nil); status != http.StatusNoContent {
		t.Fatalf("fault script: %d", status)
	}
	popAndLeave(t, b.testBroker, popPath, http.Header{FaultsRunHeader: {run}}, 500*time.Millisecond)
	waitFor(t, 10*time.Second, "the undelivered autoAck messages to be counted", func() bool {
		return b.Server.metrics.AutoAckedUndelivered() == 3
	})
	if status, _ := b.call(t, "GET", popPath, nil, nil); status != http.StatusNoContent {
		t.Fatalf("the committed messages came back to the group: %d", status)
	}
	if n := b.Server.metrics.LeasesGivenBack(); n != 0 {
		t.Errorf("lanes_pop_leases_given_back_total = %d, want 0 (an autoAck pop has no lease)", n)
	}
}
