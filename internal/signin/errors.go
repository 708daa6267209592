package signin

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
)

// Error codes. They are stable, machine-readable values of the "code"
// member of every error answer ({"error":{"code":…,"message":…}}).
const (
	// Request problems.
	CodeMethodNotAllowed = "method_not_allowed"
	CodeUnknownTenant    = "unknown_tenant"
	CodeTenantRequired   = "tenant_required"
	CodeInvalidReturn    = "invalid_return"
	CodeInvalidRequest   = "invalid_request"

	// Callback problems.
	CodeStateInvalid       = "signin_state_invalid"       // no, expired or foreign sign-in cookie; start again
	CodeIdPDenied          = "idp_access_denied"          // the IdP answered error=access_denied
	CodeIdPLoginRequired   = "idp_login_required"         // the IdP answered login_required / interaction_required …
	CodeIdPError           = "idp_error"                  // the IdP answered another error at the redirect
	CodeCodeMissing        = "code_missing"               // callback without ?code
	CodeExchangeFailed     = "code_exchange_failed"       // the token endpoint refused the code
	CodeIdPUnavailable     = "idp_unavailable"            // the token endpoint answered 5xx / temporarily_unavailable
	CodeIdPUnreachable     = "idp_unreachable"            // the IdP could not be reached
	CodeIDTokenMissing     = "id_token_missing"           // no ID token in the token response
	CodeIDTokenInvalid     = "id_token_invalid"           // the ID token failed verification (issuer, audience, signature, nonce …)
	CodeTenantMismatch     = "tenant_mismatch"            // "tid" is not the tenant's pinned IdP tenant id
	CodeNotFresh           = "signin_not_fresh"           // a fresh sign-in whose auth_time is too old
	CodeNoOfflineAccess    = "offline_access_not_granted" // no refresh token although offline_access was asked for
	CodeBindFailed         = "bind_failed"                // the Binder failed
	CodeRefreshKeepFailed  = "refresh_token_not_kept"     // the RefreshKeeper failed
	CodeSessionTooLarge    = "session_too_large"          // the session does not fit in a cookie (too many roles)
	CodeInternal           = "internal_error"             // anything else on our side
	CodeAddressUnresolved  = "address_unresolved"         // no rule yields an address
	CodeAddressDomain      = "address_domain_not_verified"
	CodeEmailNotVerified   = "email_not_verified"
	CodeEmailDomain        = "email_domain_not_allowed"
	CodeAddressClaimFormat = "address_claim_invalid" // the immutable claim or email is not a well-formed address
	CodeAddressTaken       = "address_taken"         // the address belongs to a person bound to another IdP account (an operator re-binds it)

	// Session and CSRF problems.
	CodeSigninRequired      = "signin_required"
	CodeSessionInvalid      = "session_invalid"
	CodeSessionExpired      = "session_expired"
	CodeSessionRevoked      = "session_revoked"      // signed out, or revoked by an operator
	CodeSessionsUnavailable = "sessions_unavailable" // the session records cannot be read now
	CodeFreshSigninRequired = "fresh_signin_required"
	CodeCSRFOrigin          = "csrf_origin_mismatch"
	CodeCSRFOriginMissing   = "csrf_origin_missing"
	CodeCSRFToken           = "csrf_token_invalid"
)

// Error is an error with an HTTP status and a machine-readable code. Every
// error answer of this package is one, written as
// {"error":{"code":…,"message":…}}. Messages never contain tokens, codes or
// cookie values.
//
// A Binder or RefreshKeeper may return an *Error (directly or wrapped) to
// choose the answer; any other error becomes a 500.
type Error struct {
	Status  int
	Code    string
	Message string
	// RetryAfter, when positive, is sent as a Retry-After header (seconds).
	RetryAfter int
}

func (e *Error) Error() string { return "signin: " + e.Code + ": " + e.Message }

func newError(status int, code, msg string) *Error {
	return &Error{Status: status, Code: code, Message: msg}
}

// ErrNoSession is returned by Session when the request carries no session
// cookie.
var ErrNoSession = newError(http.StatusUnauthorized, CodeSigninRequired, "sign in first")

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// WriteError answers err as JSON. An *Error (also wrapped) gives the status,
// code and message; anything else is a 500 internal_error whose message
// does not reveal err.
func WriteError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = newError(http.StatusInternalServerError, CodeInternal, "internal error")
	}
	var b errorBody
	b.Error.Code = e.Code
	b.Error.Message = e.Message
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	status := e.Status
	if status < 400 || status > 599 {
		status = http.StatusInternalServerError
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(b)
}
