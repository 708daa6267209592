package restapi

import (
	"errors"
	"net/http"
	"slices"

	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/inbox"
)

// The stable codes of this API's problems. Clients branch on them; the
// OpenAPI document's Problem schema lists exactly these (a test checks both
// ways), so a generated client knows every one. Those of the send path,
// the inbox and the credential check are every door's (ingress.Problem);
// the others are this API's own.
const (
	// Credentials: none at all, or refused with the RFC 6750 codes, each
	// with the challenge.
	CodeAuthRequired           = ingress.CodeAuthRequired
	CodeInvalidToken           = accesstoken.CodeInvalidToken
	CodeInsufficientScope      = accesstoken.CodeInsufficientScope
	CodeTemporarilyUnavailable = accesstoken.CodeTemporarilyUnavailable
	CodeRateLimited            = ingress.CodeRateLimited
	// CodeInvalidRequest: the request is not what the route takes (not
	// JSON, a member missing, of the wrong type or unknown, an
	// acknowledgement of no items or too many); the pointer names the
	// member.
	CodeInvalidRequest = ingress.CodeInvalidRequest
	// CodeInvalidMessage: a message the send path refuses as it stands,
	// past what this API checks itself.
	CodeInvalidMessage = ingress.CodeInvalidMessage
	// CodeUnsupportedMediaType: a body that is not application/json.
	CodeUnsupportedMediaType = "unsupported_media_type"
	// CodeSenderMismatch: the request names a sender ("from") other than
	// the credential's person. The sender is always the credential's.
	CodeSenderMismatch          = ingress.CodeSenderMismatch
	CodeInvalidIdempotencyKey   = "invalid_idempotency_key"
	CodeIdempotencyKeyReused    = ingress.CodeIdempotencyKeyReused
	CodeIdempotencyBodyMismatch = ingress.CodeIdempotencyBodyMismatch
	// CodeUnknownMessageType: a send of a type no one registered, or a
	// type's schema asked for that does not exist or is another
	// organization's.
	CodeUnknownMessageType = ingress.CodeUnknownMessageType
	CodeInvalidBody        = ingress.CodeInvalidBody
	CodeEnvelopeTooLarge   = ingress.CodeEnvelopeTooLarge
	CodeBodyTooLarge       = httproute.CodeBodyTooLarge
	CodeInvalidEnvelopeID  = ingress.CodeInvalidEnvelopeID
	CodeUnknownEnvelope    = ingress.CodeUnknownEnvelope
	CodeInvalidCursor      = ingress.CodeInvalidCursor
	CodeInvalidLimit       = ingress.CodeInvalidLimit
	// CodeNotFound: no such inbox item, or no route at the path.
	CodeNotFound         = ingress.CodeNotFound
	CodeMethodNotAllowed = "method_not_allowed"
	CodeTenantNotHosted  = "tenant_not_hosted"
	// CodeUnavailable: the broker cannot take or answer the request right
	// now (503, Retry-After): retry, with the same idempotency key.
	CodeUnavailable       = ingress.CodeUnavailable
	CodeInboxUnavailable  = ingress.CodeInboxUnavailable
	CodePolicyUnavailable = ingress.CodePolicyUnavailable
	CodeInternal          = httpjson.CodeInternal
)

// Codes are every code this package answers, sorted.
func Codes() []string {
	c := []string{
		CodeAuthRequired, CodeInvalidToken, CodeInsufficientScope, CodeTemporarilyUnavailable, CodeRateLimited,
		CodeInvalidRequest, CodeInvalidMessage, CodeUnsupportedMediaType, CodeSenderMismatch, CodeInvalidIdempotencyKey,
		CodeIdempotencyKeyReused, CodeIdempotencyBodyMismatch, CodeUnknownMessageType, CodeInvalidBody,
		CodeEnvelopeTooLarge, CodeBodyTooLarge, CodeInvalidEnvelopeID, CodeUnknownEnvelope,
		CodeInvalidCursor, CodeInvalidLimit, CodeNotFound, CodeMethodNotAllowed, CodeTenantNotHosted,
		CodeUnavailable, CodeInboxUnavailable, CodePolicyUnavailable, CodeInternal,
	}
	slices.Sort(c)
	return slices.Compact(c)
}

func pointed(status int, code, pointer, format string, args ...any) *httpjson.Error {
	e := httpjson.Errorf(status, code, format, args...)
	e.Pointer = pointer
	return e
}

// classify turns an error of the send path, the inbox or the credential
// check into the answer every door gives (ingress.Problem), with the
// pointers into this API's requests.
func classify(err error) *httpjson.Error {
	e := ingress.Problem(err)
	switch {
	case errors.Is(err, ingress.ErrSenderMismatch):
		e.Message += "; leave out from, or name that address"
		e.Pointer = "/from"
	case errors.Is(err, inbox.ErrInvalid):
		e.Pointer = "/ids"
	}
	return e
}

// fail answers e, logging what the agent is not told.
func (a *API) fail(w http.ResponseWriter, r *http.Request, e *httpjson.Error) {
	if e.Status >= 500 && e.Cause != nil {
		a.log.WarnContext(r.Context(), "rest api: request failed", "method", r.Method, "path", r.URL.Path, "code", e.Code, "err", e.Cause)
	}
	httpjson.WriteError(w, e)
}

// admit authenticates the request's agent through the door (credential,
// trust, rate limits) and checks the scope the route needs (a door check:
// Door.MayRead, Door.MaySend, or either): a credential without it is
// refused with 403 insufficient_scope and the challenge naming the scope,
// before anything else is read or changed.
func (a *API) admit(w http.ResponseWriter, r *http.Request, need func(*ingress.Door, ingress.Sender) error) (ingress.Sender, bool) {
	snd, err := a.door.Admit(r.Context(), r.Header.Get("Authorization"))
	if err == nil {
		err = need(a.door, snd)
	}
	if err != nil {
		a.fail(w, r, classify(err))
		return ingress.Sender{}, false
	}
	return snd, true
}

// What a route needs of the credential.
var (
	// mayRead: the person's data (inbox, connections).
	mayRead = (*ingress.Door).MayRead
	// maySend: sending, asking to connect.
	maySend = (*ingress.Door).MaySend
	// mayReply: a reply sends and reads the item it answers.
	mayReply = (*ingress.Door).MayReply
	// maySendOrRead: what a sender needs to send right, the message types
	// and the outcome of its own sends (a send-only credential must be
	// able to poll a pending send).
	maySendOrRead = func(d *ingress.Door, snd ingress.Sender) error {
		if d.MaySend(snd) == nil {
			return nil
		}
		return d.MayRead(snd)
	}
)
