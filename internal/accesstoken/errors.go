package accesstoken

import (
	"errors"
	"net/http"
	"strings"
)

// Error codes. The first two are RFC 6750 bearer token error codes;
// "temporarily_unavailable" (borrowed from RFC 6749) says the token could
// not be judged right now (revocation data too stale, key store
// unreachable); "server_error" says the verifier is misconfigured.
const (
	CodeInvalidToken           = "invalid_token"
	CodeInsufficientScope      = "insufficient_scope"
	CodeTemporarilyUnavailable = "temporarily_unavailable"
	CodeServerError            = "server_error"
)

// Sentinels. Every *Error matches exactly one of them with errors.Is.
var (
	// ErrMalformed: not a compact JWS, bad base64 or JSON, wrong typ,
	// unexpected header parameters, a required claim missing or invalid
	// (including class), or several audiences.
	ErrMalformed = errors.New("accesstoken: malformed token")
	// ErrBadAlgorithm: the JWS alg is not EdDSA (none, HS256, RS256, ...).
	ErrBadAlgorithm = errors.New("accesstoken: signing algorithm not accepted")
	// ErrUnknownKey: no kid, or the kid is not a token key of the tenant the
	// token names.
	ErrUnknownKey = errors.New("accesstoken: unknown signing key")
	// ErrKeyRevoked: the signing key was revoked (compromised).
	ErrKeyRevoked = errors.New("accesstoken: signing key revoked")
	// ErrBadSignature: the signature does not verify.
	ErrBadSignature = errors.New("accesstoken: bad signature")
	// ErrWrongIssuer: iss is not the issuer of the token's tenant, or the
	// tenant is not one this verifier accepts.
	ErrWrongIssuer = errors.New("accesstoken: wrong issuer")
	// ErrWrongAudience: aud is not this resource.
	ErrWrongAudience = errors.New("accesstoken: wrong audience")
	// ErrExpired: exp has passed (beyond the leeway).
	ErrExpired = errors.New("accesstoken: token expired")
	// ErrNotYetValid: iat or nbf is in the future (beyond the leeway).
	ErrNotYetValid = errors.New("accesstoken: token not yet valid")
	// ErrLifetime: exp - iat is over MaxLifetime, or not positive.
	ErrLifetime = errors.New("accesstoken: token lifetime not allowed")
	// ErrRevoked: the grant or the person was revoked after the token was
	// issued.
	ErrRevoked = errors.New("accesstoken: token revoked")
	// ErrStale: the revocation data is staler than allowed; fail closed.
	ErrStale = errors.New("accesstoken: revocation data stale")
	// ErrUnavailable: the signing keys could not be read.
	ErrUnavailable = errors.New("accesstoken: verification temporarily unavailable")
	// ErrInsufficientScope: the token lacks a scope the request needs.
	ErrInsufficientScope = errors.New("accesstoken: insufficient scope")
	// ErrMisconfigured: the Verifier (or Issuer) is not set up correctly.
	ErrMisconfigured = errors.New("accesstoken: misconfigured")
)

// Error is what Verify and RequireScopes return.
type Error struct {
	// Code is CodeInvalidToken, CodeInsufficientScope,
	// CodeTemporarilyUnavailable or CodeServerError.
	Code string
	// Description is for humans; it never holds the token or values from
	// an unverified token.
	Description string
	// Scope, for CodeInsufficientScope, is the space-separated scopes the
	// request needs (the "scope" attribute of the challenge).
	Scope string

	kind error
}

func newError(kind error, description string) *Error {
	code := CodeInvalidToken
	switch kind {
	case ErrStale, ErrUnavailable:
		code = CodeTemporarilyUnavailable
	case ErrMisconfigured:
		code = CodeServerError
	case ErrInsufficientScope:
		code = CodeInsufficientScope
	}
	return &Error{Code: code, Description: description, kind: kind}
}

func (e *Error) Error() string {
	if e.Description == "" {
		return "accesstoken: " + e.Code
	}
	return "accesstoken: " + e.Code + ": " + e.Description
}

// Unwrap returns the sentinel the error matches.
func (e *Error) Unwrap() error { return e.kind }

// HTTPStatus is the status to answer with: 401 for invalid_token, 403 for
// insufficient_scope, 503 for temporarily_unavailable, 500 otherwise.
func (e *Error) HTTPStatus() int {
	switch e.Code {
	case CodeInvalidToken:
		return http.StatusUnauthorized
	case CodeInsufficientScope:
		return http.StatusForbidden
	case CodeTemporarilyUnavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// WWWAuthenticate returns the value of a WWW-Authenticate header for the
// error (RFC 6750 §3 with the RFC 9728 §5.1 resource_metadata parameter):
//
//	Bearer error="invalid_token", error_description="token expired", resource_metadata="https://broker.example/.well-known/oauth-protected-resource/mcp"
//
// scope="..." is added for insufficient_scope; resource_metadata is left out
// when resourceMetadataURL is empty. Values are quoted strings: '"' and '\'
// are backslash-escaped, and control and non-ASCII characters are replaced
// by '?', so nothing can break out of the header.
func (e *Error) WWWAuthenticate(resourceMetadataURL string) string {
	var b strings.Builder
	b.WriteString("Bearer")
	sep := " "
	param := func(name, value string) {
		b.WriteString(sep)
		sep = ", "
		b.WriteString(name)
		b.WriteString("=")
		writeQuoted(&b, value)
	}
	if e.Code != "" {
		param("error", e.Code)
	}
	if e.Description != "" {
		param("error_description", e.Description)
	}
	if e.Scope != "" {
		param("scope", e.Scope)
	}
	if resourceMetadataURL != "" {
		param("resource_metadata", resourceMetadataURL)
	}
	return b.String()
}

// Challenge returns the WWW-Authenticate value for a request that carried no
// token at all: per RFC 6750 §3.1 it names no error, only where to find the
// protected resource metadata and, if given, the scopes needed.
func Challenge(resourceMetadataURL string, scopes ...string) string {
	e := &Error{Scope: strings.Join(scopes, " ")}
	return e.WWWAuthenticate(resourceMetadataURL)
}

func writeQuoted(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

// RequireScopes checks that claims hold every one of scopes. If some are
// missing it returns an insufficient_scope *Error naming them, whose Scope
// is all of scopes (what the client must ask for, RFC 6750 §3). Nil claims
// give invalid_token.
func RequireScopes(claims *Claims, scopes ...string) error {
	if claims == nil {
		return newError(ErrMalformed, "no verified token")
	}
	var missing []string
	for _, want := range scopes {
		found := false
		for _, have := range claims.Scopes {
			if have == want {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, want)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	e := newError(ErrInsufficientScope, "the token lacks scope "+strings.Join(missing, " "))
	e.Scope = strings.Join(scopes, " ")
	return e
}

// BearerToken returns the token of an Authorization header value
// "Bearer <token>" (RFC 6750 §2.1; the scheme is case-insensitive). ok is
// false if the value is empty, of another scheme, or holds no single token.
func BearerToken(authorization string) (token string, ok bool) {
	const scheme = "bearer "
	if len(authorization) <= len(scheme) || !strings.EqualFold(authorization[:len(scheme)], scheme) {
		return "", false
	}
	token = strings.TrimLeft(authorization[len(scheme):], " ")
	if token == "" || strings.ContainsAny(token, " \t") {
		return "", false
	}
	return token, true
}
