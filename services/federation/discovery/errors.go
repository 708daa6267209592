package discovery

import (
	"errors"
	"fmt"
	"time"
)

// Stable codes of discovery's errors: callers branch on them and record
// them as the reason a message was refused or held.
const (
	// CodeUnreachable: no answer (connection refused, TLS failure,
	// timeout) or an answer other than 200.
	CodeUnreachable = "discovery_unreachable"
	// CodeInvalid: the answer is not a valid document, names another
	// domain or broker, or a broker URL that is not https.
	CodeInvalid = "discovery_invalid"
	// CodeTooLarge: the answer is longer than Config.MaxBytes.
	CodeTooLarge = "discovery_too_large"
	// CodeForbiddenTarget: the URL or the address dialled is not one
	// discovery may reach (plain http, a private or loopback address).
	CodeForbiddenTarget = "discovery_forbidden_target"
	// CodeRedirect: a redirect off the host, to plain http, or more than
	// maxRedirects of them.
	CodeRedirect = "discovery_redirect"
)

// Error is a failed lookup.
type Error struct {
	// Code is one of the Code constants.
	Code string
	// URL is the document's URL ("" for key lookups).
	URL string
	// Status is the HTTP status of the answer, 0 when there was none.
	Status int
	// Message says what went wrong, for people and logs.
	Message string
	// RetryAt, on an error answered from the cache, is when the next
	// lookup will try again.
	RetryAt time.Time
	// Cause is the underlying error, if any.
	Cause error
}

func (e *Error) Error() string {
	s := "discovery: " + e.Code
	if e.URL != "" {
		s += " " + e.URL
	}
	s += ": " + e.Message
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Cause }

// CodeOf returns the code of the *Error in err's chain, or "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func errorf(code, url string, cause error, format string, args ...any) *Error {
	return &Error{Code: code, URL: url, Message: fmt.Sprintf(format, args...), Cause: cause}
}
