package api

import (
	"context"
	"errors"
	"net"
	"time"
)

// errClientHungUp ends the wait of a body whose client closed its connection.
var errClientHungUp = errors.New("the client closed the connection while its body waited for room")

type connKey struct{}

// ConnContext is the http.Server ConnContext of the broker: it keeps each
// request's connection in its context, so that a body waiting for room in
// the body budget notices its client hanging up. net/http cancels a
// request's context on a hang-up only once its body is read whole, and a
// body waiting for room is not being read.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// hangUpPoll is how often a body waiting for room checks its connection.
const hangUpPoll = 50 * time.Millisecond

// watchForHangUp cancels hungUp with errClientHungUp once the peer of ctx's
// connection has closed it (or shut down its side), checking every
// hangUpPoll until ctx ends. Without a connection in ctx (ConnContext unset)
// or where that cannot be told (peerClosed), it only waits for ctx.
func watchForHangUp(ctx context.Context, hungUp context.CancelCauseFunc) {
	conn, _ := ctx.Value(connKey{}).(net.Conn)
	if conn == nil {
		return
	}
	for {
		if c, ok := conn.(interface{ NetConn() net.Conn }); ok {
			conn = c.NetConn()
			continue
		}
		break
	}
	tick := time.NewTicker(hangUpPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if peerClosed(conn) {
				hungUp(errClientHungUp)
				return
			}
		}
	}
}
