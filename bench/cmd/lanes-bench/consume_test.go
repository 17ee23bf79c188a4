package main

import (
	"strings"
	"testing"
	"time"
)

func popped(ids ...string) []popMessage {
	ms := make([]popMessage, len(ids))
	for i, id := range ids {
		ms[i] = popMessage{TransactionID: id}
	}
	return ms
}

func errText(s string) *string { return &s }

// A delivery counts once its ack took effect; a noop ack or an expired lease
// is a redelivery after lease expiry, which at-least-once delivery allows.
func TestSortAcksCountsOnlyAcksThatTookEffect(t *testing.T) {
	ms := popped("a", "b", "c", "d")
	res := []ackResult{
		{Success: true},
		{Success: true, Noop: true},                       // another consumer acked it after the lease expired
		{Success: false, Error: errText(errInvalidLease)}, // the lease expired and the message went elsewhere
		{Success: true},
	}
	acked, redelivered, err := sortAcks(ms, res)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(transactionIDs(acked), ","); got != "a,d" || redelivered != 2 {
		t.Fatalf("acked %s, redelivered %d; want a,d and 2", got, redelivered)
	}
}

func TestSortAcksFailsOnAnyOtherRejection(t *testing.T) {
	_, _, err := sortAcks(popped("a"), []ackResult{{Success: false, Error: errText("message not found")}})
	if err == nil || !strings.Contains(err.Error(), "message not found") {
		t.Fatalf("err = %v, want the rejection", err)
	}
	if _, _, err := sortAcks(popped("a", "b"), []ackResult{{Success: true}}); err == nil {
		t.Fatal("an answer with fewer results than messages passed")
	}
}

func TestDrainDeadlineErrorSaysHowFarTheDrainGot(t *testing.T) {
	err := drainDeadlineError(30*time.Second, 990, 1000)
	if got := err.Error(); got != "drain deadline (30s) expired with 990 of 1000 messages done" {
		t.Fatalf("error %q", got)
	}
}
