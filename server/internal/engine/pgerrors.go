package engine

import (
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// SQLSTATEs the broker acts on. PostgreSQL's own are listed in its manual
// (Appendix A); the LN codes are raised by this package's SQL through
// lanes.expect.
const (
	sqlstateUndefinedTable       = "42P01"
	sqlstateUniqueViolation      = "23505"
	sqlstateSerializationFailure = "40001"
	sqlstateDeadlockDetected     = "40P01"
	sqlstateTooManyConnections   = "53300"
	sqlstateQueryCanceled        = "57014" // statement_timeout, or a canceled query
	sqlstateAdminShutdown        = "57P01"
	sqlstateCrashShutdown        = "57P02"
	sqlstateCannotConnectNow     = "57P03"
	sqlstateLockNotAvailable     = "55P03" // lock_timeout
	sqlstateInvalidCatalogName   = "3D000" // no such database
	sqlstateInvalidAuthorization = "28000" // no such role, or pg_hba.conf rejects it
	sqlstateInvalidPassword      = "28P01"

	// partitionGoneCode: pushOneTripSQL found a partition deleted since the
	// partition cache learned it; the one-trip write reports errPartitionGone.
	partitionGoneCode = "LN001"
	// stalePopPlanCode: the claim statement no longer confirms a cached pop
	// plan (errStalePopPlan).
	stalePopPlanCode = "LN002"
	// ackLeaseMismatchCode: a bundle's one-statement ack found the cursor
	// other than the lease index says.
	ackLeaseMismatchCode = "LN003"
)

// SQLSTATE classes (the first two characters of a code).
const (
	classConnectionException = "08"
	classDataException       = "22"
	classInsufficientRes     = "53"
	classProgramLimit        = "54"
	classOperatorIntervened  = "57"
	classSystemError         = "58"
)

// sqlState returns the SQLSTATE of the PostgreSQL error err wraps, or "" when
// err carries none (a network failure, a context error, a Go error).
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// sqlStateClass returns the class of err's SQLSTATE, or "" when it has none.
// A code shorter than five characters (only a hand-built error has one) has
// no class rather than a panic.
func sqlStateClass(err error) string {
	if code := sqlState(err); len(code) == 5 {
		return code[:2]
	}
	return ""
}

// HasSQLState reports whether err carries a PostgreSQL error, that is whether
// the statement reached the server and the server answered it.
func HasSQLState(err error) bool { return sqlState(err) != "" }

// hasSQLState reports whether err carries the PostgreSQL error code.
func hasSQLState(err error, code string) bool { return sqlState(err) == code }

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
	if HasSQLState(err) {
		switch sqlState(err) {
		case sqlstateAdminShutdown, sqlstateCrashShutdown, sqlstateCannotConnectNow, sqlstateTooManyConnections:
			return true
		}
		return sqlStateClass(err) == classConnectionException
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

// LoginRefused returns the error of a server that answered but refuses the
// connection's database, role or password (SQLSTATE 3D000, 28000, 28P01):
// unlike an outage, waiting does not end it, the connection settings must change.
func LoginRefused(err error) (*pgconn.PgError, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return nil, false
	}
	switch pgErr.Code {
	case sqlstateInvalidCatalogName, sqlstateInvalidAuthorization, sqlstateInvalidPassword:
		return pgErr, true
	}
	return nil, false
}

// IsRetryable reports a transaction PostgreSQL aborted to resolve a conflict
// with another one (40001 serialization_failure, 40P01 deadlock_detected):
// running it again can succeed.
func IsRetryable(err error) bool {
	code := sqlState(err)
	return code == sqlstateSerializationFailure || code == sqlstateDeadlockDetected
}

// IsStatementTimeout reports a statement PostgreSQL canceled (57014
// query_canceled), which statement_timeout causes.
func IsStatementTimeout(err error) bool { return hasSQLState(err, sqlstateQueryCanceled) }

// IsUniqueViolation reports a write that broke the unique constraint named
// constraint (23505 unique_violation).
func IsUniqueViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlstateUniqueViolation && pgErr.ConstraintName == constraint
}

// IsServerFault reports a PostgreSQL error that says the database, not the
// statement's data, failed for now, so the same statement can succeed later:
// a retryable conflict (IsRetryable) or SQLSTATE class 08 (connection), 53
// (insufficient resources: disk full, out of memory, too many connections),
// 57 (operator intervention: shutdown, statement timeout) or 58 (system
// error). An error without a SQLSTATE is not one; IsUnreachable covers those.
func IsServerFault(err error) bool {
	if IsRetryable(err) {
		return true
	}
	switch sqlStateClass(err) {
	case classConnectionException, classInsufficientRes, classOperatorIntervened, classSystemError:
		return true
	}
	return false
}

// isDataError reports a PostgreSQL error caused by a value in the statement
// rather than by the database or the transaction: SQLSTATE class 22 (data
// exception: invalid byte sequence, value out of range) or 54 (program limit
// exceeded: index row too large).
func isDataError(err error) bool {
	class := sqlStateClass(err)
	return class == classDataException || class == classProgramLimit
}
