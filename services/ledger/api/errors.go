package api

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/grpc/codes"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/services/ledger/storage"
)

// Error codes: stable, machine-readable values of "code" in every error
// answer (httpjson.Problem).
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

// A refused or failed read is an *httpjson.Error, for both transports: an
// HTTP status (mapped to a gRPC code), a code, a message for people, the
// authentication challenge or retry delay where they apply, and the cause
// (logged, never sent).
func badParam(format string, args ...any) *httpjson.Error {
	return httpjson.Errorf(http.StatusBadRequest, CodeInvalidParameter, format, args...)
}

func internal(cause error, what string) *httpjson.Error {
	return &httpjson.Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: what, Cause: cause}
}

// storageError maps a storage.Reader error. What the storage says is
// ErrInvalid can only be a bug here: every index and size is checked
// against a Head first, and logs only grow.
func storageError(err error, what string) *httpjson.Error {
	switch {
	case errors.Is(err, storage.ErrNoLog):
		return httpjson.Errorf(http.StatusNotFound, CodeNoLog, "your ledger has no entries yet")
	case errors.Is(err, storage.ErrNotHosted):
		return httpjson.Errorf(http.StatusNotFound, CodeNotHosted, "this broker does not keep ledgers of your domain")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		e := httpjson.Errorf(http.StatusServiceUnavailable, CodeNotReady, "%s took too long; try again", what)
		e.RetryAfter, e.Cause = 1, err
		return e
	}
	return internal(err, what+" failed")
}

// writeError answers an HTTP request with e, as problem details.
func writeError(w http.ResponseWriter, e *httpjson.Error) {
	w.Header().Add("Vary", "Authorization, Cookie")
	httpjson.WriteError(w, e)
}

// writeJSON answers with v. Ledgers are personal: nothing is cached
// (httpjson), and the answer depends on who asked.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Add("Vary", "Authorization, Cookie")
	httpjson.Write(w, status, v)
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
