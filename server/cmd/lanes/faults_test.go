package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lanesmq/lanes/server/brokerproc"
	"github.com/lanesmq/lanes/server/internal/brokertest"
	"github.com/lanesmq/lanes/server/internal/testdb"
	"github.com/lanesmq/lanes/server/internal/testlog"
)

// newDatabase creates a private database for one test, dropped when it ends.
func newDatabase(t *testing.T) string {
	t.Helper()
	dsn, cleanup, err := testdb.NewDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	return dsn
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := brokerproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// broker is one running broker process and everything it has written.
type broker struct {
	*brokerproc.Process
	logs *testlog.Buffer
}

// startBroker starts the broker on port; it is killed when the test ends.
func startBroker(t *testing.T, dsn string, port int, spoolDir string, extraEnv ...string) *broker {
	t.Helper()
	logs := &testlog.Buffer{}
	p, err := brokerproc.Start(brokerproc.Options{
		Binary: brokertest.Binary(t), DatabaseURL: dsn, Port: port, SpoolDir: spoolDir, Env: extraEnv, Output: logs,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(0) })
	return &broker{Process: p, logs: logs}
}

// waitHealth waits until /health answers want.
func (b *broker) waitHealth(t *testing.T, want int, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := b.WaitHealth(ctx, want); err != nil {
		t.Fatalf("%v\nfull log:\n%s", err, b.logs.String())
	}
}

func (b *broker) do(method, path string, body any, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, b.URL+path, rd)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode %q: %w", raw, err)
		}
	}
	return resp.StatusCode, nil
}

type popped struct {
	LeaseID  string `json:"leaseId"`
	Messages []struct {
		TransactionID string `json:"transactionId"`
		PartitionID   string `json:"partitionId"`
		Partition     string `json:"partition"`
	} `json:"messages"`
}

// TestSIGKILLMidConsumeRedeliversEverythingUnacked kills the broker with
// SIGKILL while a consumer loop pops and acks, restarts a broker on the same
// database, and checks that every message not acknowledged before the kill is
// delivered again from the cursor, that no acknowledged one comes back, and
// that nothing is lost.
func TestSIGKILLMidConsumeRedeliversEverythingUnacked(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	port, spool := freePort(t), t.TempDir()
	b := startBroker(t, dsn, port, spool)
	b.waitHealth(t, http.StatusOK, 30*time.Second)

	const queue, group, partitions, perPartition = "sigkill", "workers", 4, 500
	all := map[string]bool{}
	for p := 0; p < partitions; p++ {
		items := make([]map[string]any, perPartition)
		for i := range items {
			txn := fmt.Sprintf("p%d-%04d", p, i)
			all[txn] = true
			items[i] = map[string]any{"queue": queue, "partition": fmt.Sprintf("p%d", p), "transactionId": txn, "payload": i}
		}
		if status, err := b.do("POST", "/api/v1/push", map[string]any{"items": items}, nil); status != 201 || err != nil {
			t.Fatalf("push: %d %v", status, err)
		}
	}

	var mu sync.Mutex
	ackedBefore := map[string]bool{} // acks the broker confirmed before the kill
	// Acks sent when the broker died: they may or may not have committed; the
	// cursor in the database says which.
	ackUnknown := map[string]string{} // transaction id -> partition id
	deliveredAfter := map[string]int{}
	var killed bool
	pops, partialAcks := 0, 0
	popPath := "/api/v1/pop/queue/" + queue + "?batch=25&leaseSeconds=2&consumerGroup=" + group + "&subscriptionMode=all"
	// consume runs one pop and acks all of it, or (every fifth batch before the
	// kill) only its first half: the rest waits for its lease to expire.
	consume := func(c *broker) (int, error) {
		var p popped
		status, err := c.do("GET", popPath, nil, &p)
		if err != nil || status == http.StatusNoContent {
			return 0, err
		}
		if status != http.StatusOK {
			return 0, fmt.Errorf("pop answered %d", status)
		}
		mu.Lock()
		pops++
		if killed {
			for _, m := range p.Messages {
				deliveredAfter[m.TransactionID]++
			}
		}
		n := len(p.Messages)
		if pops%5 == 0 && !killed {
			n = (n + 1) / 2
			partialAcks++
		}
		mu.Unlock()
		acks := make([]map[string]any, n)
		for i, m := range p.Messages[:n] {
			acks[i] = map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": p.LeaseID, "status": "completed"}
		}
		var results []struct {
			Success bool `json:"success"`
		}
		status, err = c.do("POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": acks, "consumerGroup": group}, &results)
		if err != nil || status != http.StatusOK {
			mu.Lock()
			if !killed {
				for _, m := range p.Messages[:n] {
					ackUnknown[m.TransactionID] = m.PartitionID
				}
			}
			mu.Unlock()
			return 0, fmt.Errorf("ack answered %d: %w", status, err)
		}
		mu.Lock()
		defer mu.Unlock()
		for i, r := range results {
			if r.Success && !killed {
				ackedBefore[p.Messages[i].TransactionID] = true
			}
		}
		return len(p.Messages), nil
	}

	// Consume until about 40% is acknowledged, then SIGKILL in the middle of the loop.
	stopLoop := make(chan struct{})
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		for {
			select {
			case <-stopLoop:
				return
			default:
			}
			_, _ = consume(b) // errors are expected once the broker is gone
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(ackedBefore)
		mu.Unlock()
		if n >= len(all)*2/5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer acked only %d before the kill deadline\n%s", n, b.logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := b.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.Done()
	close(stopLoop)
	<-loopDone
	mu.Lock()
	killed = true
	acked := len(ackedBefore)
	mu.Unlock()

	// A new broker on the same database and spool.
	b2 := startBroker(t, dsn, port, spool)
	b2.waitHealth(t, http.StatusOK, 30*time.Second)
	start := time.Now()
	empties := 0
	for empties < 3 { // empty for longer than a lease: every expired lease was retried
		n, err := consume(b2)
		if err != nil {
			t.Fatalf("consume after restart: %v\n%s", err, b2.logs.String())
		}
		if n == 0 {
			empties++
			time.Sleep(time.Second)
			continue
		}
		empties = 0
		if time.Since(start) > 60*time.Second {
			t.Fatal("consuming after the restart did not finish")
		}
	}

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// An ack cut off by the kill counts as acknowledged only if the database
	// cursor moved past its message.
	committedPast := func(txn, partitionID string) bool {
		var past bool
		if err := conn.QueryRow(ctx, `SELECT c.committed >= t.message_offset FROM lanes.txns t
			JOIN lanes.consumers c ON c.partition_id = t.partition_id AND c.consumer_group = $3
			WHERE t.partition_id = $1::uuid AND t.transaction_id = $2`, partitionID, txn, group).Scan(&past); err != nil {
			t.Fatalf("cursor of %s: %v", txn, err)
		}
		return past
	}
	lost, redeliveredAcked, cutOff := 0, 0, 0
	for txn := range all {
		if pid, unknown := ackUnknown[txn]; unknown && deliveredAfter[txn] == 0 && committedPast(txn, pid) {
			cutOff++
			continue
		}
		if !ackedBefore[txn] && deliveredAfter[txn] == 0 {
			lost++
			if lost < 10 {
				t.Errorf("message %s: not acked before the kill and never delivered after the restart", txn)
			}
		}
		if ackedBefore[txn] && deliveredAfter[txn] > 0 {
			redeliveredAcked++
		}
	}
	if redeliveredAcked > 0 {
		t.Errorf("%d messages acknowledged before the kill came back after the restart (cursor not durable)", redeliveredAcked)
	}
	var backlog int64
	if err := conn.QueryRow(ctx, `SELECT coalesce(sum(p.last_offset - c.committed), 0) FROM lanes.consumers c
		JOIN lanes.partitions p ON p.id = c.partition_id WHERE c.consumer_group = $1`, group).Scan(&backlog); err != nil {
		t.Fatal(err)
	}
	if backlog != 0 {
		t.Errorf("backlog after the consume loop finished: %d", backlog)
	}
	t.Logf("load: %d messages over %d partitions, batches of 25 with 2 s leases, every 5th batch half-acked (%d); "+
		"acked before SIGKILL: %d (+%d whose ack was cut off by the kill but committed); delivered after restart: %d distinct; "+
		"acked ones redelivered: %d; lost: %d; drain after restart took %v",
		len(all), partitions, partialAcks, acked, cutOff, len(deliveredAfter), redeliveredAcked, lost, time.Since(start).Round(time.Millisecond))
}
