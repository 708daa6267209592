package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/signin"
)

// reader is whose ledger a request reads: always taken from the
// credential, never from the request.
type reader struct {
	Tenant   string
	PersonID string
	// Via is "session", or the credential kind (agentauth.Credential*).
	Via     string
	AgentID string
}

// authenticate finds the reader of an HTTP request: a bearer credential
// when the request has an Authorization header, else the person's web
// session (GET and HEAD only), else a 401 with the bearer challenge.
//
// A web session may not make other requests: they would need CSRF
// protection, and reading needs none of them.
func (a *API) authenticate(r *http.Request) (reader, *httpjson.Error) {
	authz := r.Header.Get("Authorization")
	if authz == "" && a.sessions != nil && hasSessionCookie(r) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			e := a.bearerChallenge(r.Context())
			e.Code, e.Message = CodeBearerRequired, "a web session may only read (GET); send a bearer token"
			return reader{}, e
		}
		return a.session(r)
	}
	return a.bearer(r.Context(), authz)
}

// bearer checks an Authorization value (HTTP header or gRPC metadata).
func (a *API) bearer(ctx context.Context, authz string) (reader, *httpjson.Error) {
	if a.auth == nil {
		return reader{}, httpjson.Errorf(http.StatusServiceUnavailable, CodeNotReady, "credentials cannot be checked here")
	}
	p, err := a.auth.Authenticate(ctx, authz, alp.ScopeRead)
	if err != nil {
		return reader{}, authError(err)
	}
	if p.Tenant == "" || p.PersonID == "" {
		return reader{}, internal(errors.New("authenticator returned a principal without tenant or person"), "authentication failed")
	}
	return reader{Tenant: p.Tenant, PersonID: p.PersonID, Via: p.Credential, AgentID: p.AgentID}, nil
}

func (a *API) session(r *http.Request) (reader, *httpjson.Error) {
	s, err := a.sessions.Session(r)
	if err != nil {
		var se *httpjson.Error
		if errors.As(err, &se) {
			e := httpjson.Errorf(se.Status, se.Code, "%s", se.Message)
			if se.Status == http.StatusUnauthorized {
				e.Challenge = a.bearerChallenge(r.Context()).Challenge
			}
			e.RetryAfter = se.RetryAfter
			return reader{}, e
		}
		return reader{}, internal(err, "checking the session failed")
	}
	return reader{Tenant: s.Tenant, PersonID: s.PersonID, Via: "session"}, nil
}

// bearerChallenge is the 401 the authenticator gives a request without a
// credential: it carries the WWW-Authenticate challenge with the resource
// metadata URL, so a client learns where to get a token.
func (a *API) bearerChallenge(ctx context.Context) *httpjson.Error {
	if a.auth != nil {
		if _, err := a.auth.Authenticate(ctx, "", alp.ScopeRead); err != nil {
			if e := authError(err); e.Status == http.StatusUnauthorized {
				return e
			}
		}
	}
	return &httpjson.Error{Status: http.StatusUnauthorized, Code: CodeAuthRequired, Message: "a bearer token is required",
		Challenge: accesstoken.Challenge("", alp.ScopeRead)}
}

// authError maps an authenticator's refusal.
func authError(err error) *httpjson.Error {
	var ae *agentauth.Error
	if !errors.As(err, &ae) {
		return internal(err, "checking the credential failed")
	}
	e := &httpjson.Error{Status: ae.Status, Code: ae.Code, Message: ae.Description, Challenge: ae.Challenge}
	if e.Code == "" {
		e.Code = CodeAuthRequired
	}
	if e.Status == http.StatusServiceUnavailable {
		e.RetryAfter = 1
	}
	return e
}

func hasSessionCookie(r *http.Request) bool {
	c, err := r.Cookie(signin.SessionCookie)
	return err == nil && c.Value != ""
}
