package spool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lanesmq/lanes/server/internal/engine"
	"github.com/lanesmq/lanes/server/internal/failurelog"
)

const maxBackoff = 5 * time.Second

// Run drains in the background until ctx ends: every Interval while something
// is pending, backing off to 5 s while the database keeps failing, and at
// once when DatabaseAnswered says it is back.
func (s *Spool) Run(ctx context.Context) {
	wait := s.opts.Interval
	timer := time.NewTimer(wait)
	defer timer.Stop()
	failures := failurelog.New(s.log, slog.LevelWarn, "spool drain failed; will retry", "")
	var drainingSince time.Time // zero while the spool is empty
	drained := 0
	for {
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.kick:
			wait = s.opts.Interval
		}
		if s.Pending() == 0 || s.paused() {
			wait = s.opts.Interval
			continue
		}
		if drainingSince.IsZero() {
			drainingSince, drained = time.Now(), 0
		}
		n, err := s.DrainOnce(ctx)
		drained += n
		if err != nil {
			wait = min(wait*2, maxBackoff)
			failures.Failed(err, "pending", s.Pending(), "retryIn", wait)
			continue
		}
		failures.Succeeded()
		wait = s.opts.Interval
		if s.Pending() == 0 {
			took := time.Since(drainingSince)
			s.log.Info(fmt.Sprintf("spool drained %d items in %s", drained, took.Round(time.Millisecond)), "items", drained, "took", took)
			drainingSince = time.Time{}
		}
	}
}

// DatabaseAnswered tells the drain that a database call succeeded: a drain
// backing off because the database could not be reached runs at once, so
// recovery takes the drain's time, not the backoff's.
func (s *Spool) DatabaseAnswered() {
	if s.waitingForDB.CompareAndSwap(true, false) {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

func (s *Spool) paused() bool { return s.opts.Paused != nil && s.opts.Paused() }

// maxRounds bounds one DrainOnce: each round drains what arrived during the
// previous one, so rounds shrink while the drain is faster than the appends.
const maxRounds = 50

// DrainOnce replays every finalized file oldest-first, then finalizes and
// replays the active file, round after round, until the spool is empty (new
// pushes to this broker go to the spool while it is not, so none overtakes an
// older message of its partition). It stops at the first failure.
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

// drainFile streams a file from where the last attempt stopped, replaying
// batches capped by MaxBatch and MaxBatchBytes. A replay that times out is
// the batch's size, not an outage: the batch halves and retries at once; a
// batch of one that still times out waits for the next attempt.
func (s *Spool) drainFile(ctx context.Context, name string) (int, error) {
	path := filepath.Join(s.opts.Dir, name)
	pos := s.progress[name]
	reader, err := openRecords(path, pos.offset)
	if err != nil {
		return 0, fmt.Errorf("spool: read %s: %w", name, err)
	}
	defer reader.Close()
	limit := s.opts.MaxBatch
	var batch []sizedRecord // read, not yet stored
	drained := 0
	for {
		batch = s.fillBatch(reader, batch, limit)
		if len(batch) == 0 {
			break
		}
		n := s.batchLen(batch, limit)
		err := s.replay(ctx, batch[:n])
		if err != nil && replayTimedOut(ctx, err) && n > 1 {
			limit = n / 2
			s.log.Warn("spool replay timed out; retrying with a smaller batch", "file", name, "items", n, "bytes", batchBytes(batch[:n]), "nextItems", limit, "err", err)
			continue
		}
		if err != nil {
			s.progress[name] = pos
			return drained, s.replayFailed(ctx, name, pos, batch[:n], err)
		}
		pos.done += n
		pos.offset += batchBytes(batch[:n])
		drained += n
		s.pending.Add(-int64(n))
		s.drained.Add(int64(n))
		batch = batch[n:]
	}
	s.waitingForDB.Store(false)
	s.mu.Lock()
	counted := s.fileRecords[name]
	delete(s.fileRecords, name)
	s.mu.Unlock()
	if unread := counted - pos.done; unread > 0 {
		// The count read headers only; a corrupt body ended the file sooner.
		s.log.Error("spool file ended at a corrupt record; the records after it are dropped", "file", name, "dropped", unread)
		s.pending.Add(-int64(unread))
	}
	delete(s.progress, name)
	delete(s.failures, name)
	if err := os.Remove(path); err != nil {
		return drained, fmt.Errorf("spool: remove drained %s: %w", name, err)
	}
	s.bytes.Add(-reader.size)
	return drained, syncDir(s.opts.Dir)
}

// fillBatch tops batch up from reader to limit records or MaxBatchBytes,
// whichever comes first.
func (s *Spool) fillBatch(reader *recordReader, batch []sizedRecord, limit int) []sizedRecord {
	for len(batch) < limit && batchBytes(batch) < s.opts.MaxBatchBytes {
		rec, ok := reader.next()
		if !ok {
			break
		}
		batch = append(batch, rec)
	}
	return batch
}

// batchLen is how many leading records of batch one replay takes: at most
// limit and MaxBatchBytes, and at least one.
func (s *Spool) batchLen(batch []sizedRecord, limit int) int {
	n, size := 0, int64(0)
	for n < len(batch) && n < limit && (n == 0 || size+batch[n].size <= s.opts.MaxBatchBytes) {
		size += batch[n].size
		n++
	}
	return n
}

func batchBytes(batch []sizedRecord) int64 {
	var n int64
	for _, r := range batch {
		n += r.size
	}
	return n
}

// replayFailed sorts a failed replay of batch: the database unreachable (wait
// for it), a record too slow to store alone (log it, wait), or data it
// refuses (count the failure; quarantine the file after MaxFileFailures).
func (s *Spool) replayFailed(ctx context.Context, name string, pos filePosition, batch []sizedRecord, err error) error {
	s.dbHealthy.Store(false)
	if replayTimedOut(ctx, err) {
		s.log.Error("spool replay of a single record timed out; retrying after a pause", "file", name, "bytes", batch[0].size,
			"queue", batch[0].Queue, "transactionId", batch[0].TransactionID, "err", err)
		return err
	}
	if isTransient(err) {
		s.waitingForDB.Store(true)
		return err
	}
	s.failures[name]++
	if s.failures[name] < s.opts.MaxFileFailures {
		return fmt.Errorf("spool: %s (failure %d of %d): %w", name, s.failures[name], s.opts.MaxFileFailures, err)
	}
	return s.quarantine(name, pos, err)
}

// replayTimedOut reports a replay that ran out of time (statement_timeout or
// its own deadline) while the drain itself goes on.
func replayTimedOut(ctx context.Context, err error) bool {
	return ctx.Err() == nil && (engine.IsStatementTimeout(err) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err))
}

func (s *Spool) replay(ctx context.Context, recs []sizedRecord) error {
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
	if s.opts.ReplayTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.ReplayTimeout)
		defer cancel()
	}
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
func (s *Spool) quarantine(name string, pos filePosition, cause error) error {
	delete(s.progress, name)
	delete(s.failures, name)
	from, to := filepath.Join(s.opts.Dir, name), filepath.Join(s.opts.Dir, failedSubdir, name)
	info, err := os.Stat(from)
	if err == nil {
		err = os.Rename(from, to)
	}
	if err != nil {
		return fmt.Errorf("spool: quarantine %s: %w", name, err)
	}
	s.mu.Lock()
	remaining := s.fileRecords[name] - pos.done
	delete(s.fileRecords, name)
	s.mu.Unlock()
	s.bytes.Add(-info.Size())
	s.pending.Add(-int64(remaining))
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
