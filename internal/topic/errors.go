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
// Its cause, when it has one, is the error of the package that found the
// fault (such as a *filter.Error), kept for callers that need the detail.
type invalidError struct {
	msg   string
	cause error
}

func (e *invalidError) Error() string { return e.msg }

func (e *invalidError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrInvalid}
	}
	return []error{ErrInvalid, e.cause}
}

func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

// invalidCause is invalidf for a fault that cause, another package's
// error, describes; the message should include it.
func invalidCause(cause error, format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...), cause: cause}
}
