package signin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/testidp"
	"github.com/alpd-project/alpd/internal/testkit"
)

func TestSignIn(t *testing.T) {
	h := newRig(t, rigOptions{})
	b := h.browser()

	// /signin redirects to the IdP with PKCE S256, a nonce, our scopes, the
	// login hint, and sets a flow cookie scoped to the callback.
	a := get(t, h.noRedirect(), h.public+"/signin?tenant=example.org&return=/after&login_hint=alice%40example.org")
	if a.status != http.StatusFound {
		t.Fatalf("/signin: %d %s", a.status, a.body)
	}
	au, _ := url.Parse(a.location)
	q := au.Query()
	if !strings.HasPrefix(a.location, h.idp.Issuer()) || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" ||
		q.Get("nonce") == "" || q.Get("state") == "" || q.Get("login_hint") != "alice@example.org" ||
		q.Get("client_id") != clientID || q.Get("redirect_uri") != h.public+"/signin/callback/example.org" ||
		q.Get("scope") != "openid profile email offline_access" || q.Has("max_age") || q.Has("prompt") {
		t.Fatalf("authorization URL %s", a.location)
	}
	fc := cookieNamed(a.cookies, "alpd_signin_"+q.Get("state"))
	if fc == nil || !fc.Secure || !fc.HttpOnly || fc.SameSite != http.SameSiteLaxMode || fc.Path != "/signin/callback/example.org" || fc.MaxAge <= 0 {
		t.Fatalf("flow cookie %+v", fc)
	}
	if strings.Contains(fc.Value, q.Get("nonce")) || strings.Contains(fc.Value, "/after") {
		t.Fatal("flow cookie is not encrypted")
	}

	// The whole flow.
	before := time.Now().Add(-time.Second).Truncate(time.Second)
	res, cb := h.signIn(b, mainTenant, "alice@example.org", "/after?x=1")
	if res.status != http.StatusSeeOther || res.location != "/after?x=1" {
		t.Fatalf("callback: %d %q %s", res.status, res.location, res.body)
	}
	sc := cookieNamed(res.cookies, signin.SessionCookie)
	if sc == nil {
		t.Fatalf("no session cookie in %v", res.cookies)
	}
	if !sc.Secure || !sc.HttpOnly || sc.SameSite != http.SameSiteLaxMode || sc.Path != "/" || sc.MaxAge != int((8*time.Hour)/time.Second) {
		t.Fatalf("session cookie attributes: %+v", sc)
	}
	if strings.Contains(sc.Value, "alice") {
		t.Fatal("session cookie is not encrypted")
	}
	if c := cookieNamed(res.cookies, "alpd_signin_"+mustQuery(t, cb).Get("state")); c == nil || c.MaxAge >= 0 {
		t.Fatalf("flow cookie not deleted: %+v", c)
	}
	if got := res.header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control %q", got)
	}

	binds := h.binder.all()
	want := bindCall{Tenant: mainTenant, Issuer: h.idp.Issuer(), Subject: "sub-alice", Address: "alice@example.org", Roles: []string{"approver", "admin"}}
	if len(binds) != 1 || binds[0].Tenant != want.Tenant || binds[0].Issuer != want.Issuer || binds[0].Subject != want.Subject ||
		binds[0].Address != want.Address || !slices.Equal(binds[0].Roles, want.Roles) {
		t.Fatalf("BindPerson calls %+v, want %+v", binds, want)
	}
	keeps := h.keeper.all()
	if len(keeps) != 1 || keeps[0].Tenant != mainTenant || keeps[0].PersonID != "person-sub-alice" || keeps[0].RefreshToken == "" {
		t.Fatalf("KeepRefreshToken calls %+v", keeps)
	}
	// It is a real refresh token of the IdP.
	conf := &oauth2.Config{ClientID: clientID, ClientSecret: clientSecret, Endpoint: h.idp.Endpoint()}
	if _, err := conf.TokenSource(t.Context(), &oauth2.Token{RefreshToken: keeps[0].RefreshToken}).Token(); err != nil {
		t.Fatalf("kept refresh token does not refresh: %v", err)
	}

	// The session.
	status, v := h.session(b)
	if status != http.StatusOK {
		t.Fatalf("/home: %d", status)
	}
	s := v.Session
	if s.Tenant != mainTenant || s.PersonID != "person-sub-alice" || s.Address != "alice@example.org" ||
		!slices.Equal(s.Roles, []string{"approver", "admin"}) || s.ID == "" || v.CSRF == "" {
		t.Fatalf("session %+v", v)
	}
	if s.AuthTime.Before(before) || s.AuthTime.After(time.Now()) || s.Expires.Sub(s.Issued) != 8*time.Hour {
		t.Fatalf("session times: auth %v issued %v expires %v", s.AuthTime, s.Issued, s.Expires)
	}
	req := httptest.NewRequest(http.MethodGet, h.public+"/x", nil)
	req.AddCookie(sc)
	got, err := h.svc.Session(req)
	if err != nil || got.ID != s.ID || got.CSRFToken() != v.CSRF {
		t.Fatalf("Session(): %+v %v", got, err)
	}

	// The callback cannot be replayed: the flow cookie is gone.
	wantError(t, get(t, b, cb), http.StatusBadRequest, signin.CodeStateInvalid)
	// Nor used from another browser.
	wantError(t, get(t, h.browser(), cb), http.StatusBadRequest, signin.CodeStateInvalid)

	// Default return path.
	res, _ = h.signIn(h.browser(), mainTenant, "alice@example.org", "")
	if res.status != http.StatusSeeOther || res.location != "/" {
		t.Fatalf("default return: %d %q", res.status, res.location)
	}

	h.checkLogsClean(keeps[0].RefreshToken, sc.Value, mustQuery(t, cb).Get("code"), clientSecret)
}

func (h *rig) checkLogsClean(secrets ...string) {
	h.t.Helper()
	logs := h.logs.String()
	if !strings.Contains(logs, "signin: signed in") {
		h.t.Errorf("expected sign-in log lines, got %s", logs)
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(logs, s) {
			h.t.Errorf("logs contain a secret (%.8s…)", s)
		}
	}
	for _, k := range []string{"refresh_token", "id_token", "access_token"} {
		if strings.Contains(logs, k) {
			h.t.Errorf("logs mention %s: %s", k, logs)
		}
	}
}

func (h *rig) noRedirect() *http.Client {
	c := *h.browser()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

func mustQuery(t *testing.T, u string) url.Values {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return p.Query()
}

func TestAddressRules(t *testing.T) {
	h := newRig(t, rigOptions{})
	for _, tc := range []struct {
		user, address string
		roles         []string
		status        int
		code          string
	}{
		{user: "bob", address: "bob@example.org"},                                           // oid → directory
		{user: "carol", address: "carol@corp.example.org", roles: []string{"viewer"}},       // oid is an address in a verified domain
		{user: "dave", address: "dave@example.org"},                                         // verified email, allow-listed domain
		{user: "erin", status: http.StatusForbidden, code: signin.CodeEmailNotVerified},     // email_verified false
		{user: "frank", status: http.StatusForbidden, code: signin.CodeEmailDomain},         // domain not allow-listed
		{user: "gina", status: http.StatusForbidden, code: signin.CodeAddressDomain},        // immutable address, unverified domain
		{user: "hank", status: http.StatusForbidden, code: signin.CodeAddressUnresolved},    // nothing provisioned
		{user: "ivan", status: http.StatusConflict, code: "address_taken"},                  // the Binder's own *Error
		{user: "judy", status: http.StatusInternalServerError, code: signin.CodeBindFailed}, // the Binder failed
	} {
		t.Run(tc.user, func(t *testing.T) {
			nb, nk := len(h.binder.all()), len(h.keeper.all())
			res, _ := h.signIn(h.browser(), mainTenant, tc.user, "/")
			if tc.code != "" {
				wantError(t, res, tc.status, tc.code)
				if cookieNamed(res.cookies, signin.SessionCookie) != nil {
					t.Fatal("a refused sign-in set a session cookie")
				}
				if strings.Contains(res.body, "secret detail") {
					t.Fatal("an internal error leaked its cause")
				}
				wantBinds := nb
				if tc.user == "ivan" || tc.user == "judy" {
					wantBinds++
				}
				if len(h.binder.all()) != wantBinds || len(h.keeper.all()) != nk {
					t.Fatal("a refused sign-in stored something")
				}
				return
			}
			if res.status != http.StatusSeeOther {
				t.Fatalf("%d %s", res.status, res.body)
			}
			binds := h.binder.all()
			last := binds[len(binds)-1]
			if last.Subject != "sub-"+tc.user || last.Address != tc.address || !slices.Equal(last.Roles, tc.roles) {
				t.Fatalf("bound %+v, want address %q roles %v", last, tc.address, tc.roles)
			}
			if len(h.keeper.all()) != nk+1 {
				t.Fatal("refresh token not kept")
			}
		})
	}
	if !strings.Contains(h.logs.String(), "secret detail") {
		t.Error("the Binder's failure should be logged")
	}
}

func TestTenantIDMismatch(t *testing.T) {
	h := newRig(t, rigOptions{})
	res, _ := h.signIn(h.browser(), otherTenant, "olga", "/")
	wantError(t, res, http.StatusForbidden, signin.CodeTenantMismatch)
	if len(h.binder.all()) != 0 || len(h.keeper.all()) != 0 || cookieNamed(res.cookies, signin.SessionCookie) != nil {
		t.Fatal("a tenant mismatch stored something")
	}
}

func TestNoOfflineAccess(t *testing.T) {
	h := newRig(t, rigOptions{})
	res, _ := h.signIn(h.browser(), noOffTenant, "nina", "/")
	wantError(t, res, http.StatusBadGateway, signin.CodeNoOfflineAccess)
	if !strings.Contains(res.errMsg, "the IdP did not grant offline access") {
		t.Errorf("message %q", res.errMsg)
	}
	if len(h.binder.all()) != 0 || len(h.keeper.all()) != 0 {
		t.Fatal("stored something without a refresh token")
	}
}

func TestFreshSignIn(t *testing.T) {
	h := newRig(t, rigOptions{})
	b := h.browser()
	if res, _ := h.signIn(b, mainTenant, "alice@example.org", "/"); res.status != http.StatusSeeOther {
		t.Fatalf("sign-in: %d %s", res.status, res.body)
	}
	_, v := h.session(b)
	first := v.Session.AuthTime

	// Just signed in: fresh enough.
	if a := get(t, b, h.public+"/approvals"); a.status != http.StatusOK {
		t.Fatalf("/approvals right after sign-in: %d %s", a.status, a.body)
	}

	// Six minutes later the session is stale: GET goes to a fresh sign-in,
	// POST is refused.
	h.offset.Store(int64(6 * time.Minute))
	a := get(t, b, h.public+"/approvals?item=7")
	if a.status != http.StatusFound {
		t.Fatalf("stale /approvals: %d %s", a.status, a.body)
	}
	loc, _ := url.Parse(a.location)
	lq := loc.Query()
	if loc.Path != "/signin" || lq.Get("fresh") != "1" || lq.Get("tenant") != mainTenant || lq.Get("return") != "/approvals?item=7" || lq.Get("login_hint") != "alice@example.org" {
		t.Fatalf("fresh redirect %q", a.location)
	}
	wantError(t, h.post(b, "/approvals", nil, nil), http.StatusUnauthorized, signin.CodeFreshSigninRequired)
	if a := get(t, b, h.public+"/home"); a.status != http.StatusOK {
		t.Fatalf("a stale session is still a session: %d", a.status)
	}

	// The fresh sign-in asks for max_age=0 and prompt=login.
	ar := get(t, h.noRedirect(), h.public+a.location)
	aq := mustQuery(t, ar.location)
	if aq.Get("max_age") != "0" || aq.Get("prompt") != "login" {
		t.Fatalf("fresh authorization URL %s", ar.location)
	}

	// Follow it (same IdP session, but max_age=0 forces re-authentication).
	h.offset.Store(0)
	waitNextSecond(first)
	cb := h.startSignIn(b, lq)
	res := get(t, b, cb)
	if res.status != http.StatusSeeOther || res.location != "/approvals?item=7" {
		t.Fatalf("fresh callback: %d %q %s", res.status, res.location, res.body)
	}
	_, v2 := h.session(b)
	if !v2.Session.AuthTime.After(first) || v2.Session.ID == v.Session.ID {
		t.Fatalf("fresh sign-in: auth_time %v (was %v), id changed %v", v2.Session.AuthTime, first, v2.Session.ID != v.Session.ID)
	}
	if a := get(t, b, h.public+"/approvals?item=7"); a.status != http.StatusOK {
		t.Fatalf("/approvals after fresh sign-in: %d %s", a.status, a.body)
	}
	if n := len(h.keeper.all()); n != 2 {
		t.Fatalf("every sign-in keeps its refresh token: %d calls", n)
	}

	// A fresh sign-in whose auth_time is too old by the time of the callback
	// is refused.
	cb = h.startSignIn(b, url.Values{"tenant": {mainTenant}, "fresh": {"1"}, "login_hint": {"alice@example.org"}})
	h.offset.Store(int64(6 * time.Minute))
	wantError(t, get(t, b, cb), http.StatusUnauthorized, signin.CodeNotFresh)
	h.offset.Store(0)
}

func TestOpenRedirect(t *testing.T) {
	h := newRig(t, rigOptions{})
	for _, ret := range []string{
		"//evil.example", "//evil.example/path", "https://evil.example/", "http:evil.example", "/\\evil.example",
		"\\\\evil.example", "\\/evil.example", "javascript:alert(1)", "evil.example", "/ok\r\nLocation: https://evil",
		"/a\tb", "/ /evil", "///evil.example",
	} {
		a := get(t, h.noRedirect(), h.public+"/signin?tenant=example.org&return="+url.QueryEscape(ret))
		wantError(t, a, http.StatusBadRequest, signin.CodeInvalidReturn)
		if cookieNamed(a.cookies, "") != nil {
			t.Fatal("cookie without name")
		}
	}
	for _, ok := range []string{"/", "/approvals", "/a/b?c=d&e=%2F%2Fx", "/%5C%5Cevil"} {
		if got, err := signin.SafeReturnPath(ok); err != nil || got != ok {
			t.Errorf("SafeReturnPath(%q) = %q, %v", ok, got, err)
		}
	}
	if got, err := signin.SafeReturnPath(""); err != nil || got != "/" {
		t.Errorf("SafeReturnPath(\"\") = %q, %v", got, err)
	}

	// Sign-out's return is checked too.
	b := h.browser()
	h.signIn(b, mainTenant, "alice@example.org", "/")
	_, v := h.session(b)
	a := h.post(b, "/signout", url.Values{"csrf": {v.CSRF}, "return": {"//evil.example"}}, map[string]string{"Origin": h.public})
	if a.status != http.StatusSeeOther || a.location != "/" {
		t.Fatalf("signout with a bad return: %d %q", a.status, a.location)
	}
}

func TestSignOutAndCSRF(t *testing.T) {
	h := newRig(t, rigOptions{})
	b := h.browser()
	h.signIn(b, mainTenant, "alice@example.org", "/")
	_, v := h.session(b)
	origin := map[string]string{"Origin": h.public}

	// No token, wrong token, token of another session.
	wantError(t, h.post(b, "/signout", nil, origin), http.StatusForbidden, signin.CodeCSRFToken)
	wantError(t, h.post(b, "/signout", url.Values{"csrf": {"x" + v.CSRF}}, origin), http.StatusForbidden, signin.CodeCSRFToken)
	other := h.browser()
	h.signIn(other, mainTenant, "bob", "/")
	_, ov := h.session(other)
	wantError(t, h.post(b, "/signout", url.Values{"csrf": {ov.CSRF}}, origin), http.StatusForbidden, signin.CodeCSRFToken)
	// A token in the query string does not count.
	wantError(t, h.post(b, "/signout?csrf="+url.QueryEscape(v.CSRF), nil, origin), http.StatusForbidden, signin.CodeCSRFToken)
	// Right token, but cross-site.
	form := url.Values{"csrf": {v.CSRF}}
	wantError(t, h.post(b, "/signout", form, map[string]string{"Origin": "https://evil.example"}), http.StatusForbidden, signin.CodeCSRFOrigin)
	wantError(t, h.post(b, "/signout", form, map[string]string{"Origin": "null"}), http.StatusForbidden, signin.CodeCSRFOrigin)
	wantError(t, h.post(b, "/signout", form, map[string]string{"Referer": "https://evil.example/x"}), http.StatusForbidden, signin.CodeCSRFOrigin)
	wantError(t, h.post(b, "/signout", form, map[string]string{"Origin": h.public, "Sec-Fetch-Site": "cross-site"}), http.StatusForbidden, signin.CodeCSRFOrigin)
	wantError(t, h.post(b, "/signout", form, nil), http.StatusForbidden, signin.CodeCSRFOriginMissing)
	if status, _ := h.session(b); status != http.StatusOK {
		t.Fatal("a refused sign-out ended the session")
	}

	// RequireCSRF on another form: Referer or Origin plus the token, or the header.
	if a := h.post(b, "/act", form, map[string]string{"Referer": h.public + "/approvals"}); a.status != http.StatusNoContent {
		t.Fatalf("/act with Referer: %d %s", a.status, a.body)
	}
	if a := h.post(b, "/act", nil, map[string]string{"Origin": h.public, "X-CSRF-Token": v.CSRF, "Sec-Fetch-Site": "same-origin"}); a.status != http.StatusNoContent {
		t.Fatalf("/act with header token: %d %s", a.status, a.body)
	}
	wantError(t, h.post(h.browser(), "/act", form, origin), http.StatusUnauthorized, signin.CodeSigninRequired)
	if err := h.svc.CheckCSRF(httptest.NewRequest(http.MethodPost, "/x", nil)); err == nil {
		t.Fatal("CheckCSRF without anything passed")
	}

	// Sign out properly.
	a := h.post(b, "/signout", url.Values{"csrf": {v.CSRF}, "return": {"/bye"}}, origin)
	if a.status != http.StatusSeeOther || a.location != "/bye" {
		t.Fatalf("signout: %d %q %s", a.status, a.location, a.body)
	}
	if c := cookieNamed(a.cookies, signin.SessionCookie); c == nil || c.MaxAge >= 0 {
		t.Fatalf("signout did not clear the cookie: %+v", c)
	}
	a = get(t, b, h.public+"/home?x=1")
	if a.status != http.StatusFound || a.location != "/signin?return=%2Fhome%3Fx%3D1" {
		t.Fatalf("after signout /home: %d %q", a.status, a.location)
	}
	// Signing out without a session is harmless.
	if a := h.post(h.browser(), "/signout", nil, nil); a.status != http.StatusSeeOther {
		t.Fatalf("signout without session: %d", a.status)
	}
	if a := get(t, b, h.public+"/signout"); a.status != http.StatusMethodNotAllowed || a.errCode != signin.CodeMethodNotAllowed {
		t.Fatalf("GET /signout: %d %s", a.status, a.body)
	}
}

func TestSessionCookieChecks(t *testing.T) {
	h := newRig(t, rigOptions{})
	res, _ := h.signIn(h.browser(), mainTenant, "alice@example.org", "/")
	sc := cookieNamed(res.cookies, signin.SessionCookie)
	if sc == nil {
		t.Fatal("no session cookie")
	}
	sessionOf := func(value string) (*signin.Session, error) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		if value != "" {
			req.AddCookie(&http.Cookie{Name: signin.SessionCookie, Value: value})
		}
		return h.svc.Session(req)
	}
	wantCode := func(what string, err error, code string) {
		t.Helper()
		var e *httpjson.Error
		if !errors.As(err, &e) || e.Code != code || e.Status != http.StatusUnauthorized {
			t.Errorf("%s: %v, want %s", what, err, code)
		}
	}
	if _, err := sessionOf(sc.Value); err != nil {
		t.Fatal(err)
	}
	_, err := sessionOf("")
	if !errors.Is(err, signin.ErrNoSession) {
		t.Errorf("no cookie: %v", err)
	}
	// Tampering anywhere breaks the MAC.
	for _, i := range []int{0, len(sc.Value) / 2, len(sc.Value) - 2} {
		v := []byte(sc.Value)
		if v[i] == 'A' {
			v[i] = 'B'
		} else {
			v[i] = 'A'
		}
		_, err := sessionOf(string(v))
		wantCode("tampered", err, signin.CodeSessionInvalid)
	}
	_, err = sessionOf(sc.Value[:len(sc.Value)-4])
	wantCode("truncated", err, signin.CodeSessionInvalid)
	_, err = sessionOf("garbage")
	wantCode("garbage", err, signin.CodeSessionInvalid)

	// A cookie from another broker (other keys) is invalid here.
	other, err := signin.New(t.Context(), signin.Config{
		PublicURL: h.public, HashKey: testkit.RandKey(), BlockKey: testkit.RandKey(), Sessions: h.sessions,
		Tenants: []signin.TenantIdP{{Tenant: mainTenant, Issuer: h.idp.Issuer(), ClientID: clientID, ClientSecret: clientSecret,
			Directory: map[string]string{"sub:sub-alice": "alice@example.org"}}},
	}, h.binder, h.keeper)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.AddCookie(sc)
	_, err = other.Session(req)
	wantCode("other keys", err, signin.CodeSessionInvalid)

	// With a single tenant, /signin and RequireSession need no tenant.
	rec := httptest.NewRecorder()
	other.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/signin?return=/x", nil))
	if rec.Code != http.StatusFound || !strings.HasPrefix(rec.Header().Get("Location"), h.idp.Issuer()) {
		t.Fatalf("single-tenant /signin: %d %q", rec.Code, rec.Header().Get("Location"))
	}
	rec = httptest.NewRecorder()
	other.RequireSession(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/approvals", nil))
	if loc := rec.Header().Get("Location"); rec.Code != http.StatusFound || loc != other.SignInURL(mainTenant, "/approvals", false) ||
		loc != "/signin?return=%2Fapprovals&tenant=example.org" {
		t.Fatalf("single-tenant RequireSession: %d %q", rec.Code, loc)
	}

	// Expiry by the service's clock.
	h.offset.Store(int64(8*time.Hour + time.Minute))
	_, err = sessionOf(sc.Value)
	wantCode("expired", err, signin.CodeSessionExpired)
	h.offset.Store(0)

	// A tampered cookie at a protected page: sign in again (GET) or 401.
	c := h.browser()
	u, _ := url.Parse(h.public)
	c.Jar.SetCookies(u, []*http.Cookie{{Name: signin.SessionCookie, Value: sc.Value[:len(sc.Value)-4] + "AAAA"}})
	if a := get(t, c, h.public+"/home"); a.status != http.StatusFound || !strings.HasPrefix(a.location, "/signin?") {
		t.Fatalf("tampered cookie at /home: %d %q", a.status, a.location)
	}
	wantError(t, h.post(c, "/approvals", nil, nil), http.StatusUnauthorized, signin.CodeSessionInvalid)
}

func TestIdPDownAtCallback(t *testing.T) {
	h := newRig(t, rigOptions{})
	b := h.browser()

	cb := h.startSignIn(b, url.Values{"tenant": {mainTenant}, "login_hint": {"alice@example.org"}})
	h.idp.SetDown(true)
	a := get(t, b, cb)
	wantError(t, a, http.StatusServiceUnavailable, signin.CodeIdPUnavailable)
	if a.header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	h.idp.SetDown(false)

	cb = h.startSignIn(b, url.Values{"tenant": {mainTenant}, "login_hint": {"alice@example.org"}})
	_ = h.idp.Close()
	wantError(t, get(t, b, cb), http.StatusBadGateway, signin.CodeIdPUnreachable)

	if len(h.binder.all()) != 0 || len(h.keeper.all()) != 0 {
		t.Fatal("stored something while the IdP was down")
	}
	if logs := h.logs.String(); strings.Contains(logs, mustQuery(t, cb).Get("code")) {
		t.Fatal("the authorization code was logged")
	}
}

func TestIdPErrorsAndBadRequests(t *testing.T) {
	h := newRig(t, rigOptions{})
	b := h.browser()

	// AutoLogin with an unknown user: the IdP answers error=access_denied.
	cb := h.startSignIn(b, url.Values{"tenant": {mainTenant}, "login_hint": {"nobody"}})
	if mustQuery(t, cb).Get("error") != "access_denied" {
		t.Fatalf("expected an IdP error, got %s", cb)
	}
	wantError(t, get(t, b, cb), http.StatusForbidden, signin.CodeIdPDenied)

	// A disabled user is denied as well.
	if err := h.idp.DisableUser("sub-dave"); err != nil {
		t.Fatal(err)
	}
	res, _ := h.signIn(b, mainTenant, "dave", "/")
	wantError(t, res, http.StatusForbidden, signin.CodeIdPDenied)

	// Forged state or no cookie.
	wantError(t, get(t, b, h.public+"/signin/callback/example.org?code=x&state=AAAAAAAAAAAAAAAAAAAAAAAAAA"), http.StatusBadRequest, signin.CodeStateInvalid)
	wantError(t, get(t, b, h.public+"/signin/callback/example.org?code=x&state=bad"), http.StatusBadRequest, signin.CodeStateInvalid)
	wantError(t, get(t, b, h.public+"/signin/callback/example.org?code=x"), http.StatusBadRequest, signin.CodeStateInvalid)

	// A flow started for one tenant cannot finish at another's callback
	// (its cookie is scoped to its own callback path).
	cb = h.startSignIn(b, url.Values{"tenant": {mainTenant}, "login_hint": {"alice@example.org"}})
	wrong := strings.Replace(cb, "/signin/callback/example.org", "/signin/callback/other.example", 1)
	wantError(t, get(t, b, wrong), http.StatusBadRequest, signin.CodeStateInvalid)

	// A code that is not the one issued: the flow cookie is good, the code is not.
	cb = h.startSignIn(b, url.Values{"tenant": {mainTenant}, "login_hint": {"alice@example.org"}})
	u, _ := url.Parse(cb)
	q := u.Query()
	q.Set("code", "not-a-code")
	u.RawQuery = q.Encode()
	wantError(t, get(t, b, u.String()), http.StatusBadRequest, signin.CodeExchangeFailed)
	// Without a code.
	cb = h.startSignIn(b, url.Values{"tenant": {mainTenant}, "login_hint": {"alice@example.org"}})
	u, _ = url.Parse(cb)
	q = u.Query()
	q.Del("code")
	u.RawQuery = q.Encode()
	wantError(t, get(t, b, u.String()), http.StatusBadRequest, signin.CodeCodeMissing)

	// /signin request problems.
	nr := h.noRedirect()
	wantError(t, get(t, nr, h.public+"/signin"), http.StatusBadRequest, signin.CodeTenantRequired)
	wantError(t, get(t, nr, h.public+"/signin?tenant=nope.example"), http.StatusNotFound, signin.CodeUnknownTenant)
	wantError(t, get(t, nr, h.public+"/signin?tenant=example.org&fresh=maybe"), http.StatusBadRequest, signin.CodeInvalidRequest)
	wantError(t, get(t, nr, h.public+"/signin?tenant=example.org&login_hint="+strings.Repeat("a", 300)), http.StatusBadRequest, signin.CodeInvalidRequest)
	wantError(t, get(t, nr, h.public+"/signin/callback/nope.example?code=x&state=y"), http.StatusNotFound, signin.CodeUnknownTenant)
	wantError(t, h.post(nr, "/signin?tenant=example.org", nil, nil), http.StatusMethodNotAllowed, signin.CodeMethodNotAllowed)
	if a := get(t, nr, h.public+"/signin?tenant=EXAMPLE.ORG"); a.status != http.StatusFound {
		t.Fatalf("tenant names are case-insensitive: %d", a.status)
	}
	if len(h.binder.all()) != 0 {
		t.Fatal("bound someone")
	}
}

func TestInsecureLoopback(t *testing.T) {
	h := newRig(t, rigOptions{plainHTTP: true})
	b := h.browser()
	res, _ := h.signIn(b, mainTenant, "alice@example.org", "/")
	sc := cookieNamed(res.cookies, signin.SessionCookie)
	if res.status != http.StatusSeeOther || sc == nil || sc.Secure || !sc.HttpOnly || sc.SameSite != http.SameSiteLaxMode {
		t.Fatalf("insecure sign-in: %d %+v", res.status, sc)
	}
	if status, _ := h.session(b); status != http.StatusOK {
		t.Fatalf("/home: %d", status)
	}
	if got := h.svc.CallbackURL(mainTenant); got != h.public+"/signin/callback/example.org" {
		t.Errorf("CallbackURL %q", got)
	}
}

func TestConfigValidation(t *testing.T) {
	idp := testkit.StartIdP(t, testidp.Config{Users: []testidp.User{{Subject: "s", Username: "u"}},
		Clients: []testidp.Client{{ID: clientID, Secret: clientSecret, RedirectURIs: []string{"https://broker.example/signin/callback/example.org"}}}})
	sessions := newSessions(t)
	good := func() signin.Config {
		return signin.Config{
			Sessions:  sessions,
			PublicURL: "https://broker.example",
			HashKey:   testkit.RandKey(), BlockKey: testkit.RandKey(),
			Tenants: []signin.TenantIdP{{Tenant: mainTenant, Issuer: idp.Issuer(), ClientID: clientID, ClientSecret: clientSecret}},
		}
	}
	b, k := &fakeBinder{}, &fakeKeeper{}
	if _, err := signin.New(t.Context(), good(), b, k); err != nil {
		t.Fatalf("good config: %v", err)
	}
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()

	for _, tc := range []struct {
		name   string
		mutate func(*signin.Config)
		want   string
	}{
		{"insecure non-loopback http", func(c *signin.Config) { c.PublicURL = "http://broker.example"; c.Insecure = true }, "loopback"},
		{"http loopback without Insecure", func(c *signin.Config) { c.PublicURL = "http://127.0.0.1:8080" }, "set Insecure"},
		{"Insecure with https", func(c *signin.Config) { c.Insecure = true }, "Secure attribute"},
		{"public URL with path", func(c *signin.Config) { c.PublicURL = "https://broker.example/alpd" }, "without path"},
		{"no public URL", func(c *signin.Config) { c.PublicURL = "" }, "PublicURL is required"},
		{"short hash key", func(c *signin.Config) { c.HashKey = c.HashKey[:16] }, "HashKey"},
		{"short block key", func(c *signin.Config) { c.BlockKey = c.BlockKey[:16] }, "BlockKey"},
		{"equal keys", func(c *signin.Config) { c.BlockKey = c.HashKey }, "must differ"},
		{"no tenants", func(c *signin.Config) { c.Tenants = nil }, "no tenants"},
		{"duplicate tenant", func(c *signin.Config) { c.Tenants = append(c.Tenants, c.Tenants[0]) }, "configured twice"},
		{"bad tenant name", func(c *signin.Config) { c.Tenants[0].Tenant = "example.org/x" }, "domain name"},
		{"http issuer", func(c *signin.Config) { c.Tenants[0].Issuer = "http://idp.example" }, "must be https"},
		{"no client id", func(c *signin.Config) { c.Tenants[0].ClientID = "" }, "ClientID"},
		{"email address claim", func(c *signin.Config) { c.Tenants[0].AddressClaim = "email" }, "not an immutable identifier"},
		{"email domains not verified", func(c *signin.Config) { c.Tenants[0].EmailDomains = []string{"gmail.com"} }, "not one of the tenant's VerifiedDomains"},
		{"directory key", func(c *signin.Config) { c.Tenants[0].Directory = map[string]string{"alice": "alice@example.org"} }, "Directory key"},
		{"directory prefix", func(c *signin.Config) { c.Tenants[0].Directory = map[string]string{"oid:x": "alice@example.org"} }, "neither"},
		{"directory address", func(c *signin.Config) {
			c.Tenants[0].Directory = map[string]string{"sub:x": "Alice <alice@example.org>"}
		}, "Directory[\"sub:x\"]"},
		{"directory domain", func(c *signin.Config) { c.Tenants[0].Directory = map[string]string{"sub:x": "alice@evil.example"} }, "VerifiedDomains"},
		{"scope openid", func(c *signin.Config) { c.Tenants[0].Scopes = []string{"groups", "openid"} }, `"openid" is always requested`},
		{"scope twice", func(c *signin.Config) { c.Tenants[0].Scopes = []string{"groups", "groups"} }, `"groups" is listed twice`},
		{"scope with space", func(c *signin.Config) { c.Tenants[0].Scopes = []string{"groups roles"} }, "not a scope token"},
		{"scope with quote", func(c *signin.Config) { c.Tenants[0].Scopes = []string{`gro"ups`} }, "not a scope token"},
		{"empty scope", func(c *signin.Config) { c.Tenants[0].Scopes = []string{""} }, "an empty scope"},
		{"discovery down", func(c *signin.Config) { c.Tenants[0].Issuer = closedURL }, "tenant \"example.org\": OpenID discovery"},
		{"issuer mismatch", func(c *signin.Config) { c.Tenants[0].Issuer = idp.Issuer() + "/" }, "issuer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good()
			tc.mutate(&cfg)
			_, err := signin.New(t.Context(), cfg, b, k)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := signin.New(t.Context(), good(), nil, k); err == nil || !strings.Contains(err.Error(), "Binder") {
		t.Fatalf("nil binder: %v", err)
	}
	if _, err := signin.New(t.Context(), good(), b, nil); err == nil || !strings.Contains(err.Error(), "RefreshKeeper") {
		t.Fatalf("nil keeper: %v", err)
	}
}

func TestWriteError(t *testing.T) {
	rec := httptest.NewRecorder()
	httpjson.WriteError(rec, errors.New("db password is hunter2"))
	if rec.Code != http.StatusInternalServerError || strings.Contains(rec.Body.String(), "hunter2") ||
		!strings.Contains(rec.Body.String(), `"code":"internal_error"`) {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	httpjson.WriteError(rec, &httpjson.Error{Status: 503, Code: "x", Message: "y", RetryAfter: 7})
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "7" || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %v", rec.Code, rec.Header())
	}
}

func TestRefreshRecheck(t *testing.T) {
	h := newRig(t, rigOptions{})
	b := h.browser()
	h.signIn(b, mainTenant, "dave", "")
	calls := h.keeper.all()
	if len(calls) == 0 {
		t.Fatal("no refresh token kept")
	}
	refresh := calls[len(calls)-1].Grant
	ctx := context.Background()
	next, err := h.svc.Refresh(ctx, mainTenant, refresh)
	if err != nil || next.RefreshToken == "" || next.RefreshToken == refresh.RefreshToken {
		t.Fatalf("refresh: %+v %v", next, err)
	}
	h.idp.SetDown(true)
	if _, err := h.svc.Refresh(ctx, mainTenant, next); !errors.Is(err, signin.ErrIdPUnavailable) {
		t.Fatalf("IdP down: %v", err)
	}
	h.idp.SetDown(false)
	h.idp.DisableUser("sub-dave")
	_, err = h.svc.Refresh(ctx, mainTenant, next)
	if !errors.Is(err, signin.ErrIdPRefused) {
		t.Fatalf("disabled user: %v", err)
	}
	if strings.Contains(err.Error(), next.RefreshToken) {
		t.Fatal("refresh token in the error")
	}
	if _, err := h.svc.Refresh(ctx, "nobody.example", next); err == nil {
		t.Fatal("unknown tenant accepted")
	}
}

func TestSessionEndpoint(t *testing.T) {
	h := newRig(t, rigOptions{})
	b := h.browser()
	if a := get(t, b, h.public+signin.PathSession); a.status != http.StatusUnauthorized {
		t.Fatalf("without a session: %d", a.status)
	}
	h.signIn(b, mainTenant, "dave", "")
	a := get(t, b, h.public+signin.PathSession)
	var got struct {
		Address string `json:"address"`
		CSRF    string `json:"csrf"`
	}
	if a.status != http.StatusOK || json.Unmarshal([]byte(a.body), &got) != nil || got.Address != "dave@example.org" || got.CSRF == "" {
		t.Fatalf("session: %d %s", a.status, a.body)
	}
}

// Finding 12: signing out ends the session on the server. Before, sign-out
// only cleared this browser's cookie and a copy of it (in another browser,
// or stolen) stayed valid until it expired.
func TestSignOutRevokesCopiedCookie(t *testing.T) {
	h := newRig(t, rigOptions{})
	b := h.browser()
	h.signIn(b, mainTenant, "alice@example.org", "/")
	_, v := h.session(b)
	pub, _ := url.Parse(h.public)
	var copied *http.Cookie
	for _, c := range b.Jar.Cookies(pub) {
		if c.Name == signin.SessionCookie {
			copied = c
		}
	}
	if copied == nil {
		t.Fatal("no session cookie")
	}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.AddCookie(copied)
	if _, err := h.svc.Session(req); err != nil {
		t.Fatalf("before sign-out: %v", err)
	}
	if a := h.post(b, "/signout", url.Values{"csrf": {v.CSRF}}, map[string]string{"Origin": h.public}); a.status != http.StatusSeeOther {
		t.Fatalf("signout: %d %s", a.status, a.body)
	}
	_, err := h.svc.Session(req)
	var e *httpjson.Error
	if !errors.As(err, &e) || e.Status != http.StatusUnauthorized || e.Code != signin.CodeSessionRevoked {
		t.Fatalf("copied cookie after sign-out: %v", err)
	}
	// Another browser with the copy is refused too (a POST gets 401).
	other := h.browser()
	other.Jar.SetCookies(pub, []*http.Cookie{copied})
	wantError(t, h.post(other, "/act", url.Values{"csrf": {v.CSRF}}, map[string]string{"Origin": h.public}), http.StatusUnauthorized, signin.CodeSessionRevoked)
}

// The store's extra check (the identity projection in alpd: an operator's
// revocation, an erased person) ends sessions; a store that cannot answer
// fails closed with 503.
func TestSessionStoreChecks(t *testing.T) {
	h := newRig(t, rigOptions{})
	b := h.browser()
	h.signIn(b, mainTenant, "alice@example.org", "/")
	pub, _ := url.Parse(h.public)
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	for _, c := range b.Jar.Cookies(pub) {
		req.AddCookie(c)
	}
	sess, err := h.svc.Session(req)
	if err != nil {
		t.Fatal(err)
	}
	revoked := signin.KVSessions{KV: h.sessions.KV, Valid: func(_ context.Context, tenant, person string, issued time.Time) error {
		if tenant != mainTenant || person != sess.PersonID || !issued.Equal(sess.Issued) {
			t.Errorf("Valid(%q, %q, %v)", tenant, person, issued)
		}
		return fmt.Errorf("%w: revoked by an operator", signin.ErrSessionRevoked)
	}}
	if err := revoked.CheckSession(t.Context(), sess); !errors.Is(err, signin.ErrSessionRevoked) {
		t.Fatalf("revoked by Valid: %v", err)
	}
	forged := *sess
	forged.PersonID = "p_someone_else"
	if err := h.sessions.CheckSession(t.Context(), &forged); !errors.Is(err, signin.ErrSessionRevoked) {
		t.Fatalf("a record for another person: %v", err)
	}
	if err := h.sessions.DeleteSession(t.Context(), sess); err != nil {
		t.Fatal(err)
	}
	if err := h.sessions.DeleteSession(t.Context(), sess); err != nil {
		t.Fatalf("delete again: %v", err)
	}
	if err := h.sessions.CheckSession(t.Context(), sess); !errors.Is(err, signin.ErrSessionRevoked) {
		t.Fatalf("deleted: %v", err)
	}
}
