package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestIsUnreachableTellsARestartFromAFailedStatement(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"57P01 admin_shutdown (pg_terminate_backend, fast shutdown)", &pgconn.PgError{Severity: "FATAL", Code: "57P01"}, true},
		{"57P02 crash_shutdown", &pgconn.PgError{Severity: "FATAL", Code: "57P02"}, true},
		{"57P03 cannot_connect_now (starting up)", &pgconn.PgError{Severity: "FATAL", Code: "57P03"}, true},
		{"08006 connection_failure", &pgconn.PgError{Code: "08006"}, true},
		{"53300 too_many_connections", &pgconn.PgError{Code: "53300"}, true},
		{"unexpected EOF mid-query", fmt.Errorf("claim: %w", io.ErrUnexpectedEOF), true},
		{"connection reset mid-query", fmt.Errorf("ack: %w", reset), true},
		{"23505 unique_violation", &pgconn.PgError{Code: "23505"}, false},
		{"57014 query_canceled (statement_timeout)", &pgconn.PgError{Code: "57014"}, false},
		{"40P01 deadlock", &pgconn.PgError{Code: "40P01"}, false},
		{"bad input", &InvalidInputError{Message: "x"}, false},
		{"not found", ErrNotFound, false},
		{"client went away", context.Canceled, false},
		{"nil", nil, false},
		{"any other error", errors.New("boom"), false},
	}
	for _, c := range cases {
		if got := IsUnreachable(c.err); got != c.want {
			t.Errorf("%s: IsUnreachable = %v, want %v", c.name, got, c.want)
		}
	}
}
