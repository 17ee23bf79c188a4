package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/internal/testdb"
)

// testDSN is one database shared by the package's tests; every test uses its
// own queue names.
var testDSN string

func TestMain(m *testing.M) {
	os.Exit(testdb.Main(m, &testDSN, ApplySchema))
}

// newEngine starts an engine (a "broker") on the shared test database.
func newEngine(t testing.TB) *Engine {
	t.Helper()
	return newEngineWith(t, Config{}, nil)
}

// newEngineWith is newEngine with engine settings of its own and PostgreSQL
// settings for its connections' sessions.
func newEngineWith(t testing.TB, engineCfg Config, session map[string]string) *Engine {
	t.Helper()
	return newEngineOnWith(t, testDSN, engineCfg, session)
}

// newEngineOn is newEngine on the database of dsn.
func newEngineOn(t testing.TB, dsn string) *Engine {
	t.Helper()
	return newEngineOnWith(t, dsn, Config{}, nil)
}

// newEngineOnWith is newEngineWith on the database of dsn, its pool set up as
// the broker's (ConfigurePool) unless engineCfg brings a PoolWatch.
func newEngineOnWith(t testing.TB, dsn string, engineCfg Config, session map[string]string) *Engine {
	t.Helper()
	cfg := poolConfig(t, dsn, 20)
	for k, v := range session {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	if engineCfg.PoolWatch == nil {
		engineCfg.PoolWatch = ConfigurePool(cfg)
	}
	return newEngineOnPool(t, cfg, engineCfg)
}

// newUnwatchedEngine is newEngine on a pool ConfigurePool did not set up.
func newUnwatchedEngine(t testing.TB) *Engine {
	t.Helper()
	return newEngineOnPool(t, poolConfig(t, testDSN, 20), Config{})
}

func poolConfig(t testing.TB, dsn string, maxConns int32) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	return cfg
}

// newEngineOnPool starts an engine on a pool of cfg, closed when t ends.
func newEngineOnPool(t testing.TB, cfg *pgxpool.Config, engineCfg Config) *Engine {
	t.Helper()
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := New(pool, engineCfg)
	t.Cleanup(func() { e.Close(); pool.Close() })
	return e
}

// newSchemaDatabase is a fresh database with the schema, dropped when t ends,
// for a test whose claims cover a whole retention pass: a pass sweeps every
// queue of its database, and on the shared one other tests' queues join it.
func newSchemaDatabase(t testing.TB) string {
	t.Helper()
	dsn, cleanup, err := testdb.NewDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := ApplySchema(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return dsn
}

var queueSeq atomic.Int64

// queueName is unique per call so tests never see each other's data.
func queueName(t testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return fmt.Sprintf("%s-%d-%d", name, time.Now().UnixNano()%1e6, queueSeq.Add(1))
}

func raw(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func mustPush(t testing.TB, e *Engine, items ...PushItem) []PushResult {
	t.Helper()
	res, err := e.Push(context.Background(), items)
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	return res
}

func mustPop(t testing.TB, e *Engine, req PopRequest) *PopResult {
	t.Helper()
	res, err := e.Pop(context.Background(), req)
	if err != nil {
		t.Fatalf("pop: %v", err)
	}
	return res
}

func mustAck(t testing.TB, e *Engine, items ...AckItem) []AckResult {
	t.Helper()
	res, err := e.Ack(context.Background(), items)
	if err != nil {
		t.Fatalf("ack: %v", err)
	}
	return res
}

func txnIDs(msgs []Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.TransactionID
	}
	return out
}

func items(queue, partition string, txns ...string) []PushItem {
	out := make([]PushItem, len(txns))
	for i, id := range txns {
		out[i] = PushItem{Queue: queue, Partition: partition, TransactionID: id, Payload: raw(map[string]string{"id": id})}
	}
	return out
}
