package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/metrics"
)

func pushItems(queue string, n int) map[string]any {
	items := make([]map[string]any, n)
	for i := range items {
		items[i] = map[string]any{"queue": queue, "partition": "p", "transactionId": fmt.Sprintf("t%d", i), "payload": i}
	}
	return map[string]any{"items": items}
}

func TestLimitsAnswer400NamingTheLimit(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{Limits: Limits{MaxPushItems: 3, MaxAckItems: 2, MaxTxnOperations: 4, MaxPopBatch: 5}}, "")
	q := uniqueQueue(t)
	expect := func(what string, status int, e errorBody, want string) {
		t.Helper()
		if status != http.StatusBadRequest || e.Code != CodeLimitExceeded || !strings.Contains(e.Error, want) {
			t.Errorf("%s: %d %+v, want 400 limit_exceeded mentioning %q", what, status, e, want)
		}
	}
	var e errorBody
	status, _ := b.call(t, "POST", "/api/v1/push", pushItems(q, 4), &e)
	expect("push of 4 items", status, e, "limit of 3")
	if status, _ := b.call(t, "POST", "/api/v1/push", pushItems(q, 3), nil); status != http.StatusCreated {
		t.Fatalf("push at the limit: %d", status)
	}

	acks := make([]map[string]any, 3)
	for i := range acks {
		acks[i] = map[string]any{"transactionId": fmt.Sprintf("t%d", i), "partitionId": "00000000-0000-0000-0000-000000000000"}
	}
	e = errorBody{}
	status, _ = b.call(t, "POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks}, &e)
	expect("ack batch of 3", status, e, "limit of 2")
	if status, _ := b.call(t, "POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks[:2]}, nil); status != http.StatusOK {
		t.Fatalf("ack batch at the limit: %d", status)
	}

	// One push operation carrying 3 items plus 2 acks is 5 operations.
	txItems := []map[string]any{{"queue": q, "payload": 1}, {"queue": q, "payload": 2}, {"queue": q, "payload": 3}}
	ops := []map[string]any{{"type": "push", "items": txItems},
		{"type": "ack", "transactionId": "t0", "partitionId": "00000000-0000-0000-0000-000000000000"},
		{"type": "ack", "transactionId": "t1", "partitionId": "00000000-0000-0000-0000-000000000000"}}
	e = errorBody{}
	status, _ = b.call(t, "POST", "/api/v1/transaction", map[string]any{"operations": ops}, &e)
	expect("transaction of 5 operations", status, e, "limit of 4")
	if status, _ := b.call(t, "POST", "/api/v1/transaction", map[string]any{"operations": ops[:1]}, nil); status != http.StatusOK {
		t.Fatalf("transaction under the limit: %d", status)
	}

	for _, path := range []string{"/api/v1/pop/queue/" + q, "/api/v1/pop/queue/" + q + "/partition/p", "/api/v1/pop?namespace=x"} {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		e = errorBody{}
		status, _ = b.call(t, "GET", path+sep+"batch=6", nil, &e)
		expect("pop batch 6 on "+path, status, e, "limit of 5")
		if status, _ := b.call(t, "GET", path+sep+"batch=5", nil, nil); status != http.StatusOK && status != http.StatusNoContent {
			t.Errorf("pop batch at the limit on %s: %d", path, status)
		}
	}
	// Past the spec's own bound the validator answers, also naming it.
	e = errorBody{}
	status, _ = b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=10001", nil, &e)
	if status != http.StatusBadRequest || !strings.Contains(e.Error, "10000") {
		t.Errorf("pop batch past the spec bound: %d %+v", status, e)
	}
}

func TestDefaultLimitsFollowTheSpecBound(t *testing.T) {
	l := Limits{MaxPopBatch: 50000}.withDefaults()
	if l.MaxPopBatch != 10000 || l.MaxPushItems != DefaultMaxPushItems || l.MaxAckItems != DefaultMaxAckItems || l.MaxTxnOperations != DefaultMaxTxnOperations {
		t.Fatalf("defaults: %+v", l)
	}
}

// holdConsumerRow pops one message and then locks its cursor row from another
// connection, so an ack of it waits inside PostgreSQL until the lock goes.
func holdConsumerRow(t *testing.T, b *resilientBroker, q string) (ackBody map[string]any, unlock func()) {
	t.Helper()
	if status, _ := b.call(t, "POST", "/api/v1/push", pushItems(q, 1), nil); status != http.StatusCreated {
		t.Fatal("push")
	}
	var p popBody
	if status, _ := b.call(t, "GET", "/api/v1/pop/queue/"+q, nil, &p); status != 200 || len(p.Messages) != 1 {
		t.Fatalf("pop: %d %+v", status, p)
	}
	ctx := context.Background()
	tx, err := b.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM lanes.consumers WHERE partition_id = $1 FOR UPDATE`, p.Messages[0].PartitionID); err != nil {
		t.Fatal(err)
	}
	return map[string]any{"transactionId": p.Messages[0].TransactionID, "partitionId": p.Messages[0].PartitionID, "leaseId": p.LeaseID},
		func() { _ = tx.Rollback(ctx) }
}

func TestRequestDeadlineBoundsDatabaseWork(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{DBTimeout: 500 * time.Millisecond}, "")
	ack, unlock := holdConsumerRow(t, b, uniqueQueue(t))
	defer unlock()
	start := time.Now()
	var e errorBody
	status, _ := b.call(t, "POST", "/api/v1/ack", ack, &e)
	took := time.Since(start)
	if status != http.StatusInternalServerError || e.Code != CodeDatabaseTimeout {
		t.Fatalf("ack blocked past the deadline: %d %+v", status, e)
	}
	if took > 10*time.Second {
		t.Fatalf("ack answered after %v; the deadline is 500ms", took)
	}
	t.Logf("blocked ack answered %d %s after %v (deadline 500ms)", status, e.Code, took.Round(time.Millisecond))
}

// wait=true&timeout=0 answers at once like wait=false: the engine read a zero
// timeout as its 30 s default while the request deadline allowed the database
// budget alone, so the pop parked past its deadline and answered 500.
func TestPopWithWaitAndTimeoutZeroAnswersAtOnce(t *testing.T) {
	b := newBrokerWith(t, testDSN, Options{DBTimeout: 500 * time.Millisecond}, "")
	q := uniqueQueue(t)
	for _, path := range []string{
		"/api/v1/pop/queue/" + q + "?wait=true&timeout=0",
		"/api/v1/pop/queue/" + q + "/partition/Default?wait=true&timeout=0",
		"/api/v1/pop?namespace=" + q + "&wait=true&timeout=0",
	} {
		start := time.Now()
		var e errorBody
		status, _ := b.call(t, "GET", path, nil, &e)
		if took := time.Since(start); status != http.StatusNoContent || took > 400*time.Millisecond {
			t.Fatalf("%s: %d %+v after %v; want a prompt 204", path, status, e, took)
		}
	}
}

func TestStatementTimeoutBoundsDatabaseWork(t *testing.T) {
	// pgx sends unknown URL parameters as run-time parameters, as main.go does
	// with RuntimeParams["statement_timeout"].
	b := newBrokerWith(t, testDSN+"&statement_timeout=500", Options{}, "")
	var setting string
	if err := b.Pool.QueryRow(context.Background(), "SHOW statement_timeout").Scan(&setting); err != nil || setting != "500ms" {
		t.Fatalf("statement_timeout on the pool: %q %v", setting, err)
	}
	ack, unlock := holdConsumerRow(t, b, uniqueQueue(t))
	defer unlock()
	start := time.Now()
	var e errorBody
	status, _ := b.call(t, "POST", "/api/v1/ack", ack, &e)
	if status != http.StatusInternalServerError || e.Code != CodeDatabaseTimeout {
		t.Fatalf("ack blocked past statement_timeout: %d %+v", status, e)
	}
	t.Logf("blocked ack answered %d %s after %v (statement_timeout 500ms)", status, e.Code, time.Since(start).Round(time.Millisecond))
}

// scrape reads /metrics/prometheus into "name{labels}" → value. A sample's
// value follows its last space, so label values holding braces (the route
// /api/v1/pop/queue/{queue}) are read too.
func scrape(t testing.TB, url string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for line := range strings.SplitSeq(getText(t, url+"/metrics/prometheus"), "\n") {
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// getText is the body of a GET of url.
func getText(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func TestMessageRetentionAndLagMetrics(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), testDSN)
	if err != nil {
		t.Fatal(err)
	}
	reg := metrics.New()
	eng := engine.New(pool, engine.Config{OnRetentionPass: RetentionObserver(reg, slog.Default())})
	srv := NewServer(eng, Options{Version: "test", MaxBodyBytes: 1 << 20, Metrics: reg})
	h, err := srv.Handler()
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(func() { hs.Close(); eng.Close(); pool.Close() })
	b := &testBroker{URL: hs.URL, Engine: eng, Pool: pool}

	q, group := uniqueQueue(t), "metrics-g"
	if status, _ := b.call(t, "POST", "/api/v1/push", pushItems(q, 5), nil); status != http.StatusCreated {
		t.Fatal("push")
	}
	var p popBody
	b.call(t, "GET", "/api/v1/pop/queue/"+q+"?batch=5&consumerGroup="+group+"&subscriptionMode=all", nil, &p)
	if len(p.Messages) != 5 {
		t.Fatalf("pop: %+v", p)
	}
	acks := make([]map[string]any, 5)
	for i, m := range p.Messages {
		acks[i] = map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": p.LeaseID, "status": "completed"}
	}
	acks[4]["status"] = "dlq"
	if status, _ := b.call(t, "POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks, "consumerGroup": group}, nil); status != 200 {
		t.Fatal("ack batch")
	}
	// Seven more wait behind the group's cursor.
	more := pushItems(q, 7)
	for i, it := range more["items"].([]map[string]any) {
		it["transactionId"] = fmt.Sprintf("more-%d", i)
	}
	b.call(t, "POST", "/api/v1/push", more, nil)
	if err := srv.RefreshLag(context.Background(), 1000); err != nil {
		t.Fatal(err)
	}
	got := scrape(t, b.URL)
	want := map[string]float64{
		`lanes_messages_pushed_total{source="push"}`:                             12,
		"lanes_messages_popped_total":                                            5,
		"lanes_messages_acked_total":                                             5,
		"lanes_messages_dead_lettered_total":                                     1,
		fmt.Sprintf(`lanes_queue_lag_messages{group="%s",queue="%s"}`, group, q): 7,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if got["lanes_queue_lag_refresh_timestamp_seconds"] == 0 {
		t.Error("lag refresh timestamp not set")
	}

	// Retention: a queue whose messages expire after a second loses its segments.
	rq := uniqueQueue(t)
	b.call(t, "POST", "/api/v1/configure", map[string]any{"queue": rq, "options": map[string]any{"maxWaitTimeSeconds": 1, "dedupWindowSeconds": 0}}, nil)
	for i := 0; i < 3; i++ {
		b.call(t, "POST", "/api/v1/push", map[string]any{"items": []map[string]any{{"queue": rq, "payload": i}}}, nil)
	}
	time.Sleep(1100 * time.Millisecond)
	eng.StartRetention(200 * time.Millisecond)
	waitFor(t, 20*time.Second, "retention to delete the expired segments", func() bool {
		return scrape(t, b.URL)["lanes_retention_segments_deleted_total"] >= 3
	})
	got = scrape(t, b.URL)
	if got["lanes_retention_passes_total"] < 1 || got["lanes_retention_last_pass_timestamp_seconds"] == 0 || got["lanes_retention_messages_deleted_total"] < 3 {
		t.Errorf("retention progress: passes %v, last %v, messages %v", got["lanes_retention_passes_total"],
			got["lanes_retention_last_pass_timestamp_seconds"], got["lanes_retention_messages_deleted_total"])
	}

	var js struct {
		Messages  map[string]float64 `json:"messages"`
		Retention struct {
			SegmentsDeleted int64 `json:"segmentsDeleted"`
			Passes          int64 `json:"passes"`
		} `json:"retention"`
		Lag struct {
			Series        int   `json:"series"`
			TotalMessages int64 `json:"totalMessages"`
			Top           []struct {
				Queue    string `json:"queue"`
				Messages int64  `json:"messages"`
			} `json:"top"`
		} `json:"lag"`
	}
	if status, _ := b.call(t, "GET", "/metrics", nil, &js); status != 200 {
		t.Fatal("json metrics")
	}
	if js.Messages["pushed"] != 15 || js.Messages["popped"] != 5 || js.Messages["acked"] != 5 || js.Messages["deadLettered"] != 1 ||
		js.Retention.SegmentsDeleted < 3 || js.Lag.Series < 1 || js.Lag.TotalMessages < 7 {
		t.Errorf("JSON metrics: %+v", js)
	}
}
