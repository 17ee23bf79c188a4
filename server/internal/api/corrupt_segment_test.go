package api

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/testlog"
)

// newLoggedBroker is newTestBroker with the engine and the server logging into
// the returned buffer.
func newLoggedBroker(t *testing.T) (*testBroker, *testlog.Buffer) {
	t.Helper()
	log, out := capturedLogger()
	pool := newEnginePool(t, testDSN)
	eng := engine.New(pool, engine.Config{Logger: log})
	h, err := NewServer(eng, Options{Version: "test", MaxBodyBytes: 1 << 20, Logger: log}).Handler()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); eng.Close(); pool.Close() })
	return &testBroker{URL: srv.URL, Engine: eng, Pool: pool}, out
}

// corruptPartition truncates the frames of every segment of q's partition, as
// tampering or a bug would leave them: they no longer decode.
func (b *testBroker) corruptPartition(t *testing.T, q, partition string) {
	t.Helper()
	tag, err := b.Pool.Exec(t.Context(), `UPDATE lanes.segments s SET frames = substring(s.frames FROM 1 FOR 20)
		FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
		WHERE s.partition_id = p.id AND q.name = $1 AND p.name = $2`, q, partition)
	if err != nil || tag.RowsAffected() == 0 {
		t.Fatalf("corrupt %s/%s: %v (%d segments)", q, partition, err, tag.RowsAffected())
	}
}

// consumerRow reads the queue-mode cursor of q's partition: committed offset,
// lease id ("" when none) and whether a lease expiry is set.
func (b *testBroker) consumerRow(t *testing.T, q, partition string) (committed int64, leaseID string, expires bool) {
	t.Helper()
	if err := b.Pool.QueryRow(t.Context(), `SELECT c.committed, coalesce(c.lease_id::text, ''), c.lease_expires_at IS NOT NULL
		FROM lanes.consumers c JOIN lanes.partitions p ON p.id = c.partition_id JOIN lanes.queues q ON q.id = p.queue_id
		WHERE q.name = $1 AND p.name = $2 AND c.consumer_group = '__QUEUE_MODE__'`, q, partition).Scan(&committed, &leaseID, &expires); err != nil {
		t.Fatal(err)
	}
	return committed, leaseID, expires
}

// A pop whose claim reads a segment that no longer decodes gives the claim back
// in the same request and answers 500 corrupt_segment naming the queue and the
// partition; the broker logs the damage once, with the offsets. The cursor is
// as it was (no lease held for nobody), and the queue's other partitions are
// still served, by a pop naming them and by pops of the queue, one partition
// wide or wider.
func TestAPopReadingACorruptSegmentGivesItsClaimBack(t *testing.T) {
	b, out := newLoggedBroker(t)
	q := uniqueQueue(t)
	b.push(t, q, "bad", "b1", "b2", "b3")
	b.push(t, q, "good", "g1")
	b.corruptPartition(t, q, "bad")

	for range 3 {
		var e errorBody
		status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"/partition/bad?batch=10", nil, &e)
		if status != http.StatusInternalServerError || e.Code != CodeCorruptSegment ||
			!strings.Contains(e.Error, `queue "`+q+`"`) || !strings.Contains(e.Error, `partition "bad"`) {
			t.Fatalf("pop of the corrupt partition: %d %+v", status, e)
		}
		if committed, lease, expires := b.consumerRow(t, q, "bad"); committed != -1 || lease != "" || expires {
			t.Fatalf("the claim was not given back: committed %d, lease %q, expiry set %v", committed, lease, expires)
		}
	}
	wantLines(t, out, "stored segment does not decode", 1, "three pops of one corrupt segment")
	for _, detail := range []string{"queue=" + q, "partition=bad", "segmentBase=0", "segmentEnd=2", "claimedFrom=0", "claimedTo=2"} {
		if !strings.Contains(out.String(), detail) {
			t.Errorf("the log line lacks %s:\n%s", detail, out.String())
		}
	}
	if strings.Contains(out.String(), "request failed") {
		t.Errorf("the failure was logged again as a failed request:\n%s", out.String())
	}

	if got := b.pop(t, "/api/v1/pop/queue/"+q+"/partition/good?batch=10&autoAck=true").txns(); !slices.Equal(got, []string{"g1"}) {
		t.Fatalf("pop of the good partition: %v", got)
	}
	b.push(t, q, "good", "g2")
	if got := b.pop(t, "/api/v1/pop/queue/"+q+"?batch=10&partitions=2&autoAck=true").txns(); !slices.Equal(got, []string{"g2"}) {
		t.Fatalf("a pop of the queue taking both partitions: %v", got)
	}
	if committed, lease, _ := b.consumerRow(t, q, "bad"); committed != -1 || lease != "" {
		t.Fatalf("the wide pop kept the corrupt partition's claim: committed %d, lease %q", committed, lease)
	}
	// The corrupt partition, written first, is every claim's first choice: a
	// pop of one partition claims again past it.
	for _, txn := range []string{"g3", "g4"} {
		b.push(t, q, "good", txn)
		if got := b.pop(t, "/api/v1/pop/queue/"+q+"?batch=10&autoAck=true").txns(); !slices.Equal(got, []string{txn}) {
			t.Fatalf("a pop of the queue taking one partition: %v, want %s", got, txn)
		}
	}
}

// An autoAck pop's claim moves the cursor as it reads: on a corrupt segment it
// moves it back, so the messages are neither delivered nor counted consumed.
func TestAnAutoAckPopReadingACorruptSegmentMovesTheCursorBack(t *testing.T) {
	b, _ := newLoggedBroker(t)
	q := uniqueQueue(t)
	b.push(t, q, "bad", "b1", "b2")
	b.corruptPartition(t, q, "bad")
	var e errorBody
	if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"/partition/bad?batch=10&autoAck=true", nil, &e); status != http.StatusInternalServerError || e.Code != CodeCorruptSegment {
		t.Fatalf("autoAck pop of the corrupt partition: %d %+v", status, e)
	}
	if committed, lease, _ := b.consumerRow(t, q, "bad"); committed != -1 || lease != "" {
		t.Fatalf("the autoAck claim was not undone: committed %d, lease %q", committed, lease)
	}
}

// An ack that dead-letters a message whose segment was damaged after its
// delivery cannot copy it: the ack still commits (the cursor moves past the
// poison, the lease frees now), that item says no dead letter was filed, and
// the broker logs the segment. Before, the whole request answered 500 and the
// lease held until it expired. (The completed ack after it redelivers, by the
// clamp rule.)
func TestAnAckDeadLetteringFromACorruptSegmentStillCommits(t *testing.T) {
	b, out := newLoggedBroker(t)
	q := uniqueQueue(t)
	b.push(t, q, "bad", "b1", "b2")
	p := b.pop(t, "/api/v1/pop/queue/"+q+"/partition/bad?batch=10&leaseSeconds=60")
	if len(p.Messages) != 2 {
		t.Fatalf("popped %d messages, want 2", len(p.Messages))
	}
	b.corruptPartition(t, q, "bad")

	acks := []map[string]any{
		{"transactionId": p.Messages[0].TransactionID, "partitionId": p.Messages[0].PartitionID, "leaseId": p.LeaseID, "status": "dlq", "error": "poison"},
		{"transactionId": p.Messages[1].TransactionID, "partitionId": p.Messages[1].PartitionID, "leaseId": p.LeaseID, "status": "completed"},
	}
	var results []struct {
		Success       bool   `json:"success"`
		DLQ           bool   `json:"dlq"`
		Error         string `json:"error"`
		LeaseReleased bool   `json:"leaseReleased"`
	}
	if status, _ := b.call(t, "POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks}, &results); status != http.StatusOK || len(results) != 2 {
		t.Fatalf("ack batch: %d %+v", status, results)
	}
	if r := results[0]; !r.Success || r.DLQ || !strings.Contains(r.Error, "no longer decodes") {
		t.Fatalf("dlq ack of a message in a corrupt segment: %+v", r)
	}
	if r := results[1]; !r.Success || r.Error != "" {
		t.Fatalf("the completed ack beside it: %+v", r)
	}
	if committed, lease, expires := b.consumerRow(t, q, "bad"); committed != 0 || lease != "" || expires {
		t.Fatalf("cursor after the acks: committed %d, lease %q, expiry set %v; want 0 (past the poison) and no lease", committed, lease, expires)
	}
	wantLines(t, out, "stored segment does not decode", 1, "one ack that could not dead-letter")
	if !strings.Contains(out.String(), "deadLetterNotFiled=true") {
		t.Errorf("the log line does not say the dead letter was not filed:\n%s", out.String())
	}
}

// The message listing skips a segment that no longer decodes and says so in
// unreadable (queue, partition, how many messages), instead of failing the
// whole page: the unfiltered listing spans every queue, and one damaged
// segment would otherwise hide all of them. Reading one of its messages answers
// 500 corrupt_segment.
func TestTheMessageListingSkipsACorruptSegmentAndSaysSo(t *testing.T) {
	b, out := newLoggedBroker(t)
	q := uniqueQueue(t)
	b.push(t, q, "bad", "b1", "b2", "b3")
	b.push(t, q, "good", "g1")
	b.corruptPartition(t, q, "bad")

	type unreadable struct {
		Queue       string `json:"queue"`
		Partition   string `json:"partition"`
		PartitionID string `json:"partitionId"`
		Messages    int    `json:"messages"`
	}
	type listing struct {
		Messages []struct {
			TransactionID string `json:"transactionId"`
			Queue         string `json:"queue"`
		} `json:"messages"`
		Unreadable []unreadable `json:"unreadable"`
	}
	for _, path := range []string{"/api/v1/messages?queue=" + q, "/api/v1/messages?limit=1000"} {
		var l listing
		if status, _ := b.call(t, "GET", path, nil, &l); status != http.StatusOK {
			t.Fatalf("GET %s: %d", path, status)
		}
		var mine []string
		for _, m := range l.Messages {
			if m.Queue == q {
				mine = append(mine, m.TransactionID)
			}
		}
		if !slices.Equal(mine, []string{"g1"}) {
			t.Fatalf("GET %s listed %v of the queue", path, mine)
		}
		i := slices.IndexFunc(l.Unreadable, func(u unreadable) bool { return u.Queue == q })
		if i < 0 || l.Unreadable[i].Partition != "bad" || l.Unreadable[i].Messages != 3 || l.Unreadable[i].PartitionID == "" {
			t.Fatalf("GET %s: unreadable %+v", path, l.Unreadable)
		}
	}
	if !strings.Contains(out.String(), "stored segment does not decode") {
		t.Errorf("the listing did not log the corrupt segment:\n%s", out.String())
	}
	var one errorBody
	if status, _ := b.call(t, "GET", "/api/v1/messages/"+badPartitionID(t, b, q)+"/b2", nil, &one); status != http.StatusInternalServerError ||
		one.Code != CodeCorruptSegment || !strings.Contains(one.Error, `partition "bad"`) {
		t.Fatalf("GET one message of the corrupt segment: %d %+v", status, one)
	}
	var clean map[string]any
	b.call(t, "GET", "/api/v1/messages?queue="+q+"&partition=good", nil, &clean)
	if _, ok := clean["unreadable"]; ok {
		t.Fatalf("a listing with nothing skipped carries unreadable: %v", clean)
	}
}

func badPartitionID(t *testing.T, b *testBroker, q string) string {
	t.Helper()
	var id string
	if err := b.Pool.QueryRow(t.Context(), `SELECT p.id::text FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
		WHERE q.name = $1 AND p.name = 'bad'`, q).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}
