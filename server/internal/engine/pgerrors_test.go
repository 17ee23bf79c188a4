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

// TestPredicatesClassifyWhatPostgreSQLReallyRaises produces each error from a
// real statement, so the named SQLSTATEs are checked against the server.
func TestPredicatesClassifyWhatPostgreSQLReallyRaises(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()

	_, timeout := conn.Exec(ctx, "SET LOCAL statement_timeout = 1; SELECT pg_sleep(1)")
	if !IsStatementTimeout(timeout) || IsRetryable(timeout) || !IsServerFault(timeout) || IsUnreachable(timeout) {
		t.Errorf("statement_timeout %v: IsStatementTimeout %v, IsRetryable %v, IsServerFault %v, IsUnreachable %v",
			timeout, IsStatementTimeout(timeout), IsRetryable(timeout), IsServerFault(timeout), IsUnreachable(timeout))
	}

	_, dup := conn.Exec(ctx, "CREATE TEMP TABLE pgerrors_t (k int CONSTRAINT pgerrors_t_pkey PRIMARY KEY); INSERT INTO pgerrors_t VALUES (1), (1)")
	if !IsUniqueViolation(dup, "pgerrors_t_pkey") || IsUniqueViolation(dup, "txns_pkey") || IsServerFault(dup) {
		t.Errorf("duplicate key %v: IsUniqueViolation(own) %v, IsUniqueViolation(txns_pkey) %v, IsServerFault %v",
			dup, IsUniqueViolation(dup, "pgerrors_t_pkey"), IsUniqueViolation(dup, "txns_pkey"), IsServerFault(dup))
	}

	_, serialization := conn.Exec(ctx, "DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = 'serialization_failure'; END $$")
	_, deadlock := conn.Exec(ctx, "DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = 'deadlock_detected'; END $$")
	for _, err := range []error{serialization, deadlock} {
		if !IsRetryable(err) || !IsServerFault(err) {
			t.Errorf("%v: IsRetryable %v, IsServerFault %v", err, IsRetryable(err), IsServerFault(err))
		}
	}

	_, badByte := conn.Exec(ctx, "SELECT convert_from('\\xff'::bytea, 'UTF8')")
	if !isDataError(badByte) || IsServerFault(badByte) {
		t.Errorf("%v: isDataError %v, IsServerFault %v", badByte, isDataError(badByte), IsServerFault(badByte))
	}
}

func TestIsServerFaultTellsTheDatabaseFromTheData(t *testing.T) {
	cases := []struct {
		code string
		want bool
	}{
		{"08006", true}, {"53100", true}, {"53200", true}, {"53300", true}, {"57014", true},
		{"57P01", true}, {"58030", true}, {"40001", true}, {"40P01", true},
		{"23505", false}, {"22021", false}, {"54000", false}, {"42P01", false}, {"LN001", false},
		// A hand-built error without a full code has no class; it must not panic.
		{"", false}, {"5", false},
	}
	for _, c := range cases {
		if got := IsServerFault(fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: c.code})); got != c.want {
			t.Errorf("IsServerFault(%q) = %v, want %v", c.code, got, c.want)
		}
	}
	if IsServerFault(io.ErrUnexpectedEOF) || IsRetryable(context.DeadlineExceeded) || IsStatementTimeout(nil) {
		t.Error("an error without a SQLSTATE matched a SQLSTATE predicate")
	}
}
