package spool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lanesmq/lanes/server/internal/engine"
)

// bigItems are items whose payloads take about size bytes each.
func bigItems(queue string, from, to, size int) []engine.PushItem {
	out := items(queue, "p", from, to)
	for i := range out {
		out[i].Payload = json.RawMessage(fmt.Sprintf(`{"n":%d,"pad":%q}`, from+i, strings.Repeat("x", size)))
	}
	return out
}

// batchRecorder stores through the real engine and keeps the size of every
// replay it was asked for; tooSlow, when set, answers a batch it picks with
// the statement timeout PostgreSQL gives a batch too large for its deadline.
type batchRecorder struct {
	eng     *engine.Engine
	tooSlow func(items []engine.PushItem) bool
	mu      sync.Mutex
	sizes   []int
	bytes   []int
}

func (b *batchRecorder) push(ctx context.Context, items []engine.PushItem) ([]engine.PushResult, error) {
	size := 0
	for _, it := range items {
		size += len(it.Payload)
	}
	b.mu.Lock()
	b.sizes = append(b.sizes, len(items))
	b.bytes = append(b.bytes, size)
	b.mu.Unlock()
	if b.tooSlow != nil && b.tooSlow(items) {
		return nil, fmt.Errorf("push: %w", &pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"})
	}
	return b.eng.Push(ctx, items)
}

// A replay that times out is a batch too large for the deadline, not a
// database that is down: the drain halves the batch at once, down to what
// fits, and stores everything in order in the same attempt.
func TestTimedOutReplayHalvesTheBatchUntilItFits(t *testing.T) {
	eng, pool := newEngine(t)
	rec := &batchRecorder{eng: eng, tooSlow: func(items []engine.PushItem) bool { return len(items) > 3 }}
	s, err := Open(Options{Dir: t.TempDir(), Push: rec.push, MaxBatch: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Append(items("spool-halve", "p", 0, 40)); err != nil {
		t.Fatal(err)
	}
	n, err := s.DrainOnce(context.Background())
	if err != nil || n != 40 || s.Pending() != 0 || !s.DBHealthy() {
		t.Fatalf("drain: %d %v pending %d healthy %v", n, err, s.Pending(), s.DBHealthy())
	}
	if want := []int{16, 8, 4, 2, 2}; fmt.Sprint(rec.sizes[:5]) != fmt.Sprint(want) {
		t.Fatalf("replay sizes %v, want them to start %v", rec.sizes, want)
	}
	got := storedOrder(t, pool, "spool-halve")
	if len(got) != 40 {
		t.Fatalf("stored %d, want 40", len(got))
	}
	for i, id := range got {
		if id != fmt.Sprintf("tx-%04d", i) {
			t.Fatalf("offset %d holds %s: order lost", i, id)
		}
	}
}

// A single record that still times out waits for the next attempt (the
// backoff) instead of spinning, and keeps its place.
func TestSingleRecordThatTimesOutWaitsAndKeepsItsPlace(t *testing.T) {
	eng, pool := newEngine(t)
	slow := true
	rec := &batchRecorder{eng: eng, tooSlow: func(items []engine.PushItem) bool {
		for _, it := range items {
			if slow && it.TransactionID == "tx-0002" {
				return true
			}
		}
		return false
	}}
	s, err := Open(Options{Dir: t.TempDir(), Push: rec.push, MaxBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	_ = s.Append(items("spool-one", "p", 0, 6))
	if n, err := s.DrainOnce(context.Background()); err == nil || n != 2 || s.Pending() != 4 {
		t.Fatalf("drain past a record that times out alone: %d %v pending %d", n, err, s.Pending())
	}
	slow = false
	if n, err := s.DrainOnce(context.Background()); err != nil || n != 4 || s.Pending() != 0 {
		t.Fatalf("next attempt: %d %v pending %d", n, err, s.Pending())
	}
	if got := storedOrder(t, pool, "spool-one"); len(got) != 6 {
		t.Fatalf("stored %v, want 6 exactly once", got)
	}
}

// Batches are capped by bytes as well as count, and a record larger than the
// cap still goes, alone.
func TestBatchesAreCappedByBytes(t *testing.T) {
	eng, pool := newEngine(t)
	rec := &batchRecorder{eng: eng}
	s, err := Open(Options{Dir: t.TempDir(), Push: rec.push, MaxBatchBytes: 30 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	_ = s.Append(bigItems("spool-bytes", 0, 10, 10<<10))
	_ = s.Append(bigItems("spool-bytes", 10, 11, 50<<10))
	_ = s.Append(bigItems("spool-bytes", 11, 13, 1<<10))
	if n, err := s.DrainOnce(context.Background()); err != nil || n != 13 {
		t.Fatalf("drain: %d %v", n, err)
	}
	// 10 KiB records: two fit under 30 KiB with their framing; the 50 KiB one alone.
	if want := "[2 2 2 2 2 1 2]"; fmt.Sprint(rec.sizes) != want {
		t.Fatalf("replay sizes %v (bytes %v), want %s", rec.sizes, rec.bytes, want)
	}
	if got := storedOrder(t, pool, "spool-bytes"); len(got) != 13 {
		t.Fatalf("stored %d, want 13", len(got))
	}
}

// When the database answers again, a drain backing off after failed
// attempts starts at once instead of sleeping out its backoff.
func TestDatabaseAnsweredWakesABackedOffDrain(t *testing.T) {
	eng, pool := newEngine(t)
	var mu sync.Mutex
	down := true
	push := func(ctx context.Context, it []engine.PushItem) ([]engine.PushResult, error) {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return nil, errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
		}
		return eng.Push(ctx, it)
	}
	s, err := Open(Options{Dir: t.TempDir(), Push: push, Interval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	_ = s.Append(items("spool-wake", "p", 0, 5))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	// Attempts at 0.5 s and 1.5 s fail; the next waits 2 s, until 3.5 s.
	time.Sleep(1700 * time.Millisecond)
	mu.Lock()
	down = false
	mu.Unlock()
	s.DatabaseAnswered()
	woke := time.Now()
	for s.Pending() > 0 && time.Since(woke) < 3*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	if took := time.Since(woke); s.Pending() != 0 || took > 500*time.Millisecond {
		t.Fatalf("drained %d left after %v; want the drain to start when the database answers", s.Pending(), took)
	}
	if got := storedOrder(t, pool, "spool-wake"); len(got) != 5 {
		t.Fatalf("stored %d, want 5", len(got))
	}
}
