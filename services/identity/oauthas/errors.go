package oauthas

import (
	"net/http"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// OAuth error codes that package oidc has no constructor for.
const (
	// CodeInvalidTarget: RFC 8707 §2 — the resource is missing, unknown,
	// malformed or not the one authorized.
	CodeInvalidTarget = "invalid_target"
	// CodeUnsupportedResponseType: RFC 6749 §4.1.2.1.
	CodeUnsupportedResponseType = "unsupported_response_type"
	// CodeTemporarilyUnavailable: RFC 6749 §4.1.2.1; at the token endpoint
	// it is answered with status 503.
	CodeTemporarilyUnavailable = "temporarily_unavailable"
)

// Error descriptions never contain tokens, codes, secrets or other request
// values (RFC 6749 restricts their characters, and op logs them).

func invalidTarget(desc string) *oidc.Error {
	e := oidc.ErrInvalidRequest().WithDescription("%s", desc)
	e.ErrorType = CodeInvalidTarget
	return e
}

func unsupportedResponseType(desc string) *oidc.Error {
	e := oidc.ErrInvalidRequest().WithDescription("%s", desc)
	e.ErrorType = CodeUnsupportedResponseType
	return e
}

func temporarilyUnavailable(desc string) *oidc.Error {
	e := oidc.ErrServerError().WithDescription("%s", desc)
	e.ErrorType = CodeTemporarilyUnavailable
	return e
}

// unavailable is temporarily_unavailable with status 503, for the token and
// revocation endpoints.
func unavailable(desc string) error {
	return op.NewStatusError(temporarilyUnavailable(desc), http.StatusServiceUnavailable)
}

// invalidClient is invalid_client with status 401 (RFC 6749 §5.2).
func invalidClient(desc string) error {
	return op.NewStatusError(oidc.ErrInvalidClient().WithDescription("%s", desc), http.StatusUnauthorized)
}

// serverError is server_error; the cause is logged by the caller, never
// sent.
func serverError() error {
	return op.NewStatusError(oidc.ErrServerError().WithDescription("internal error"), http.StatusInternalServerError)
}

const (
	descBadCode    = "the authorization code is invalid, expired or was already used"
	descBadRefresh = "the refresh token is invalid, expired or revoked"
)

func invalidGrant(desc string) error { return oidc.ErrInvalidGrant().WithDescription("%s", desc) }
