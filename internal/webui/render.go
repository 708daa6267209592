package webui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/signin"
)

//go:embed assets
var assets embed.FS

var (
	styleCSS  = mustRead("assets/style.css")
	styleETag = func() string { s := sha256.Sum256(styleCSS); return `"` + hex.EncodeToString(s[:8]) + `"` }()
	// styleURL names the style sheet's version, so a browser never keeps
	// an older one with a newer page.
	styleURL = PathStyle + "?v=" + strings.Trim(styleETag, `"`)
)

func mustRead(name string) []byte {
	b, err := assets.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return b
}

// Nav names a navigation entry, the one a page marks as current.
type Nav string

// Navigation entries.
const (
	NavPending     Nav = "pending"
	NavStanding    Nav = "standing"
	NavConnections Nav = "connections"
	NavRules       Nav = "rules"
	NavLedger      Nav = "ledger"
	NavAdmin       Nav = "admin"
)

// NavItem is one link of the navigation.
type NavItem struct {
	Label, Href string
	Current     bool
}

// Page is what the layout renders: the page's title (also its h1 in the
// content templates), the current navigation entry, the session, an
// optional notice, and the page's own data.
type Page struct {
	Title   string
	Nav     Nav
	Notice  string
	Data    any
	Session *signin.Session
	admin   bool
}

// CSRF is the session's CSRF token, for a form's "csrf" field.
func (p Page) CSRF() string {
	if p.Session == nil {
		return ""
	}
	return p.Session.CSRFToken()
}

// CSRFField is the hidden "csrf" input every state-changing form carries.
func (p Page) CSRFField() template.HTML {
	return template.HTML(`<input type="hidden" name="csrf" value="` + template.HTMLEscapeString(p.CSRF()) + `">`)
}

// ButtonForm is a one-button form that POSTs to Action with the CSRF
// token (template "button-form").
type ButtonForm struct {
	Action, ID, Label, Class string
	// Describe is the id of the text the button acts on
	// (aria-describedby), so "Accept" says what it accepts.
	Describe string
	CSRF     string
	Hidden   []Field
}

// Field is a hidden form field.
type Field struct{ Name, Value string }

// Button is a ButtonForm of this page's session: action, the button's id
// and label, its class ("", "secondary" or "danger") and the id of the
// text it acts on. Templates use it as
// {{template "button-form" ($.Button "/path" "id" "Label" "class" "desc-id")}}.
func (p Page) Button(action, id, label, class, describe string) ButtonForm {
	return ButtonForm{Action: action, ID: id, Label: label, Class: class, Describe: describe, CSRF: p.CSRF()}
}

// StyleURL is the style sheet's address.
func (p Page) StyleURL() string { return styleURL }

// NavItems are the navigation links; Admin only for admins.
func (p Page) NavItems() []NavItem {
	items := []NavItem{
		{"Pending", PathPending, p.Nav == NavPending},
		{"Standing rules", PathStanding, p.Nav == NavStanding},
		{"Connections", PathConnection, p.Nav == NavConnections},
		{"Rules", PathRules, p.Nav == NavRules},
		{"Ledger", PathLedger, p.Nav == NavLedger},
	}
	if p.admin {
		items = append(items, NavItem{"Admin", PathAdmin, p.Nav == NavAdmin})
	}
	return items
}

// Template is one page: the shared layout with the page's "content".
type Template struct{ t *template.Template }

// Funcs are the helpers every page template may use.
var Funcs = template.FuncMap{
	// when formats a time for people, in UTC (the page has no script to
	// learn the reader's zone); "" for the zero time.
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04 UTC")
	},
	// iso is the machine-readable time of a <time datetime>.
	"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	// prefix shortens a hash or commitment to n characters and an ellipsis.
	"prefix": func(n int, s string) string {
		if len(s) <= n {
			return s
		}
		return s[:n] + "…"
	},
	"join": strings.Join,
}

// Parse builds a page from the file name in fsys (which defines
// "content"), with the shared layout and Funcs; it panics on a broken
// template, which every test run shows.
func Parse(fsys fs.FS, name string) *Template {
	t := template.Must(template.New(name).Funcs(Funcs).ParseFS(assets, "assets/layout.html"))
	template.Must(t.ParseFS(fsys, name))
	if t.Lookup("content") == nil {
		panic(fmt.Sprintf("webui: %s defines no \"content\"", name))
	}
	return &Template{t: t}
}

var errorPage = func() *Template {
	t := template.Must(template.New("error").Funcs(Funcs).ParseFS(assets, "assets/layout.html"))
	template.Must(t.New("content").Parse(`{{template "error-content" .}}`))
	return &Template{t: t}
}()

// Render answers the page with status, the session of the request's
// context in the header. It renders into memory first, so a template
// failure answers a clean 500 rather than half a page.
func (u *UI) Render(w http.ResponseWriter, r *http.Request, status int, t *Template, p Page) {
	if p.Session == nil {
		p.Session = signin.SessionFromContext(r.Context())
	}
	p.admin = u.IsAdmin(p.Session)
	var buf bytes.Buffer
	if err := t.t.ExecuteTemplate(&buf, "layout", p); err != nil {
		if t == errorPage {
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		u.renderError(w, r, &httpjson.Error{Status: http.StatusInternalServerError, Code: httpjson.CodeInternal, Message: "the page could not be shown", Cause: err})
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	httpjson.NoStore(h)
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// errorData is what the error page shows.
type errorData struct {
	Title, Message, Code string
	Status, RetryAfter   int
	SignIn               string
}

// Error answers err: an *httpjson.Error (also wrapped) with its status,
// code and message, anything else as 500 internal_error without its text.
// A request that asks for JSON gets problem details, a browser a page.
func (u *UI) Error(w http.ResponseWriter, r *http.Request, err error) {
	var e *httpjson.Error
	if !errors.As(err, &e) {
		e = &httpjson.Error{Status: http.StatusInternalServerError, Code: httpjson.CodeInternal, Message: "internal error", Cause: err}
	}
	u.renderError(w, r, e)
}

func (u *UI) renderError(w http.ResponseWriter, r *http.Request, e *httpjson.Error) {
	if WantsJSON(r) {
		httpjson.WriteError(w, e)
		return
	}
	p := e.Problem()
	e.SetHeaders(w.Header())
	d := errorData{Title: p.Title, Message: p.Detail, Code: p.Code, Status: p.Status, RetryAfter: p.RetryAfter}
	if p.Status == http.StatusUnauthorized {
		// A fresh or new sign-in brings the person back here.
		d.SignIn = signin.PathSignIn + "?" + "return=" + template.URLQueryEscaper(returnPath(r))
		if e.Code == signin.CodeFreshSigninRequired {
			d.SignIn += "&fresh=1"
		}
	}
	u.Render(w, r, p.Status, errorPage, Page{Title: p.Title, Data: d})
}

// returnPath is where a sign-in should come back to: the page itself for
// a GET, else the referring page of this site, else the pending list.
func returnPath(r *http.Request) string {
	cand := r.URL.RequestURI()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		cand = PathPending
		if ref := r.Referer(); ref != "" {
			if i := strings.Index(ref, "://"); i >= 0 {
				if j := strings.IndexByte(ref[i+3:], '/'); j >= 0 {
					cand = ref[i+3+j:]
				}
			}
		}
	}
	p, err := signin.SafeReturnPath(cand)
	if err != nil {
		return PathPending
	}
	return p
}

// Routes serve the shared style sheet at PathStyle (the broker mounts
// them in its own space, PathAssets).
func Routes() []httproute.Route {
	return []httproute.Route{{Method: http.MethodGet, Pattern: PathStyle, Caller: httproute.Public, BodyLimit: httproute.NoBody,
		Handler: http.HandlerFunc(serveStyle)}}
}

func serveStyle(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/css; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("ETag", styleETag)
	// The URL names the version (?v=), so a year is safe; without it,
	// revalidate.
	if r.URL.Query().Get("v") == strings.Trim(styleETag, `"`) {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "no-cache")
	}
	if r.Header.Get("If-None-Match") == styleETag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	_, _ = w.Write(styleCSS)
}

// NotFound answers every other path of a page package's space: 404.
func (u *UI) NotFound() http.Handler {
	return Secure(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.Error(w, r, httpjson.Errorf(http.StatusNotFound, CodeNotFound, "there is no such page"))
	}))
}
