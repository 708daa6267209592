package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"google.golang.org/grpc/codes"

	"github.com/alpd-project/alpd/services/ledger/storage"
)

// Error codes: stable, machine-readable values of "code" in every error
// answer ({"error":{"status":…,"code":…,"message":…}}).
const (
	CodeInvalidParameter       = "invalid_parameter"       // a query parameter is missing, malformed or unknown
	CodeOutOfRange             = "out_of_range"            // an index or size outside the log
	CodeInvalidCheckpoint      = "invalid_checkpoint"      // the checkpoint sent is not one of this log's, signed by its keys
	CodeCheckpointKeyRevoked   = "checkpoint_key_revoked"  // the checkpoint sent is signed only by a key revoked as compromised
	CodeCheckpointAhead        = "checkpoint_ahead"        // the checkpoint sent covers more entries than the log has
	CodeCheckpointInconsistent = "checkpoint_inconsistent" // the log disagrees with the checkpoint sent
	CodeBodyTooLarge           = "body_too_large"
	CodeAuthRequired           = "authentication_required" // no credential at all
	CodeBearerRequired         = "bearer_required"         // a web session cannot do this (non-GET)
	CodeNoLog                  = "no_log"                  // the person's ledger has no entry yet
	CodeNotHosted              = "tenant_not_hosted"
	CodeNotFound               = "not_found"
	CodeMethodNotAllowed       = "method_not_allowed"
	CodeTooManyExports         = "too_many_exports"   // every export slot of this process is taken
	CodeExportInProgress       = "export_in_progress" // the person already holds their share of export slots
	CodeCheckpointPending      = "checkpoint_pending" // entries exist but no checkpoint is signed yet
	CodeNotReady               = "not_ready"
	CodeInternal               = "internal_error"
)

// Error is a refused or failed read, for both transports: an HTTP status
// (mapped to a gRPC code), a code, a message for people, and the
// authentication challenge or retry delay where they apply.
type Error struct {
	Status  int
	Code    string
	Message string
	// Challenge is the WWW-Authenticate value of a 401 or 403.
	Challenge string
	// RetryAfter, in seconds, for 429 and 503.
	RetryAfter int
	// cause is logged, never sent.
	cause error
}

func (e *Error) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("ledger api: %d %s: %s: %v", e.Status, e.Code, e.Message, e.cause)
	}
	return fmt.Sprintf("ledger api: %d %s: %s", e.Status, e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.cause }

func newError(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func badParam(format string, args ...any) *Error {
	return newError(http.StatusBadRequest, CodeInvalidParameter, format, args...)
}

func internal(cause error, what string) *Error {
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: what, cause: cause}
}

// storageError maps a storage.Reader error. What the storage says is
// ErrInvalid can only be a bug here: every index and size is checked
// against a Head first, and logs only grow.
func storageError(err error, what string) *Error {
	switch {
	case errors.Is(err, storage.ErrNoLog):
		return newError(http.StatusNotFound, CodeNoLog, "your ledger has no entries yet")
	case errors.Is(err, storage.ErrNotHosted):
		return newError(http.StatusNotFound, CodeNotHosted, "this broker does not keep ledgers of your domain")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		e := newError(http.StatusServiceUnavailable, CodeNotReady, "%s took too long; try again", what)
		e.RetryAfter, e.cause = 1, err
		return e
	}
	return internal(err, what+" failed")
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Status     int    `json:"status"`
	Code       string `json:"code"`
	Message    string `json:"message"`
	RetryAfter int    `json:"retry_after,omitempty"`
}

// writeError answers an HTTP request with e.
func writeError(w http.ResponseWriter, e *Error) {
	h := w.Header()
	if e.Challenge != "" {
		h.Set("WWW-Authenticate", e.Challenge)
	}
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, e.Status, errorBody{Error: errorDetail{Status: e.Status, Code: e.Code, Message: e.Message, RetryAfter: e.RetryAfter}})
}

// writeJSON answers with v. Ledgers are personal: nothing is cached, and
// the answer depends on who asked.
func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Add("Vary", "Authorization, Cookie")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// grpcCode maps an HTTP status to the gRPC code that means the same.
func grpcCode(status int) codes.Code {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusConflict:
		return codes.FailedPrecondition
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	}
	return codes.Internal
}
