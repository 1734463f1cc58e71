package topology

import (
	"errors"
	"fmt"
)

var (
	// ErrMalformed reports a sysfs file whose content could not be parsed or
	// contradicts another file.
	ErrMalformed = errors.New("malformed topology data")
	// ErrMissing reports a file that discovery needs but could not read.
	// The wrapped error also satisfies errors.Is(err, fs.ErrNotExist) when
	// the file does not exist.
	ErrMissing = errors.New("missing topology data")
)

// ParseError carries the file and the offending value of a failed parse.
// Its Err wraps ErrMalformed (or ErrMissing), so callers test with
// errors.Is(err, ErrMalformed) and reach the path with errors.As.
type ParseError struct {
	// Path is the file that was read, as seen from the sysfs root given to
	// discovery (the root is included when discovery was given one).
	Path string
	// Value is the raw content that failed to parse, possibly shortened.
	Value string
	// Err is the underlying error.
	Err error
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%s: value %q: %v", e.Path, e.Value, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// shorten keeps error messages bounded when a file holds garbage.
func shorten(s string) string {
	const maxLen = 64
	if len(s) <= maxLen {
		return s
	}
	return s[:maxLen] + "..."
}
