package engine

import (
	"errors"
	"fmt"
)

// ErrNotFound reports a missing queue, partition or lease.
var ErrNotFound = errors.New("not found")

// ErrPushesPaused refuses a transaction bundle that carries pushes while push
// maintenance is on: a push alone goes to the spool, but a bundle cannot be
// spooled without coming apart from its acks and riders.
var ErrPushesPaused = errors.New("push maintenance is on; send the bundle again once it is off")

// InvalidInputError is a caller mistake; Field names the offending input.
type InvalidInputError struct {
	Field   string
	Message string
}

func (e *InvalidInputError) Error() string { return e.Message }

func invalid(field, format string, args ...any) error {
	return &InvalidInputError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// CodedInputError is a caller mistake with its own stable wire code.
type CodedInputError struct {
	Code    string
	Message string
}

func (e *CodedInputError) Error() string { return e.Message }

func codedInvalid(code, format string, args ...any) error {
	return &CodedInputError{Code: code, Message: fmt.Sprintf(format, args...)}
}
