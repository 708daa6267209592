// Package pages is the policy service's pages for people: their
// connections (requests to answer: accept, decline, block; and every
// connection they are part of), their own rule sets read-only, and for an
// organization's admins the pre-approved relationships (list, add, lift).
//
// The pages call the same stores as policy's JSON API
// (services/policy/api): relationships.Store and rulestore.Store, through
// the small interfaces below, in policy's own process.
package pages

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/projection"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/webui"
	"github.com/alpd-project/alpd/services/policy/relationships"
	"github.com/alpd-project/alpd/services/policy/rules"
	"github.com/alpd-project/alpd/services/policy/rulestore"
)

// Paths, in the policy service's space.
const (
	PathConnections = webui.PathConnection
	PathRules       = webui.PathRules
	PathAdminRels   = webui.PathAdmin
	// pathRulesJSON is policy's JSON API for the person's sets.
	pathRulesJSON = "/v1/rules"
)

// Error codes of the pages (besides webui's and signin's).
const (
	CodeUnavailable = "policy_unavailable"
	CodeState       = "connection_state"
	CodeInvalid     = "invalid_request"
)

// Relationships is what the pages need of *relationships.Store.
type Relationships interface {
	Pending(tenant, person string) ([]relationships.Connection, error)
	Connections(tenant, person string) ([]relationships.Connection, error)
	Accept(ctx context.Context, tenant, person, id string) (relationships.Connection, error)
	Decline(ctx context.Context, tenant, person, id string) (relationships.Connection, error)
	BlockConnection(ctx context.Context, tenant, person, id string) (relationships.Target, error)
	OrgRules(tenant string) ([]relationships.OrgRule, error)
	SetOrgRule(ctx context.Context, tenant string, rule relationships.OrgRule, active bool, by *alpv1.Actor) error
}

// RuleSets is what the pages need of *rulestore.Store.
type RuleSets interface {
	Get(tenant string, party rules.Party, owner string) (rulestore.Version, error)
}

//go:embed templates
var templates embed.FS

var (
	connectionsPage = parse("connections.html")
	rulesPage       = parse("rules.html")
	adminPage       = parse("admin.html")
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
	// The stores policy's API uses. Required.
	Relationships Relationships
	Rules         RuleSets
	// Ready is nil while policy may answer (its projections fresh), as
	// policy's API Options.Ready; nil means always ready.
	Ready func() error
	// UI is the shared web UI. Required.
	UI     *webui.UI
	Logger *slog.Logger
}

// Pages serves the policy pages. Safe for concurrent use.
type Pages struct {
	o   Options
	log *slog.Logger
}

// New builds the pages; it panics without the stores or the UI.
func New(o Options) *Pages {
	if o.Relationships == nil || o.Rules == nil || o.UI == nil {
		panic("policy/pages: Options.Relationships, Options.Rules and Options.UI are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Pages{o: o, log: o.Logger}
}

// Routes, all person routes:
//
//	GET  /settings/connections                    requests and connections
//	POST /settings/connections/{id}/accept|decline|block   (CSRF)
//	GET  /settings/rules                          the person's rule sets, read-only
//	GET  /admin/relationships                     pre-approved relationships (admin role)
//	POST /admin/relationships                     add one (admin role, CSRF)
//	POST /admin/relationships/{id}/lift           lift one (admin role, CSRF)
func (p *Pages) Routes() []httproute.Route {
	u := p.o.UI
	get := func(pattern string, h http.Handler) httproute.Route {
		return httproute.Route{Method: http.MethodGet, Pattern: pattern, Handler: h, Caller: httproute.Person, BodyLimit: httproute.NoBody}
	}
	post := func(pattern string, h http.Handler) httproute.Route {
		return httproute.Route{Method: http.MethodPost, Pattern: pattern, Handler: h, Caller: httproute.Person, BodyLimit: httproute.FormBody}
	}
	return []httproute.Route{
		get(PathConnections, u.Page(http.HandlerFunc(p.serveConnections))),
		post(PathConnections+"/{id}/accept", u.Write(p.answer("accept"))),
		post(PathConnections+"/{id}/decline", u.Write(p.answer("decline"))),
		post(PathConnections+"/{id}/block", u.Write(p.answer("block"))),
		get(PathRules, u.Page(http.HandlerFunc(p.serveRules))),
		get(PathAdminRels, u.Page(u.Admin(http.HandlerFunc(p.serveAdmin)))),
		post(PathAdminRels, u.Write(u.Admin(http.HandlerFunc(p.serveAdd)))),
		post(PathAdminRels+"/{id}/lift", u.Write(u.Admin(http.HandlerFunc(p.serveLift)))),
		{Pattern: PathConnections + "/", Handler: u.NotFound(), Caller: httproute.Person, BodyLimit: httproute.NoBody},
		{Pattern: PathAdminRels + "/", Handler: u.NotFound(), Caller: httproute.Person, BodyLimit: httproute.NoBody},
	}
}

func who(r *http.Request) *signin.Session { return signin.SessionFromContext(r.Context()) }

// ready refuses while policy's state is catching up, as its API does.
func (p *Pages) ready(w http.ResponseWriter, r *http.Request) bool {
	if p.o.Ready == nil {
		return true
	}
	if err := p.o.Ready(); err != nil {
		p.o.UI.Error(w, r, &httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "policy is not ready (its state is catching up); try again shortly", RetryAfter: 1, Cause: err})
		return false
	}
	return true
}

type connView struct {
	ID, Who, State                     string
	Mine                               bool
	Requested, Since                   time.Time
	AcceptHref, DeclineHref, BlockHref string
}

func connectionView(c relationships.Connection, person string) connView {
	base := PathConnections + "/" + url.PathEscape(c.ID)
	other := c.Other(person)
	whoText := other.Address
	if whoText == "" {
		whoText = "a person of your organization (" + other.Person + ")"
	}
	since := c.Decided
	if since.IsZero() {
		since = c.Requested
	}
	return connView{ID: c.ID, Who: whoText, State: string(c.State), Mine: c.From.Person == person, Requested: c.Requested, Since: since,
		AcceptHref: base + "/accept", DeclineHref: base + "/decline", BlockHref: base + "/block"}
}

var notices = map[string]string{
	"accept":  "Connected.",
	"decline": "Declined; they cannot ask you again.",
	"block":   "Blocked; nothing from them reaches you.",
	"added":   "The relationship is in force.",
	"lifted":  "The relationship is lifted.",
}

func (p *Pages) serveConnections(w http.ResponseWriter, r *http.Request) {
	if !p.ready(w, r) {
		return
	}
	s := who(r)
	pending, err := p.o.Relationships.Pending(s.Tenant, s.PersonID)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	all, err := p.o.Relationships.Connections(s.Tenant, s.PersonID)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	d := struct{ Pending, Connections []connView }{}
	for _, c := range pending {
		d.Pending = append(d.Pending, connectionView(c, s.PersonID))
	}
	for _, c := range all {
		if c.State != relationships.ConnRequested || c.To != s.PersonID {
			d.Connections = append(d.Connections, connectionView(c, s.PersonID))
		}
	}
	p.o.UI.Render(w, r, http.StatusOK, connectionsPage, webui.Page{Title: "Connections", Nav: webui.NavConnections,
		Notice: notices[r.URL.Query().Get("done")], Data: d})
}

func (p *Pages) answer(how string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.ready(w, r) {
			return
		}
		s := who(r)
		id := r.PathValue("id")
		var err error
		switch how {
		case "accept":
			_, err = p.o.Relationships.Accept(r.Context(), s.Tenant, s.PersonID, id)
		case "decline":
			_, err = p.o.Relationships.Decline(r.Context(), s.Tenant, s.PersonID, id)
		default:
			_, err = p.o.Relationships.BlockConnection(r.Context(), s.Tenant, s.PersonID, id)
		}
		if err != nil {
			p.fail(w, r, err)
			return
		}
		p.log.InfoContext(r.Context(), "connection answered on a page", "tenant", s.Tenant, "person_id", s.PersonID, "connection", id, "answer", how)
		http.Redirect(w, r, PathConnections+"?done="+how, http.StatusSeeOther)
	})
}

type setView struct {
	Party                         rules.Party
	Version                       uint64
	Stored                        time.Time
	Label, Text, Href, By, Digest string
	Template                      bool
}

func (p *Pages) serveRules(w http.ResponseWriter, r *http.Request) {
	if !p.ready(w, r) {
		return
	}
	s := who(r)
	d := struct {
		Sets    []setView
		APIPath string
	}{APIPath: pathRulesJSON}
	for _, party := range []rules.Party{rules.PartyRecipient, rules.PartySender} {
		v, err := p.o.Rules.Get(s.Tenant, party, s.PersonID)
		if err != nil {
			p.fail(w, r, err)
			return
		}
		label := "What may reach you (recipient rules)"
		if party == rules.PartySender {
			label = "What you may send (sender rules)"
		}
		sv := setView{Party: v.Party, Version: v.Version, Stored: v.Stored, Digest: v.Digest, Label: label, Text: string(v.Text), Href: pathRulesJSON + "/" + string(party), Template: v.Version == 0}
		if v.By != 0 {
			sv.By = v.By.String()
		}
		d.Sets = append(d.Sets, sv)
	}
	p.o.UI.Render(w, r, http.StatusOK, rulesPage, webui.Page{Title: "Your rules", Nav: webui.NavRules, Data: d})
}

type orgRuleView struct {
	ID, Text, LiftHref string
}

func orgRuleText(r relationships.OrgRule) string {
	var text string
	switch r.Kind {
	case relationships.SameOrg:
		text = "Everyone in the organization is connected with everyone else in it."
	case relationships.RoleMayReceiveFrom:
		text = fmt.Sprintf("People with the role %q may receive from anyone at %s.", r.Role, r.Domain)
	default:
		text = string(r.Kind)
	}
	if len(r.Commits) > 0 {
		text += " Also pre-approved, without asking: commitments to " + strings.Join(r.Commits, ", ") + "."
	}
	return text
}

func (p *Pages) serveAdmin(w http.ResponseWriter, r *http.Request) {
	if !p.ready(w, r) {
		return
	}
	s := who(r)
	list, err := p.o.Relationships.OrgRules(s.Tenant)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	d := struct {
		Rules   []orgRuleView
		AddHref string
	}{AddHref: PathAdminRels}
	for _, rule := range list {
		id := relationships.OrgRuleID(s.Tenant, rule)
		d.Rules = append(d.Rules, orgRuleView{ID: id, Text: orgRuleText(rule), LiftHref: PathAdminRels + "/" + url.PathEscape(id) + "/lift"})
	}
	p.o.UI.Render(w, r, http.StatusOK, adminPage, webui.Page{Title: "Pre-approved relationships", Nav: webui.NavAdmin,
		Notice: notices[r.URL.Query().Get("done")], Data: d})
}

func adminActor(s *signin.Session) *alpv1.Actor {
	return &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_PERSON, Id: s.PersonID}
}

func (p *Pages) serveAdd(w http.ResponseWriter, r *http.Request) {
	if !p.ready(w, r) {
		return
	}
	s := who(r)
	rule := relationships.OrgRule{Kind: relationships.OrgRuleKind(r.PostFormValue("kind"))}
	if rule.Kind == relationships.RoleMayReceiveFrom {
		rule.Role, rule.Domain = r.PostFormValue("role"), r.PostFormValue("domain")
	}
	rule.Commits = strings.FieldsFunc(r.PostFormValue("commits"), func(c rune) bool { return c == ',' || unicode.IsSpace(c) })
	slices.Sort(rule.Commits)
	rule.Commits = slices.Compact(rule.Commits)
	norm, err := relationships.CheckOrgRule(rule)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	if err := p.o.Relationships.SetOrgRule(r.Context(), s.Tenant, norm, true, adminActor(s)); err != nil {
		p.fail(w, r, err)
		return
	}
	p.log.InfoContext(r.Context(), "organization relationship added on a page", "tenant", s.Tenant, "kind", string(norm.Kind), "by", s.PersonID)
	http.Redirect(w, r, PathAdminRels+"?done=added", http.StatusSeeOther)
}

func (p *Pages) serveLift(w http.ResponseWriter, r *http.Request) {
	if !p.ready(w, r) {
		return
	}
	s := who(r)
	id := r.PathValue("id")
	list, err := p.o.Relationships.OrgRules(s.Tenant)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	for _, rule := range list {
		if relationships.OrgRuleID(s.Tenant, rule) != id {
			continue
		}
		if err := p.o.Relationships.SetOrgRule(r.Context(), s.Tenant, rule, false, adminActor(s)); err != nil {
			p.fail(w, r, err)
			return
		}
		p.log.InfoContext(r.Context(), "organization relationship lifted on a page", "tenant", s.Tenant, "rule", id, "by", s.PersonID)
		http.Redirect(w, r, PathAdminRels+"?done=lifted", http.StatusSeeOther)
		return
	}
	p.fail(w, r, fmt.Errorf("%w: relationship %q", relationships.ErrNotFound, id))
}

// fail answers a store error as a page.
func (p *Pages) fail(w http.ResponseWriter, r *http.Request, err error) {
	var e *httpjson.Error
	switch {
	case errors.Is(err, relationships.ErrNotFound):
		e = httpjson.Errorf(http.StatusNotFound, webui.CodeNotFound, "there is no such connection or relationship of yours")
	case errors.Is(err, relationships.ErrState):
		e = httpjson.Errorf(http.StatusConflict, CodeState, "that connection was already answered otherwise")
	case errors.Is(err, relationships.ErrInvalid), errors.Is(err, rulestore.ErrInvalid):
		e = httpjson.Errorf(http.StatusUnprocessableEntity, CodeInvalid, "%v", err)
	case errors.Is(err, projection.ErrClosed), errors.Is(err, projection.ErrStale):
		e = &httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "policy is not ready; try again shortly", RetryAfter: 1, Cause: err}
	default:
		p.log.ErrorContext(r.Context(), "policy pages: store failed", "path", r.URL.Path, "err", err)
		e = &httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "your settings cannot be read or changed right now; try again shortly", RetryAfter: 1, Cause: err}
	}
	p.o.UI.Error(w, r, e)
}
