package engine

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ConfigurePool sets what the engine needs of every connection of a pool it
// is given: times scanned from timestamptz columns in UTC. pgx scans them in
// the process's local zone by default, and an answer built from one would
// carry that zone's offset (-05:00) where every other time on the wire is UTC.
// Each new connection also reads when its server started; pass the returned
// ServerStarts in the engine's Config.
func ConfigurePool(cfg *pgxpool.Config) *ServerStarts {
	starts := &ServerStarts{}
	next := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		conn.TypeMap().RegisterType(&pgtype.Type{Name: "timestamptz", OID: pgtype.TimestamptzOID,
			Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC}})
		started, err := serverStart(ctx, conn)
		if err != nil {
			return err
		}
		starts.met(started)
		if next != nil {
			return next(ctx, conn)
		}
		return nil
	}
	return starts
}

// serverStart reads when conn's server started. A server that refuses the
// function (a revoked grant, a PostgreSQL look-alike) answers the zero time,
// which changes nothing: only the listener's check notices a restart there.
func serverStart(ctx context.Context, conn *pgx.Conn) (time.Time, error) {
	var started time.Time
	err := conn.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&started)
	if HasSQLState(err) {
		return time.Time{}, nil
	}
	return started, err
}

// ServerStarts remembers the start time of the server the pool's latest new
// connection reached. After a restart, a crash or a failover the pool's next
// new connection meets a later one (or another server's), while the
// notification listener's connection, when the old host died without
// closing it, tells the engine nothing for up to three check intervals; pops
// meanwhile would use plans the crash made stale (see popPlanCache).
type ServerStarts struct {
	mu       sync.Mutex
	started  time.Time
	onChange func()
}

func (s *ServerStarts) met(started time.Time) {
	if started.IsZero() {
		return
	}
	// Held while the engine acts: another new connection to the same server
	// finds the start time noted, and must not run its pop before the plans
	// are forgotten.
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := !s.started.IsZero() && !started.Equal(s.started)
	s.started = started
	if changed && s.onChange != nil {
		s.onChange()
	}
}

// record notes the server the listener's new connection reached; the
// listener acts on its own reconnect, so this calls nobody.
func (s *ServerStarts) record(started time.Time) {
	if started.IsZero() {
		return
	}
	s.mu.Lock()
	s.started = started
	s.mu.Unlock()
}

func (s *ServerStarts) notify(onChange func()) {
	s.mu.Lock()
	s.onChange = onChange
	s.mu.Unlock()
}

// noticeServerRestart: a new connection met a server other than the last
// one. Plans cached before are forgotten now, before that connection's pop
// runs (popInOneTrip checks), and the pool's idle connections, to the old
// server, are closed; the listener, still on the old server, reconnects and
// wakes the parked pops.
func (e *Engine) noticeServerRestart() {
	e.popPlans.forgetAll()
	e.pool.Reset()
	select {
	case e.serverRestarted <- struct{}{}:
	default:
	}
}
