// Package api is the approvals service's JSON API for the signed-in person
// (/v1/approvals): their items, one item with what it says, decisions, and
// standing rules. Only a web session counts here: a request carrying an
// Authorization header (an agent's token) is refused, so no agent can
// approve what it asked for. A decision needs a fresh sign-in and the
// session's CSRF token.
package api

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/services/approvals/items"
)

// Paths.
const (
	PathItems = "/v1/approvals"
	PathRules = "/v1/approvals/rules"
	// PathTestNotification sends the signed-in person a test notification
	// on every channel configured for them.
	PathTestNotification = "/v1/approvals/notifications/test"
)

// Error codes, besides httpjson's and signin's.
const (
	CodeAgentCredential      = "agent_credential_refused"
	CodeNotFound             = "approval_not_found"
	CodeDecided              = "approval_decided"
	CodeChanged              = "approval_changed"
	CodeNotOffered           = "decision_not_offered"
	CodeInvalid              = "invalid_request"
	CodeFreshSigninRequired  = signin.CodeFreshSigninRequired
	CodeSessionsUnavailable  = "web_sessions_unavailable"
	CodeNotificationsMissing = "notifications_not_configured"
)

// Sessions reads people's web sessions and checks their writes.
type Sessions interface {
	Session(r *http.Request) (*signin.Session, error)
	CheckCSRF(r *http.Request) error
}

// Tester sends a person a test notification (the notifier).
type Tester interface {
	TestSend(r *http.Request, tenant, personID string) (any, error)
}

// Options build an API.
type Options struct {
	Store    items.Store
	Sessions Sessions
	// Ready is nil while the service may answer.
	Ready func() error
	// FreshMaxAge is how recent the person's sign-in must be to decide.
	FreshMaxAge time.Duration
	Tester      Tester
	Logger      *slog.Logger
	Now         func() time.Time
}

// API serves /v1/approvals.
type API struct{ o Options }

// New builds the API.
func New(o Options) *API {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.FreshMaxAge <= 0 {
		o.FreshMaxAge = signin.DefaultFreshMaxAge
	}
	return &API{o: o}
}

const decisionBody int64 = 4 << 10

// Routes are the API's routes.
func (a *API) Routes() []httproute.Route {
	p := httproute.Person
	return []httproute.Route{
		{Method: http.MethodGet, Pattern: PathItems, Caller: p, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.list)},
		{Method: http.MethodGet, Pattern: PathItems + "/items/{id}", Caller: p, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.get)},
		{Method: http.MethodPost, Pattern: PathItems + "/items/{id}/decision", Caller: p, BodyLimit: decisionBody, Handler: http.HandlerFunc(a.decide)},
		{Method: http.MethodGet, Pattern: PathRules, Caller: p, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.rules)},
		{Method: http.MethodPost, Pattern: PathRules + "/{id}/revoke", Caller: p, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.revoke)},
		{Method: http.MethodPost, Pattern: PathTestNotification, Caller: p, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.testNotification)},
	}
}

// person admits the signed-in person: never an Authorization header; for
// a write the CSRF check; for a decision a fresh sign-in.
func (a *API) person(w http.ResponseWriter, r *http.Request, write, fresh bool) (*signin.Session, bool) {
	if r.Header.Get("Authorization") != "" {
		httpjson.WriteError(w, httpjson.Errorf(http.StatusForbidden, CodeAgentCredential,
			"approvals are decided by the person on their signed-in page; an agent's credential is never accepted here"))
		return nil, false
	}
	if a.o.Ready != nil {
		if err := a.o.Ready(); err != nil {
			httpjson.WriteError(w, httpjson.Errorf(http.StatusServiceUnavailable, "not_ready", "approvals is not ready: %v", err))
			return nil, false
		}
	}
	if a.o.Sessions == nil {
		httpjson.WriteError(w, httpjson.Errorf(http.StatusServiceUnavailable, CodeSessionsUnavailable,
			"web sessions are checked only by a process that also runs identity"))
		return nil, false
	}
	sess, err := a.o.Sessions.Session(r)
	if err == nil && write {
		err = a.o.Sessions.CheckCSRF(r)
	}
	if err != nil {
		httpjson.WriteError(w, err)
		return nil, false
	}
	if fresh && !sess.FreshAt(a.o.Now(), a.o.FreshMaxAge) {
		httpjson.WriteError(w, httpjson.Errorf(http.StatusUnauthorized, CodeFreshSigninRequired,
			"a decision needs a fresh sign-in: sign in again (max_age=0) and decide within %s", a.o.FreshMaxAge))
		return nil, false
	}
	return sess, true
}

type listJSON struct {
	Items []items.Item `json:"items"`
}

func (a *API) list(w http.ResponseWriter, r *http.Request) {
	sess, ok := a.person(w, r, false, false)
	if !ok {
		return
	}
	list, err := a.o.Store.List(r.Context(), sess.Tenant, sess.PersonID)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	httpjson.Write(w, http.StatusOK, listJSON{Items: list})
}

// itemJSON is one item with what it says and the decisions it offers.
type itemJSON struct {
	items.Item
	Rendered items.Rendered   `json:"rendered"`
	Offers   []items.Decision `json:"offers"`
}

func (a *API) writeItem(w http.ResponseWriter, r *http.Request, status int, it items.Item) {
	rendered, err := a.o.Store.Render(r.Context(), it)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	httpjson.Write(w, status, itemJSON{Item: it, Rendered: rendered, Offers: orEmpty(it.Offers())})
}

func (a *API) get(w http.ResponseWriter, r *http.Request) {
	sess, ok := a.person(w, r, false, false)
	if !ok {
		return
	}
	it, err := a.o.Store.Get(r.Context(), sess.Tenant, sess.PersonID, r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.writeItem(w, r, http.StatusOK, it)
}

// decisionJSON is the body of a decision.
type decisionJSON struct {
	Decision      items.Decision `json:"decision"`
	PayloadDigest string         `json:"payload_digest"`
}

func (a *API) decide(w http.ResponseWriter, r *http.Request) {
	sess, ok := a.person(w, r, true, true)
	if !ok {
		return
	}
	var in decisionJSON
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		httpjson.WriteError(w, httpjson.Errorf(http.StatusBadRequest, CodeInvalid, "the body must be {\"decision\": …, \"payload_digest\": …}: %v", err))
		return
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		httpjson.WriteError(w, httpjson.Errorf(http.StatusBadRequest, CodeInvalid, "one JSON object, nothing after it"))
		return
	}
	it, err := a.o.Store.Decide(r.Context(), sess.Tenant, sess.PersonID, r.PathValue("id"), in.Decision, in.PayloadDigest,
		items.Actor{PersonID: sess.PersonID, SessionID: sess.ID})
	if errors.Is(err, items.ErrDecided) {
		// A repeated decision shows the final state.
		a.o.Logger.InfoContext(r.Context(), "approvals: decision on a decided item", "tenant", sess.Tenant, "item", it.ID, "state", it.State)
		a.writeItem(w, r, http.StatusConflict, it)
		return
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.o.Logger.InfoContext(r.Context(), "approvals: decided", "tenant", sess.Tenant, "person_id", sess.PersonID, "item", it.ID, "state", it.State)
	a.writeItem(w, r, http.StatusOK, it)
}

type rulesJSON struct {
	Rules []items.StandingRule `json:"rules"`
}

func (a *API) rules(w http.ResponseWriter, r *http.Request) {
	sess, ok := a.person(w, r, false, false)
	if !ok {
		return
	}
	list, err := a.o.Store.Rules(r.Context(), sess.Tenant, sess.PersonID)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	httpjson.Write(w, http.StatusOK, rulesJSON{Rules: orEmpty(list)})
}

func (a *API) revoke(w http.ResponseWriter, r *http.Request) {
	sess, ok := a.person(w, r, true, true)
	if !ok {
		return
	}
	rule, err := a.o.Store.RevokeRule(r.Context(), sess.Tenant, sess.PersonID, r.PathValue("id"), items.Actor{PersonID: sess.PersonID, SessionID: sess.ID})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	httpjson.Write(w, http.StatusOK, rule)
}

func (a *API) testNotification(w http.ResponseWriter, r *http.Request) {
	sess, ok := a.person(w, r, true, false)
	if !ok {
		return
	}
	if a.o.Tester == nil {
		httpjson.WriteError(w, httpjson.Errorf(http.StatusConflict, CodeNotificationsMissing, "no webhook or email is configured for notifications"))
		return
	}
	res, err := a.o.Tester.TestSend(r, sess.Tenant, sess.PersonID)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	httpjson.Write(w, http.StatusOK, res)
}

// fail answers a store error with its status and code.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpjson.Error
	switch {
	case errors.As(err, &he):
		httpjson.WriteError(w, he)
	case errors.Is(err, items.ErrNotFound):
		httpjson.WriteError(w, httpjson.Errorf(http.StatusNotFound, CodeNotFound, "no such approval item of yours"))
	case errors.Is(err, items.ErrDigest):
		httpjson.WriteError(w, httpjson.Errorf(http.StatusConflict, CodeChanged, "the request changed since you looked at it; review it again"))
	case errors.Is(err, items.ErrNotOffered):
		httpjson.WriteError(w, httpjson.Errorf(http.StatusUnprocessableEntity, CodeNotOffered, "%v", err))
	case errors.Is(err, items.ErrInvalid):
		httpjson.WriteError(w, httpjson.Errorf(http.StatusBadRequest, CodeInvalid, "%v", err))
	default:
		a.o.Logger.ErrorContext(r.Context(), "approvals: request failed", "path", r.URL.Path, "err", err)
		httpjson.WriteError(w, httpjson.Errorf(http.StatusServiceUnavailable, "unavailable", "approvals could not answer; try again"))
	}
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
