package engine

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// planSettingsSQL reads the planner settings of hotPlanSettingList (but jit,
// which the broker's sessions turn off anyway).
const planSettingsSQL = `SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan'),
	current_setting('enable_hashjoin'), current_setting('enable_mergejoin'), current_setting('enable_memoize'),
	current_setting('enable_bitmapscan')`

type planSettings [6]string

var hotSettings = planSettings{"force_generic_plan", "off", "off", "off", "off", "off"}

func readPlanSettings(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, ctx context.Context) planSettings {
	t.Helper()
	var s planSettings
	if err := q.QueryRow(ctx, planSettingsSQL).Scan(&s[0], &s[1], &s[2], &s[3], &s[4], &s[5]); err != nil {
		t.Fatal(err)
	}
	return s
}

// newOneConnEngine is an engine whose pool holds one connection, so every
// statement of the test meets the same session; watched: set up by
// ConfigurePool, as the broker's pool is.
func newOneConnEngine(t *testing.T, watched bool) *Engine {
	t.Helper()
	cfg := poolConfig(t, testDSN, 1)
	var engineCfg Config
	if watched {
		engineCfg.PoolWatch = ConfigurePool(cfg)
	}
	return newEngineOnPool(t, cfg, engineCfg)
}

// inHotTx runs read inside a hot transaction begun as push, pop and ack begin
// theirs, and commits it; it returns how many statements beginHot queued.
func inHotTx(t *testing.T, e *Engine, read func(tx *connTx) error) int {
	t.Helper()
	ctx := context.Background()
	tx, done, err := e.acquireHotTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	b := &pgx.Batch{}
	begun := tx.beginHot(b)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	tx.open = true
	if err := read(tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return begun
}

func TestHotSessionsKeepTheHotSettingsAndOtherStatementsGetTheDefaults(t *testing.T) {
	ctx := context.Background()
	e := newOneConnEngine(t, true)
	defaults := readPlanSettings(t, e.pool, ctx)
	if defaults == hotSettings {
		t.Fatalf("the server's defaults are the hot settings already (%v): nothing to tell apart", defaults)
	}

	var inside planSettings
	if begun := inHotTx(t, e, func(tx *connTx) error {
		inside = readPlanSettings(t, tx, ctx)
		return nil
	}); begun != 1 {
		t.Errorf("a hot session's transaction began with %d statements, want a bare BEGIN", begun)
	}
	if inside != hotSettings {
		t.Errorf("inside a hot transaction: %v, want %v", inside, hotSettings)
	}
	if hot, plain := e.SessionSwitches(); hot != 1 || plain != 0 {
		t.Errorf("switches after the first hot transaction: to hot %d, to plain %d; want 1, 0", hot, plain)
	}

	// The session keeps them for the next hot transaction, even after a
	// failed one rolled back (they were set outside it), and for a
	// statement that takes any session.
	tx, done, err := e.acquireHotTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := &pgx.Batch{}
	tx.beginHot(b)
	b.Queue("SELECT 1 / 0")
	if err := tx.SendBatch(ctx, b).Close(); err == nil {
		t.Fatal("a division by zero did not fail")
	}
	done()
	inHotTx(t, e, func(tx *connTx) error {
		inside = readPlanSettings(t, tx, ctx)
		return nil
	})
	if inside != hotSettings {
		t.Errorf("a hot transaction after a failed one: %v, want %v", inside, hotSettings)
	}
	if got := readPlanSettings(t, e.pool, withSessionMode(ctx, sessionAny)); got != hotSettings {
		t.Errorf("a statement taking any session: %v, want the session as it was (%v)", got, hotSettings)
	}
	if hot, plain := e.SessionSwitches(); hot != 1 || plain != 0 {
		t.Errorf("switches after three hot transactions and an any-session statement: to hot %d, to plain %d; want 1, 0", hot, plain)
	}

	// Any other statement gets the session's defaults back first.
	if got := readPlanSettings(t, e.pool, ctx); got != defaults {
		t.Errorf("a plain statement after hot transactions: %v, want the defaults %v", got, defaults)
	}
	inHotTx(t, e, func(*connTx) error { return nil })
	if got := readPlanSettings(t, e.pool, ctx); got != defaults {
		t.Errorf("a plain statement after the session was hot again: %v, want the defaults %v", got, defaults)
	}
	if hot, plain := e.SessionSwitches(); hot != 2 || plain != 2 {
		t.Errorf("switches: to hot %d, to plain %d; want 2, 2", hot, plain)
	}
}

// A pool ConfigurePool did not set up (no PoolWatch) keeps no session mode:
// each hot transaction sets the hot settings for itself.
func TestHotTransactionsSetTheirOwnSettingsWithoutAWatchedPool(t *testing.T) {
	ctx := context.Background()
	e := newOneConnEngine(t, false)
	defaults := readPlanSettings(t, e.pool, ctx)
	var inside planSettings
	if begun := inHotTx(t, e, func(tx *connTx) error {
		inside = readPlanSettings(t, tx, ctx)
		return nil
	}); begun != 2 {
		t.Errorf("beginHot queued %d statements, want BEGIN and the settings", begun)
	}
	if inside != hotSettings {
		t.Errorf("inside a hot transaction: %v, want %v", inside, hotSettings)
	}
	if got := readPlanSettings(t, e.pool, ctx); got != defaults {
		t.Errorf("after a hot transaction: %v, want the defaults %v", got, defaults)
	}
}

// The broker's own paths on one connection: a push, a pop and its ack switch
// the session once, a listing switches it back, and the messages go through.
func TestPushPopAckShareOneHotSession(t *testing.T) {
	ctx := context.Background()
	e := newOneConnEngine(t, true)
	queue := queueName(t)
	for i := range 3 {
		if _, err := e.Push(ctx, []PushItem{{Queue: queue, Partition: "p", TransactionID: string(rune('a' + i)), Payload: []byte(`{}`)}}); err != nil {
			t.Fatal(err)
		}
		res, err := e.Pop(ctx, PopRequest{Queue: queue, Batch: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Messages) != 1 {
			t.Fatalf("pop %d: %d messages, want 1", i, len(res.Messages))
		}
		m := res.Messages[0]
		acks, err := e.Ack(ctx, []AckItem{{TransactionID: m.TransactionID, PartitionID: m.PartitionID.String(), LeaseID: res.LeaseID, Status: "completed"}})
		if err != nil {
			t.Fatal(err)
		}
		if !acks[0].Success {
			t.Fatalf("ack %d: %+v", i, acks[0])
		}
	}
	hot, plain := e.SessionSwitches()
	if _, _, _, err := e.ListQueues(ctx, QueueListFilter{Queue: queue}); err != nil {
		t.Fatal(err)
	}
	hotAfter, plainAfter := e.SessionSwitches()
	if hotAfter != 1 || plainAfter != plain+1 {
		t.Errorf("switches: to hot %d (then %d), to plain %d (then %d); want the session switched to hot once for three pushes, pops and acks, and back for the listing",
			hot, hotAfter, plain, plainAfter)
	}
}
