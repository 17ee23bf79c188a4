package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lanesmq/lanes/server/internal/testdb"
)

// listenQuery is what the broker's notification listener sends on each of its connections.
const listenQuery = "LISTEN lanes_push"

// crash stops the cluster as a crash would: SIGQUIT to the postmaster is
// pg_ctl's immediate mode, in which no process writes anything more, so WAL
// not yet written (commits that did not wait for the flush) is gone and the
// next start runs crash recovery.
func (c *privateCluster) crash(t *testing.T) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(c.dir, "data", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0]))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil || strings.Contains(string(status), "State:\tZ") {
			return
		}
	}
	t.Fatalf("postmaster %d did not exit after SIGQUIT", pid)
}

// TestAPostgresCrashLosesNoStoredMessage crashes PostgreSQL while producers
// push and consumers pop and ack, starts it again, and checks that every
// message the broker answered queued or buffered is delivered afterwards or
// was before: acks commit without waiting for the WAL flush, so a crash may
// undo the last of them, and then their messages come again (at-least-once),
// but a push is answered only once it is durable (or spooled).
func TestAPostgresCrashLosesNoStoredMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and crashes a PostgreSQL cluster of its own")
	}
	pg := newPrivateCluster(t, false) // durable: a push is answered after its flush
	if err := pg.run("start"); err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, pg.url(), freePort(t), t.TempDir(), "LANES_PUSH_TIMEOUT_MS=2000", "LANES_LOG_LEVEL=warn")
	b.waitHealth(t, http.StatusOK, 30*time.Second)

	const queue, group = "pgcrash", "workers"
	var mu sync.Mutex
	stored := map[string]bool{}   // answered queued or buffered
	delivered := map[string]int{} // deliveries by transaction id
	acked, buffered := 0, 0
	stop := make(chan struct{})
	var producers, consumers sync.WaitGroup
	for p := 0; p < 2; p++ {
		producers.Add(1)
		go func() {
			defer producers.Done()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				items := make([]map[string]any, 10)
				for i := range items {
					items[i] = map[string]any{"queue": queue, "partition": fmt.Sprintf("p%d", (seq+i)%4),
						"transactionId": fmt.Sprintf("w%d-%d-%d", p, seq, i), "payload": seq}
				}
				var res []struct {
					TransactionID string `json:"transaction_id"`
					Status        string `json:"status"`
				}
				if status, err := b.do("POST", "/api/v1/push", map[string]any{"items": items}, &res); err != nil || status != http.StatusCreated {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				mu.Lock()
				for _, r := range res {
					if r.Status == "queued" || r.Status == "buffered" {
						stored[r.TransactionID] = true
					}
					if r.Status == "buffered" {
						buffered++
					}
				}
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	popPath := "/api/v1/pop/queue/" + queue + "?batch=20&wait=true&timeout=500&leaseSeconds=2&consumerGroup=" + group + "&subscriptionMode=all"
	consume := func() {
		var p popped
		status, err := b.do("GET", popPath, nil, &p)
		if err != nil || status != http.StatusOK {
			if status != http.StatusNoContent {
				time.Sleep(50 * time.Millisecond) // the database is down
			}
			return
		}
		acks := make([]map[string]any, len(p.Messages))
		mu.Lock()
		for i, m := range p.Messages {
			delivered[m.TransactionID]++
			acks[i] = map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": p.LeaseID, "status": "completed"}
		}
		mu.Unlock()
		var results []struct {
			Success bool `json:"success"`
		}
		if status, err := b.do("POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks, "consumerGroup": group}, &results); err == nil && status == http.StatusOK {
			mu.Lock()
			for _, r := range results {
				if r.Success {
					acked++
				}
			}
			mu.Unlock()
		}
	}
	for c := 0; c < 2; c++ {
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				consume()
			}
		}()
	}

	time.Sleep(2 * time.Second)
	mu.Lock()
	ackedBeforeCrash := acked
	mu.Unlock()
	if ackedBeforeCrash == 0 {
		t.Fatalf("nothing acked before the crash\n%s", b.logs.String())
	}
	pg.crash(t)
	time.Sleep(time.Second) // pushes spool, pops and acks fail meanwhile
	if err := pg.run("start"); err != nil {
		t.Fatalf("after the crash: %v", err)
	}
	b.waitHealth(t, http.StatusOK, 30*time.Second)
	time.Sleep(time.Second)
	close(stop)
	producers.Wait()
	consumers.Wait()

	// Drain: the spool replays, expired leases redeliver.
	missing := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for id := range stored {
			if delivered[id] == 0 {
				out = append(out, id)
			}
		}
		return out
	}
	for deadline := time.Now().Add(60 * time.Second); len(missing()) > 0 && time.Now().Before(deadline); {
		consume()
	}
	if m := missing(); len(m) > 0 {
		t.Fatalf("%d of %d stored messages never delivered after the crash, e.g. %v\n%s", len(m), len(stored), m[:min(5, len(m))], b.logs.String())
	}
	redelivered := 0
	for _, n := range delivered {
		if n > 1 {
			redelivered++
		}
	}
	t.Logf("%d messages stored (%d of them spooled while the database was down), %d acked before the crash, %d acks in all; %d delivered more than once",
		len(stored), buffered, ackedBeforeCrash, acked, redelivered)
}

// TestAPostgresCrashThatUndoesAnAckRedeliversOnAQuietPartition acks a partition's only message,
// lets a pop find nothing more, and crashes PostgreSQL before the ack's commit (which does not
// wait for the flush) reaches the disk: the crash moves the cursor back, and no new write comes
// to the partition. The message must come again once its lease expires. The broker's cached pop
// plan had walked its claim floor past the partition's last write on the pop after the ack, so
// every wildcard pop skipped the partition until something was pushed to it again (the fault
// soak, tools/soak, found it).
func TestAPostgresCrashThatUndoesAnAckRedeliversOnAQuietPartition(t *testing.T) {
	crashUndoingAnAckOnAQuietPartition(t, false)
}

// TestAPostgresCrashUnseenByTheListenerRedeliversOnAQuietPartition is that crash on a database
// host that dies without closing the listener's connection (power loss, a network partition, a
// failover behind the same address): the pool's new connections reach the restarted server,
// while the listener hears nothing and TCP keepalive gives up on its connection only minutes
// later (never here, where a proxy keeps it open). The pool's first new connection meets a
// server started later than the one before (pg_postmaster_start_time), and the broker forgets its
// cached pop plans at once, as on a dropped listener connection: the message comes again at the
// first pop after the restart, not after the listener's check (up to three check intervals; 9.6 s
// measured with the default 5 s check before the pool's connections told).
func TestAPostgresCrashUnseenByTheListenerRedeliversOnAQuietPartition(t *testing.T) {
	crashUndoingAnAckOnAQuietPartition(t, true)
}

// crashUndoingAnAckOnAQuietPartition runs the two tests above; silentListener puts the broker
// behind a proxy that makes the listener's connection silently dead before the crash.
func crashUndoingAnAckOnAQuietPartition(t *testing.T, silentListener bool) {
	if testing.Short() {
		t.Skip("starts and crashes a PostgreSQL cluster of its own")
	}
	ctx := context.Background()
	pg := newPrivateCluster(t, false)
	if err := pg.run("start"); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, pg.url())
	if err != nil {
		t.Fatal(err)
	}
	// The WAL writer flushes an asynchronous commit within 200 ms by default: held back, the
	// ack is sure to be lost in the crash.
	if _, err := admin.Exec(ctx, "ALTER SYSTEM SET wal_writer_delay = '10s'"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	_ = admin.Close(ctx)
	dsn, env := pg.url(), []string{"LANES_LOG_LEVEL=warn"}
	var proxy *testdb.Proxy
	if silentListener {
		proxy = testdb.NewProxy(t, fmt.Sprintf("127.0.0.1:%d", pg.port))
		dsn = fmt.Sprintf("postgres://postgres@%s/lanes?sslmode=disable", proxy.Addr())
	}
	b := startBroker(t, dsn, freePort(t), t.TempDir(), env...)
	b.waitHealth(t, http.StatusOK, 30*time.Second)

	const popPath = "/api/v1/pop/queue/quiet?wait=false&leaseSeconds=1"
	if status, err := b.do("POST", "/api/v1/push", map[string]any{"items": []map[string]any{
		{"queue": "quiet", "partition": "p1", "transactionId": "only", "payload": 1}}}, nil); err != nil || status != http.StatusCreated {
		t.Fatalf("push: %d %v", status, err)
	}
	var p popped
	if status, err := b.do("GET", popPath, nil, &p); err != nil || status != http.StatusOK || len(p.Messages) != 1 {
		t.Fatalf("pop: %d %+v %v", status, p, err)
	}
	m := p.Messages[0]
	var acks []struct {
		Success bool `json:"success"`
	}
	if status, err := b.do("POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": []map[string]any{
		{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": p.LeaseID, "status": "completed"}}}, &acks); err != nil || status != http.StatusOK || len(acks) != 1 || !acks[0].Success {
		t.Fatalf("ack: %d %+v %v", status, acks, err)
	}
	// A pop that finds nothing: its claim computes a floor past the partition's last write.
	if status, err := b.do("GET", popPath, nil, nil); err != nil || status != http.StatusNoContent {
		t.Fatalf("pop after the ack: %d %v", status, err)
	}

	if silentListener {
		for deadline := time.Now().Add(10 * time.Second); proxy.Sent(listenQuery) == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the broker's listener did not connect within 10 s")
			}
		}
		if n := proxy.Kill(listenQuery); n != 1 {
			t.Fatalf("killed %d listener connections, want 1", n)
		}
	}
	pg.crash(t)
	if err := pg.run("start"); err != nil {
		t.Fatalf("after the crash: %v", err)
	}
	b.waitHealth(t, http.StatusOK, 30*time.Second)
	conn, err := pgx.Connect(ctx, pg.url())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var committed int64
	if err := conn.QueryRow(ctx, `SELECT c.committed FROM lanes.consumers c WHERE c.partition_id = $1`, m.PartitionID).Scan(&committed); err != nil {
		t.Fatal(err)
	}
	if committed >= 0 {
		t.Fatalf("the crash did not undo the ack (cursor at %d): the test proves nothing; something flushed the WAL", committed)
	}

	back := time.Now()
	deadline := back.Add(10 * time.Second)
	for {
		var again popped
		status, err := b.do("GET", popPath, nil, &again)
		if err == nil && status == http.StatusOK && len(again.Messages) == 1 && again.Messages[0].TransactionID == "only" {
			took := time.Since(back)
			t.Logf("delivered again %v after the restarted database answered", took.Round(time.Millisecond))
			// The listener's check (default 5 s) would take seconds; the pool's new connection
			// tells at the first pop, which finds the message once its 1 s lease from before the
			// crash has run out.
			if silentListener && took > 2*time.Second {
				t.Fatalf("the message whose ack the crash undid came again only %v after the restarted database answered", took)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the message whose ack the crash undid was not delivered again within 10 s (last pop: %d %v)\n%s", status, err, b.logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
