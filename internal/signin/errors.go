package signin

import (
	"net/http"

	"github.com/alpd-project/alpd/internal/httpjson"
)

// Error codes. They are stable, machine-readable values of the "code"
// member of every error answer (httpjson.Problem).
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

// Every error answer of this package is an *httpjson.Error with one of
// the codes above, answered by httpjson.WriteError as problem details.
// Messages never contain tokens, codes or cookie values.
//
// A Binder or RefreshKeeper may return an *httpjson.Error (directly or
// wrapped) to choose the answer; any other error becomes a 500.
func newError(status int, code, msg string) *httpjson.Error {
	return &httpjson.Error{Status: status, Code: code, Message: msg}
}

// ErrNoSession is returned by Session when the request carries no session
// cookie.
var ErrNoSession = newError(http.StatusUnauthorized, CodeSigninRequired, "sign in first")
