package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
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

// A uuid.UUID parameter on a configured pool's connection reaches
// PostgreSQL as the same id, Nil and NULL included, and is encoded in
// binary: pgx's driver.Valuer path formats it as text, builds an error with
// fmt.Errorf when the text does not encode in binary and parses it back: 20
// allocations an id, where this takes the two that box it.
func TestUUIDParametersAreSentAsTheirBytes(t *testing.T) {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testDSN)
	if err != nil {
		t.Fatal(err)
	}
	ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()

	id := uuid.MustParse("0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b")
	for _, c := range []struct {
		param any
		want  *string
	}{
		{id, ptr(id.String())},
		{uuid.Nil, ptr(uuid.Nil.String())},
		{uuid.NullUUID{UUID: id, Valid: true}, ptr(id.String())},
		{uuid.NullUUID{}, nil},
	} {
		var got *string
		if err := conn.QueryRow(ctx, "SELECT $1::uuid::text", c.param).Scan(&got); err != nil {
			t.Fatalf("%#v: %v", c.param, err)
		}
		if (got == nil) != (c.want == nil) || (got != nil && *got != *c.want) {
			t.Errorf("%#v reached PostgreSQL as %v, want %v", c.param, deref(got), deref(c.want))
		}
	}

	m := conn.Conn().TypeMap()
	buf := make([]byte, 0, 64)
	allocs := testing.AllocsPerRun(100, func() {
		out, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, id, buf[:0])
		if err != nil || len(out) != 16 || [16]byte(out) != id {
			t.Fatalf("binary encoding of %s: %x, %v", id, out, err)
		}
	})
	if allocs > 2 {
		t.Errorf("encoding a uuid.UUID parameter took %.0f allocations, want at most 2", allocs)
	}
}

func ptr[T any](v T) *T { return &v }

func deref(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}
