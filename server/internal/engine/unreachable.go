package engine

import (
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsUnreachable reports whether err means PostgreSQL could not be reached or
// dropped the connection (a restart, a shutdown, a network fault), rather
// than that the statement itself failed: a connect failure, SQLSTATE class 08
// (connection exception), 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03
// cannot_connect_now, 53300 too_many_connections, or a connection that ended
// mid-query (EOF, reset, closed).
func IsUnreachable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "53300":
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08")
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	if errors.As(err, &connErr) || pgconn.SafeToRetry(err) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "connection refused") ||
		strings.Contains(msg, "failed to connect") || strings.Contains(msg, "connection reset")
}
