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
