package topic

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every error that rejects a name, an attribute or
// an id. Test for it with errors.Is.
var ErrInvalid = errors.New("invalid argument")

// invalidError carries a complete, self-explanatory message and matches
// ErrInvalid under errors.Is. A plain fmt.Errorf("%w: ...") would prefix
// every message with "invalid argument: ", which adds nothing for a reader.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }
func (e *invalidError) Unwrap() error { return ErrInvalid }

func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}
