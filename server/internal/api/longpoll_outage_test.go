package api

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// longPollOutcome is what a long poll answered and how long it took.
type longPollOutcome struct {
	status int
	code   string
	body   popBody
	took   time.Duration
}

// longPoll sends a waiting pop of queue; its answer arrives on the channel.
func longPoll(t *testing.T, b *testBroker, queue string, timeout time.Duration) <-chan longPollOutcome {
	out := make(chan longPollOutcome, 1)
	go func() {
		start := time.Now()
		resp, err := http.Get(fmt.Sprintf("%s/api/v1/pop/queue/%s?wait=true&timeout=%d", b.URL, queue, timeout.Milliseconds()))
		if err != nil {
			t.Error(err)
			out <- longPollOutcome{}
			return
		}
		defer resp.Body.Close()
		a := longPollOutcome{status: resp.StatusCode}
		switch resp.StatusCode {
		case http.StatusOK:
			decodeJSON(t, resp, &a.body)
		case http.StatusNoContent:
		default:
			var e errorBody
			decodeJSON(t, resp, &e)
			a.code = e.Code
		}
		a.took = time.Since(start)
		out <- a
	}()
	return out
}

// A long poll parked when PostgreSQL went down answered 500
// database_unavailable at its next re-check, within a second, so a consumer
// looping without backoff spun on errors. It now stays parked: it answers 204
// at its timeout, or the message pushed once the database is back. A pop
// whose first claim, on arrival, cannot reach the database still answers 500.
func TestALongPollParkedThroughAnOutageWaitsForItsTimeoutOrAMessage(t *testing.T) {
	pg := startPrivatePG(t)
	b := newBrokerWith(t, pg.urlWithSchema(), Options{}, "")
	q, idle := uniqueQueue(t), uniqueQueue(t)
	for _, name := range []string{q, idle} {
		if status, _ := b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": name}, nil); status != http.StatusOK {
			t.Fatalf("configure: %d", status)
		}
	}
	// short leaves room for both polls to park and the database to stop on a
	// loaded machine before the window in which the first must stay parked.
	const short, long = 6 * time.Second, 60 * time.Second
	timesOutSentAt := time.Now()
	timesOut := longPoll(t, b.testBroker, q, short)
	getsMessage := longPoll(t, b.testBroker, q, long)
	// A pop counts as parked from just before its first claim: wait for the
	// claims to end too, or the database may stop under the first one, which
	// then answers 500 as a pop arriving in the outage does.
	waitFor(t, 5*time.Second, "both long polls to park", func() bool {
		return b.Engine.ParkedPops() == 2 && b.Engine.ClaimsRunning() == 0
	})
	stoppedAt := time.Now()
	if err := pg.run("stop"); err != nil {
		t.Fatal(err)
	}

	// A queue without parked pops: this one claims on arrival.
	if a := <-longPoll(t, b.testBroker, idle, short); a.status != http.StatusInternalServerError || a.code != CodeDatabase {
		t.Errorf("a long poll arriving during the outage answered %d %s after %v, want 500 %s", a.status, a.code, a.took, CodeDatabase)
	}
	select {
	case a := <-timesOut:
		t.Fatalf("the parked long poll answered %d %s after %v, %v after the database stopped; want 204 at its %v timeout",
			a.status, a.code, a.took, time.Since(stoppedAt), short)
	case a := <-getsMessage:
		t.Fatalf("the parked long poll answered %d %s after %v, %v after the database stopped; want it parked", a.status, a.code, a.took, time.Since(stoppedAt))
	case <-time.After(time.Until(timesOutSentAt.Add(short - time.Second))):
	}
	if parkedInOutage := time.Since(stoppedAt); parkedInOutage < 2*time.Second {
		t.Fatalf("the database stopped only %v before the short poll's timeout: too late to test re-checks in an outage", parkedInOutage)
	}
	if a := <-timesOut; a.status != http.StatusNoContent || a.took < short-100*time.Millisecond {
		t.Fatalf("the parked long poll answered %d %s after %v; want 204 at its %v timeout", a.status, a.code, a.took, short)
	}

	if err := pg.run("start"); err != nil {
		t.Fatal(err)
	}
	var pushed []pushResult
	waitFor(t, 15*time.Second, "a push once the database is back", func() bool {
		status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{
			{"queue": q, "transactionId": "after-the-outage", "payload": 1}}}, &pushed)
		return status == http.StatusCreated && pushed[0].Status == "queued"
	})
	pushedAt := time.Now()
	select {
	case a := <-getsMessage:
		if a.status != http.StatusOK || len(a.body.Messages) != 1 || a.body.Messages[0].TransactionID != "after-the-outage" {
			t.Fatalf("the long poll parked through the outage answered %d %s %+v; want the message pushed after it", a.status, a.code, a.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the long poll parked through the outage was still waiting %v after the push", time.Since(pushedAt))
	}
}
