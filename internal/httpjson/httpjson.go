// Package httpjson writes the broker's JSON answers and its errors, so that
// every HTTP surface (the broker's own, identity's, the ledger's, the agent
// bindings') sends the same headers and the same error shape.
//
// An answer ([Write]) is application/json with X-Content-Type-Options:
// nosniff and, because nearly everything the broker answers is personal, a
// secret or live state, Cache-Control: no-store. Only public documents that
// caches may keep (discovery metadata) use [WritePublic].
//
// An error is an [*Error]: an HTTP status, a stable machine-readable code,
// a message for people, and the Retry-After and WWW-Authenticate values
// that go with it. [WriteError] sends it as RFC 9457 problem details
// (application/problem+json, see [Problem]). Bindings with an error shape
// of their own (NLIP answers an NLIP message) build on the same *Error and
// write its headers with [Error.SetHeaders].
//
// OAuth protocol endpoints keep the RFC 6749 / RFC 7591 error object
// ({"error","error_description"}): OAuth clients parse exactly that.
package httpjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Media types.
const (
	MediaJSON    = "application/json"
	MediaProblem = "application/problem+json"
)

// CodeInternal is the code of an error the broker does not explain.
const CodeInternal = "internal_error"

// NoStore marks an answer as not to be kept by any cache (RFC 9111 §5.2.2.5;
// Pragma for HTTP/1.0 caches, as RFC 6749 §5.1 asks of token answers) and
// not to be sniffed as another media type. JSON answers get it from Write;
// other personal answers (a streamed export, an empty 204) call it.
func NoStore(h http.Header) {
	h.Set("Cache-Control", "no-store")
	h.Set("Pragma", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
}

// Write answers v as JSON with status, not to be cached (see NoStore).
func Write(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	NoStore(h)
	write(w, MediaJSON, status, v)
}

// WritePublic answers a public document (discovery metadata) that caches
// may keep for maxAge; a HEAD request gets the headers only.
func WritePublic(w http.ResponseWriter, r *http.Request, v any, maxAge time.Duration) {
	b, err := encode(v)
	if err != nil {
		WriteError(w, fmt.Errorf("httpjson: encode: %w", err))
		return
	}
	h := w.Header()
	h.Set("Content-Type", MediaJSON)
	h.Set("Cache-Control", "public, max-age="+strconv.Itoa(int(maxAge.Seconds())))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}

func write(w http.ResponseWriter, media string, status int, v any) {
	b, err := encode(v)
	if err != nil {
		// Our own values always encode; if one does not, say so without
		// the half-written value.
		b, _ = encode(internalProblem())
		media, status = MediaProblem, http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", media)
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// encode is JSON with a trailing newline. HTML characters stay as they are:
// the answer is never HTML (nosniff), and URLs in it stay readable.
func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Error is a refused or failed request.
type Error struct {
	// Status is the HTTP status (4xx or 5xx).
	Status int
	// Code is stable and machine-readable: clients branch on it.
	Code string
	// Message is for people; it never holds a secret.
	Message string
	// Pointer is the JSON pointer (RFC 6901) of the part of the request at
	// fault, where there is one.
	Pointer string
	// RetryAfter, in seconds, is sent as Retry-After (429, 503).
	RetryAfter int
	// Challenge is the WWW-Authenticate value of a 401 or 403.
	Challenge string
	// Problems, when set, lists every problem of a refused input (each a
	// JSON object with its own code and position, such as a rule set's
	// parse errors with line and column), so a client fixes them all in
	// one round; it is sent as the problem's "problems" member.
	Problems any
	// Cause is logged by whoever answers, never sent.
	Cause error
}

// Errorf is an error with status, code and a formatted message.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("%d %s: %s: %v", e.Status, e.Code, e.Message, e.Cause)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Cause }

// SetHeaders sets the headers that go with e: Retry-After and
// WWW-Authenticate.
func (e *Error) SetHeaders(h http.Header) {
	if e.Challenge != "" {
		h.Set("WWW-Authenticate", e.Challenge)
	}
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
}

// Problem is the body of every error answer: RFC 9457 problem details with
// the "about:blank" type (so Title is the status's text) and the extension
// members code, pointer, retry_after and problems.
type Problem struct {
	// Type is omitted ("about:blank"): Code tells problems apart.
	Type       string `json:"type,omitempty"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail,omitempty"`
	Code       string `json:"code"`
	Pointer    string `json:"pointer,omitempty"`
	RetryAfter int    `json:"retry_after,omitempty"`
	// Problems is Error.Problems.
	Problems any `json:"problems,omitempty"`
	// Error repeats status, code and message in the shape alpd answered
	// before it sent problem details ({"error":{"code","message"}}), which
	// its clients read.
	Error ErrorMember `json:"error"`
}

// ErrorMember is Problem's "error" member.
type ErrorMember struct {
	Status     int    `json:"status"`
	Code       string `json:"code"`
	Message    string `json:"message"`
	RetryAfter int    `json:"retry_after,omitempty"`
}

// Problem is e as problem details. A status outside 400–599 becomes 500.
func (e *Error) Problem() Problem {
	status := e.Status
	if status < 400 || status > 599 {
		status = http.StatusInternalServerError
	}
	return Problem{
		Title: http.StatusText(status), Status: status, Detail: e.Message, Code: e.Code, Pointer: e.Pointer, RetryAfter: e.RetryAfter,
		Problems: e.Problems,
		Error:    ErrorMember{Status: status, Code: e.Code, Message: e.Message, RetryAfter: e.RetryAfter},
	}
}

func internalProblem() Problem {
	return (&Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"}).Problem()
}

// WriteError answers err as problem details. An *Error (also wrapped)
// gives the status, code, message and headers; anything else is a 500
// internal_error whose message does not reveal err.
func WriteError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"}
	}
	h := w.Header()
	e.SetHeaders(h)
	NoStore(h)
	p := e.Problem()
	write(w, MediaProblem, p.Status, p)
}
