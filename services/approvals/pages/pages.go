// Package pages is the approvals service's pages for people: what waits
// for their decision, one item with who asks, what, what it would
// disclose and why, the decision with its confirmation, and their standing
// rules ("approve always") with a revoke button.
//
// A decision is two steps, both behind a fresh sign-in (RequireFresh: a
// stale session is sent to sign in again with max_age=0): a GET shows the
// confirmation with the binding code again, and its POST (CSRF-checked,
// same origin) carries the payload digest the person saw. The store
// refuses a decision on another payload (ErrDigest), so a request that
// changed between the page and the click is shown again, not approved.
//
// The pages read and decide through items.Store only; the JSON API of
// the same items is the service's own.
package pages

import (
	"context"
	"embed"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/webui"
	"github.com/alpd-project/alpd/services/approvals/items"
)

// Paths, all in the approvals service's space (/approvals/).
const (
	PathList     = webui.PathPending
	PathItems    = "/approvals/items/"
	PathRules    = webui.PathStanding
	pathRulesDir = PathRules + "/" // each rule's actions
)

// Error codes of the pages' refusals (besides webui's and signin's).
const (
	CodeRequestChanged = "request_changed"
	CodeDecided        = "already_decided"
	CodeNotOffered     = "decision_not_offered"
	CodeUnavailable    = "approvals_unavailable"
)

//go:embed templates
var templates embed.FS

var (
	listPage    = parse("list.html")
	itemPage    = parse("item.html")
	confirmPage = parse("confirm.html")
	rulesPage   = parse("rules.html")
)

func parse(name string) *webui.Template {
	sub, err := fs.Sub(templates, "templates")
	if err != nil {
		panic(err)
	}
	return webui.Parse(sub, name)
}

// Options build the pages.
type Options struct {
	// Store is the approvals service's items. Required.
	Store items.Store
	// UI is the shared web UI (sign-in guards, layout). Required.
	UI     *webui.UI
	Logger *slog.Logger
	// Now is the clock (default time.Now), for a rule's "active".
	Now func() time.Time
}

// Pages serves the approvals pages. Safe for concurrent use.
type Pages struct {
	store items.Store
	ui    *webui.UI
	log   *slog.Logger
	now   func() time.Time
}

// New builds the pages; it panics without Store or UI (a wiring mistake
// every test run shows).
func New(o Options) *Pages {
	if o.Store == nil || o.UI == nil {
		panic("approvals/pages: Options.Store and Options.UI are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Pages{store: o.Store, ui: o.UI, log: o.Logger, now: o.Now}
}

// decideBody bounds a decision's form: csrf, decision and digest.
const decideBody = httproute.FormBody

// Routes are the pages, all person routes in /approvals/:
//
//	GET  /approvals/                         pending items, then decided
//	GET  /approvals/items/{id}               one item
//	GET  /approvals/items/{id}/decide?decision=approve_once|approve_always|deny   confirmation (fresh sign-in)
//	POST /approvals/items/{id}/decide        the decision (fresh sign-in, CSRF)
//	GET  /approvals/rules                    standing rules
//	POST /approvals/rules/{id}/revoke        revoke one (fresh sign-in, CSRF)
//
// and a 404 page for every other path under /approvals/.
func (p *Pages) Routes() []httproute.Route {
	u := p.ui
	get := func(pattern string, h http.Handler) httproute.Route {
		return httproute.Route{Method: http.MethodGet, Pattern: pattern, Handler: h, Caller: httproute.Person, BodyLimit: httproute.NoBody}
	}
	post := func(pattern string, h http.Handler) httproute.Route {
		return httproute.Route{Method: http.MethodPost, Pattern: pattern, Handler: h, Caller: httproute.Person, BodyLimit: decideBody}
	}
	return []httproute.Route{
		get(PathList+"{$}", u.Page(http.HandlerFunc(p.serveList))),
		get(PathItems+"{id}", u.Page(http.HandlerFunc(p.serveItem))),
		get(PathItems+"{id}/decide", u.Fresh(http.HandlerFunc(p.serveConfirm))),
		post(PathItems+"{id}/decide", u.FreshWrite(http.HandlerFunc(p.serveDecide))),
		get(PathRules, u.Page(http.HandlerFunc(p.serveRules))),
		post(pathRulesDir+"{id}/revoke", u.FreshWrite(http.HandlerFunc(p.serveRevoke))),
		{Pattern: PathList, Handler: u.NotFound(), Caller: httproute.Person, BodyLimit: httproute.NoBody},
	}
}

// who is the request's person (the guards put the session there).
func who(r *http.Request) *signin.Session { return signin.SessionFromContext(r.Context()) }

func itemHref(id string) string { return PathItems + url.PathEscape(id) }

// kindLabels and stateLabels are what people read.
var (
	kindLabels = map[items.Kind]string{
		items.ConfidentialFields: "Confidential fields",
		items.Commitment:         "Commitment",
		items.ConnectionRequest:  "Connection request",
	}
	stateLabels = map[items.State]string{
		items.Pending:        "waiting for your decision",
		items.ApprovedOnce:   "approved once",
		items.ApprovedAlways: "approved always",
		items.Denied:         "denied",
		items.Expired:        "expired",
		items.Superseded:     "superseded by a newer request",
		items.Cancelled:      "cancelled",
	}
)

func label[K comparable](m map[K]string, k K, fallback string) string {
	if l, ok := m[k]; ok {
		return l
	}
	return fallback
}

// offer is one decision button.
type offer struct {
	Value, ID, Label, Class, Explain string
}

var offers = map[items.Decision]offer{
	items.ApproveOnce: {Value: string(items.ApproveOnce), ID: "approve-once", Label: "Approve once",
		Explain: "Approving lets this one request through; the next one asks you again."},
	items.ApproveAlways: {Value: string(items.ApproveAlways), ID: "approve-always", Label: "Approve always", Class: "secondary",
		Explain: "Approving always lets this one through and creates a standing rule: later requests from this sender committing you to the same thing go through without asking, until the rule expires or you revoke it."},
	items.Deny: {Value: string(items.Deny), ID: "deny", Label: "Deny", Class: "danger",
		Explain: "Denying releases nothing: the sender's request stays unanswered by you."},
}

// itemView is an item with what a page shows of it.
type itemView struct {
	Item                  items.Item
	Href, DecideHref      string
	Summary               string
	Details               []items.Detail
	RenderProblem         string
	KindLabel, StateLabel string
	Pending               bool
	Offers                []offer
}

func (p *Pages) view(ctx context.Context, it items.Item) itemView {
	v := itemView{Item: it, Href: itemHref(it.ID), DecideHref: itemHref(it.ID) + "/decide",
		KindLabel: label(kindLabels, it.Kind, string(it.Kind)), StateLabel: label(stateLabels, it.State, string(it.State)),
		Pending: it.State == items.Pending, Summary: it.Type}
	rd, err := p.store.Render(ctx, it)
	if err != nil {
		// The item stays decidable by what the page knows without its
		// content (who, type, disclosed fields); the person is told.
		p.log.WarnContext(ctx, "approvals pages: cannot open an item", "item", it.ID, "err", err)
		v.RenderProblem = "The content of this request cannot be shown right now."
	} else {
		v.Details = rd.Details
		if rd.Summary != "" {
			v.Summary = rd.Summary
		}
	}
	for _, d := range it.Offers() {
		if o, ok := offers[d]; ok {
			v.Offers = append(v.Offers, o)
		}
	}
	return v
}

type listData struct{ Pending, Decided []itemView }

func (p *Pages) serveList(w http.ResponseWriter, r *http.Request) {
	s := who(r)
	list, err := p.store.List(r.Context(), s.Tenant, s.PersonID)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	var d listData
	for _, it := range list {
		if it.State == items.Pending {
			d.Pending = append(d.Pending, p.view(r.Context(), it))
		} else {
			d.Decided = append(d.Decided, p.view(r.Context(), it))
		}
	}
	p.ui.Render(w, r, http.StatusOK, listPage, webui.Page{Title: "Waiting for your decision", Nav: webui.NavPending, Data: d})
}

// notices are the fixed lines a redirect may ask a page to show (never
// text from the query itself).
var notices = map[string]string{
	"decided": "Your decision is recorded.",
	"revoked": "The standing rule is revoked; it covers nothing from now on.",
}

func (p *Pages) serveItem(w http.ResponseWriter, r *http.Request) {
	s := who(r)
	it, err := p.store.Get(r.Context(), s.Tenant, s.PersonID, r.PathValue("id"))
	if err != nil {
		p.fail(w, r, err)
		return
	}
	p.renderItem(w, r, http.StatusOK, it, notices[r.URL.Query().Get("done")])
}

func (p *Pages) renderItem(w http.ResponseWriter, r *http.Request, status int, it items.Item, notice string) {
	v := p.view(r.Context(), it)
	p.ui.Render(w, r, status, itemPage, webui.Page{Title: label(kindLabels, it.Kind, "Request") + " from " + it.From,
		Nav: webui.NavPending, Notice: notice, Data: v})
}

type confirmData struct {
	itemView
	ItemHref string
	Decision offer
	Explain  string
}

func (p *Pages) serveConfirm(w http.ResponseWriter, r *http.Request) {
	s := who(r)
	it, err := p.store.Get(r.Context(), s.Tenant, s.PersonID, r.PathValue("id"))
	if err != nil {
		p.fail(w, r, err)
		return
	}
	if it.State.Terminal() {
		p.renderItem(w, r, http.StatusConflict, it, "This request was already decided: "+label(stateLabels, it.State, string(it.State))+".")
		return
	}
	d := items.Decision(r.URL.Query().Get("decision"))
	o, known := offers[d]
	if !known {
		p.ui.Error(w, r, httpjson.Errorf(http.StatusBadRequest, webui.CodeInvalidRequest, "choose approve_once, approve_always or deny"))
		return
	}
	if !offered(it, d) {
		p.ui.Error(w, r, httpjson.Errorf(http.StatusUnprocessableEntity, CodeNotOffered, "%q is not offered for this request", o.Label))
		return
	}
	v := p.view(r.Context(), it)
	p.ui.Render(w, r, http.StatusOK, confirmPage, webui.Page{Title: o.Label + "?", Nav: webui.NavPending,
		Data: confirmData{itemView: v, ItemHref: v.Href, Decision: o, Explain: o.Explain}})
}

func offered(it items.Item, d items.Decision) bool {
	for _, x := range it.Offers() {
		if x == d {
			return true
		}
	}
	return false
}

func (p *Pages) serveDecide(w http.ResponseWriter, r *http.Request) {
	s := who(r)
	id := r.PathValue("id")
	d := items.Decision(r.PostFormValue("decision"))
	digest := r.PostFormValue("payload_digest")
	if _, known := offers[d]; !known || digest == "" {
		p.ui.Error(w, r, httpjson.Errorf(http.StatusBadRequest, webui.CodeInvalidRequest, "the form needs a decision (approve_once, approve_always or deny) and the payload digest you reviewed"))
		return
	}
	it, err := p.store.Decide(r.Context(), s.Tenant, s.PersonID, id, d, digest, items.Actor{PersonID: s.PersonID, SessionID: s.ID})
	switch {
	case err == nil:
		p.log.InfoContext(r.Context(), "approvals: decided on a page", "tenant", s.Tenant, "person_id", s.PersonID, "item", id, "state", string(it.State))
		http.Redirect(w, r, itemHref(id)+"?done=decided", http.StatusSeeOther)
	case errors.Is(err, items.ErrDecided):
		// A repeated click, or another tab: the final state is the answer.
		if it.ID == "" {
			if it, err = p.store.Get(r.Context(), s.Tenant, s.PersonID, id); err != nil {
				p.fail(w, r, err)
				return
			}
		}
		p.renderItem(w, r, http.StatusConflict, it, "This request was already decided: "+label(stateLabels, it.State, string(it.State))+".")
	case errors.Is(err, items.ErrDigest):
		cur, gerr := p.store.Get(r.Context(), s.Tenant, s.PersonID, id)
		if gerr != nil {
			p.fail(w, r, gerr)
			return
		}
		p.renderItem(w, r, http.StatusConflict, cur, "The request changed since you reviewed it; review it again. Nothing was decided.")
	default:
		p.fail(w, r, err)
	}
}

type ruleView struct {
	Rule       items.StandingRule
	Active     bool
	RevokeHref string
}

func (p *Pages) serveRules(w http.ResponseWriter, r *http.Request) {
	s := who(r)
	list, err := p.store.Rules(r.Context(), s.Tenant, s.PersonID)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	now := p.now()
	d := struct{ Rules []ruleView }{}
	for _, rule := range list {
		d.Rules = append(d.Rules, ruleView{Rule: rule, Active: rule.Active(now), RevokeHref: pathRulesDir + url.PathEscape(rule.ID) + "/revoke"})
	}
	p.ui.Render(w, r, http.StatusOK, rulesPage, webui.Page{Title: "Standing rules", Nav: webui.NavStanding,
		Notice: notices[r.URL.Query().Get("done")], Data: d})
}

func (p *Pages) serveRevoke(w http.ResponseWriter, r *http.Request) {
	s := who(r)
	id := r.PathValue("id")
	if _, err := p.store.RevokeRule(r.Context(), s.Tenant, s.PersonID, id, items.Actor{PersonID: s.PersonID, SessionID: s.ID}); err != nil {
		p.fail(w, r, err)
		return
	}
	p.log.InfoContext(r.Context(), "approvals: standing rule revoked on a page", "tenant", s.Tenant, "person_id", s.PersonID, "rule", id)
	http.Redirect(w, r, PathRules+"?done=revoked", http.StatusSeeOther)
}

// fail answers a store error as the page people read.
func (p *Pages) fail(w http.ResponseWriter, r *http.Request, err error) {
	var e *httpjson.Error
	switch {
	case errors.Is(err, items.ErrNotFound):
		e = httpjson.Errorf(http.StatusNotFound, webui.CodeNotFound, "there is no such request or rule of yours")
	case errors.Is(err, items.ErrNotOffered):
		e = httpjson.Errorf(http.StatusUnprocessableEntity, CodeNotOffered, "that decision is not offered for this request")
	case errors.Is(err, items.ErrInvalid):
		e = httpjson.Errorf(http.StatusBadRequest, webui.CodeInvalidRequest, "the request is not valid")
	case errors.Is(err, items.ErrDigest):
		e = httpjson.Errorf(http.StatusConflict, CodeRequestChanged, "the request changed; review it again")
	case errors.Is(err, items.ErrDecided):
		e = httpjson.Errorf(http.StatusConflict, CodeDecided, "this request was already decided")
	case errors.As(err, &e):
	default:
		p.log.ErrorContext(r.Context(), "approvals pages: store failed", "path", r.URL.Path, "err", err)
		e = &httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "your approvals cannot be read right now; try again shortly", RetryAfter: 1, Cause: err}
	}
	p.ui.Error(w, r, e)
}
