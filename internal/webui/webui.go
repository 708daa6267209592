// Package webui is what every person's page of the broker shares: the
// layout (header with the signed-in address, navigation, sign-out form),
// the style sheet, error pages, the security headers and the guards in
// front of every page.
//
// Pages are server-rendered html/template with embedded assets; nothing
// needs JavaScript and the Content-Security-Policy forbids any
// (default-src 'none'). Every page answer is personal, so it is never
// cached (Cache-Control: no-store).
//
// # Who may call
//
// Only a person signed in with their organization's login (internal/signin)
// reaches a page. A request with an Authorization header is refused before
// anything else (403 agent_credentials_refused): an agent's bearer token
// must never act on a person's pages, and a page must never answer
// anything to one. Only the session cookie counts.
//
// The guards (Page, Fresh, Write, FreshWrite) wrap a page package's
// handlers with the sign-in's own checks (Sessions: RequireSession,
// RequireFresh, RequireCSRF — *signin.Service has them). Their refusals
// are problem details (httpjson); for a browser that did not ask for JSON
// the guards show them as an HTML error page with the same status and
// code.
package webui

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/signin"
)

// Sessions is the sign-in a page package needs: identity's
// *signin.Service has these methods. Each puts the session in the
// request context (signin.SessionFromContext) before it calls next.
type Sessions interface {
	// RequireSession: a valid session, else a GET is redirected to sign
	// in and anything else is 401.
	RequireSession(next http.Handler) http.Handler
	// RequireFresh: a session whose person authenticated at their IdP
	// recently, else a GET is redirected to a fresh sign-in (max_age=0)
	// and anything else is 401 fresh_signin_required.
	RequireFresh(next http.Handler) http.Handler
	// RequireCSRF: a same-origin request (Origin or Referer) carrying the
	// session's CSRF token in the form field "csrf", else 403.
	RequireCSRF(next http.Handler) http.Handler
}

// Error codes of this package's refusals.
const (
	// CodeAgentCredentials: the request carried an Authorization header.
	CodeAgentCredentials = "agent_credentials_refused"
	// CodeAdminRoleRequired: an admin page, and the person is no admin.
	CodeAdminRoleRequired = "admin_role_required"
	// CodeNotFound: no such page or thing of this person's.
	CodeNotFound = "not_found"
	// CodeMethodNotAllowed: a known page under another method.
	CodeMethodNotAllowed = "method_not_allowed"
	// CodeInvalidRequest: a form or query that does not make sense.
	CodeInvalidRequest = "invalid_request"
)

// Paths of the shared navigation and assets.
const (
	// PathAssets holds the style sheet (the broker serves Routes there).
	PathAssets     = "/ui/"
	PathStyle      = PathAssets + "style.css"
	PathPending    = "/approvals/"
	PathStanding   = "/approvals/rules"
	PathConnection = "/settings/connections"
	PathRules      = "/settings/rules"
	PathLedger     = "/ledger/"
	PathAdmin      = "/admin/relationships"
)

// Options build a UI.
type Options struct {
	// Sessions is the sign-in. Required.
	Sessions Sessions
	// AdminRole is the session role of an organization's admin (default
	// alp.AdminRole): it shows the Admin link and opens admin pages.
	AdminRole string
}

// UI is the shared part of the pages: one per process, used by every page
// package. Safe for concurrent use.
type UI struct {
	sessions  Sessions
	adminRole string
}

// New builds the UI. It panics without Sessions: a page package wired
// without sign-in is a programming error every test run shows.
func New(o Options) *UI {
	if o.Sessions == nil {
		panic("webui: Options.Sessions is required")
	}
	if o.AdminRole == "" {
		o.AdminRole = alp.AdminRole
	}
	return &UI{sessions: o.Sessions, adminRole: o.AdminRole}
}

// IsAdmin reports whether sess has the organization's admin role.
func (u *UI) IsAdmin(sess *signin.Session) bool {
	return sess != nil && slices.Contains(sess.Roles, u.adminRole)
}

// AdminRole is the role admin pages require.
func (u *UI) AdminRole() string { return u.adminRole }

// Page guards a page that reads: a signed-in person.
func (u *UI) Page(h http.Handler) http.Handler { return u.guard(u.sessions.RequireSession(h)) }

// Fresh guards a page that leads to a decision: a fresh sign-in.
func (u *UI) Fresh(h http.Handler) http.Handler { return u.guard(u.sessions.RequireFresh(h)) }

// Write guards a form's POST: the session and the CSRF check.
func (u *UI) Write(h http.Handler) http.Handler { return u.guard(u.sessions.RequireCSRF(h)) }

// FreshWrite guards a decision's POST: a fresh sign-in, then the CSRF
// check.
func (u *UI) FreshWrite(h http.Handler) http.Handler {
	return u.guard(u.sessions.RequireFresh(u.sessions.RequireCSRF(h)))
}

// Admin guards an admin page's handler (inside Page or Write): the
// organization's admin role, else 403 admin_role_required.
func (u *UI) Admin(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !u.IsAdmin(signin.SessionFromContext(r.Context())) {
			u.Error(w, r, httpjson.Errorf(http.StatusForbidden, CodeAdminRoleRequired, "this page is for your organization's admins (role %s)", u.adminRole))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// guard sets the security headers, refuses agents' credentials, and shows
// the sign-in's refusals as pages.
func (u *UI) guard(h http.Handler) http.Handler {
	return Secure(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			u.Error(w, r, httpjson.Errorf(http.StatusForbidden, CodeAgentCredentials,
				"these pages are for people signed in with their organization's login; an agent's credential (the Authorization header) is never accepted here"))
			return
		}
		if WantsJSON(r) {
			h.ServeHTTP(w, r)
			return
		}
		pw := &problemPage{ResponseWriter: w}
		h.ServeHTTP(pw, r)
		pw.finish(u, r)
	}))
}

// CSP is the Content-Security-Policy of every page: no script, no inline
// style, nothing from elsewhere, forms only to this site, no framing.
const CSP = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Secure sets the security headers every page answer carries.
func Secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", CSP)
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("X-Frame-Options", "DENY")
		httpjson.NoStore(hd)
		h.ServeHTTP(w, r)
	})
}

// WantsJSON reports whether the request asks for JSON (Accept names
// application/json or application/problem+json before any HTML).
func WantsJSON(r *http.Request) bool {
	for part := range strings.SplitSeq(r.Header.Get("Accept"), ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mt {
		case "text/html", "application/xhtml+xml":
			return false
		case httpjson.MediaJSON, httpjson.MediaProblem:
			return true
		}
	}
	return false
}

// problemPage catches a problem-details refusal written by the sign-in's
// guards and shows it as an error page instead; everything else passes.
type problemPage struct {
	http.ResponseWriter
	caught bool
	status int
	body   bytes.Buffer
}

func (p *problemPage) WriteHeader(status int) {
	if status >= 400 && p.Header().Get("Content-Type") == httpjson.MediaProblem {
		p.caught, p.status = true, status
		return
	}
	p.ResponseWriter.WriteHeader(status)
}

func (p *problemPage) Write(b []byte) (int, error) {
	if p.caught {
		return p.body.Write(b)
	}
	return p.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (p *problemPage) Unwrap() http.ResponseWriter { return p.ResponseWriter }

func (p *problemPage) finish(u *UI, r *http.Request) {
	if !p.caught {
		return
	}
	var pd httpjson.Problem
	e := &httpjson.Error{Status: p.status, Code: httpjson.CodeInternal, Message: "the request was refused"}
	if json.Unmarshal(p.body.Bytes(), &pd) == nil && pd.Error.Code != "" {
		e.Code, e.Message, e.RetryAfter = pd.Error.Code, pd.Error.Message, pd.Error.RetryAfter
	}
	if ra := p.Header().Get("Retry-After"); ra != "" && e.RetryAfter == 0 {
		e.RetryAfter, _ = strconv.Atoi(ra)
	}
	p.Header().Del("Content-Length")
	u.renderError(p.ResponseWriter, r, e)
}
