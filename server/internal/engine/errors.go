package engine

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
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

// CorruptSegmentError reports a stored segment whose frames no longer decode
// (tampering, or a bug): its messages cannot be delivered or listed. Its text
// names the queue and the partition; the offsets, which never go on the wire,
// are in the fields and in the broker's log line.
type CorruptSegmentError struct {
	Queue, Partition string
	PartitionID      uuid.UUID
	// SegmentBase and SegmentEnd are the segment's first and last offsets.
	SegmentBase, SegmentEnd int64
	Err                     error
}

func (e *CorruptSegmentError) Error() string {
	return fmt.Sprintf("queue %q partition %q (%s): a stored segment of its messages does not decode (%v)",
		e.Queue, e.Partition, e.PartitionID, e.Err)
}

func (e *CorruptSegmentError) Unwrap() error { return e.Err }

// logAttrs are the details the broker logs of e.
func (e *CorruptSegmentError) logAttrs() []any {
	return []any{"queue", e.Queue, "partition", e.Partition, "partitionId", e.PartitionID,
		"segmentBase", e.SegmentBase, "segmentEnd", e.SegmentEnd}
}
