// Package spool keeps pushes on local disk while PostgreSQL is unreachable (or
// push maintenance is on) and replays them through the normal push path when
// the database is back.
//
// Layout under Dir: the active file `spool-<seq>.tmp` takes appends; it is
// finalized to `spool-<seq>.buf` before a drain reads it. seq is zero-padded and
// grows, so lexical order is append order. The active file is finalized once
// it holds RotateBytes, so finished files drain while appends go on. Each
// record is u32le length, u32le CRC-32 (IEEE) of the body, then the JSON body
// (record.go); a torn tail (crash mid-append, never acknowledged) fails its
// check and ends the file. A file that fails permanently is moved to
// `failed/`, never deleted.
package spool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lanesmq/lanes/server/internal/engine"
)

const (
	activeExt    = ".tmp"
	finalExt     = ".buf"
	failedSubdir = "failed"
)

// ErrFull is the error of an append that would take the spool past MaxBytes.
var ErrFull = errors.New("spool: full")

// PushFunc stores items; engine.ReplayPush in the broker, which keeps one
// copy of a record replayed again.
type PushFunc func(ctx context.Context, items []engine.PushItem) ([]engine.PushResult, error)

// Options configures a spool.
type Options struct {
	Dir  string
	Push PushFunc
	// Paused, when it answers true, holds the drain (push maintenance).
	Paused func() bool
	Logger *slog.Logger
	// Interval between drain attempts while something is pending (default 100ms).
	Interval time.Duration
	// MaxBatch is the most items replayed per push call (default 500).
	MaxBatch int
	// MaxBatchBytes is the most record bytes replayed per push call (default
	// 4 MiB); a batch holds at least one record whatever its size.
	MaxBatchBytes int64
	// MaxFileFailures is how many permanent failures in a row quarantine a file (default 5).
	MaxFileFailures int
	// ReplayTimeout bounds each replay push; 0 = none (statement_timeout still applies).
	ReplayTimeout time.Duration
	// RotateBytes is the size at which the active file is finalized (default 64 MiB).
	RotateBytes int64
	// MaxBytes bounds the bytes of the files waiting to drain: an append past
	// it fails with ErrFull; 0 = unbounded.
	MaxBytes int64
}

const (
	defaultMaxBatchBytes = 4 << 20
	defaultRotateBytes   = 64 << 20
)

// Spool is safe for concurrent use.
type Spool struct {
	opts Options
	log  *slog.Logger

	mu          sync.Mutex // guards the active file and seq
	active      *os.File
	activeName  string
	activeSize  int64
	activeCount int
	seq         int64

	// fileRecords is the record count of each finalized file, guarded by mu.
	fileRecords map[string]int

	drainMu  sync.Mutex // one drain at a time
	progress map[string]filePosition
	failures map[string]int

	pending   atomic.Int64
	bytes     atomic.Int64 // of the files waiting to drain, the active one included
	drained   atomic.Int64
	dbHealthy atomic.Bool
	// waitingForDB is set while the drain backs off because the database
	// could not be reached; DatabaseAnswered then kicks it.
	waitingForDB atomic.Bool
	kick         chan struct{}
}

// filePosition is how far a drain got in a file: the records stored and the
// offset of the first one not stored.
type filePosition struct {
	done   int
	offset int64
}

// Open creates Dir (and Dir/failed), finalizes files a previous process left
// active, and counts what is pending.
func Open(opts Options) (*Spool, error) {
	if opts.Dir == "" {
		return nil, errors.New("spool: no directory")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Interval <= 0 {
		opts.Interval = 100 * time.Millisecond
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 500
	}
	if opts.MaxFileFailures <= 0 {
		opts.MaxFileFailures = 5
	}
	if opts.MaxBatchBytes <= 0 {
		opts.MaxBatchBytes = defaultMaxBatchBytes
	}
	if opts.RotateBytes <= 0 {
		opts.RotateBytes = defaultRotateBytes
	}
	if err := os.MkdirAll(filepath.Join(opts.Dir, failedSubdir), 0o750); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	s := &Spool{
		opts: opts, log: opts.Logger, fileRecords: map[string]int{},
		progress: map[string]filePosition{}, failures: map[string]int{}, kick: make(chan struct{}, 1),
	}
	s.dbHealthy.Store(true)
	// Numbering goes on after the quarantined files too: a new file that
	// took the name of one in failed/ would replace it when quarantined.
	quarantined, err := os.ReadDir(filepath.Join(opts.Dir, failedSubdir))
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	for _, e := range quarantined {
		if seq, ok := parseSeq(e.Name()); ok {
			s.seq = max(s.seq, seq)
		}
	}
	entries, err := os.ReadDir(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if seq, ok := parseSeq(name); ok {
			s.seq = max(s.seq, seq)
		}
		if strings.HasSuffix(name, activeExt) {
			final := strings.TrimSuffix(name, activeExt) + finalExt
			if err := os.Rename(filepath.Join(opts.Dir, name), filepath.Join(opts.Dir, final)); err != nil {
				return nil, fmt.Errorf("spool: recover %s: %w", name, err)
			}
		}
	}
	files, err := s.finalFiles()
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		n, size, err := countRecords(filepath.Join(opts.Dir, f))
		if err != nil {
			return nil, fmt.Errorf("spool: count %s: %w", f, err)
		}
		s.fileRecords[f] = n
		s.pending.Add(int64(n))
		s.bytes.Add(size)
	}
	if n := s.pending.Load(); n > 0 {
		s.log.Warn("spool holds pushes from before the restart; draining", "pending", n, "bytes", s.bytes.Load(), "dir", opts.Dir)
	}
	return s, syncDir(opts.Dir)
}

func parseSeq(name string) (int64, bool) {
	if !strings.HasPrefix(name, "spool-") {
		return 0, false
	}
	base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(name, "spool-"), activeExt), finalExt)
	n, err := strconv.ParseInt(base, 10, 64)
	return n, err == nil
}

// Append writes items to the active file and fsyncs it; when it returns nil
// the items survive a crash of the broker or the host. Past MaxBytes it
// stores nothing and returns ErrFull.
func (s *Spool) Append(items []engine.PushItem) error {
	buf, err := encodeRecords(items)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if used := s.bytes.Load(); s.opts.MaxBytes > 0 && used+int64(len(buf)) > s.opts.MaxBytes {
		return fmt.Errorf("%w: %d bytes waiting to drain, %d more would pass LANES_SPOOL_MAX_BYTES (%d)", ErrFull, used, len(buf), s.opts.MaxBytes)
	}
	if s.active == nil {
		if err := s.openActive(); err != nil {
			return err
		}
	}
	if _, err := s.active.Write(buf); err != nil {
		// Cut the partial write so the next append starts on a record boundary.
		_ = s.active.Truncate(s.activeSize)
		_, _ = s.active.Seek(s.activeSize, io.SeekStart)
		return fmt.Errorf("spool: write: %w", err)
	}
	if err := s.active.Sync(); err != nil {
		_ = s.active.Truncate(s.activeSize)
		_, _ = s.active.Seek(s.activeSize, io.SeekStart)
		return fmt.Errorf("spool: fsync: %w", err)
	}
	s.activeSize += int64(len(buf))
	s.activeCount += len(items)
	s.pending.Add(int64(len(items)))
	s.bytes.Add(int64(len(buf)))
	if s.activeSize >= s.opts.RotateBytes {
		// The items are durable already: a failed rotation only delays it.
		if err := s.finalizeActiveLocked(); err != nil {
			s.log.Error("spool file rotation failed", "file", s.activeName, "err", err)
		}
	}
	return nil
}

// openActive starts a new active file. Called with mu held.
func (s *Spool) openActive() error {
	s.seq++
	name := fmt.Sprintf("spool-%016d%s", s.seq, activeExt)
	f, err := os.OpenFile(filepath.Join(s.opts.Dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("spool: create: %w", err)
	}
	if err := syncDir(s.opts.Dir); err != nil {
		_ = f.Close()
		return fmt.Errorf("spool: %w", err)
	}
	s.active, s.activeName, s.activeSize, s.activeCount = f, name, 0, 0
	return nil
}

// finalizeActive closes the active file and renames it for the drain.
func (s *Spool) finalizeActive() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.finalizeActiveLocked()
}

func (s *Spool) finalizeActiveLocked() error {
	if s.active == nil || s.activeCount == 0 {
		return nil
	}
	if err := s.active.Close(); err != nil {
		return fmt.Errorf("spool: close: %w", err)
	}
	final := strings.TrimSuffix(s.activeName, activeExt) + finalExt
	s.active = nil
	if err := os.Rename(filepath.Join(s.opts.Dir, s.activeName), filepath.Join(s.opts.Dir, final)); err != nil {
		return fmt.Errorf("spool: finalize: %w", err)
	}
	s.fileRecords[final] = s.activeCount
	return syncDir(s.opts.Dir)
}

func (s *Spool) finalFiles() ([]string, error) {
	entries, err := os.ReadDir(s.opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), finalExt) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Pending is the number of spooled items not yet stored in PostgreSQL.
func (s *Spool) Pending() int64 { return s.pending.Load() }

// Failed is the number of items in quarantined files, counted on each call
// (record headers only): an operator who replays or moves the files out of
// failed/ sees it fall, where a running count only ever grew.
func (s *Spool) Failed() int64 {
	dir := filepath.Join(s.opts.Dir, failedSubdir)
	files, _ := os.ReadDir(dir)
	var total int64
	for _, f := range files {
		n, _, _ := countRecords(filepath.Join(dir, f.Name()))
		total += int64(n)
	}
	return total
}

// Bytes is the size of the files waiting to drain, the active one included.
func (s *Spool) Bytes() int64 { return s.bytes.Load() }

// Drained is the number of items replayed since the process started.
func (s *Spool) Drained() int64 { return s.drained.Load() }

// DBHealthy is false after a push had to be spooled, a drain failed or the
// broker could not reach the database at boot; true after a drain succeeded
// or the schema was applied.
func (s *Spool) DBHealthy() bool { return s.dbHealthy.Load() }

// MarkDBDown records that the database could not be reached (a push fell back
// to the spool, or the schema could not be applied at boot).
func (s *Spool) MarkDBDown() { s.dbHealthy.Store(false) }

// MarkDBUp records that the database answered again (the schema was applied
// after a boot without it).
func (s *Spool) MarkDBUp() { s.dbHealthy.Store(true) }

// Dir is where the spool lives.
func (s *Spool) Dir() string { return s.opts.Dir }

// Close closes the active file; its records stay on disk and drain at the next start.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active == nil {
		return nil
	}
	err := s.active.Close()
	s.active = nil
	return err
}
