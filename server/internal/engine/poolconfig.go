package engine

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	pgxuuid "github.com/vgarvardt/pgx-google-uuid/v5"
)

// ConfigurePool sets what the engine needs of every connection of a pool it
// is given: times scanned from timestamptz columns in UTC. pgx scans them in
// the process's local zone by default, and an answer built from one would
// carry that zone's offset (-05:00) where every other time on the wire is UTC.
// A uuid.UUID parameter is sent as its 16 bytes (encodeUUIDParams).
// Each new connection also reads when its server started, and the pool's
// open connections are kept in a list the engine can cut off (openConns),
// with the planner settings each one's session holds (sessionMode); pass the
// returned PoolWatch in the engine's Config.
func ConfigurePool(cfg *pgxpool.Config) *PoolWatch {
	watch := &PoolWatch{conns: openConns{conns: map[*pgx.Conn]bool{}}}
	next := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		conn.TypeMap().RegisterType(&pgtype.Type{Name: "timestamptz", OID: pgtype.TimestamptzOID,
			Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC}})
		encodeUUIDParams(conn.TypeMap())
		started, err := serverStart(ctx, conn)
		if err != nil {
			return err
		}
		watch.starts.met(started)
		if next != nil {
			if err := next(ctx, conn); err != nil {
				return err
			}
		}
		watch.conns.opened(conn)
		return nil
	}
	// A PrepareConn set before runs first. (pgx ignores a BeforeAcquire
	// once PrepareConn is set; the broker sets neither.)
	nextPrepare := cfg.PrepareConn
	cfg.PrepareConn = func(ctx context.Context, conn *pgx.Conn) (bool, error) {
		if nextPrepare != nil {
			if ok, err := nextPrepare(ctx, conn); !ok || err != nil {
				return ok, err
			}
		}
		if err := watch.conns.fitSession(ctx, conn); err != nil {
			return false, err
		}
		return true, nil
	}
	nextBeforeClose := cfg.BeforeClose
	cfg.BeforeClose = func(conn *pgx.Conn) {
		watch.conns.closing(conn)
		if nextBeforeClose != nil {
			nextBeforeClose(conn)
		}
	}
	return watch
}

// encodeUUIDParams makes m send a uuid.UUID (and uuid.NullUUID) parameter in
// binary. pgx otherwise takes it as a driver.Valuer: it formats the id as
// text, fails to encode the text in binary, builds that error with
// fmt.Errorf, parses the text back and encodes that, 4% of the broker's CPU
// in consume-queue. Only the encode side is registered: scanning into
// *uuid.UUID keeps its sql.Scanner path, which reads NULL as uuid.Nil.
func encodeUUIDParams(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{pgxuuid.TryWrapUUIDEncodePlan}, m.TryWrapEncodePlanFuncs...)
}

// PoolWatch is what the engine learns from its pool's connections
// (ConfigurePool): the start time of the server the latest new one reached,
// and which ones are open.
type PoolWatch struct {
	starts ServerStarts
	conns  openConns
}

// openConns are the pool's open connections, idle or checked out. pgxpool's
// Reset closes the idle ones and those checked out only when they come back;
// a request whose statement waits on a silent host would hold its connection
// until its deadline (30 s; a pop's claim 60 s).
type openConns struct {
	mu sync.Mutex
	// conns says of each open connection whether its session holds the hot
	// planner settings (sessionHot).
	conns    map[*pgx.Conn]bool
	switches sessionSwitches
}

func (o *openConns) opened(conn *pgx.Conn) {
	o.mu.Lock()
	o.conns[conn] = false
	o.mu.Unlock()
}

func (o *openConns) closing(conn *pgx.Conn) {
	o.mu.Lock()
	delete(o.conns, conn)
	o.mu.Unlock()
}

// cutOff closes the network connection under every connection open now, and
// says how many: a statement waiting on one fails at once, as on a server
// that closed it, and pgx closes the connection, which the pool then drops.
// It closes the socket only, which is safe while another goroutine reads or
// writes it; pgx's own Close is not.
func (o *openConns) cutOff() int {
	o.mu.Lock()
	cut := make([]*pgx.Conn, 0, len(o.conns))
	for conn := range o.conns {
		cut = append(cut, conn)
	}
	clear(o.conns)
	o.mu.Unlock()
	for _, conn := range cut {
		_ = conn.PgConn().Conn().Close()
	}
	return len(cut)
}

// serverStart reads when conn's server started. A server that refuses the
// function (a revoked grant, a PostgreSQL look-alike) answers the zero time,
// which changes nothing: only the listener's check notices a restart there.
// It takes one round trip: pgx's default would prepare the statement first,
// on a new connection one round trip more. The simple protocol answers in
// text, so the time comes as microseconds since the epoch: pgx parses a
// timestamptz's text in the ISO DateStyle only, and a server set to another
// would fail every new connection.
func serverStart(ctx context.Context, conn *pgx.Conn) (time.Time, error) {
	var micros int64
	err := conn.QueryRow(ctx, "SELECT (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::int8",
		pgx.QueryExecModeSimpleProtocol).Scan(&micros)
	if HasSQLState(err) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMicro(micros), nil
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
