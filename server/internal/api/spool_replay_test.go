package api

import (
	"net/http"
	"slices"
	"testing"
	"time"
)

// A push whose commit waits on its partition's lock past LANES_PUSH_TIMEOUT
// is answered buffered and spooled, and its commit still lands once the lock
// is released. The drain's replay then found the transaction id stored under
// the same message id but, with the queue's dedup off, stored a second copy:
// a pop delivered the message twice. The replay now knows its own message.
func TestBufferedPushWhoseLateCommitLandedIsStoredOnce(t *testing.T) {
	b, q := drainingBrokerWithDedupOff(t, "early-1")

	release := lockPartition(t, b.testBroker, q, "p")
	late := pushOne(t, b.testBroker, q, "p", "late-1")
	if late.itemStatus != "buffered" {
		release()
		t.Fatalf("push behind the lock: %+v, want buffered after the push timeout", late)
	}
	release() // the late commit lands now; the drain replays the spooled copy behind it
	waitFor(t, 15*time.Second, "the spool to drain", func() bool { return b.Spool.Pending() == 0 })

	var popped popBody
	if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=10", nil, &popped); status != http.StatusOK {
		t.Fatalf("pop: %d", status)
	}
	var lateIDs []string
	for _, m := range popped.Messages {
		if m.TransactionID == "late-1" {
			lateIDs = append(lateIDs, m.ID)
		}
	}
	if len(popped.Messages) != 2 || len(lateIDs) != 1 || lateIDs[0] != late.messageID {
		t.Fatalf("popped %d messages, late-1 under ids %v; want early-1 and late-1 once, under the buffered answer's id %s",
			len(popped.Messages), lateIDs, late.messageID)
	}
}

// The audit's stall: while a write waits on its partition's lock, a second
// push of that partition waits for the committer behind it; both pass
// LANES_PUSH_TIMEOUT and are answered buffered, and the drain replays both.
// The second one's queued request and its replay used to be committed in one
// write, which stored it twice on a queue with dedup off. Its committer now
// drops a request whose caller gave up, and a replay in the write of its own
// first attempt is a duplicate: each message is stored once.
func TestPushesBufferedBehindAStalledWriteAreStoredOnce(t *testing.T) {
	b, q := drainingBrokerWithDedupOff(t, "early")

	release := lockPartition(t, b.testBroker, q, "p")
	answers := make([]chan pushOutcome, 2)
	for i, txn := range []string{"stalled", "queued-behind"} {
		answers[i] = make(chan pushOutcome, 1)
		go func() { answers[i] <- pushOne(t, b.testBroker, q, "p", txn) }()
		time.Sleep(50 * time.Millisecond) // the second push reaches the committer while the first holds it
	}
	buffered := map[string]string{} // transaction id → message id answered
	for i, txn := range []string{"stalled", "queued-behind"} {
		out := <-answers[i]
		if out.itemStatus != "buffered" {
			release()
			t.Fatalf("push %s behind the lock: %+v, want buffered after the push timeout", txn, out)
		}
		buffered[txn] = out.messageID
	}
	time.Sleep(500 * time.Millisecond) // the drain's replay joins the committer's queue
	release()
	waitFor(t, 15*time.Second, "the spool to drain", func() bool { return b.Spool.Pending() == 0 })

	var popped popBody
	if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=10", nil, &popped); status != http.StatusOK {
		t.Fatalf("pop: %d", status)
	}
	var got []string
	for _, m := range popped.Messages {
		got = append(got, m.TransactionID)
		if id, ok := buffered[m.TransactionID]; ok && m.ID != id {
			t.Errorf("%s popped under id %s, want the buffered answer's %s", m.TransactionID, m.ID, id)
		}
	}
	if want := []string{"early", "stalled", "queued-behind"}; !slices.Equal(got, want) {
		t.Fatalf("popped %v, want %v", got, want)
	}
}

// drainingBrokerWithDedupOff is a broker whose pushes go to its spool after
// 500 ms and whose drain runs, with a queue whose dedup is off and whose
// partition p already holds first (pushed before any lock is taken).
func drainingBrokerWithDedupOff(t *testing.T, first string) (*resilientBroker, string) {
	t.Helper()
	b := newBrokerWith(t, testDSN, Options{PushTimeout: 500 * time.Millisecond}, t.TempDir())
	b.runDrain(t)
	q := uniqueQueue(t)
	if status, _ := b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"dedupWindowSeconds": 0}}, nil); status != http.StatusOK {
		t.Fatalf("configure: %d", status)
	}
	if out := pushOne(t, b.testBroker, q, "p", first); out.itemStatus != "queued" {
		t.Fatalf("push before the lock: %+v", out)
	}
	return b, q
}
