package api

import (
	"context"
	"log/slog"
	"net/http"
	"strings"

	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/internal/msgtypes/typestore"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/services/policy/relationships"
	"github.com/alpd-project/alpd/services/policy/rules"
	"github.com/alpd-project/alpd/services/policy/rulestore"
)

// Paths.
const (
	PathConnections   = "/v1/connections"
	PathBlocks        = "/v1/blocks"
	PathRules         = "/v1/rules"
	PathAdminPolicies = "/v1/admin/policies"
	PathAdminTypes    = "/v1/admin/types"
	PathAdminRels     = "/v1/admin/relationships"
)

// Body limits besides the rule text's (Options.MaxRuleBytes) and the
// schema's (msgtypes.MaxSchemaBytes). Answering a connection takes no body
// but a page's form with its CSRF field (httproute.FormBody).
const (
	// blockBody bounds POST /v1/blocks: a kind and an address.
	blockBody int64 = 4 << 10
	// orgRulesBody bounds PUT /v1/admin/relationships: an organization's
	// pre-approved relationships are a handful of short rules.
	orgRulesBody int64 = 64 << 10
)

// Authenticator checks an agent's bearer credential
// (agentauth.Authenticator; errors are *agentauth.Error).
type Authenticator interface {
	Authenticate(ctx context.Context, authorization string, scopes ...string) (agentauth.Principal, error)
}

// Sessions are people's web sessions (identity's sign-in, signin.Service):
// errors of both are *httpjson.Error (401 without or with a bad session,
// 403 for a failed CSRF check).
type Sessions interface {
	Session(r *http.Request) (*signin.Session, error)
	CheckCSRF(r *http.Request) error
}

// Options build an API.
type Options struct {
	// Ready is nil while the service may answer (started, projections
	// fresh); otherwise every request is 503 not_ready.
	Ready func() error
	// The stores written and read. Required.
	Relationships *relationships.Store
	Rules         *rulestore.Store
	Types         *typestore.Store
	// MaxRuleBytes bounds a rule set's text (the engine's limit,
	// rules.Limits.MaxBytes): the body limit of the rule writes.
	MaxRuleBytes int
	// Auth checks agents' bearer credentials; nil refuses them (503).
	Auth Authenticator
	// Sessions, where identity runs in the same process; nil: the person
	// and admin routes answer 503 web_sessions_unavailable.
	Sessions Sessions
	// AdminRole is the session role of an organization's admin (default
	// alp.AdminRole).
	AdminRole string
	// Accepted, if set, runs after a person accepted a connection (also
	// one accepted already): policy tells an asker at another broker. Its
	// error is answered 503, and accepting again runs it again.
	Accepted func(ctx context.Context, tenant, person string, c relationships.Connection) error
	Logger   *slog.Logger
}

// API serves policy's REST endpoints. Safe for concurrent use.
type API struct {
	o   Options
	log *slog.Logger
	mux *http.ServeMux
}

// New builds the API.
func New(o Options) *API {
	if o.AdminRole == "" {
		o.AdminRole = alp.AdminRole
	}
	if o.MaxRuleBytes <= 0 {
		o.MaxRuleBytes = rules.DefaultMaxBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	a := &API{o: o, log: o.Logger}
	a.mux = httproute.Handler(a.Routes())
	return a
}

// Routes are the API's routes, each within policy's URL space, with a JSON
// 405 for a known path under another method and a JSON 404 for an unknown
// path in the space.
func (a *API) Routes() []httproute.Route {
	ruleBody := int64(a.o.MaxRuleBytes)
	person, either := httproute.Person, httproute.AgentOrPerson
	routes := []httproute.Route{
		{Method: http.MethodGet, Pattern: PathConnections, Caller: person, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.listConnections)},
		{Method: http.MethodPost, Pattern: PathConnections + "/{id}/accept", Caller: person, BodyLimit: httproute.FormBody, Handler: a.answerConnection(accept)},
		{Method: http.MethodPost, Pattern: PathConnections + "/{id}/decline", Caller: person, BodyLimit: httproute.FormBody, Handler: a.answerConnection(decline)},
		{Method: http.MethodPost, Pattern: PathConnections + "/{id}/block", Caller: person, BodyLimit: httproute.FormBody, Handler: a.answerConnection(block)},
		{Method: http.MethodGet, Pattern: PathBlocks, Caller: person, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.listBlocks)},
		{Method: http.MethodPost, Pattern: PathBlocks, Caller: person, BodyLimit: blockBody, Handler: http.HandlerFunc(a.addBlock)},
		{Method: http.MethodDelete, Pattern: PathBlocks + "/{kind}/{value}", Caller: person, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.removeBlock)},

		{Method: http.MethodGet, Pattern: PathRules, Caller: either, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.listRules)},
		{Method: http.MethodGet, Pattern: PathRules + "/{party}", Caller: either, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.getRules)},
		{Method: http.MethodPut, Pattern: PathRules + "/{party}", Caller: either, BodyLimit: ruleBody, Handler: http.HandlerFunc(a.putRules)},

		{Method: http.MethodGet, Pattern: PathAdminPolicies + "/{set}", Caller: person, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.getOrgSet)},
		{Method: http.MethodPut, Pattern: PathAdminPolicies + "/{set}", Caller: person, BodyLimit: ruleBody, Handler: http.HandlerFunc(a.putOrgSet)},
		{Method: http.MethodGet, Pattern: PathAdminTypes, Caller: person, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.listTypes)},
		{Method: http.MethodGet, Pattern: PathAdminTypes + "/{name...}", Caller: person, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.getType)},
		{Method: http.MethodPut, Pattern: PathAdminTypes + "/{name...}", Caller: person, BodyLimit: msgtypes.MaxSchemaBytes, Handler: http.HandlerFunc(a.putType)},
		{Method: http.MethodGet, Pattern: PathAdminRels, Caller: person, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.getOrgRules)},
		{Method: http.MethodPut, Pattern: PathAdminRels, Caller: person, BodyLimit: orgRulesBody, Handler: http.HandlerFunc(a.putOrgRules)},
	}
	// The same patterns under any other method: 405 with Allow, as a
	// problem (http.ServeMux would answer plain text).
	allow := map[string][]string{}
	callers := map[string]httproute.Caller{}
	var order []string
	for _, rt := range routes {
		if _, ok := allow[rt.Pattern]; !ok {
			order = append(order, rt.Pattern)
		}
		m := rt.Method
		if m == http.MethodGet {
			allow[rt.Pattern] = append(allow[rt.Pattern], m, http.MethodHead)
		} else {
			allow[rt.Pattern] = append(allow[rt.Pattern], m)
		}
		callers[rt.Pattern] = rt.Caller
	}
	for _, p := range order {
		methods := strings.Join(allow[p], ", ")
		routes = append(routes, httproute.Route{Pattern: p, Caller: callers[p], BodyLimit: httproute.NoBody,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Allow", methods)
				httpjson.WriteError(w, httpjson.Errorf(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "%s is not allowed here (allowed: %s)", r.Method, methods))
			})})
	}
	// Every other path of the space.
	for _, p := range []string{PathRules + "/", PathConnections + "/", PathBlocks + "/", PathAdminPolicies + "/"} {
		routes = append(routes, httproute.Route{Pattern: p, Caller: httproute.Person, BodyLimit: httproute.NoBody,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				httpjson.WriteError(w, httpjson.Errorf(http.StatusNotFound, CodeNotFound, "no such policy endpoint"))
			})})
	}
	return routes
}

// ServeHTTP serves the routes on their own mux (the broker mounts Routes
// on its own).
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// fail answers e, logging what the client does not see.
func (a *API) fail(w http.ResponseWriter, r *http.Request, e *httpjson.Error) {
	if e.Status >= 500 && e.Cause != nil {
		a.log.ErrorContext(r.Context(), "policy api: request failed", "method", r.Method, "path", r.URL.Path, "code", e.Code, "err", e.Cause)
	}
	httpjson.WriteError(w, e)
}

// ready answers 503 while the service may not answer.
func (a *API) ready() *httpjson.Error {
	if a.o.Ready == nil || a.o.Rules == nil || a.o.Relationships == nil || a.o.Types == nil {
		return httpjson.Errorf(http.StatusServiceUnavailable, CodeNotReady, "policy is not available")
	}
	if err := a.o.Ready(); err != nil {
		e := httpjson.Errorf(http.StatusServiceUnavailable, CodeNotReady, "policy is not ready (its state is catching up); try again shortly")
		e.RetryAfter, e.Cause = 1, err
		return e
	}
	return nil
}
