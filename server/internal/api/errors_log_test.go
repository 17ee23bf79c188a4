package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/spool"
	"github.com/lanesmq/lanes/server/internal/testlog"
)

// capturedLogger is a text logger whose lines the test reads back.
func capturedLogger() (*slog.Logger, *testlog.Buffer) {
	out := &testlog.Buffer{}
	return slog.New(slog.NewTextHandler(out, nil)), out
}

// wantLines fails the test unless the log holds fragment exactly want times.
func wantLines(t *testing.T, out *testlog.Buffer, fragment string, want int, what string) {
	t.Helper()
	if n := strings.Count(out.String(), fragment); n != want {
		t.Errorf("want %d line(s) for %s, got %d:\n%s", want, what, n, out.String())
	}
}

// TestRequestsFailingForWantOfTheDatabaseLogOneLine: during an outage the
// first request answered database_unavailable logs an ERROR; the ones after
// it within the minute add no line, whatever their number.
func TestRequestsFailingForWantOfTheDatabaseLogOneLine(t *testing.T) {
	log, out := capturedLogger()
	b := newBrokerWith(t, "postgres://lanes@127.0.0.1:1/lanes?sslmode=disable&connect_timeout=1", Options{Logger: log}, "")
	for range 5 {
		var e errorBody
		if status, _ := b.call(t, "GET", "/api/v1/pop/queue/outage", nil, &e); status != http.StatusInternalServerError || e.Code != CodeDatabase {
			t.Fatalf("pop with the database down: %d %+v", status, e)
		}
	}
	wantLines(t, out, `msg="database unavailable"`, 1, "5 requests failing for want of the database")
}

// TestSpoolWritesFailingLogOneLine: while the spool is full every push it
// refuses is answered failed, but only the first one within the minute logs
// an ERROR, as for requests failing for want of the database.
func TestSpoolWritesFailingLogOneLine(t *testing.T) {
	log, out := capturedLogger()
	sp, err := spool.Open(spool.Options{Dir: t.TempDir(), MaxBytes: 200, Logger: log,
		Push: func(context.Context, []engine.PushItem) ([]engine.PushResult, error) {
			return nil, errors.New("this test runs no drain")
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sp.Close() })
	b := newBrokerWith(t, testDSN, Options{Logger: log, Spool: sp}, "")
	maintenance := func(on bool) {
		if status, _ := b.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": on}, nil); status != http.StatusOK {
			t.Fatalf("push maintenance %v: %d", on, status)
		}
	}
	maintenance(true)
	t.Cleanup(func() { maintenance(false) })
	push := func(txn string, want engine.PushStatus) {
		t.Helper()
		var results []engine.PushResult
		body := `{"items":[{"queue":"spool-full-log","transactionId":"` + txn + `","payload":{"n":1}}]}`
		if status, _ := b.call(t, "POST", "/api/v1/push", body, &results); status != http.StatusCreated || len(results) != 1 || results[0].Status != want {
			t.Fatalf("push %s: want 201 %s, got %d %+v", txn, want, status, results)
		}
	}
	push("fits", engine.PushBuffered)
	for i := range 5 {
		push(fmt.Sprint("full-", i), engine.PushFailed)
	}
	wantLines(t, out, `msg="spool write failed; push answered failed"`, 1, "5 pushes the full spool refused")
}

// TestLagRefreshFailingLogsAWarning: backlog refreshes that keep failing
// (the gauges then keep their last values) log one WARN, not nothing, so an
// operator learns why lanes_queue_lag_refresh_timestamp_seconds stopped.
func TestLagRefreshFailingLogsAWarning(t *testing.T) {
	log, out := capturedLogger()
	b := newBrokerWith(t, "postgres://lanes@127.0.0.1:1/lanes?sslmode=disable&connect_timeout=1", Options{Logger: log}, "")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	b.Server.RunLagCollector(ctx, 20*time.Millisecond, 10)
	wantLines(t, out, "level=WARN msg=\"lag refresh failed", 1, "the failing lag refreshes")
}

// TestRequestsPassingTheirDeadlineLogOneLine: requests answered
// database_timeout (a slow or locked database) log the first at once and then
// once a minute with the count, not one ERROR line each.
func TestRequestsPassingTheirDeadlineLogOneLine(t *testing.T) {
	log, out := capturedLogger()
	b := newBrokerWith(t, testDSN, Options{Logger: log, DBTimeout: 200 * time.Millisecond}, "")
	ack, unlock := holdConsumerRow(t, b, uniqueQueue(t))
	defer unlock()
	for range 3 {
		var e errorBody
		if status, _ := b.call(t, "POST", "/api/v1/ack", ack, &e); status != http.StatusInternalServerError || e.Code != CodeDatabaseTimeout {
			t.Fatalf("ack blocked past the deadline: %d %+v", status, e)
		}
	}
	wantLines(t, out, `msg="database work passed its deadline"`, 1, "3 requests past their deadline")
}

// TestDatabaseErrorsLogOneLine: requests PostgreSQL refuses with an error
// other than an outage (here every write of a read-only session) are each
// answered 500, but only the first within the minute logs an ERROR.
func TestDatabaseErrorsLogOneLine(t *testing.T) {
	log, out := capturedLogger()
	b := newBrokerWith(t, testDSN+"&default_transaction_read_only=on", Options{Logger: log}, "")
	for i := range 5 {
		var e errorBody
		body := map[string]any{"queue": fmt.Sprint(uniqueQueue(t), "-", i), "options": map[string]any{"leaseTime": 30}}
		if status, _ := b.call(t, "POST", "/api/v1/configure", body, &e); status != http.StatusInternalServerError || e.Code != CodeInternal {
			t.Fatalf("configure on a read-only session: %d %+v", status, e)
		}
	}
	wantLines(t, out, `msg="database error"`, 1, "5 requests refused by the database")
}

// TestFailingRequestsLogOneLine: requests that keep failing on the same
// fault (here a message whose transaction index entry points past the frames
// of its segment, which every read of it meets) are each answered 500, but
// only the first within the minute logs an ERROR.
func TestFailingRequestsLogOneLine(t *testing.T) {
	log, out := capturedLogger()
	b := newBrokerWith(t, testDSN, Options{Logger: log}, "")
	q := uniqueQueue(t)
	if status, _ := b.call(t, "POST", "/api/v1/push", pushItems(q, 1), nil); status != http.StatusCreated {
		t.Fatalf("push: %d", status)
	}
	var pid string
	if err := b.Pool.QueryRow(t.Context(), `WITH p AS (SELECT p.id FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $1),
			s AS (UPDATE lanes.segments SET end_offset = end_offset + 1 WHERE partition_id = (SELECT id FROM p)),
			t AS (UPDATE lanes.txns SET message_offset = message_offset + 1 WHERE partition_id = (SELECT id FROM p))
		SELECT id::text FROM p`, q).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		var e errorBody
		if status, _ := b.call(t, "GET", "/api/v1/messages/"+pid+"/t0", nil, &e); status != http.StatusInternalServerError || e.Code != CodeInternal {
			t.Fatalf("reading a message its segment does not hold: %d %+v", status, e)
		}
	}
	wantLines(t, out, `msg="request failed"`, 1, "5 failing requests")
}

// TestPushesSpooledForWantOfTheDatabaseLogOneLine: three outages within the
// minute, each spooling a push and each drained once the database is back,
// log one WARN for the spooled pushes, not one per push.
func TestPushesSpooledForWantOfTheDatabaseLogOneLine(t *testing.T) {
	log, out := capturedLogger()
	proxy, dsn := startDBProxy(t, testDSN)
	b := newBrokerWith(t, dsn, Options{Logger: log, PushTimeout: 2 * time.Second}, t.TempDir())
	b.runDrain(t)
	q := uniqueQueue(t)
	for i := range 3 {
		proxy.cut()
		var res []pushResult
		body := map[string]any{"items": []map[string]any{{"queue": q, "transactionId": fmt.Sprint("outage-", i), "payload": i}}}
		if status, _ := b.call(t, "POST", "/api/v1/push", body, &res); status != http.StatusCreated || len(res) != 1 || res[0].Status != "buffered" {
			t.Fatalf("push during outage %d: %d %+v", i, status, res)
		}
		proxy.restore()
		b.Spool.DatabaseAnswered()
		waitFor(t, 10*time.Second, "the spool to drain", func() bool { return b.Spool.Pending() == 0 })
	}
	wantLines(t, out, `msg="database unreachable; push`, 1, "3 pushes spooled for want of the database")
}

// holdPopAnswers scripts the next n queue pops of a run to have their answer
// held after the claim, so their client can leave before it is sent.
func holdPopAnswers(t *testing.T, b *resilientBroker, n int) http.Header {
	t.Helper()
	run := fmt.Sprintf("hold-%d", time.Now().UnixNano())
	if status, _ := b.call(t, "PUT", faultsPrefix+run, map[string]any{"rules": []map[string]any{{
		"method": "GET", "path": "/api/v1/pop/queue/*", "responses": []map[string]any{{"pass": true, "holdAnswerMs": 5000, "times": n}},
	}}}, nil); status != http.StatusNoContent {
		t.Fatalf("fault script: %d", status)
	}
	return http.Header{FaultsRunHeader: {run}}
}

// TestClientsLeavingPopsDoNotLogEachPop: claims given back because their
// client left are counted in lanes_pop_leases_given_back_total and logged at
// DEBUG only; autoAck pops whose client left log one WARN within the minute,
// with lanes_pop_auto_acked_undelivered_total counting every message.
func TestClientsLeavingPopsDoNotLogEachPop(t *testing.T) {
	log, out := capturedLogger()
	b := newBrokerWith(t, testDSN, Options{Logger: log, TestFaults: true}, "")
	q := uniqueQueue(t)
	pushThree(t, b.testBroker, q)
	leased := "/api/v1/pop/queue/" + q + "?batch=1&subscriptionMode=all&consumerGroup=leaver"
	header := holdPopAnswers(t, b, 2)
	for i := range 2 {
		popAndLeave(t, b.testBroker, leased, header, 300*time.Millisecond)
		// The next pop of the group finds the partition free once the claim is back.
		waitFor(t, 10*time.Second, "the claim given back", func() bool { return b.Server.metrics.LeasesGivenBack() == int64(i+1) })
	}
	autoAcked := "/api/v1/pop/queue/" + q + "?batch=1&subscriptionMode=all&autoAck=true&consumerGroup=auto-leaver"
	header = holdPopAnswers(t, b, 3)
	for range 3 {
		popAndLeave(t, b.testBroker, autoAcked, header, 300*time.Millisecond)
	}
	waitFor(t, 10*time.Second, "the undelivered messages counted", func() bool { return b.Server.metrics.AutoAckedUndelivered() == 3 })
	wantLines(t, out, "claim given back", 0, "claims given back at INFO or above")
	wantLines(t, out, `level=WARN msg="client left during an autoAck pop`, 1, "3 autoAck pops whose client left")
}

// TestClaimsThatCannotBeGivenBackLogOneLine: a client leaving a pop while
// the database is down leaves a claim that cannot be given back (it frees at
// lease expiry); three of them within the minute log one WARN.
func TestClaimsThatCannotBeGivenBackLogOneLine(t *testing.T) {
	log, out := capturedLogger()
	proxy, dsn := startDBProxy(t, testDSN)
	const dbTimeout = time.Second
	b := newBrokerWith(t, dsn, Options{Logger: log, TestFaults: true, DBTimeout: dbTimeout}, "")
	q := uniqueQueue(t)
	pushThree(t, b.testBroker, q)
	header := holdPopAnswers(t, b, 3)
	var giveBackOver time.Time
	for i := range 3 {
		// A group of its own each time: the claim left behind keeps its partition leased.
		popPath := fmt.Sprintf("/api/v1/pop/queue/%s?batch=1&subscriptionMode=all&consumerGroup=stranded-%d", q, i)
		// The last give-back keeps trying to reach the database until its
		// deadline: restoring it sooner let that give-back succeed.
		time.Sleep(time.Until(giveBackOver))
		proxy.restore()
		waitFor(t, 10*time.Second, "the broker to reach the database again", func() bool {
			status, _ := b.call(t, "GET", "/api/v1/resources/queues/"+q, nil, nil)
			return status == http.StatusOK
		})
		// Cut the database once the claim has committed, before the client
		// leaves: a timer for it fired late on a loaded machine, after the
		// claim was given back.
		claims := popTransactions(b.Engine)
		cutAt := make(chan time.Time, 1)
		go func() {
			for deadline := time.Now().Add(5 * time.Second); popTransactions(b.Engine) == claims && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			proxy.cut()
			cutAt <- time.Now()
		}()
		left := popAndLeave(t, b.testBroker, popPath, header, time.Second)
		if at := <-cutAt; at.After(left) {
			t.Fatalf("pop %d: the database was cut %v after the client left; want the claim to have committed first", i, at.Sub(left))
		}
		giveBackOver = left.Add(dbTimeout + 300*time.Millisecond)
	}
	waitFor(t, 10*time.Second, "the give-backs to fail", func() bool {
		return strings.Contains(out.String(), "(it frees at lease expiry)")
	})
	time.Sleep(500 * time.Millisecond) // the later give-backs fail too
	wantLines(t, out, "(it frees at lease expiry)", 1, "3 claims that could not be given back")
	if n := b.Server.metrics.LeasesGivenBack(); n != 0 {
		t.Fatalf("lanes_pop_leases_given_back_total = %d with the database down, want 0", n)
	}
}

// TestPushSpooledPastItsDeadlineSaysSo: a push whose commit waits on a locked
// partition past LANES_PUSH_TIMEOUT_MS goes to the spool while the database
// answers every other query. Its WARN used to say "database unreachable",
// which sent an operator to check connectivity; it names the deadline now.
func TestPushSpooledPastItsDeadlineSaysSo(t *testing.T) {
	log, out := capturedLogger()
	b := newBrokerWith(t, testDSN, Options{Logger: log, PushTimeout: 300 * time.Millisecond}, t.TempDir())
	q := uniqueQueue(t)
	if o := pushOne(t, b.testBroker, q, "p", "before"); o.itemStatus != "queued" {
		t.Fatalf("push before the lock: %+v", o)
	}
	release := lockPartition(t, b.testBroker, q, "p")
	defer release()
	if o := pushOne(t, b.testBroker, q, "p", "behind-the-lock"); o.itemStatus != "buffered" {
		t.Fatalf("push behind the lock: %+v, want buffered after the push timeout", o)
	}
	if strings.Contains(out.String(), `msg="database unreachable`) {
		t.Errorf("a push past its deadline on a reachable database logged it unreachable:\n%s", out.String())
	}
	wantLines(t, out, `level=WARN msg="push passed its deadline (LANES_PUSH_TIMEOUT_MS)`, 1, "the push spooled past its deadline")
}

// popTransactions counts the pop transactions e has committed.
func popTransactions(e *engine.Engine) uint64 {
	st := e.HotPathStats()
	return st.PopsOneTrip + st.PopsGeneral
}
