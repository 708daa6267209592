package agentauth

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/identitystore"
)

// Errors of PATVerifier.Verify; each *PATError matches one with errors.Is.
var (
	// ErrInvalidPAT: malformed, unknown, or not the token on record.
	ErrInvalidPAT = errors.New("agentauth: invalid personal access token")
	// ErrPATExpired: past its expiry.
	ErrPATExpired = errors.New("agentauth: personal access token expired")
	// ErrPATRevoked: revoked, or its person's agents were revoked.
	ErrPATRevoked = errors.New("agentauth: personal access token revoked")
	// ErrInsufficientScope: the token lacks a required scope.
	ErrInsufficientScope = errors.New("agentauth: insufficient scope")
	// ErrPATUnavailable: the revocation projection is stale (fail closed).
	ErrPATUnavailable = errors.New("agentauth: personal access token verification unavailable")
)

// PATError is a refused personal access token. Its messages never contain
// the token.
type PATError struct {
	// Code is the RFC 6750 error: invalid_token, insufficient_scope or
	// temporarily_unavailable.
	Code        string
	Description string
	// Scope, for insufficient_scope, is every required scope (space-separated).
	Scope string
	kind  error
}

func (e *PATError) Error() string { return "agentauth: " + e.Code + ": " + e.Description }

// Unwrap is the sentinel the error matches.
func (e *PATError) Unwrap() error { return e.kind }

// HTTPStatus is 401 for invalid_token, 403 for insufficient_scope, 503 for
// temporarily_unavailable.
func (e *PATError) HTTPStatus() int {
	switch e.Code {
	case "insufficient_scope":
		return http.StatusForbidden
	case "temporarily_unavailable":
		return http.StatusServiceUnavailable
	}
	return http.StatusUnauthorized
}

func patError(kind error, desc string) *PATError {
	code := "invalid_token"
	switch kind {
	case ErrInsufficientScope:
		code = "insufficient_scope"
	case ErrPATUnavailable:
		code = "temporarily_unavailable"
	}
	return &PATError{Code: code, Description: desc, kind: kind}
}

// DefaultPATMaxStaleness is how stale the store may be before
// PATVerifier fails closed.
const DefaultPATMaxStaleness = time.Minute

// PATVerifier checks personal access tokens against the store.
type PATVerifier struct {
	Store *identitystore.Store
	// Tenants are the hosted tenants VerifyAny tries, in order.
	Tenants []string
	// MaxStaleness of the store before verification fails closed
	// (ErrPATUnavailable); default DefaultPATMaxStaleness, negative: not
	// checked.
	MaxStaleness time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Verify checks token as a PAT of tenant holding every one of
// requiredScopes, and returns its record. Errors are *PATError.
func (v PATVerifier) Verify(ctx context.Context, tenant, token string, requiredScopes ...string) (identitystore.PAT, error) {
	id, hash, err := v.parse(token)
	if err != nil {
		return identitystore.PAT{}, err
	}
	if err := v.fresh(); err != nil {
		return identitystore.PAT{}, err
	}
	p, ok := v.lookup(tenant, id, hash)
	if !ok {
		return identitystore.PAT{}, patError(ErrInvalidPAT, "unknown personal access token")
	}
	return v.check(p, requiredScopes)
}

// VerifyAny is Verify for a token whose tenant the caller does not know:
// it tries each of Tenants (see the package doc).
func (v PATVerifier) VerifyAny(ctx context.Context, token string, requiredScopes ...string) (identitystore.PAT, error) {
	id, hash, err := v.parse(token)
	if err != nil {
		return identitystore.PAT{}, err
	}
	if err := v.fresh(); err != nil {
		return identitystore.PAT{}, err
	}
	for _, t := range v.Tenants {
		if p, ok := v.lookup(t, id, hash); ok {
			return v.check(p, requiredScopes)
		}
	}
	return identitystore.PAT{}, patError(ErrInvalidPAT, "unknown personal access token")
}

func (v PATVerifier) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

func (v PATVerifier) parse(token string) (string, identitystore.Hash, error) {
	if v.Store == nil {
		return "", identitystore.Hash{}, patError(ErrPATUnavailable, "no store configured")
	}
	id, hashHex, err := accesstoken.ParsePAT(token)
	if err != nil {
		return "", identitystore.Hash{}, patError(ErrInvalidPAT, "malformed personal access token")
	}
	hash, err := identitystore.ParseHash(hashHex)
	if err != nil {
		return "", identitystore.Hash{}, patError(ErrInvalidPAT, "malformed personal access token")
	}
	return id, hash, nil
}

func (v PATVerifier) fresh() error {
	ms := v.MaxStaleness
	if ms == 0 {
		ms = DefaultPATMaxStaleness
	}
	if ms < 0 {
		return nil
	}
	if err := v.Store.Fresh(ms); err != nil {
		return patError(ErrPATUnavailable, "revocation data is stale; try again shortly")
	}
	return nil
}

// lookup finds the PAT by id and compares the token's hash in constant
// time.
func (v PATVerifier) lookup(tenant, id string, hash identitystore.Hash) (identitystore.PAT, bool) {
	p, err := v.Store.PAT(tenant, id)
	if err != nil || p.ID != id {
		return identitystore.PAT{}, false
	}
	if !p.TokenSHA256.Equal(hash) {
		return identitystore.PAT{}, false
	}
	return p, true
}

func (v PATVerifier) check(p identitystore.PAT, required []string) (identitystore.PAT, error) {
	now := v.now()
	switch {
	case p.Revoked:
		return identitystore.PAT{}, patError(ErrPATRevoked, "personal access token revoked")
	case !now.Before(p.Expires):
		return identitystore.PAT{}, patError(ErrPATExpired, "personal access token expired")
	}
	if void, reason := v.Store.PATRevoked(p.Tenant, p.ID, now); void {
		return identitystore.PAT{}, patError(ErrPATRevoked, reason)
	}
	var missing []string
	for _, s := range required {
		if !slices.Contains(p.Scopes, s) {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		e := patError(ErrInsufficientScope, "the token lacks scope "+strings.Join(missing, " "))
		e.Scope = strings.Join(required, " ")
		return identitystore.PAT{}, e
	}
	return p, nil
}
