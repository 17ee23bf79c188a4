package spool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lanesmq/lanes/server/internal/engine"
)

const maxBackoff = 5 * time.Second

// Run drains in the background until ctx ends: every Interval while something
// is pending, backing off to 5 s while the database keeps failing.
func (s *Spool) Run(ctx context.Context) {
	wait := s.opts.Interval
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if s.Pending() == 0 || s.paused() {
			wait = s.opts.Interval
			continue
		}
		if _, err := s.DrainOnce(ctx); err != nil {
			wait = min(wait*2, maxBackoff)
			s.log.Warn("spool drain failed; will retry", "err", err, "pending", s.Pending(), "retryIn", wait)
			continue
		}
		wait = s.opts.Interval
	}
}

func (s *Spool) paused() bool { return s.opts.Paused != nil && s.opts.Paused() }

// maxRounds bounds one DrainOnce: each round drains what arrived during the
// previous one, so rounds shrink while the drain is faster than the appends.
const maxRounds = 50

// DrainOnce replays every finalized file oldest-first, then finalizes and
// replays the active file, round after round, until the spool is empty (new
// pushes go to the spool while it is not, so nothing overtakes an older
// message of its partition). It stops at the first failure.
func (s *Spool) DrainOnce(ctx context.Context) (int, error) {
	if s.paused() {
		return 0, nil
	}
	s.drainMu.Lock()
	defer s.drainMu.Unlock()
	total := 0
	for round := 0; round < maxRounds && !s.paused(); round++ {
		files, err := s.finalFiles()
		if err != nil {
			return total, err
		}
		if len(files) == 0 {
			if err := s.finalizeActive(); err != nil {
				return total, err
			}
			if files, err = s.finalFiles(); err != nil {
				return total, err
			}
		}
		if len(files) == 0 {
			break
		}
		for _, name := range files {
			n, err := s.drainFile(ctx, name)
			total += n
			if err != nil {
				return total, err
			}
		}
		s.dbHealthy.Store(true)
	}
	return total, nil
}

func (s *Spool) drainFile(ctx context.Context, name string) (int, error) {
	path := filepath.Join(s.opts.Dir, name)
	recs, err := readRecords(path)
	if err != nil {
		return 0, fmt.Errorf("spool: read %s: %w", name, err)
	}
	done := s.progress[name]
	drained := 0
	for done < len(recs) {
		end := min(done+s.opts.MaxBatch, len(recs))
		if err := s.replay(ctx, recs[done:end]); err != nil {
			s.progress[name] = done
			s.dbHealthy.Store(false)
			if isTransient(err) {
				return drained, err
			}
			s.failures[name]++
			if s.failures[name] < s.opts.MaxFileFailures {
				return drained, fmt.Errorf("spool: %s (failure %d of %d): %w", name, s.failures[name], s.opts.MaxFileFailures, err)
			}
			return drained, s.quarantine(name, len(recs)-done, err)
		}
		n := end - done
		done = end
		drained += n
		s.pending.Add(-int64(n))
		s.drained.Add(int64(n))
	}
	delete(s.progress, name)
	delete(s.failures, name)
	if err := os.Remove(path); err != nil {
		return drained, fmt.Errorf("spool: remove drained %s: %w", name, err)
	}
	return drained, syncDir(s.opts.Dir)
}

func (s *Spool) replay(ctx context.Context, recs []record) error {
	items := make([]engine.PushItem, len(recs))
	for i, r := range recs {
		items[i] = engine.PushItem{
			Queue: r.Queue, Partition: r.Partition, TransactionID: r.TransactionID,
			TraceID: r.TraceID, ProducerSub: r.ProducerSub, Payload: r.Payload,
		}
		if id, err := uuid.Parse(r.MessageID); err == nil {
			items[i].MessageID = id
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.PushTimeout)
	defer cancel()
	results, err := s.opts.Push(ctx, items)
	if err != nil {
		return err
	}
	for _, r := range results {
		if r.Status == engine.PushFailed {
			return &permanentError{fmt.Sprintf("item %s in %s: %s", r.TransactionID, r.Queue, r.Error)}
		}
	}
	return nil
}

type permanentError struct{ msg string }

func (e *permanentError) Error() string { return e.msg }

// quarantine moves a file that keeps failing to failed/, keeping its records.
func (s *Spool) quarantine(name string, remaining int, cause error) error {
	delete(s.progress, name)
	delete(s.failures, name)
	to := filepath.Join(s.opts.Dir, failedSubdir, name)
	if err := os.Rename(filepath.Join(s.opts.Dir, name), to); err != nil {
		return fmt.Errorf("spool: quarantine %s: %w", name, err)
	}
	s.pending.Add(-int64(remaining))
	s.failed.Add(int64(remaining))
	s.log.Error("spool file quarantined after repeated failures; its pushes need attention",
		"file", to, "items", remaining, "err", cause)
	return fmt.Errorf("spool: quarantined %s: %w", name, cause)
}

// isTransient reports failures that mean "database not reachable now" rather
// than "this data cannot be stored": an error without a SQLSTATE, or one
// engine.IsServerFault accepts.
func isTransient(err error) bool {
	var perm *permanentError
	if errors.As(err, &perm) {
		return false
	}
	var invalid *engine.InvalidInputError
	if errors.As(err, &invalid) {
		return false
	}
	return !engine.HasSQLState(err) || engine.IsServerFault(err)
}

// IsUnavailable reports whether err from a push means the database could not be
// reached (so the push belongs in the spool) rather than bad input.
func IsUnavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var invalid *engine.InvalidInputError
	if errors.As(err, &invalid) || errors.Is(err, engine.ErrNotFound) {
		return false
	}
	if engine.HasSQLState(err) {
		return isTransient(err)
	}
	return engine.IsUnreachable(err) || pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded)
}
