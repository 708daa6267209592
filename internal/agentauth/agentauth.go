// Package agentauth authenticates agents' bearer credentials for every
// agent-facing endpoint (NLIP, the ledger API): an OAuth access token
// (at+jwt, verified locally with revocations from the identity stream) or a
// personal access token (alppat_…, looked up hashed in the same
// projection). The sender is what the credential proves, never what a
// message says.
//
// # Personal access tokens
//
// People issue PATs through identity (clientreg's /v1/pats); [PATVerifier]
// checks a presented one against the identity projection. Which tenant a PAT
// belongs to: the token format (accesstoken.NewPAT, "alppat_<id>_<secret>")
// carries no tenant, and identitystore keeps PATs per tenant.
// [PATVerifier.Verify] takes the tenant from the caller, for routes that know
// it (a tenant in the path or host). [PATVerifier.VerifyAny] tries each hosted
// tenant in turn: each try is an in-memory lookup of the id followed by a
// constant-time comparison of the token's SHA-256, and since that hash covers
// 256 random bits, at most one tenant can hold it. The cost is one map lookup
// per hosted tenant, so VerifyAny is fine for the handful of tenants a broker
// hosts.
package agentauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/identitystore"
)

// Credential kinds.
const (
	CredentialAccessToken = "access_token"
	CredentialPAT         = "personal_access_token"
)

// Principal is an authenticated agent acting for one person.
type Principal struct {
	Tenant   string
	PersonID string
	// Address is the person's address (person@domain) from the identity
	// projection.
	Address string
	// AgentID is the agent; for a personal access token "pat_<id>".
	AgentID  string
	ClientID string
	// Class is the trust class of the credential (accesstoken.ClassCompany
	// or ClassConsumer). A personal access token is the person's own
	// say-so about whatever uses it, so it is consumer class.
	Class      string
	Scopes     []string
	Credential string
}

// Error is a refused credential, ready for an HTTP answer.
type Error struct {
	Status int
	// Code is the RFC 6750 error code ("invalid_request" when no bearer
	// token was sent at all is not used: RFC 6750 §3.1 names no error then).
	Code        string
	Description string
	// Challenge is the WWW-Authenticate value (RFC 6750 with the RFC 9728
	// resource_metadata parameter).
	Challenge string
}

func (e *Error) Error() string {
	if e.Code == "" {
		return "agentauth: " + e.Description
	}
	return "agentauth: " + e.Code + ": " + e.Description
}

// ErrNoCredential: the request carried no bearer token.
var ErrNoCredential = errors.New("agentauth: no bearer token")

// Authenticator checks bearer credentials.
type Authenticator struct {
	Tokens *accesstoken.Verifier
	PATs   *PATVerifier
	// People resolves a person's address; the credential's person must
	// exist there.
	People interface {
		Person(ctx context.Context, tenant, id string) (identitystore.Person, error)
	}
	// ResourceMetadataURL is where a refused client finds how to get a
	// token (RFC 9728), sent in every challenge.
	ResourceMetadataURL string
}

// Authenticate checks the value of an Authorization header and requires
// every one of scopes. Errors are *Error.
func (a *Authenticator) Authenticate(ctx context.Context, authorization string, scopes ...string) (Principal, error) {
	if strings.TrimSpace(authorization) == "" {
		return Principal{}, &Error{Status: http.StatusUnauthorized, Description: "a bearer token is required",
			Challenge: accesstoken.Challenge(a.ResourceMetadataURL, scopes...)}
	}
	token, ok := accesstoken.BearerToken(authorization)
	if !ok {
		return Principal{}, a.refuse(http.StatusUnauthorized, accesstoken.CodeInvalidToken, "the Authorization header is not a bearer token", "")
	}
	if accesstoken.LooksLikePAT(token) {
		return a.pat(ctx, token, scopes)
	}
	if a.Tokens == nil {
		return Principal{}, a.refuse(http.StatusServiceUnavailable, accesstoken.CodeTemporarilyUnavailable, "token verification is not available yet", "")
	}
	c, err := a.Tokens.Verify(ctx, token)
	if err == nil {
		err = accesstoken.RequireScopes(c, scopes...)
	}
	if err != nil {
		var te *accesstoken.Error
		if errors.As(err, &te) {
			return Principal{}, &Error{Status: te.HTTPStatus(), Code: te.Code, Description: te.Description,
				Challenge: te.WWWAuthenticate(a.ResourceMetadataURL)}
		}
		return Principal{}, fmt.Errorf("agentauth: verify access token: %w", err)
	}
	return a.withAddress(ctx, Principal{Tenant: c.Tenant, PersonID: c.Subject, AgentID: c.AgentID, ClientID: c.ClientID,
		Class: c.Class, Scopes: c.Scopes, Credential: CredentialAccessToken})
}

// withAddress completes p with its person's address; a credential whose
// person the projection does not know is refused.
func (a *Authenticator) withAddress(ctx context.Context, p Principal) (Principal, error) {
	if a.People == nil {
		return Principal{}, a.refuse(http.StatusServiceUnavailable, accesstoken.CodeTemporarilyUnavailable, "people cannot be looked up yet", "")
	}
	person, err := a.People.Person(ctx, p.Tenant, p.PersonID)
	if err != nil {
		return Principal{}, a.refuse(http.StatusUnauthorized, accesstoken.CodeInvalidToken, "the token's person is not known to this broker", "")
	}
	p.Address = person.Address
	return p, nil
}

func (a *Authenticator) pat(ctx context.Context, token string, scopes []string) (Principal, error) {
	if a.PATs == nil {
		return Principal{}, a.refuse(http.StatusServiceUnavailable, accesstoken.CodeTemporarilyUnavailable, "personal access tokens cannot be verified yet", "")
	}
	p, err := a.PATs.VerifyAny(ctx, token, scopes...)
	if err != nil {
		var pe *PATError
		if errors.As(err, &pe) {
			return Principal{}, a.refuse(pe.HTTPStatus(), pe.Code, pe.Description, pe.Scope)
		}
		return Principal{}, fmt.Errorf("agentauth: verify personal access token: %w", err)
	}
	return a.withAddress(ctx, Principal{Tenant: p.Tenant, PersonID: p.PersonID, AgentID: "pat_" + p.ID,
		Class: accesstoken.ClassConsumer, Scopes: p.Scopes, Credential: CredentialPAT})
}

func (a *Authenticator) refuse(status int, code, desc, scope string) *Error {
	e := &accesstoken.Error{Code: code, Description: desc, Scope: scope}
	return &Error{Status: status, Code: code, Description: desc, Challenge: e.WWWAuthenticate(a.ResourceMetadataURL)}
}
