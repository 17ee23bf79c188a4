package api

import (
	"net/http"
	"testing"
	"time"
)

// A push whose commit waits on its partition's lock past LANES_PUSH_TIMEOUT
// is answered buffered and spooled, and its commit still lands once the lock
// is released. The drain's replay then found the transaction id stored under
// the same message id but, with the queue's dedup off, stored a second copy:
// a pop delivered the message twice. The replay now knows its own message.
func TestBufferedPushWhoseLateCommitLandedIsStoredOnce(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{PushTimeout: 500 * time.Millisecond}, t.TempDir())
	b.runDrain(t)
	q := uniqueQueue(t)
	if status, _ := b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": q, "options": map[string]any{"dedupWindowSeconds": 0}}, nil); status != http.StatusOK {
		t.Fatalf("configure: %d", status)
	}
	if out := pushOne(t, b.testBroker, q, "p", "early-1"); out.itemStatus != "queued" {
		t.Fatalf("push before the lock: %+v", out)
	}

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
