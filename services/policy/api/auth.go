package api

import (
	"errors"
	"net/http"
	"slices"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/signin"
)

// caller is who a request speaks for, from its credential only.
type caller struct {
	Tenant   string
	PersonID string
	Roles    []string
	// AgentID is the agent of a bearer credential; "" for a web session.
	AgentID string
}

func (c caller) actor() *alpv1.Actor {
	if c.AgentID != "" {
		return &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_AGENT, Id: c.AgentID}
	}
	return &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_PERSON, Id: c.PersonID}
}

// person admits a signed-in person: the session (401), and for a write
// (mutate) the CSRF check (403). It answers the refusal itself.
func (a *API) person(w http.ResponseWriter, r *http.Request, mutate bool) (caller, bool) {
	if e := a.ready(); e != nil {
		a.fail(w, r, e)
		return caller{}, false
	}
	if a.o.Sessions == nil {
		a.fail(w, r, httpjson.Errorf(http.StatusServiceUnavailable, CodeWebSessionsUnavailable,
			"web sessions are checked only by a process that also runs identity; this one does not (split mode): sign in where identity runs, or use an agent's token where the endpoint takes one"))
		return caller{}, false
	}
	sess, err := a.o.Sessions.Session(r)
	if err == nil && mutate {
		err = a.o.Sessions.CheckCSRF(r)
	}
	if err != nil {
		a.fail(w, r, sessionError(err))
		return caller{}, false
	}
	return caller{Tenant: sess.Tenant, PersonID: sess.PersonID, Roles: sess.Roles}, true
}

// admin admits a signed-in admin of their organization: person, then the
// admin role (403).
func (a *API) admin(w http.ResponseWriter, r *http.Request, mutate bool) (caller, bool) {
	c, ok := a.person(w, r, mutate)
	if !ok {
		return caller{}, false
	}
	if !slices.Contains(c.Roles, a.o.AdminRole) {
		a.log.WarnContext(r.Context(), "policy admin request refused: role missing", "tenant", c.Tenant, "person_id", c.PersonID, "path", r.URL.Path)
		a.fail(w, r, httpjson.Errorf(http.StatusForbidden, CodeAdminRoleRequired, "this needs the %s role", a.o.AdminRole))
		return caller{}, false
	}
	return c, true
}

// agentOrPerson admits an agent's bearer credential with scope, when the
// request has an Authorization header, else the person's web session (and
// CSRF for a write). A request with neither is refused with the bearer
// challenge, so an agent learns where to get a token.
func (a *API) agentOrPerson(w http.ResponseWriter, r *http.Request, mutate bool, scope string) (caller, bool) {
	authz := r.Header.Get("Authorization")
	if authz == "" && a.o.Sessions != nil && hasSessionCookie(r) {
		return a.person(w, r, mutate)
	}
	if e := a.ready(); e != nil {
		a.fail(w, r, e)
		return caller{}, false
	}
	if a.o.Auth == nil {
		a.fail(w, r, httpjson.Errorf(http.StatusServiceUnavailable, CodeNotReady, "agents' credentials cannot be checked here"))
		return caller{}, false
	}
	p, err := a.o.Auth.Authenticate(r.Context(), authz, scope)
	if err != nil {
		a.fail(w, r, authError(err))
		return caller{}, false
	}
	if p.Tenant == "" || p.PersonID == "" || p.AgentID == "" {
		a.fail(w, r, internalError(errors.New("authenticator returned a principal without tenant, person or agent"), "authentication failed"))
		return caller{}, false
	}
	return caller{Tenant: p.Tenant, PersonID: p.PersonID, AgentID: p.AgentID}, true
}

// sessionError keeps signin's answer (401 signin_required, session_expired,
// 403 csrf_… ); anything else is a 500.
func sessionError(err error) *httpjson.Error {
	var e *httpjson.Error
	if errors.As(err, &e) {
		return e
	}
	return internalError(err, "checking the session failed")
}

// authError maps an authenticator's refusal, challenge included.
func authError(err error) *httpjson.Error {
	var ae *agentauth.Error
	if !errors.As(err, &ae) {
		return internalError(err, "checking the credential failed")
	}
	e := &httpjson.Error{Status: ae.Status, Code: ae.Code, Message: ae.Description, Challenge: ae.Challenge}
	if e.Code == "" {
		// No credential at all: RFC 6750 names no error code then.
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

// readScope and writeScope are what an agent's credential must carry to
// read its person's rules and to tighten them: a token that may only read
// must not change what reaches the person.
const (
	readScope  = alp.ScopeRead
	writeScope = alp.ScopeSend
)
