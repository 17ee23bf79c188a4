package engine

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// hotPlanSetting is one planner setting of the push, pop and ack
// transactions; beginHot says why each.
type hotPlanSetting struct{ name, value string }

var hotPlanSettingList = [...]hotPlanSetting{
	{"plan_cache_mode", "force_generic_plan"},
	{"enable_seqscan", "off"}, {"enable_hashjoin", "off"}, {"enable_mergejoin", "off"},
	{"enable_memoize", "off"}, {"enable_bitmapscan", "off"}, {"jit", "off"},
}

// hotPlanSettings sets them for one transaction: what beginHot sends when the
// pool does not keep hot sessions (a pool ConfigurePool did not set up).
var hotPlanSettings = func() string {
	parts := make([]string, len(hotPlanSettingList))
	for i, s := range hotPlanSettingList {
		parts[i] = "set_config('" + s.name + "', '" + s.value + "', true)"
	}
	return "SELECT " + strings.Join(parts, ", ")
}()

// hotSessionSQL gives a connection's session the hot settings; plainSessionSQL
// takes them back to the session's own values (its startup parameters, else
// the server's). One round trip each, in the simple protocol.
var hotSessionSQL, plainSessionSQL = func() (hot, plain string) {
	var h, p strings.Builder
	for _, s := range hotPlanSettingList {
		h.WriteString("SET " + s.name + " = " + s.value + "; ")
		p.WriteString("RESET " + s.name + "; ")
	}
	return h.String(), p.String()
}()

// sessionMode is the planner settings a pooled connection's session is asked
// for when it is acquired. Sending the hot settings in every push, pop and
// ack transaction cost PostgreSQL a statement, and restoring them at the
// commit, about 5% of its CPU a consume-queue cycle; a pooled session keeps
// them instead, between the hot transactions it serves, and any other
// statement gets PostgreSQL's defaults back first (plans a listing was tuned
// with may need a hash join or a sequential scan).
type sessionMode int

const (
	// sessionPlain: PostgreSQL's defaults; every acquisition not marked otherwise.
	sessionPlain sessionMode = iota
	// sessionHot: the hot planner settings (acquireHotTx).
	sessionHot
	// sessionAny: either; for statements whose plan the settings cannot
	// change, so that a broker's frequent small writes (pg_notify, a lease
	// extension) never switch a hot session back and forth.
	sessionAny
)

type sessionModeKey struct{}

// withSessionMode marks ctx so that a connection the pool hands out under it
// has its session in mode first (ConfigurePool's PrepareConn).
func withSessionMode(ctx context.Context, mode sessionMode) context.Context {
	return context.WithValue(ctx, sessionModeKey{}, mode)
}

func sessionModeOf(ctx context.Context) sessionMode {
	mode, _ := ctx.Value(sessionModeKey{}).(sessionMode)
	return mode
}

// sessionSwitches counts the round trips that switched a session's mode.
type sessionSwitches struct{ toHot, toPlain atomic.Uint64 }

// fitSession puts conn's session in the mode ctx asks for, unless it is in it
// already. The mode is recorded only once the server confirmed it; a failure
// fails the acquisition, and the pool closes the connection.
func (o *openConns) fitSession(ctx context.Context, conn *pgx.Conn) error {
	want := sessionModeOf(ctx)
	if want == sessionAny {
		return nil
	}
	hot := want == sessionHot
	o.mu.Lock()
	isHot := o.conns[conn]
	o.mu.Unlock()
	if isHot == hot {
		return nil
	}
	sql := plainSessionSQL
	if hot {
		sql = hotSessionSQL
	}
	if _, err := conn.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol); err != nil {
		return err
	}
	o.mu.Lock()
	if _, open := o.conns[conn]; open {
		o.conns[conn] = hot
	}
	o.mu.Unlock()
	if hot {
		o.switches.toHot.Add(1)
	} else {
		o.switches.toPlain.Add(1)
	}
	return nil
}

// SessionSwitches counts, since the engine started, the pooled connections
// whose session was switched to the hot planner settings and back to
// PostgreSQL's defaults (a round trip each); zero without a PoolWatch.
func (e *Engine) SessionSwitches() (toHot, toPlain uint64) {
	if w := e.cfg.PoolWatch; w != nil {
		return w.conns.switches.toHot.Load(), w.conns.switches.toPlain.Load()
	}
	return 0, 0
}
