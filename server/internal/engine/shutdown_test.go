package engine

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A group commit stuck on a partition row another connection holds does not
// hold Shutdown past its budget: the commit is canceled, the waiting push
// gets an error, and the shutdown log says what it waited for. The canceled
// commit either committed or did not: a retry stores the message exactly once.
func TestShutdownCancelsAGroupCommitStuckOnALockAtItsBudget(t *testing.T) {
	ctx := context.Background()
	var logs bytes.Buffer
	e := newEngineWith(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, nil)
	q := queueName(t)
	mustPush(t, e, items(q, "p", "provision")...)
	holder, err := pgx.Connect(ctx, testDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	lock, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	if _, err := lock.Exec(ctx, `SELECT 1 FROM lanes.partitions p JOIN lanes.queues q ON q.id = p.queue_id
		WHERE q.name = $1 AND p.name = 'p' FOR UPDATE OF p`, q); err != nil {
		t.Fatal(err)
	}
	pushed := make(chan error, 1)
	go func() {
		_, err := e.Push(ctx, items(q, "p", "stuck"))
		pushed <- err
	}()
	time.Sleep(300 * time.Millisecond) // the push waits for the row inside its commit

	const budget = 500 * time.Millisecond
	stopped := make(chan time.Duration, 1)
	go func() {
		budgetCtx, cancel := context.WithTimeout(ctx, budget)
		defer cancel()
		start := time.Now()
		e.Shutdown(budgetCtx)
		stopped <- time.Since(start)
	}()
	select {
	case took := <-stopped:
		if took > budget+time.Second {
			t.Fatalf("Shutdown took %v with a %v budget", took, budget)
		}
	case <-time.After(budget + 5*time.Second):
		t.Fatalf("Shutdown still waits %v after its %v budget for a commit stuck on a lock", 5*time.Second, budget)
	}
	select {
	case err := <-pushed:
		if !errors.Is(err, errEngineClosed) {
			t.Fatalf("the push waiting on the canceled commit got %v, want an engine-closed error", err)
		}
	case <-time.After(time.Second):
		t.Fatal("the push waiting on the canceled commit got no answer")
	}
	for _, line := range []string{"waiting for group commits", "canceling group commits"} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("no %q in the shutdown log:\n%s", line, logs.String())
		}
	}

	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	retried := mustPush(t, newEngine(t), items(q, "p", "stuck")...)
	if s := retried[0].Status; s != PushQueued && s != PushDuplicate {
		t.Fatalf("the retry answered %q", s)
	}
	var copies int
	if err := holder.QueryRow(ctx, `SELECT count(*) FROM lanes.txns t JOIN lanes.partitions p ON p.id = t.partition_id
		JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = $1 AND t.transaction_id = 'stuck'`, q).Scan(&copies); err != nil {
		t.Fatal(err)
	}
	if copies != 1 {
		t.Fatalf("stored %d copies of the retried push, want 1", copies)
	}
}
