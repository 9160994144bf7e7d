package log

import (
	"errors"
	"fmt"
)

var (
	// ErrCompacted is returned when an index below the first one the log
	// holds is requested; those records were removed by DeletePrefix or
	// Reset.
	ErrCompacted = errors.New("log: requested index is compacted")

	// ErrUnavailable is returned when an index above LastIndex is requested.
	ErrUnavailable = errors.New("log: requested index is unavailable")

	// ErrClosed is returned by every operation on a closed Log.
	ErrClosed = errors.New("log: closed")
)

// CorruptionError reports damage found in a segment file: a bad header, a
// record whose checksum does not match, or records that do not follow one
// another. The log refuses to open (or to serve the damaged range) rather
// than silently drop data.
type CorruptionError struct {
	File   string // path of the damaged segment file
	Offset int64  // byte offset of the damaged header or record
	Reason string // what is wrong
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("log corrupted: %s at byte offset %d: %s", e.File, e.Offset, e.Reason)
}

func corruptf(file string, off int64, format string, args ...any) *CorruptionError {
	return &CorruptionError{File: file, Offset: off, Reason: fmt.Sprintf(format, args...)}
}
