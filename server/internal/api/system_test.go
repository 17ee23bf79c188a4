package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/spool"
)

func countStored(t *testing.T, b *testBroker, queue string) int {
	t.Helper()
	var n int
	if err := b.Pool.QueryRow(context.Background(), `SELECT count(*) FROM lanes.txns t JOIN lanes.partitions p ON p.id = t.partition_id
		JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $1`, queue).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMaintenanceModesAreSharedByEveryBroker(t *testing.T) {
	a := newBrokerWith(t, testDSN, Options{}, t.TempDir())
	b := newBrokerWith(t, testDSN, Options{}, t.TempDir())
	t.Cleanup(func() {
		a.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}, nil)
		a.call(t, "POST", "/api/v1/system/maintenance/pop", map[string]any{"enabled": false}, nil)
	})
	q := uniqueQueue(t)
	push := func(br *resilientBroker, txn string) string {
		var res []pushResult
		status, _ := br.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": txn, "transactionId": txn}}}, &res)
		if status != http.StatusCreated || len(res) != 1 {
			t.Fatalf("push %s: %d %+v", txn, status, res)
		}
		return res[0].Status
	}
	// Both brokers have read the switch (off) once, so B's view is cached.
	if push(a, "a0") != "queued" || push(b, "b0") != "queued" {
		t.Fatal("pushes before maintenance must be queued")
	}

	var m struct {
		Enabled bool `json:"enabled"`
	}
	if status, _ := a.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": true}, &m); status != 200 || !m.Enabled {
		t.Fatalf("enable push maintenance: %d %+v", status, m)
	}
	if got := push(a, "a1"); got != "buffered" {
		t.Fatalf("push during push maintenance on the switching broker: %s", got)
	}
	probes, probesQueued := 0, 0
	waitFor(t, 3*time.Second, "the other broker to see push maintenance", func() bool {
		probes++
		if push(b, fmt.Sprintf("b-probe-%d", probes)) == "buffered" {
			return true
		}
		probesQueued++ // B had not refreshed its view yet
		return false
	})
	if status, _ := b.call(t, "GET", "/api/v1/system/maintenance", nil, &m); status != 200 || !m.Enabled {
		t.Fatalf("GET on the other broker: %d %+v", status, m)
	}
	if n, err := a.Spool.DrainOnce(context.Background()); n != 0 || err != nil || a.Spool.Pending() != 1 {
		t.Fatalf("the drain must pause during push maintenance: drained %d pending %d %v", n, a.Spool.Pending(), err)
	}
	if got := countStored(t, a.testBroker, q); got != 2+probesQueued {
		t.Fatalf("stored %d during maintenance, want only the %d queued before", got, 2+probesQueued)
	}

	a.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}, &m)
	waitFor(t, 3*time.Second, "both spools to drain after maintenance", func() bool {
		_, _ = a.Spool.DrainOnce(context.Background())
		_, _ = b.Spool.DrainOnce(context.Background())
		return a.Spool.Pending() == 0 && b.Spool.Pending() == 0
	})
	stored := countStored(t, a.testBroker, q)
	if stored != 3+probes {
		t.Fatalf("after the drain %d stored; want a0, b0, a1 and %d probes", stored, probes)
	}

	if status, _ := a.call(t, "POST", "/api/v1/system/maintenance/pop", map[string]any{"enabled": true}, &m); status != 200 || !m.Enabled {
		t.Fatalf("enable pop maintenance: %d", status)
	}
	status, hdr := a.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=10", nil, nil)
	if status != http.StatusNoContent || hdr.Get("Content-Length") != "" {
		t.Fatalf("pop during pop maintenance: %d %v", status, hdr)
	}
	waitFor(t, 3*time.Second, "the other broker to see pop maintenance", func() bool {
		status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=10", nil, nil)
		return status == http.StatusNoContent
	})
	a.call(t, "POST", "/api/v1/system/maintenance/pop", map[string]any{"enabled": false}, nil)
	var popped popBody
	if status, _ := a.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=100&consumerGroup=after&subscriptionMode=all", nil, &popped); status != 200 || len(popped.Messages) != stored {
		t.Fatalf("pop after maintenance: %d, %d messages of %d", status, len(popped.Messages), stored)
	}

	resp, err := http.Get(a.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var metrics map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&metrics); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"uptime", "requests", "messages", "database", "spool", "maintenance"} {
		if metrics[k] == nil {
			t.Errorf("/metrics lacks %q: %v", k, metrics)
		}
	}
	if mem, _ := metrics["memory"].(map[string]any); mem["rss"] == nil || mem["rss"].(float64) < 1<<20 {
		t.Errorf("/metrics memory lacks a resident size: %v", metrics["memory"])
	}
	prom, err := http.Get(a.URL + "/metrics/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	defer prom.Body.Close()
	var sb strings.Builder
	_, _ = io.Copy(&sb, prom.Body)
	for _, want := range []string{"lanes_spool_pending 0", "lanes_spool_bytes 0", "lanes_maintenance_pop 0", `lanes_push_items_total{status="buffered"}`, "lanes_db_pool_max_connections 10", "lanes_http_request_duration_seconds_bucket", `lanes_ack_requests_total{path="one_trip"}`, `lanes_ack_requests_total{path="general"}`, "lanes_push_unprobed_conflicts_total 0", `lanes_push_commits_total{path="one_trip"}`, `lanes_push_commits_total{path="general"}`, `lanes_pop_transactions_total{path="one_trip"}`, `lanes_pop_transactions_total{path="general"}`, `lanes_transaction_commits_total{path="one_trip"}`, `lanes_transaction_commits_total{path="general"}`, "lanes_pop_hand_offs_total 0", "lanes_pop_hand_offs_continued_total 0", `lanes_db_session_switches_total{to="hot"}`, `lanes_db_session_switches_total{to="plain"}`} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("prometheus output lacks %q", want)
		}
	}
}

// lanes_push_items_total counts every item of a push by its own verdict,
// also when one push mixes them.
func TestPushItemsAreCountedByVerdict(t *testing.T) {
	b := newTestBroker(t)
	q := "verdicts-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	before := scrape(t, b.URL)
	b.push(t, q, "p", "a")
	items := []map[string]any{
		{"queue": q, "partition": "p", "transactionId": "b", "payload": 1},
		{"queue": q, "partition": "p", "transactionId": "a", "payload": 1},
		{"queue": q, "partition": "p", "transactionId": "c", "payload": 1},
	}
	var res []pushResult
	if status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": items}, &res); status != http.StatusCreated {
		t.Fatalf("push: %d %+v", status, res)
	}
	if len(res) != 3 || res[0].Status != "queued" || res[1].Status != "duplicate" || res[2].Status != "queued" {
		t.Fatalf("verdicts %+v, want queued, duplicate, queued", res)
	}
	after := scrape(t, b.URL)
	for status, want := range map[string]float64{"queued": 3, "duplicate": 1} {
		key := `lanes_push_items_total{status="` + status + `"}`
		if got := after[key] - before[key]; got != want {
			t.Errorf("%s rose by %v, want %v", key, got, want)
		}
	}
}

// An ack batch item without a required field is named by its index, and the
// whole batch is refused.
func TestAckBatchNamesTheItemMissingAField(t *testing.T) {
	b := newTestBroker(t)
	var e errorBody
	status, _ := b.call(t, "POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": []map[string]any{
		{"transactionId": "a", "partitionId": "00000000-0000-0000-0000-000000000001", "status": "completed"},
		{"transactionId": "b", "status": "completed"},
	}}, &e)
	if status != http.StatusBadRequest || e.Code != CodeValidation || e.Error != "bad body: acknowledgments[1].partitionId is required" {
		t.Fatalf("ack batch with item 1 lacking partitionId: %d %+v", status, e)
	}
	status, _ = b.call(t, "POST", "/api/v1/ack", map[string]any{"partitionId": "00000000-0000-0000-0000-000000000001"}, &e)
	if status != http.StatusBadRequest || e.Error != "bad body: transactionId is required" {
		t.Fatalf("ack lacking transactionId: %d %+v", status, e)
	}
}

// An idle broker must not answer its first push from a switch it read before
// another broker turned push maintenance on: that push would reach the
// database while an operator holds writes off it.
func TestAnIdleBrokerSeesPushMaintenanceTurnedOnElsewhere(t *testing.T) {
	a := newBrokerWith(t, testDSN, Options{}, t.TempDir())
	b := newBrokerWith(t, testDSN, Options{}, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go b.Server.RunMaintenanceRefresh(ctx)
	t.Cleanup(func() { a.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}, nil) })
	q := uniqueQueue(t)
	push := func(txn string) string {
		var res []pushResult
		if status, _ := b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": txn, "transactionId": txn}}}, &res); status != http.StatusCreated || len(res) != 1 {
			t.Fatalf("push %s: %d %+v", txn, status, res)
		}
		return res[0].Status
	}
	if got := push("before"); got != "queued" {
		t.Fatalf("push before maintenance: %s", got)
	}
	a.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": true}, nil)
	time.Sleep(2 * maintenanceRefresh) // b serves nothing meanwhile
	if got := push("first-after"); got != "buffered" {
		t.Fatalf("the idle broker's first push after maintenance went on: %s, want buffered", got)
	}
}

// Without a disk spool, push maintenance has nowhere to put a push: it is
// answered 503 maintenance with a Retry-After, and nothing reaches the database.
func TestPushMaintenanceWithoutASpoolStoresNothing(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{}, "")
	t.Cleanup(func() { b.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}, nil) })
	q := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": true}, nil)
	// Refused whole like a bundle with pushes, so clients wait it out and resend.
	var refusal errorBody
	status, hdr := b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": q, "payload": 1, "transactionId": "m"}}}, &refusal)
	if status != http.StatusServiceUnavailable || refusal.Code != CodeMaintenance || hdr.Get("Retry-After") != "5" {
		t.Fatalf("push under maintenance without a spool: %d %+v Retry-After %q", status, refusal, hdr.Get("Retry-After"))
	}
	var buffers map[string]any
	if b.call(t, "GET", "/api/v1/status/buffers", nil, &buffers); buffers["spoolAvailable"] != false {
		t.Fatalf("buffer status without a spool: %+v", buffers)
	}
	b.call(t, "POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}, nil)
	if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q, nil, nil); status != http.StatusNoContent {
		t.Fatalf("pop after maintenance: %d, want 204 (nothing stored)", status)
	}
}

// A broker without a disk spool still reports the database's health in
// status/buffers: false while PostgreSQL is stopped, true again once it is back.
func TestBufferStatusWithoutASpoolFollowsTheDatabase(t *testing.T) {
	pg := startPrivatePG(t)
	b := newBrokerWith(t, pg.urlWithSchema(), Options{}, "")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go b.Server.RunMaintenanceRefresh(ctx) // as main.go starts it once the schema is applied
	dbHealthy := func() bool {
		var buffers struct {
			SpoolAvailable bool `json:"spoolAvailable"`
			DBHealthy      bool `json:"dbHealthy"`
		}
		if status, _ := b.call(t, "GET", "/api/v1/status/buffers", nil, &buffers); status != http.StatusOK || buffers.SpoolAvailable {
			t.Fatalf("buffer status without a spool: %d %+v", status, buffers)
		}
		return buffers.DBHealthy
	}
	checkDBHealthyFollowsAnOutage(t, pg, dbHealthy)
}

// An idle broker with a spool (no push spooled, no drain run) reports the
// outage too: dbHealthy and lanes_spool_db_healthy follow the periodic read.
func TestBufferStatusWithASpoolFollowsTheDatabaseWhileIdle(t *testing.T) {
	pg := startPrivatePG(t)
	b := newBrokerWith(t, pg.urlWithSchema(), Options{}, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go b.Server.RunMaintenanceRefresh(ctx) // as main.go starts it once the schema is applied
	buffersDBHealthy := func() bool {
		var buffers struct {
			SpoolAvailable bool `json:"spoolAvailable"`
			DBHealthy      bool `json:"dbHealthy"`
		}
		if status, _ := b.call(t, "GET", "/api/v1/status/buffers", nil, &buffers); status != http.StatusOK || !buffers.SpoolAvailable {
			t.Fatalf("buffer status with a spool: %d %+v", status, buffers)
		}
		return buffers.DBHealthy
	}
	dbHealthy := func() bool {
		for {
			before := buffersDBHealthy()
			gauge := scrape(t, b.URL)["lanes_spool_db_healthy"]
			var metrics struct {
				Spool struct {
					DBHealthy bool `json:"dbHealthy"`
				} `json:"spool"`
			}
			status, _ := b.call(t, "GET", "/metrics", nil, &metrics)
			if buffersDBHealthy() != before {
				continue // the outage began or ended between the reads: read again
			}
			if (gauge == 1) != before {
				t.Fatalf("dbHealthy %v but lanes_spool_db_healthy %v", before, gauge)
			}
			if status != http.StatusOK || metrics.Spool.DBHealthy != before {
				t.Fatalf("dbHealthy %v but /metrics spool.dbHealthy %v (%d)", before, metrics.Spool.DBHealthy, status)
			}
			return before
		}
	}
	checkDBHealthyFollowsAnOutage(t, pg, dbHealthy)
}

// A pop parked before pop maintenance went on must not be handed the messages
// pushed during it: every pop answers 204 while pop maintenance is on.
func TestPopMaintenanceHoldsPopsThatWereAlreadyParked(t *testing.T) {
	b := newTestBroker(t)
	t.Cleanup(func() { b.call(t, "POST", "/api/v1/system/maintenance/pop", map[string]any{"enabled": false}, nil) })
	for _, query := range []string{"wait=true&timeout=1500", "wait=true&timeout=1500&autoAck=true"} {
		q := uniqueQueue(t)
		parked := make(chan int, 1)
		go func() {
			status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?"+query, nil, nil)
			parked <- status
		}()
		waitFor(t, 5*time.Second, "the pop to park", func() bool { return b.Engine.ParkedPops() == 1 })
		b.call(t, "POST", "/api/v1/system/maintenance/pop", map[string]any{"enabled": true}, nil)
		// A re-check that passed its maintenance test just before the switch may still claim
		// (late, on a loaded machine); the push waits until none is running.
		waitFor(t, 5*time.Second, "the pop's re-checks from before the switch to end", func() bool { return b.Engine.ClaimsRunning() == 0 })
		b.push(t, q, "p", "during")
		if status := <-parked; status != http.StatusNoContent {
			t.Fatalf("a pop (%s) parked before pop maintenance answered %d, want 204", query, status)
		}
		b.call(t, "POST", "/api/v1/system/maintenance/pop", map[string]any{"enabled": false}, nil)
		if p := b.pop(t, "/api/v1/pop/queue/"+q); len(p.Messages) != 1 {
			t.Fatalf("after pop maintenance: %+v, want the message pushed during it", p)
		}
	}
}

// Under pop maintenance a long poll parks until its timeout instead of
// answering at once (idle consumers would spin), and a push while it waits
// is not delivered; a pop that does not wait still answers at once.
func TestPopMaintenanceParksLongPollsUntilTheirTimeout(t *testing.T) {
	b := newTestBroker(t)
	t.Cleanup(func() { b.call(t, "POST", "/api/v1/system/maintenance/pop", map[string]any{"enabled": false}, nil) })
	q := uniqueQueue(t)
	if status, _ := b.call(t, "POST", "/api/v1/system/maintenance/pop", map[string]any{"enabled": true}, nil); status != 200 {
		t.Fatalf("enable pop maintenance: %d", status)
	}

	start := time.Now()
	if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=10", nil, nil); status != http.StatusNoContent || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("non-waiting pop under pop maintenance: %d after %v, want 204 at once", status, time.Since(start))
	}

	type answer struct {
		status  int
		elapsed time.Duration
	}
	done := make(chan answer, 1)
	start = time.Now()
	go func() {
		status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=10&wait=true&timeout=1000", nil, nil)
		done <- answer{status, time.Since(start)}
	}()
	waitFor(t, 900*time.Millisecond, "the long poll to park", func() bool { return b.Engine.ParkedPops() == 1 })
	b.push(t, q, "p", q+"-during")
	got := <-done
	if got.status != http.StatusNoContent || got.elapsed < 800*time.Millisecond || got.elapsed > 5*time.Second {
		t.Fatalf("long poll under pop maintenance: %d after %v, want 204 after about its 1 s timeout", got.status, got.elapsed)
	}

	b.call(t, "POST", "/api/v1/system/maintenance/pop", map[string]any{"enabled": false}, nil)
	var popped popBody
	if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=10", nil, &popped); status != http.StatusOK || len(popped.Messages) != 1 {
		t.Fatalf("pop after maintenance: %d with %d messages, want the one pushed during it", status, len(popped.Messages))
	}
}

// The switches' periodic read is the broker's sign that the database answers
// again: a spool drain backing off after failed replays starts with it rather
// than sleeping out its backoff.
func TestMaintenanceReadWakesASpoolDrainWaitingForTheDatabase(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	var eng *engine.Engine
	push := func(ctx context.Context, items []engine.PushItem) ([]engine.PushResult, error) {
		if down.Load() {
			return nil, errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
		}
		return eng.Push(ctx, items)
	}
	sp, err := spool.Open(spool.Options{Dir: t.TempDir(), Push: push, Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b := newBrokerWith(t, testDSN, Options{Spool: sp}, "")
	eng = b.Server.engine
	if err := sp.Append([]engine.PushItem{{Queue: "wake-drain", Partition: "p", TransactionID: "w1", Payload: json.RawMessage(`1`)}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sp.Run(ctx)
	go b.Server.RunMaintenanceRefresh(ctx)
	// The attempt at 1 s fails; the next waits 2 s, until 3 s.
	time.Sleep(1200 * time.Millisecond)
	down.Store(false)
	back := time.Now()
	for sp.Pending() > 0 && time.Since(back) < 3*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	if took := time.Since(back); sp.Pending() != 0 || took > time.Second {
		t.Fatalf("pending %d %v after the database answered; want the next switch read (every 0.5 s) to start the drain", sp.Pending(), took)
	}
	if n := countStored(t, b.testBroker, "wake-drain"); n != 1 {
		t.Fatalf("stored %d, want 1", n)
	}
}

// checkDBHealthyFollowsAnOutage stops and restarts pg and waits for dbHealthy
// to read false, then true again.
func checkDBHealthyFollowsAnOutage(t *testing.T, pg *privatePG, dbHealthy func() bool) {
	t.Helper()
	if !dbHealthy() {
		t.Fatal("dbHealthy is false with PostgreSQL up")
	}
	if err := pg.run("stop"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "dbHealthy false with PostgreSQL stopped", func() bool { return !dbHealthy() })
	if err := pg.run("start"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "dbHealthy true with PostgreSQL back", dbHealthy)
}
