package api

import (
	"net/http"
	"net/url"
	"testing"
)

// Rules of docs/model.md and docs/consuming.md §6 that users rely on and no
// other test held: where the lease time comes from, what one call does with
// two statuses for one message or two dead letters of one partition, items of
// one call under different leases, and the retry budget a seek resets.

type ackItemAnswer struct {
	Success       bool    `json:"success"`
	DLQ           bool    `json:"dlq"`
	Noop          bool    `json:"noop"`
	LeaseReleased bool    `json:"leaseReleased"`
	Error         *string `json:"error"`
}

type ackItem struct {
	txn, status, lease string
}

// ackBatch sends one ack batch for the items, all on one partition, and
// returns the per-item answers.
func (b *testBroker) ackBatch(t *testing.T, partitionID, group string, items ...ackItem) []ackItemAnswer {
	t.Helper()
	acks := make([]map[string]any, len(items))
	for i, it := range items {
		acks[i] = map[string]any{"transactionId": it.txn, "partitionId": partitionID, "leaseId": it.lease, "status": it.status}
	}
	body := map[string]any{"acknowledgments": acks}
	if group != "" {
		body["consumerGroup"] = group
	}
	var out []ackItemAnswer
	if status, _ := b.call(t, "POST", "/api/v1/ack/batch", body, &out); status != http.StatusOK || len(out) != len(items) {
		t.Fatalf("ack batch: %d %+v", status, out)
	}
	return out
}

// pushPop pushes the transaction ids to q's Default partition and pops them
// all with the query given.
func (b *testBroker) pushPop(t *testing.T, q, query string, txns ...string) popBody {
	t.Helper()
	items := make([]map[string]any, len(txns))
	for i, txn := range txns {
		items[i] = map[string]any{"queue": q, "payload": i, "transactionId": txn}
	}
	b.call(t, "POST", "/api/v1/push", map[string]any{"items": items}, nil)
	return b.popAll(t, q, query, len(txns))
}

// popAll pops q with the query and wants want messages.
func (b *testBroker) popAll(t *testing.T, q, query string, want int) popBody {
	t.Helper()
	var popped popBody
	if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?wait=false&batch=100&"+query, nil, &popped); status != http.StatusOK || len(popped.Messages) != want {
		t.Fatalf("pop %s: %d, want %d messages: %+v", query, status, want, popped)
	}
	return popped
}

func (b *testBroker) deadLetterCount(t *testing.T, q string) int {
	t.Helper()
	var list dlqList
	b.call(t, "GET", "/api/v1/dlq?queue="+url.QueryEscape(q), nil, &list)
	return list.Total
}

func TestLeaseTimeIsThePopsLeaseSecondsElseTheQueuesLeaseTimeElseSixty(t *testing.T) {
	b := newTestBroker(t)
	cases := []struct {
		name      string
		leaseTime int // 0: the queue is not configured
		query     string
		want      float64
	}{
		{"default", 0, "", 60},
		{"queue leaseTime", 20, "", 20},
		{"pop leaseSeconds over the queue's", 20, "leaseSeconds=40", 40},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := uniqueQueue(t)
			if c.leaseTime > 0 {
				b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"leaseTime": c.leaseTime}}, nil)
			}
			popped := b.pushPop(t, q, c.query, "m")
			var left float64
			if err := b.Pool.QueryRow(t.Context(), `SELECT extract(epoch FROM lease_expires_at - now()) FROM lanes.consumers
				WHERE partition_id = $1 AND consumer_group = '__QUEUE_MODE__'`, popped.Messages[0].PartitionID).Scan(&left); err != nil {
				t.Fatal(err)
			}
			if left > c.want || left < c.want-5 {
				t.Fatalf("lease left %.1f s, want %.0f s", left, c.want)
			}
		})
	}
}

// At one offset dlq beats failed beats retry, whatever the order of the items.
func TestOneMessageAckedTwiceInOneCallTakesTheStrongerStatus(t *testing.T) {
	b := newTestBroker(t)
	cases := []struct {
		first, second string
		wantDLQ       bool
		wantRetries   int
	}{
		{"retry", "failed", false, 1},
		{"failed", "retry", false, 1},
		{"failed", "dlq", true, 0},
		{"dlq", "retry", true, 0},
		{"completed", "retry", false, 0},
	}
	for _, c := range cases {
		t.Run(c.first+"+"+c.second, func(t *testing.T) {
			q := uniqueQueue(t)
			b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"retryLimit": 3}}, nil)
			popped := b.pushPop(t, q, "", "a", "b")
			pid := popped.Messages[0].PartitionID
			b.ackBatch(t, pid, "", ackItem{"a", c.first, popped.LeaseID}, ackItem{"a", c.second, popped.LeaseID})
			committed, retries := b.queueModeCursor(t, pid)
			filed := b.deadLetterCount(t, q) == 1
			if filed != c.wantDLQ || retries != c.wantRetries {
				t.Fatalf("dead-lettered %v with retry_count %d, want %v and %d", filed, retries, c.wantDLQ, c.wantRetries)
			}
			if wantCommitted := map[bool]int64{true: 0, false: -1}[c.wantDLQ]; committed != wantCommitted {
				t.Fatalf("committed %d, want %d", committed, wantCommitted)
			}
		})
	}
}

// A nack lands the cursor on the highest message the call completes below it: unmentioned
// messages below that count as completed, those between it and the nack redeliver.
func TestANackLandsTheCursorOnTheHighestCompletedBelowIt(t *testing.T) {
	b := newTestBroker(t)
	cases := []struct {
		name  string
		items []ackItem // lease filled in below
		want  int64     // committed offset; a=0 … e=4
	}{
		{"gap below the completed one", []ackItem{{"c", "completed", ""}, {"d", "failed", ""}}, 2},
		{"gap between completed and nack", []ackItem{{"a", "completed", ""}, {"d", "retry", ""}}, 0},
		{"nack alone", []ackItem{{"d", "failed", ""}}, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := uniqueQueue(t)
			popped := b.pushPop(t, q, "", "a", "b", "c", "d", "e")
			pid := popped.Messages[0].PartitionID
			for i := range c.items {
				c.items[i].lease = popped.LeaseID
			}
			b.ackBatch(t, pid, "", c.items...)
			if committed, _ := b.queueModeCursor(t, pid); committed != c.want {
				t.Fatalf("committed %d, want %d", committed, c.want)
			}
		})
	}
}

func TestTwoDeadLettersOfOnePartitionInOneCallFileOnlyTheLower(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	popped := b.pushPop(t, q, "", "a", "b", "c")
	pid := popped.Messages[0].PartitionID
	res := b.ackBatch(t, pid, "", ackItem{"a", "dlq", popped.LeaseID}, ackItem{"b", "dlq", popped.LeaseID})
	if !res[0].Success || !res[0].DLQ || !res[1].Success || res[1].DLQ {
		t.Fatalf("want a filed and b not: %+v", res)
	}
	if n := b.deadLetterCount(t, q); n != 1 {
		t.Fatalf("%d dead letters, want 1", n)
	}
	again := b.popAll(t, q, "", 2)
	if again.Messages[0].TransactionID != "b" {
		t.Fatalf("redelivery starts at %s, want b", again.Messages[0].TransactionID)
	}
	if res := b.ackBatch(t, pid, "", ackItem{"b", "dlq", again.LeaseID}); !res[0].DLQ {
		t.Fatalf("b acked dlq again as the head: %+v", res)
	}
}

func TestItemsOfOneCallUnderDifferentLeasesAreJudgedEachAgainstItsOwn(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	old := b.pushPop(t, q, "leaseSeconds=1", "a", "b")
	pid := old.Messages[0].PartitionID
	if _, err := b.Pool.Exec(t.Context(), `UPDATE lanes.consumers SET lease_expires_at = now() - interval '1 second'
		WHERE partition_id = $1`, pid); err != nil {
		t.Fatal(err)
	}
	live := b.popAll(t, q, "", 2)
	res := b.ackBatch(t, pid, "", ackItem{"b", "completed", old.LeaseID}, ackItem{"a", "completed", live.LeaseID})
	if res[0].Success || res[0].Error == nil || *res[0].Error != "invalid or expired lease" {
		t.Fatalf("the expired lease's item: %+v", res[0])
	}
	if !res[1].Success || res[1].Noop {
		t.Fatalf("the live lease's item: %+v", res[1])
	}
	if committed, _ := b.queueModeCursor(t, pid); committed != 0 {
		t.Fatalf("committed %d, want 0 (a only)", committed)
	}
}

func TestSeekResetsTheRetryBudget(t *testing.T) {
	b := newTestBroker(t)
	q := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"retryLimit": 1}}, nil)
	const group = "g"
	query := "consumerGroup=" + group + "&subscriptionMode=all"
	popped := b.pushPop(t, q, query, "a", "b")
	pid := popped.Messages[0].PartitionID
	if res := b.ackBatch(t, pid, group, ackItem{"a", "failed", popped.LeaseID}); res[0].DLQ {
		t.Fatalf("the first failure spent the whole budget: %+v", res)
	}
	var seek map[string]any
	if status, _ := b.call(t, "POST", "/api/v1/consumer-groups/"+group+"/queues/"+q+"/seek",
		map[string]any{"timestamp": "2000-01-01T00:00:00Z"}, &seek); status != http.StatusOK {
		t.Fatalf("seek: %d %+v", status, seek)
	}
	again := b.popAll(t, q, query, 2)
	if res := b.ackBatch(t, pid, group, ackItem{"a", "failed", again.LeaseID}); res[0].DLQ || b.deadLetterCount(t, q) != 0 {
		t.Fatalf("a failure after the seek found the budget spent: %+v", res)
	}
}
