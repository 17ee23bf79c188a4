package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Two new connections that meet a restarted server at once: the first
// forgets the cached pop plans, and the second, which finds the new start
// time already noted, must not be handed out before that is done, or its
// pop claims on a plan the crash made stale (a message whose ack the crash
// undid skipped). Before, met called the engine after letting go of its
// lock, and the second connection went on at once.
func TestANewConnectionToARestartedServerWaitsUntilThePlansAreForgotten(t *testing.T) {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testDSN)
	if err != nil {
		t.Fatal(err)
	}
	starts := &ConfigurePool(cfg).starts
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// The last server met started long ago: the pool's first connection meets a restarted one.
	starts.record(time.Unix(1, 0))
	forgetting, forgotten := make(chan struct{}), make(chan struct{})
	var notified, released sync.Once
	release := func() { released.Do(func() { close(forgotten) }) }
	t.Cleanup(release) // before the pool's close, which waits for the first connection
	starts.notify(func() {
		notified.Do(func() { close(forgetting) })
		<-forgotten
	})
	acquire := func(result chan<- error) {
		c, err := pool.Acquire(ctx)
		if err == nil {
			c.Release()
		}
		result <- err
	}
	first, second := make(chan error, 1), make(chan error, 1)
	go acquire(first)
	select {
	case <-forgetting:
	case err := <-first:
		t.Fatalf("the first new connection did not notice the restarted server: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the first new connection did not reach the server within 10 s")
	}
	go acquire(second)
	select {
	case err := <-second:
		t.Fatalf("a second new connection was handed out (err %v) while the first was still forgetting the plans", err)
	case <-time.After(500 * time.Millisecond):
	}
	release()
	for _, result := range []chan error{first, second} {
		if err := <-result; err != nil {
			t.Fatal(err)
		}
	}
}

// A server whose DateStyle is not ISO (postgresql.conf or ALTER DATABASE ...
// SET datestyle, here 'SQL, DMY' and 'German') still gets connections: the
// start time every new connection reads does not depend on how the server
// writes a time as text, which pgx parses in ISO only. The broker reads every
// other time in binary. Before, each new connection failed ("cannot parse"),
// and the broker with it.
func TestANewConnectionReadsTheServerStartUnderAnyDateStyle(t *testing.T) {
	ctx := context.Background()
	direct := newEngine(t)
	var want time.Time
	if err := direct.pool.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&want); err != nil {
		t.Fatal(err)
	}
	for _, style := range []string{"SQL, DMY", "German", "Postgres, MDY"} {
		cfg, err := pgxpool.ParseConfig(testDSN)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["datestyle"] = style // as the server's default would be
		watch := ConfigurePool(cfg)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = pool.Ping(ctx)
		pool.Close()
		if err != nil {
			t.Fatalf("DateStyle %q: a new connection failed: %v", style, err)
		}
		watch.starts.mu.Lock()
		got := watch.starts.started
		watch.starts.mu.Unlock()
		if !got.Equal(want) {
			t.Fatalf("DateStyle %q: the connection read the server start %v, want %v", style, got, want)
		}
	}
}
