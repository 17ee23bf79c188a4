package api

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/internal/engine"
)

// privatePG is a PostgreSQL cluster of the test's own (scripts/pg.sh on
// another port and directory), so the test can stop and start it.
type privatePG struct {
	t   *testing.T
	env []string
	sh  string
}

func startPrivatePG(t *testing.T) *privatePG {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	sh, err := filepath.Abs("../../../scripts/pg.sh")
	if err != nil {
		t.Fatal(err)
	}
	// Under /tmp: as root the cluster runs as the postgres user, which must reach it.
	dir := fmt.Sprintf("/tmp/lanes-fault-pg-%d-%d", port, os.Getpid())
	pg := &privatePG{t: t, sh: sh, env: append(os.Environ(),
		fmt.Sprintf("LANES_PG_PORT=%d", port), "LANES_PG_DIR="+dir, "LANES_PG_FAST=1")}
	t.Cleanup(func() {
		_ = pg.run("stop")
		_ = os.RemoveAll(dir)
	})
	if err := pg.run("start"); err != nil {
		t.Fatalf("start private PostgreSQL: %v", err)
	}
	return pg
}

func (pg *privatePG) run(action string) error {
	cmd := exec.Command("bash", pg.sh, action)
	cmd.Env = pg.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg.sh %s: %w: %s", action, err, out)
	}
	return nil
}

func (pg *privatePG) url() string {
	cmd := exec.Command("bash", pg.sh, "url")
	cmd.Env = pg.env
	out, err := cmd.Output()
	if err != nil {
		pg.t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// urlWithSchema applies the schema, as a broker's boot does, and returns url().
func (pg *privatePG) urlWithSchema() string {
	dsn := pg.url()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		pg.t.Fatal(err)
	}
	defer pool.Close()
	if err := engine.ApplySchema(context.Background(), pool); err != nil {
		pg.t.Fatal(err)
	}
	return dsn
}

func TestPostgresOutageSpoolsPushesAndDrainsExactlyOnceInOrder(t *testing.T) {
	pg := startPrivatePG(t)
	dsn := pg.urlWithSchema()
	b := newBrokerWith(t, dsn, Options{PushTimeout: 3 * time.Second}, t.TempDir())
	b.runDrain(t)

	const queue = "outage"
	partitions := []string{"p0", "p1", "p2", "p3"}
	var stop atomic.Bool
	var mu sync.Mutex
	pushed := map[string][]string{} // partition → transaction ids in push order
	answered := map[string]string{} // transaction id → message id of the 201 answer
	statuses := map[string]int{}
	var wg sync.WaitGroup
	for _, p := range partitions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				txn := fmt.Sprintf("%s-%05d", p, i)
				o := pushOne(t, b.testBroker, queue, p, txn)
				mu.Lock()
				if o.status == http.StatusCreated {
					statuses[o.itemStatus]++
					if o.itemStatus == "queued" || o.itemStatus == "buffered" {
						pushed[p] = append(pushed[p], txn)
						answered[txn] = o.messageID
					}
				} else {
					statuses[fmt.Sprintf("http %d %s", o.status, o.code)]++
				}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
	count := func(s string) int { mu.Lock(); defer mu.Unlock(); return statuses[s] }

	waitFor(t, 10*time.Second, "pushes before the outage", func() bool { return count("queued") >= 100 })
	if err := pg.run("stop"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "buffered pushes during the outage", func() bool { return count("buffered") >= 100 })
	if status, _ := b.call(t, "GET", "/health", nil, nil); status != http.StatusServiceUnavailable {
		t.Errorf("/health during the outage answered %d, want 503", status)
	}
	var buffers struct {
		Pending   int  `json:"pending"`
		Failed    int  `json:"failed"`
		DBHealthy bool `json:"dbHealthy"`
	}
	if status, _ := b.call(t, "GET", "/api/v1/status/buffers", nil, &buffers); status != 200 || buffers.Pending == 0 || buffers.DBHealthy {
		t.Errorf("buffers during the outage: %d %+v", status, buffers)
	}
	if err := pg.run("start"); err != nil {
		t.Fatal(err)
	}
	queuedBefore := count("queued")
	waitFor(t, 90*time.Second, "pushes stored directly again after the restart", func() bool { return count("queued") >= queuedBefore+100 })
	stop.Store(true)
	wg.Wait()
	waitFor(t, 90*time.Second, "the spool to drain", func() bool { return b.Spool.Pending() == 0 })
	if status, _ := b.call(t, "GET", "/api/v1/status/buffers", nil, &buffers); status != 200 || buffers.Pending != 0 || buffers.Failed != 0 || !buffers.DBHealthy {
		t.Errorf("buffers after the drain: %d %+v", status, buffers)
	}

	total := 0
	for _, p := range partitions {
		type storedMessage struct{ TransactionID, MessageID string }
		rows, _ := b.Pool.Query(context.Background(), `SELECT t.transaction_id, t.message_id::text FROM lanes.txns t
			JOIN lanes.partitions p ON p.id = t.partition_id JOIN lanes.queues q ON q.id = p.queue_id
			WHERE q.name = $1 AND p.name = $2 ORDER BY t.message_offset`, queue, p)
		// Collected before any check: failing with the rows open would leave
		// the pool's Close in the cleanup waiting for them.
		messages, err := pgx.CollectRows(rows, pgx.RowToStructByPos[storedMessage])
		if err != nil {
			t.Fatal(err)
		}
		var stored []string
		for _, m := range messages {
			stored = append(stored, m.TransactionID)
			// Buffered or not, the message keeps the id its answer gave.
			if answered[m.TransactionID] != m.MessageID {
				t.Fatalf("%s was answered with message id %s and stored as %s", m.TransactionID, answered[m.TransactionID], m.MessageID)
			}
		}
		want := pushed[p]
		if len(stored) != len(want) {
			t.Fatalf("partition %s: stored %d, acknowledged %d (lost or duplicated)", p, len(stored), len(want))
		}
		for i := range want {
			if stored[i] != want[i] {
				t.Fatalf("partition %s offset %d: stored %s, pushed %s (order lost)", p, i, stored[i], want[i])
			}
		}
		total += len(stored)
	}
	t.Logf("outage load: %d pushes over %d partitions; verdicts %v; stored exactly once in order: %d; lost: 0",
		total, len(partitions), statuses, total)
	for s := range statuses {
		if s != "queued" && s != "buffered" {
			t.Errorf("unexpected verdicts during the outage: %v", statuses)
		}
	}
}
