package spool

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/testdb"
)

func newEngine(t *testing.T) (*engine.Engine, *pgxpool.Pool) {
	t.Helper()
	pool := testdb.Pool(t)
	if err := engine.ApplySchema(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	e := engine.New(pool, engine.Config{})
	t.Cleanup(e.Close)
	return e, pool
}

func items(queue, partition string, from, to int) []engine.PushItem {
	var out []engine.PushItem
	for i := from; i < to; i++ {
		out = append(out, engine.PushItem{
			Queue: queue, Partition: partition, TransactionID: fmt.Sprintf("tx-%04d", i),
			Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)),
		})
	}
	return out
}

// readAll reads every record of a spool file.
func readAll(t *testing.T, path string) []sizedRecord {
	t.Helper()
	r, err := openRecords(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []sizedRecord
	for rec, ok := r.next(); ok; rec, ok = r.next() {
		out = append(out, rec)
	}
	return out
}

// storedOrder lists the transaction ids of a partition in offset order.
func storedOrder(t *testing.T, pool *pgxpool.Pool, queue string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT t.transaction_id FROM lanes.txns t
		JOIN lanes.partitions p ON p.id = t.partition_id JOIN lanes.queues q ON q.id = p.queue_id
		WHERE q.name = $1 ORDER BY t.partition_id, t.message_offset`, queue)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

func TestAppendSurvivesRestartAndDrainsOnceInOrder(t *testing.T) {
	eng, pool := newEngine(t)
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, Push: eng.Push})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := s.Append(items("spool-order", "p", i*10, i*10+10)); err != nil {
			t.Fatal(err)
		}
	}
	// Simulate a crash: a torn record after the last acknowledged append.
	active := filepath.Join(dir, s.activeName)
	f, err := os.OpenFile(active, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write([]byte{200, 0, 0, 0, 1, 2, 3})
	_ = f.Close()
	_ = s.Close()

	s, err = Open(Options{Dir: dir, Push: eng.Push})
	if err != nil {
		t.Fatal(err)
	}
	if s.Pending() != 100 {
		t.Fatalf("pending after restart = %d, want 100", s.Pending())
	}
	// Ten items were already stored before the spool drains: the replay of those is a duplicate.
	if _, err := eng.Push(context.Background(), items("spool-order", "p", 0, 10)); err != nil {
		t.Fatal(err)
	}
	n, err := s.DrainOnce(context.Background())
	if err != nil || n != 100 {
		t.Fatalf("drain: %d %v", n, err)
	}
	if s.Pending() != 0 || !s.DBHealthy() {
		t.Fatalf("pending %d healthy %v", s.Pending(), s.DBHealthy())
	}
	got := storedOrder(t, pool, "spool-order")
	if len(got) != 100 {
		t.Fatalf("stored %d messages, want 100 exactly once", len(got))
	}
	for i, id := range got {
		if id != fmt.Sprintf("tx-%04d", i) {
			t.Fatalf("offset %d holds %s: order lost", i, id)
		}
	}
	left, _ := filepath.Glob(filepath.Join(dir, "spool-*"))
	if len(left) != 0 {
		t.Fatalf("drained files left behind: %v", left)
	}
}

// A buffered answer names a message id before anything is stored; the record
// carries it and the drain stores the message under it, whether the item
// named a transaction id or took the message id as one. A record without an
// id (written by an older broker) gets one minted at the replay.
func TestDrainStoresEachMessageUnderTheIDTheBufferedAnswerGave(t *testing.T) {
	eng, pool := newEngine(t)
	s, err := Open(Options{Dir: t.TempDir(), Push: eng.Push})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	named, _ := uuid.NewV7()
	minted, _ := uuid.NewV7()
	batch := []engine.PushItem{
		{Queue: "spool-ids", Partition: "p", TransactionID: "named", MessageID: named, Payload: json.RawMessage(`1`)},
		{Queue: "spool-ids", Partition: "p", TransactionID: minted.String(), MessageID: minted, Payload: json.RawMessage(`2`)},
		{Queue: "spool-ids", Partition: "p", TransactionID: "unset", Payload: json.RawMessage(`3`)},
	}
	if err := s.Append(batch); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DrainOnce(context.Background()); err != nil || n != 3 {
		t.Fatalf("drain: %d %v", n, err)
	}
	stored := map[string]uuid.UUID{}
	rows, err := pool.Query(context.Background(), `SELECT t.transaction_id, t.message_id FROM lanes.txns t
		JOIN lanes.partitions p ON p.id = t.partition_id JOIN lanes.queues q ON q.id = p.queue_id WHERE q.name = 'spool-ids'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close() // a failure below must not leave the rows holding a pool connection
	for rows.Next() {
		var txn string
		var id uuid.UUID
		if err := rows.Scan(&txn, &id); err != nil {
			t.Fatal(err)
		}
		stored[txn] = id
	}
	rows.Close()
	if stored["named"] != named || stored[minted.String()] != minted {
		t.Fatalf("stored ids %v; the answers gave named=%s minted=%s", stored, named, minted)
	}
	if id, ok := stored["unset"]; !ok || id == uuid.Nil {
		t.Fatalf("a record without a message id was stored as %v", stored)
	}
}

func TestPermanentFailureQuarantinesTheFile(t *testing.T) {
	dir := t.TempDir()
	calls := 0
	push := func(_ context.Context, _ []engine.PushItem) ([]engine.PushResult, error) {
		calls++
		return nil, &engine.InvalidInputError{Message: "queue name rejected"}
	}
	s, err := Open(Options{Dir: dir, Push: push, MaxFileFailures: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(items("q", "p", 0, 4)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := s.DrainOnce(context.Background()); err == nil {
			t.Fatal("drain of a failing file must report it")
		}
	}
	if calls != 3 || s.Pending() != 0 || s.Failed() != 4 {
		t.Fatalf("calls %d pending %d failed %d", calls, s.Pending(), s.Failed())
	}
	quarantined, _ := filepath.Glob(filepath.Join(dir, "failed", "spool-*.buf"))
	if len(quarantined) != 1 {
		t.Fatalf("quarantined files: %v", quarantined)
	}
	if recs := readAll(t, quarantined[0]); len(recs) != 4 {
		t.Fatalf("quarantined file keeps %d records, want 4", len(recs))
	}
	// A restarted broker still counts the quarantined items.
	s2, err := Open(Options{Dir: dir, Push: push})
	if err != nil || s2.Failed() != 4 {
		t.Fatalf("reopen: failed=%d err=%v", s2.Failed(), err)
	}
	// Once the operator has dealt with the file (moved it away), nothing is quarantined.
	if err := os.Rename(quarantined[0], filepath.Join(t.TempDir(), "handled.buf")); err != nil {
		t.Fatal(err)
	}
	if n := s2.Failed(); n != 0 {
		t.Fatalf("after the quarantined file was moved away: failed=%d, want 0", n)
	}
}

func TestTransientFailureKeepsTheFileAndPaused(t *testing.T) {
	dir := t.TempDir()
	down := true
	paused := true
	var stored []engine.PushItem
	push := func(_ context.Context, it []engine.PushItem) ([]engine.PushResult, error) {
		if down {
			return nil, errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
		}
		stored = append(stored, it...)
		return make([]engine.PushResult, len(it)), nil
	}
	s, err := Open(Options{Dir: dir, Push: push, MaxFileFailures: 1, Paused: func() bool { return paused }})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Append(items("q", "p", 0, 3))
	if n, err := s.DrainOnce(context.Background()); n != 0 || err != nil || s.Pending() != 3 {
		t.Fatalf("paused drain did something: %d %v", n, err)
	}
	paused = false
	for i := 0; i < 3; i++ {
		if _, err := s.DrainOnce(context.Background()); err == nil {
			t.Fatal("want a transient error")
		}
	}
	if s.Pending() != 3 || s.Failed() != 0 || s.DBHealthy() {
		t.Fatalf("transient failures must not quarantine: pending %d failed %d", s.Pending(), s.Failed())
	}
	down = false
	if n, err := s.DrainOnce(context.Background()); n != 3 || err != nil || len(stored) != 3 || !s.DBHealthy() {
		t.Fatalf("drain after recovery: %d %v stored %d", n, err, len(stored))
	}
}

// TestTransientAndUnavailableFollowEngineClassifiers pins the spool's rules:
// a server fault or an error without a SQLSTATE waits for the database, bad
// data is a failure, and a hand-built error with a short code must not panic.
func TestTransientAndUnavailableFollowEngineClassifiers(t *testing.T) {
	cases := []struct {
		name                 string
		err                  error
		transient, available bool
	}{
		{"disk full 53100", &pgconn.PgError{Code: "53100"}, true, true},
		{"statement timeout 57014", &pgconn.PgError{Code: "57014"}, true, true},
		{"deadlock 40P01", &pgconn.PgError{Code: "40P01"}, true, true},
		{"admin shutdown 57P01", &pgconn.PgError{Code: "57P01"}, true, true},
		{"bad byte 22021", &pgconn.PgError{Code: "22021"}, false, false},
		{"unique violation 23505", &pgconn.PgError{Code: "23505"}, false, false},
		{"empty code", &pgconn.PgError{}, true, false},
		{"one-character code", &pgconn.PgError{Code: "5"}, false, false},
		{"connection reset", fmt.Errorf("push: %w", io.ErrUnexpectedEOF), true, true},
		{"bad input", &engine.InvalidInputError{Message: "x"}, false, false},
		{"quarantine-worthy", &permanentError{msg: "x"}, false, false},
	}
	for _, c := range cases {
		if got := isTransient(c.err); got != c.transient {
			t.Errorf("%s: isTransient = %v, want %v", c.name, got, c.transient)
		}
		if got := IsUnavailable(c.err); got != c.available {
			t.Errorf("%s: IsUnavailable = %v, want %v", c.name, got, c.available)
		}
	}
}

// The active file is finalized at RotateBytes, so finished files can drain
// while appends go on; a restart counts every file from its headers.
func TestActiveFileRotatesAtItsSizeAndRestartCountsEveryFile(t *testing.T) {
	eng, pool := newEngine(t)
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, Push: eng.Push, RotateBytes: 20 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := s.Append(bigItems("spool-rotate", i, i+1, 8<<10)); err != nil {
			t.Fatal(err)
		}
	}
	finished, _ := filepath.Glob(filepath.Join(dir, "spool-*.buf"))
	if len(finished) != 3 {
		t.Fatalf("finished files %v, want 3 of three 8 KiB records each", finished)
	}
	size := s.Bytes()
	_ = s.Close()
	s, err = Open(Options{Dir: dir, Push: eng.Push})
	if err != nil {
		t.Fatal(err)
	}
	if s.Pending() != 10 || s.Bytes() != size {
		t.Fatalf("after restart pending %d bytes %d, want 10 and %d", s.Pending(), s.Bytes(), size)
	}
	if n, err := s.DrainOnce(context.Background()); err != nil || n != 10 || s.Bytes() != 0 {
		t.Fatalf("drain: %d %v bytes %d", n, err, s.Bytes())
	}
	if got := storedOrder(t, pool, "spool-rotate"); len(got) != 10 || got[9] != "tx-0009" {
		t.Fatalf("stored %v", got)
	}
}

// Past MaxBytes an append stores nothing and says the spool is full; once
// the drain frees room, appends go in again.
func TestAppendPastMaxBytesFailsAndChangesNothing(t *testing.T) {
	eng, _ := newEngine(t)
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, Push: eng.Push, MaxBytes: 30 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Append(bigItems("spool-full", 0, 2, 10<<10)); err != nil {
		t.Fatal(err)
	}
	used := s.Bytes()
	err = s.Append(bigItems("spool-full", 2, 4, 10<<10))
	if !errors.Is(err, ErrFull) {
		t.Fatalf("append past the limit: %v, want ErrFull", err)
	}
	info, _ := os.Stat(filepath.Join(dir, s.activeName))
	if s.Pending() != 2 || s.Bytes() != used || info.Size() != used {
		t.Fatalf("a refused append changed the spool: pending %d bytes %d file %d, want 2 and %d", s.Pending(), s.Bytes(), info.Size(), used)
	}
	if _, err := s.DrainOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(bigItems("spool-full", 2, 4, 10<<10)); err != nil {
		t.Fatalf("append after the drain: %v", err)
	}
}

// A file an older broker left (records without message ids) still counts and
// drains; a record whose body is corrupt ends the file as a torn tail does,
// and the count taken from the headers settles so nothing stays pending.
func TestOlderFileWithACorruptRecordDrainsAndSettlesPending(t *testing.T) {
	eng, pool := newEngine(t)
	dir := t.TempDir()
	var file []byte
	for i, body := range []string{
		`{"queue":"spool-old","partition":"p","transactionId":"old-1","payload":{"n":1}}`,
		`{"queue":"spool-old","partition":"p","transactionId":"old-2","payload":{"n":2}}`,
		`{"queue":"spool-old","partition":"p","transactionId":"old-3","payload":{"n":3}}`,
	} {
		var hdr [headerSize]byte
		binary.LittleEndian.PutUint32(hdr[0:4], uint32(len(body)))
		sum := crc32.ChecksumIEEE([]byte(body))
		if i == 1 {
			sum++ // bit rot in the second record
		}
		binary.LittleEndian.PutUint32(hdr[4:8], sum)
		file = append(append(file, hdr[:]...), body...)
	}
	if err := os.WriteFile(filepath.Join(dir, "spool-0000000000000007.tmp"), file, 0o640); err != nil {
		t.Fatal(err)
	}
	s, err := Open(Options{Dir: dir, Push: eng.Push})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if s.Pending() != 3 {
		t.Fatalf("pending %d, want the 3 records the headers show", s.Pending())
	}
	if n, err := s.DrainOnce(context.Background()); err != nil || n != 1 || s.Pending() != 0 || s.Bytes() != 0 {
		t.Fatalf("drain: %d %v pending %d bytes %d", n, err, s.Pending(), s.Bytes())
	}
	if got := storedOrder(t, pool, "spool-old"); fmt.Sprint(got) != "[old-1]" {
		t.Fatalf("stored %v, want [old-1]", got)
	}
	if err := s.Append(items("spool-old", "p", 0, 1)); err != nil || s.activeName != "spool-0000000000000008.tmp" {
		t.Fatalf("next file %s (%v), want the sequence to go on after the old file", s.activeName, err)
	}
}
