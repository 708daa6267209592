package alp

import (
	"errors"
	"fmt"
)

// Every refusal wraps one of these, so callers can tell which value was bad.
var (
	ErrInvalidTenant   = errors.New("invalid tenant")
	ErrInvalidAddress  = errors.New("invalid address")
	ErrInvalidPersonID = errors.New("invalid person id")
)

// Error says why a string is not a valid value. Callers with their own
// wording (configuration) print Reason after the value; the rest use the
// error as it is.
type Error struct {
	// Kind is ErrInvalidTenant, ErrInvalidAddress or ErrInvalidPersonID.
	Kind error
	// Input is the refused string, as given.
	Input string
	// Reason completes the sentence `"<input>" <reason>`, e.g. "must be
	// lowercase".
	Reason string
}

func (e *Error) Error() string { return fmt.Sprintf("%v: %s %s", e.Kind, quote(e.Input), e.Reason) }

func (e *Error) Unwrap() error { return e.Kind }

// quote renders untrusted input for an error message: quoted, so no control
// character reaches a terminal or log, and truncated, so a huge input does
// not make a huge message.
func quote(s string) string {
	const max = 80
	if len(s) > max {
		return fmt.Sprintf("%q…", s[:max])
	}
	return fmt.Sprintf("%q", s)
}
