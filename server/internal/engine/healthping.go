package engine

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// healthPingTimeout bounds one /health round trip, connecting included.
const healthPingTimeout = 2 * time.Second

// healthConn is the one connection Ping uses, outside the pool: a pool busy
// with requests must not read as a database that is down. It opens on first
// use and again after a failed ping.
type healthConn struct {
	turn chan struct{} // one ping at a time; a waiter gives up with its context
	conn *pgx.Conn
}

func newHealthConn() *healthConn { return &healthConn{turn: make(chan struct{}, 1)} }

// Ping does one database round trip on the health connection within 2 s.
func (e *Engine) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, healthPingTimeout)
	defer cancel()
	h := e.health
	select {
	case h.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-h.turn }()
	if h.conn == nil {
		conn, err := pgx.ConnectConfig(ctx, e.pool.Config().ConnConfig.Copy())
		if err != nil {
			return err
		}
		h.conn = conn
	}
	if err := h.conn.Ping(ctx); err != nil {
		h.closeConn()
		return err
	}
	return nil
}

// closeConn closes the connection, if open; the caller holds the turn.
func (h *healthConn) closeConn() {
	if h.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = h.conn.Close(ctx)
	h.conn = nil
}

// close closes the connection once no ping runs.
func (h *healthConn) close() {
	h.turn <- struct{}{}
	h.closeConn()
	<-h.turn
}
