package webui_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/webui"
	"github.com/alpd-project/alpd/internal/webui/webuitest"
)

var testFS = fstest.MapFS{"page.html": {Data: []byte(`{{define "content"}}<h1>{{.Title}}</h1>
<p id="who">{{.Session.PersonID}}</p>
<form method="post" action="/t/write">{{.CSRFField}}<label for="name">Name</label><input id="name" name="name" type="text"><button type="submit" id="go">Go</button></form>
{{template "button-form" ($.Button "/t/write" "one" "One" "secondary" "who")}}
{{end}}`)}}

func rig(t *testing.T) *webuitest.Rig {
	page := webui.Parse(testFS, "page.html")
	return webuitest.New(t, func(r *webuitest.Rig) []httproute.Route {
		u := r.UI
		show := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			u.Render(w, req, http.StatusOK, page, webui.Page{Title: "Test page", Nav: webui.NavPending})
		})
		wrote := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			http.Redirect(w, req, "/t/page", http.StatusSeeOther)
		})
		get := func(p string, h http.Handler) httproute.Route {
			return httproute.Route{Method: http.MethodGet, Pattern: p, Handler: h, Caller: httproute.Person, BodyLimit: httproute.NoBody}
		}
		post := func(p string, h http.Handler) httproute.Route {
			return httproute.Route{Method: http.MethodPost, Pattern: p, Handler: h, Caller: httproute.Person, BodyLimit: httproute.FormBody}
		}
		return []httproute.Route{
			get("/t/page", u.Page(show)),
			get("/t/fresh", u.Fresh(show)),
			get("/t/admin", u.Page(u.Admin(show))),
			post("/t/write", u.Write(wrote)),
			post("/t/decide", u.FreshWrite(wrote)),
			{Pattern: "/t/", Handler: u.NotFound(), Caller: httproute.Person, BodyLimit: httproute.NoBody},
		}
	})
}

func wantHeaders(t *testing.T, a webuitest.Answer) {
	t.Helper()
	for k, v := range map[string]string{
		"Content-Security-Policy": webui.CSP,
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "same-origin",
		"Cache-Control":           "no-store",
	} {
		if got := a.Header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
}

// wantPage is an HTML error page with status and code.
func wantPage(t *testing.T, a webuitest.Answer, status int, code string) {
	t.Helper()
	if a.Status != status || !strings.HasPrefix(a.Header.Get("Content-Type"), "text/html") || !strings.Contains(a.Body, "<code>"+code+"</code>") {
		t.Fatalf("want a %d %s page, got %d %s: %s", status, code, a.Status, a.Header.Get("Content-Type"), a.Body)
	}
	wantHeaders(t, a)
	webuitest.CheckPage(t, a.Body)
}

func TestPageSignedIn(t *testing.T) {
	r := rig(t)
	alice, csrf := r.SignInAs(webuitest.Alice)
	a := r.Get(alice, "/t/page")
	if a.Status != http.StatusOK {
		t.Fatalf("page: %d %s", a.Status, a.Body)
	}
	wantHeaders(t, a)
	doc := webuitest.CheckPage(t, a.Body)
	for _, want := range []string{"alice@example.org", `aria-current="page"`, `href="/admin/relationships"`, `action="/signout"`, `value="` + csrf + `"`} {
		if !strings.Contains(a.Body, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if webuitest.ByID(doc, "sign-out") == nil || webuitest.ByID(doc, "one") == nil {
		t.Error("sign-out or button-form missing")
	}
	// Bob is no admin: no Admin link, and the admin page is refused.
	bob, _ := r.SignInAs(webuitest.Bob)
	if a := r.Get(bob, "/t/page"); strings.Contains(a.Body, "/admin/relationships") {
		t.Error("a non-admin sees the Admin link")
	}
	wantPage(t, r.Get(bob, "/t/admin"), http.StatusForbidden, webui.CodeAdminRoleRequired)
	if a := r.Get(alice, "/t/admin"); a.Status != http.StatusOK {
		t.Fatalf("admin page for an admin: %d", a.Status)
	}
	// The form posts.
	if a := r.Post(alice, "/t/write", url.Values{"csrf": {csrf}}); a.Status != http.StatusSeeOther {
		t.Fatalf("write: %d %s", a.Status, a.Body)
	}
	// Sign-out through the layout's form ends the session.
	if a := r.Post(alice, signin.PathSignOut, url.Values{"csrf": {csrf}, "return": {"/"}}); a.Status != http.StatusSeeOther {
		t.Fatalf("sign-out: %d %s", a.Status, a.Body)
	}
	if a := r.Get(alice, "/t/page"); a.Status != http.StatusFound || !strings.HasPrefix(a.Location, signin.PathSignIn) {
		t.Fatalf("after sign-out: %d %q", a.Status, a.Location)
	}
}

func TestRefusals(t *testing.T) {
	r := rig(t)
	anon := r.Browser()
	// No session: a GET goes to sign in, a POST is a 401 page (or JSON).
	a := r.Get(anon, "/t/page")
	if a.Status != http.StatusFound || !strings.HasPrefix(a.Location, signin.PathSignIn+"?") || !strings.Contains(a.Location, "return=%2Ft%2Fpage") {
		t.Fatalf("no session GET: %d %q", a.Status, a.Location)
	}
	wantPage(t, r.Post(anon, "/t/write", url.Values{"csrf": {"x"}}), http.StatusUnauthorized, signin.CodeSigninRequired)
	j := r.Post(anon, "/t/write", url.Values{"csrf": {"x"}}, "Accept", "application/json")
	var p struct{ Code string }
	if j.Status != http.StatusUnauthorized || json.Unmarshal([]byte(j.Body), &p) != nil || p.Code != signin.CodeSigninRequired {
		t.Fatalf("JSON refusal: %d %s", j.Status, j.Body)
	}

	alice, csrf := r.SignInAs(webuitest.Alice)
	// An agent's bearer token never counts, with or without a cookie.
	for _, c := range []*http.Client{anon, alice} {
		wantPage(t, r.Get(c, "/t/page", "Authorization", "Bearer alp_at_x"), http.StatusForbidden, webui.CodeAgentCredentials)
		wantPage(t, r.Post(c, "/t/write", url.Values{"csrf": {csrf}}, "Authorization", "Bearer alp_at_x"), http.StatusForbidden, webui.CodeAgentCredentials)
	}
	// CSRF: missing, wrong, foreign origin, no origin at all.
	wantPage(t, r.Post(alice, "/t/write", nil), http.StatusForbidden, signin.CodeCSRFToken)
	wantPage(t, r.Post(alice, "/t/write", url.Values{"csrf": {csrf + "x"}}), http.StatusForbidden, signin.CodeCSRFToken)
	wantPage(t, r.Post(alice, "/t/write", url.Values{"csrf": {csrf}}, "Origin", "https://evil.example"), http.StatusForbidden, signin.CodeCSRFOrigin)
	wantPage(t, r.Post(alice, "/t/write", url.Values{"csrf": {csrf}}, "Origin", ""), http.StatusForbidden, signin.CodeCSRFOriginMissing)
	// Another person's token is no good either.
	_, bobCSRF := r.SignInAs(webuitest.Bob)
	wantPage(t, r.Post(alice, "/t/write", url.Values{"csrf": {bobCSRF}}), http.StatusForbidden, signin.CodeCSRFToken)

	// Fresh: just signed in it passes; six minutes later a GET goes to a
	// fresh sign-in and a POST is 401 fresh_signin_required.
	if a := r.Get(alice, "/t/fresh"); a.Status != http.StatusOK {
		t.Fatalf("fresh page: %d", a.Status)
	}
	if a := r.Post(alice, "/t/decide", url.Values{"csrf": {csrf}}); a.Status != http.StatusSeeOther {
		t.Fatalf("fresh write: %d %s", a.Status, a.Body)
	}
	r.Advance(6 * time.Minute)
	a = r.Get(alice, "/t/fresh")
	loc, _ := url.Parse(a.Location)
	if a.Status != http.StatusFound || loc.Path != signin.PathSignIn || loc.Query().Get("fresh") != "1" || loc.Query().Get("return") != "/t/fresh" {
		t.Fatalf("stale GET: %d %q", a.Status, a.Location)
	}
	wantPage(t, r.Post(alice, "/t/decide", url.Values{"csrf": {csrf}}), http.StatusUnauthorized, signin.CodeFreshSigninRequired)
	// A stale session still reads and writes where freshness is not asked.
	if a := r.Get(alice, "/t/page"); a.Status != http.StatusOK {
		t.Fatalf("stale session on a reading page: %d", a.Status)
	}

	// Unknown paths of the space: 404 page.
	wantPage(t, r.Get(alice, "/t/nothing"), http.StatusNotFound, webui.CodeNotFound)
}

func TestStyleSheet(t *testing.T) {
	r := rig(t)
	c := r.Browser()
	a := r.Get(c, webui.PathStyle)
	if a.Status != http.StatusOK || a.Header.Get("Content-Type") != "text/css; charset=utf-8" || !strings.Contains(a.Body, ":focus-visible") {
		t.Fatalf("style: %d %s", a.Status, a.Header.Get("Content-Type"))
	}
	etag := a.Header.Get("ETag")
	if a := r.Get(c, webui.PathStyle, "If-None-Match", etag); a.Status != http.StatusNotModified {
		t.Fatalf("revalidation: %d", a.Status)
	}
	// The page links the versioned sheet, which may be cached for good.
	alice, _ := r.SignInAs(webuitest.Alice)
	page := r.Get(alice, "/t/page")
	i := strings.Index(page.Body, webui.PathStyle+"?v=")
	if i < 0 {
		t.Fatal("page does not link the style sheet")
	}
	href := page.Body[i:]
	href = href[:strings.IndexByte(href, '"')]
	if a := r.Get(c, href); a.Status != http.StatusOK || !strings.Contains(a.Header.Get("Cache-Control"), "immutable") {
		t.Fatalf("versioned style: %d %q", a.Status, a.Header.Get("Cache-Control"))
	}
}

func TestWantsJSON(t *testing.T) {
	for accept, want := range map[string]bool{
		"":                                false,
		"text/html,application/xhtml+xml": false,
		"application/json":                true,
		"application/problem+json":        true,
		"text/html, application/json":     false,
		"*/*":                             false,
		"application/json;q=0.9, */*":     true,
	} {
		req, _ := http.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("Accept", accept)
		if got := webui.WantsJSON(req); got != want {
			t.Errorf("Accept %q: %v, want %v", accept, got, want)
		}
	}
}
