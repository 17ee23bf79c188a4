package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// docs/operations.md: besides its pool (LANES_DB_POOL_SIZE), a broker holds
// two connections of its own, the LISTEN connection that wakes parked polls
// and the one /health pings on, so max_connections must allow the pool + 2
// per broker. Pushes and pops fill a pool of 2 while a sampler counts the
// broker's connections.
func TestBrokerHoldsItsPoolPlusTwoConnections(t *testing.T) {
	const poolSize = 2
	dsn := newDatabase(t)
	b := startBroker(t, dsn, freePort(t), t.TempDir(), fmt.Sprintf("LANES_DB_POOL_SIZE=%d", poolSize))
	b.waitHealth(t, http.StatusOK, 30*time.Second)
	ctx := context.Background()
	watcher, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(ctx)
	count := func() int {
		var n int
		if err := watcher.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	stop := make(chan struct{})
	var load sync.WaitGroup
	for i := range 16 {
		load.Add(1)
		go func() {
			defer load.Done()
			queue := fmt.Sprintf("conns-%d", i)
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = b.do(http.MethodPost, "/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": queue, "payload": i}}}, nil)
				_, _ = b.do(http.MethodGet, "/api/v1/pop/queue/"+queue+"?batch=1&autoAck=true", nil, nil)
			}
		}()
	}
	most := 0
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		most = max(most, count())
	}
	close(stop)
	load.Wait()
	if _, err := b.do(http.MethodGet, "/health", nil, nil); err != nil {
		t.Fatal(err)
	}
	most = max(most, count())
	if most != poolSize+2 {
		t.Fatalf("the broker held at most %d connections with a pool of %d; want the pool + 2 (LISTEN and the /health ping)\n%s",
			most, poolSize, b.logs.String())
	}
}
