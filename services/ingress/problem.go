package ingress

import (
	"errors"
	"net/http"
	"strings"

	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/services/ingress/inbox"
)

// The stable codes of Problem: the same refusal has the same code on every
// agent door (NLIP, MCP, REST). A binding adds codes only for what its own
// wire format gets wrong (its decoder), and the pointer into its own
// request.
const (
	// CodeAuthRequired: no credential at all. RFC 6750 §3.1 names no
	// error then (the challenge has none), but the answer needs a code:
	// the one the broker's other APIs (policy, ledger) use. A refused
	// credential answers with its RFC 6750 code (accesstoken.Code…).
	CodeAuthRequired = "authentication_required"
	// CodeRateLimited: over the agent's, the person's or the tenant's
	// rate (429, Retry-After).
	CodeRateLimited = "rate_limited"
	// CodeBudgetHalted: the agent's NMP budget is spent (422).
	CodeBudgetHalted = "nmp_budget_halted"
	// CodeIdempotencyKeyReused and CodeIdempotencyBodyMismatch: the
	// agent's idempotency key was used for another message (422).
	CodeIdempotencyKeyReused    = "idempotency_key_reused"
	CodeIdempotencyBodyMismatch = "idempotency_body_mismatch"
	// CodeEnvelopeTooLarge: the envelope would not fit the bus (413).
	CodeEnvelopeTooLarge = "envelope_too_large"
	// CodeSenderMismatch: the message names a sender other than the
	// credential's person (403).
	CodeSenderMismatch = "sender_mismatch"
	// CodeInvalidEnvelopeID: an envelope id that is not a UUID (400).
	CodeInvalidEnvelopeID = "invalid_envelope_id"
	// CodeInvalidMessage: a submission the send path refuses as it stands
	// (400, ErrInvalid).
	CodeInvalidMessage = "invalid_alp_message"
	// CodeUnknownEnvelope: the person sent no envelope of that id (404).
	CodeUnknownEnvelope = "unknown_envelope"
	// CodeNotFound: no such item in the person's inbox (404), whether it
	// does not exist or is another person's.
	CodeNotFound = "not_found"
	// CodeInvalidCursor and CodeInvalidLimit: a page the inbox cannot
	// give (400).
	CodeInvalidCursor = "invalid_cursor"
	CodeInvalidLimit  = "invalid_limit"
	// CodeInvalidRequest: an inbox request the agent must fix (400,
	// inbox.ErrInvalid: an acknowledgement of no items or too many).
	CodeInvalidRequest = "invalid_request"
	// CodeInboxUnavailable: the inbox cannot be read right now (503,
	// Retry-After).
	CodeInboxUnavailable = "inbox_unavailable"
	// CodeUnavailable: the broker cannot take or answer the request right
	// now (503, Retry-After): retry, a send with the same idempotency key.
	CodeUnavailable = "unavailable"
)

// Problem is the answer to an error of the send path, the inbox or the
// credential check, for every agent door: its status, stable code, message
// and, where they apply, the retry delay, the authentication challenge and
// a refused body's problems. An *httpjson.Error (a peer's answer,
// services/ingress/peers.go) passes as it is. What it does not know is a
// 503 to retry, with the error as the Cause to log: the send path's
// unexplained failures are the bus's and the projections', which pass.
//
// Problem never sets a pointer: where the fault is depends on the
// binding's request layout, so each binding adds its own.
func Problem(err error) *httpjson.Error {
	var he *httpjson.Error
	var auth *agentauth.Error
	var limited *RateLimited
	var halted *BudgetHalted
	var body *BodyError
	var cursor *inbox.CursorError
	var limit *inbox.LimitError
	switch {
	case errors.As(err, &he):
		return he
	case errors.As(err, &auth):
		e := &httpjson.Error{Status: auth.Status, Code: auth.Code, Message: auth.Description, Challenge: auth.Challenge}
		if e.Code == "" {
			e.Code = CodeAuthRequired
		}
		if auth.Status == http.StatusServiceUnavailable {
			e.RetryAfter = 1
		}
		return e
	case errors.As(err, &limited):
		e := httpjson.Errorf(http.StatusTooManyRequests, CodeRateLimited, "%s", limited.Description())
		e.RetryAfter = limited.RetryAfterSeconds()
		return e
	case errors.As(err, &halted):
		return httpjson.Errorf(http.StatusUnprocessableEntity, CodeBudgetHalted, "%s", halted.Description())
	case errors.As(err, &body):
		e := httpjson.Errorf(http.StatusUnprocessableEntity, body.Code, "%s", body.Description())
		if len(body.Errors) > 0 {
			e.Problems = body.Errors
		}
		return e
	case errors.Is(err, ErrUnknownType):
		return httpjson.Errorf(http.StatusNotFound, CodeUnknownMessageType, "%s", strings.TrimPrefix(err.Error(), "ingress: "))
	case errors.Is(err, ErrTypesUnavailable):
		return unavailableNow(err, "the broker cannot check message types right now; retry with the same idempotency key")
	case errors.Is(err, ErrIdempotencyBodyDiffers):
		return httpjson.Errorf(http.StatusUnprocessableEntity, CodeIdempotencyBodyMismatch, "%v", err)
	case errors.Is(err, ErrIdempotencyKeyReused):
		return httpjson.Errorf(http.StatusUnprocessableEntity, CodeIdempotencyKeyReused, "%v", err)
	case errors.Is(err, ErrTooLarge):
		return httpjson.Errorf(http.StatusRequestEntityTooLarge, CodeEnvelopeTooLarge, "%v", err)
	case errors.Is(err, ErrSenderMismatch):
		return httpjson.Errorf(http.StatusForbidden, CodeSenderMismatch, "%v", err)
	case errors.Is(err, ErrUnknownEnvelope):
		return httpjson.Errorf(http.StatusNotFound, CodeUnknownEnvelope, "no envelope of that id was sent by this person (or it is too old)")
	case errors.Is(err, ErrInvalidEnvelopeID):
		return httpjson.Errorf(http.StatusBadRequest, CodeInvalidEnvelopeID, "%v", err)
	case errors.Is(err, ErrInvalid), errors.Is(err, bus.ErrInvalidSubject):
		// A subject the bus refused is built from the request: retrying
		// the same request cannot help.
		return httpjson.Errorf(http.StatusBadRequest, CodeInvalidMessage, "%v", err)
	// The inbox. An item that is not the agent's person's is not found,
	// in the same words as one that does not exist.
	case errors.Is(err, inbox.ErrNotFound):
		return httpjson.Errorf(http.StatusNotFound, CodeNotFound, "no such item in this person's inbox")
	case errors.As(err, &cursor):
		return httpjson.Errorf(http.StatusBadRequest, CodeInvalidCursor,
			"the cursor is not one this inbox gave: pass back the next cursor of a page, unchanged")
	case errors.As(err, &limit):
		return httpjson.Errorf(http.StatusBadRequest, CodeInvalidLimit, "limit %d is out of range: 1 to %d items a page", limit.Limit, inbox.MaxPageSize)
	case errors.Is(err, inbox.ErrInvalid):
		return httpjson.Errorf(http.StatusBadRequest, CodeInvalidRequest, "%s", strings.TrimPrefix(err.Error(), "inbox: "))
	case errors.Is(err, inbox.ErrUnavailable):
		return &httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeInboxUnavailable, RetryAfter: 1, Cause: err,
			Message: "the inbox cannot be read right now; retry shortly"}
	}
	return unavailableNow(err, "the broker could not answer right now; retry (a send with the same idempotency key)")
}

func unavailableNow(cause error, msg string) *httpjson.Error {
	return &httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: 1, Message: msg, Cause: cause}
}
