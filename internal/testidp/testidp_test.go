package testidp_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/pkg/client/rp"
	httphelper "github.com/zitadel/oidc/v3/pkg/http"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"golang.org/x/oauth2"

	"github.com/alpd-project/alpd/internal/testidp"
	"github.com/alpd-project/alpd/internal/testkit"
)

const (
	tenantID    = "7f3c2a10-0000-4000-8000-00000000a1pd"
	webSecret   = "web-secret"
	webRedirect = "http://127.0.0.1:1/cb" // never contacted: the browser stops there
	cliRedirect = "http://127.0.0.1/cli/cb"
	alice       = "alice@example.com"
	bob         = "bob@example.com"
)

func testConfig() testidp.Config {
	return testidp.Config{
		TenantID:  tenantID,
		AutoLogin: true,
		Users: []testidp.User{
			{Subject: "sub-alice", Username: alice, Password: "alice-pw", Email: alice, EmailVerified: true,
				Name: "Alice", Roles: []string{"approver", "admin"}, ImmutableID: "oid-alice"},
			{Subject: "sub-bob", Username: bob, Password: "bob-pw", Email: "bob@elsewhere.example", Name: "Bob"},
		},
		Clients: []testidp.Client{
			{ID: "web", Secret: webSecret, RedirectURIs: []string{webRedirect}},
			{ID: "cli", RedirectURIs: []string{cliRedirect}},
		},
	}
}

// startConfigured starts an IdP with testConfig, changed by mutate (nil:
// unchanged).
func startConfigured(t *testing.T, mutate func(*testidp.Config)) *testidp.IdP {
	t.Helper()
	cfg := testConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	return testkit.StartIdP(t, cfg)
}

// browser is an http.Client with a cookie jar that follows redirects but
// stops at any URL starting with one of stopAt (the client's redirect URI).
func browser(t *testing.T, stopAt ...string) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{
		Jar:     jar,
		Timeout: 10 * time.Second,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > 10 {
				return errors.New("too many redirects")
			}
			for _, p := range stopAt {
				if strings.HasPrefix(req.URL.String(), p) {
					return http.ErrUseLastResponse
				}
			}
			return nil
		},
	}
}

func ctxWithClient(t *testing.T) context.Context {
	return context.WithValue(t.Context(), oauth2.HTTPClient, &http.Client{Timeout: 10 * time.Second})
}

// redirectQuery checks that resp redirects to redirectURI and returns the
// redirect's query (code/state or error).
func redirectQuery(t *testing.T, resp *http.Response, redirectURI string) url.Values {
	t.Helper()
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusFound && resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("want a redirect to %s, got %d (Location %q): %s", redirectURI, resp.StatusCode, loc, body)
	}
	u, err := url.Parse(loc)
	if err != nil {
		t.Fatal(err)
	}
	if got := u.Scheme + "://" + u.Host + u.Path; got != redirectURI && !strings.HasPrefix(loc, redirectURI) {
		t.Fatalf("redirected to %q, want %q", loc, redirectURI)
	}
	return u.Query()
}

func authorize(t *testing.T, b *http.Client, authURL, redirectURI string) url.Values {
	t.Helper()
	resp, err := b.Get(authURL)
	if err != nil {
		t.Fatalf("GET %s: %v", authURL, err)
	}
	return redirectQuery(t, resp, redirectURI)
}

func webConfig(idp *testidp.IdP) *oauth2.Config {
	return &oauth2.Config{
		ClientID:     "web",
		ClientSecret: webSecret,
		Endpoint:     idp.Endpoint(),
		RedirectURL:  webRedirect,
		Scopes:       []string{oidc.ScopeOpenID, oidc.ScopeProfile, oidc.ScopeEmail, oidc.ScopeOfflineAccess},
	}
}

type loginResult struct {
	token  *oauth2.Token
	claims *oidc.IDTokenClaims
	raw    map[string]any // ID token payload as sent
}

// login runs code+PKCE through the IdP with b (AutoLogin via hint when
// non-empty) and exchanges the code.
func login(t *testing.T, idp *testidp.IdP, b *http.Client, conf *oauth2.Config, hint string, extra ...oauth2.AuthCodeOption) loginResult {
	t.Helper()
	q := authorizeCode(t, b, conf, hint, extra...)
	if e := q.Get("error"); e != "" {
		t.Fatalf("authorization failed: %s: %s", e, q.Get("error_description"))
	}
	tok, err := conf.Exchange(ctxWithClient(t), q.Get("code"), oauth2.VerifierOption(q.Get("verifier")))
	if err != nil {
		t.Fatalf("Exchange: %v", err)
	}
	res := checkIDToken(t, idp, conf.ClientID, tok, q.Get("nonce"))
	res.token = tok
	return res
}

// authorizeCode returns the redirect query plus the "verifier" and "nonce"
// the request used.
func authorizeCode(t *testing.T, b *http.Client, conf *oauth2.Config, hint string, extra ...oauth2.AuthCodeOption) url.Values {
	t.Helper()
	verifier, state, nonce := oauth2.GenerateVerifier(), rand.Text(), rand.Text()
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("nonce", nonce)}
	if hint != "" {
		opts = append(opts, oauth2.SetAuthURLParam("login_hint", hint))
	}
	q := authorize(t, b, conf.AuthCodeURL(state, append(opts, extra...)...), conf.RedirectURL)
	if got := q.Get("state"); got != state {
		t.Fatalf("state %q, want %q", got, state)
	}
	q.Set("verifier", verifier)
	q.Set("nonce", nonce)
	return q
}

// checkIDToken verifies the token response's ID token (signature, iss, aud,
// exp, iat and the nonce, "" for none).
func checkIDToken(t *testing.T, idp *testidp.IdP, clientID string, tok *oauth2.Token, nonce string) loginResult {
	t.Helper()
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		t.Fatal("no id_token in token response")
	}
	v := rp.NewIDTokenVerifier(idp.Issuer(), clientID, rp.NewRemoteKeySet(http.DefaultClient, idp.JWKSURL()),
		rp.WithNonce(func(context.Context) string { return nonce }))
	claims, err := rp.VerifyIDToken[*oidc.IDTokenClaims](t.Context(), raw, v)
	if err != nil {
		t.Fatalf("VerifyIDToken: %v", err)
	}
	return loginResult{claims: claims, raw: jwtPayload(t, raw)}
}

func jwtPayload(t *testing.T, raw string) map[string]any {
	t.Helper()
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWS: %q", raw)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func refresh(t *testing.T, conf *oauth2.Config, rt string) (*oauth2.Token, error) {
	t.Helper()
	return conf.TokenSource(ctxWithClient(t), &oauth2.Token{RefreshToken: rt}).Token()
}

func wantOAuthError(t *testing.T, err error, code string, status int) {
	t.Helper()
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		t.Fatalf("want oauth2 error %q, got %v", code, err)
	}
	if re.ErrorCode != code || (status != 0 && re.Response.StatusCode != status) {
		t.Fatalf("want %q/%d, got %q/%d: %v", code, status, re.ErrorCode, re.Response.StatusCode, err)
	}
}

func userinfo(t *testing.T, idp *testidp.IdP, accessToken string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, idp.UserinfoURL(), nil)
	req.Header.Set("Authorization", "Bearer "+accessToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m := map[string]any{}
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

func TestCodeFlowPKCEAutoLogin(t *testing.T) {
	idp := startConfigured(t, nil)
	conf := webConfig(idp)
	before := time.Now().Add(-time.Second)
	res := login(t, idp, browser(t, webRedirect), conf, alice)
	c := res.claims

	if c.Issuer != idp.Issuer() || !slices.Contains([]string(c.Audience), "web") || c.Subject != "sub-alice" {
		t.Fatalf("iss/aud/sub = %q/%v/%q", c.Issuer, c.Audience, c.Subject)
	}
	if got := c.Claims["tid"]; got != tenantID {
		t.Errorf("tid = %v", got)
	}
	if got := c.Claims["oid"]; got != "oid-alice" {
		t.Errorf("oid = %v", got)
	}
	if got, _ := c.Claims["roles"].([]any); len(got) != 2 || got[0] != "approver" || got[1] != "admin" {
		t.Errorf("roles = %v", c.Claims["roles"])
	}
	if !bool(c.EmailVerified) || c.Email != alice || c.PreferredUsername != alice || c.Name != "Alice" {
		t.Errorf("email/email_verified/preferred_username/name = %q/%v/%q/%q", c.Email, c.EmailVerified, c.PreferredUsername, c.Name)
	}
	if at := c.AuthTime.AsTime(); at.Before(before.Truncate(time.Second)) || at.After(time.Now()) {
		t.Errorf("auth_time %v not between %v and now", at, before)
	}
	if _, ok := res.raw["auth_time"]; !ok {
		t.Error("auth_time missing from the ID token")
	}
	if !slices.Contains([]string(c.AuthenticationMethodsReferences), "pwd") {
		t.Errorf("amr = %v", c.AuthenticationMethodsReferences)
	}
	tok := res.token
	if tok.RefreshToken == "" || tok.AccessToken == "" {
		t.Fatalf("missing tokens: %+v", tok)
	}
	if d := time.Until(tok.Expiry); d <= 0 || d > testidp.DefaultAccessTokenLifetime+5*time.Second {
		t.Errorf("access token expires in %v", d)
	}
	// The access token is a JWT with the Entra-like claims too.
	at := jwtPayload(t, tok.AccessToken)
	if at["tid"] != tenantID || at["oid"] != "oid-alice" || at["sub"] != "sub-alice" {
		t.Errorf("access token claims = %v", at)
	}

	status, info := userinfo(t, idp, tok.AccessToken)
	if status != http.StatusOK || info["sub"] != "sub-alice" || info["email_verified"] != true || info["tid"] != tenantID {
		t.Fatalf("userinfo %d %v", status, info)
	}
	if roles, _ := info["roles"].([]any); len(roles) != 2 {
		t.Errorf("userinfo roles = %v", info["roles"])
	}

	// Refresh with offline_access: a new refresh token, same auth_time.
	tok2, err := refresh(t, conf, tok.RefreshToken)
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if tok2.RefreshToken == "" || tok2.RefreshToken == tok.RefreshToken || tok2.AccessToken == tok.AccessToken {
		t.Fatal("refresh did not rotate the tokens")
	}
	r2 := checkIDToken(t, idp, "web", tok2, "") // refreshed ID tokens carry no nonce
	if !r2.claims.AuthTime.AsTime().Equal(c.AuthTime.AsTime()) || r2.claims.Claims["tid"] != tenantID {
		t.Errorf("refreshed ID token auth_time %v (want %v), tid %v", r2.claims.AuthTime.AsTime(), c.AuthTime.AsTime(), r2.claims.Claims["tid"])
	}

	// Bob: unverified email is said explicitly, no roles or oid claim.
	rb := login(t, idp, browser(t, webRedirect), conf, bob)
	if v, ok := rb.raw["email_verified"]; !ok || v != false {
		t.Errorf("bob email_verified = %v (present %v)", v, ok)
	}
	if _, ok := rb.raw["roles"]; ok {
		t.Error("bob has a roles claim")
	}
	if _, ok := rb.raw["oid"]; ok {
		t.Error("bob has an oid claim")
	}
}

func TestCustomRolesClaimAndNoOfflineAccess(t *testing.T) {
	idp := startConfigured(t, func(c *testidp.Config) { c.RolesClaim = "app_roles" })
	conf := webConfig(idp)
	conf.Scopes = []string{oidc.ScopeOpenID}
	res := login(t, idp, browser(t, webRedirect), conf, alice)
	if _, ok := res.raw["roles"]; ok {
		t.Error("roles claim present under the default name")
	}
	if got, _ := res.raw["app_roles"].([]any); len(got) != 2 {
		t.Errorf("app_roles = %v", res.raw["app_roles"])
	}
	if _, ok := res.raw["email"]; ok {
		t.Error("email present without the email scope")
	}
	if res.token.RefreshToken != "" {
		t.Error("refresh token issued without offline_access")
	}
}

func TestRefreshRotationReuseRevokesFamily(t *testing.T) {
	idp := startConfigured(t, nil)
	conf := webConfig(idp)
	rt1 := login(t, idp, browser(t, webRedirect), conf, alice).token.RefreshToken
	tok2, err := refresh(t, conf, rt1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = refresh(t, conf, rt1)
	wantOAuthError(t, err, "invalid_grant", http.StatusBadRequest)
	_, err = refresh(t, conf, tok2.RefreshToken)
	wantOAuthError(t, err, "invalid_grant", http.StatusBadRequest)
	_, err = refresh(t, conf, "no-such-token")
	wantOAuthError(t, err, "invalid_grant", http.StatusBadRequest)
}

func TestDisableUser(t *testing.T) {
	idp := startConfigured(t, nil)
	conf := webConfig(idp)
	b := browser(t, webRedirect)
	tok := login(t, idp, b, conf, alice).token

	if err := idp.DisableUser("sub-alice"); err != nil {
		t.Fatal(err)
	}
	_, err := refresh(t, conf, tok.RefreshToken)
	wantOAuthError(t, err, "invalid_grant", http.StatusBadRequest)
	if status, _ := userinfo(t, idp, tok.AccessToken); status == http.StatusOK {
		t.Error("userinfo still answers for a disabled user")
	}
	// New sign-ins fail: AutoLogin denies, and the SSO session is gone, so
	// without a hint the login form is shown.
	if q := authorizeCode(t, b, conf, alice); q.Get("error") != "access_denied" || q.Get("code") != "" {
		t.Fatalf("disabled user via AutoLogin: %v", q)
	}
	getForm(t, b, conf.AuthCodeURL("s", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
	if err := idp.DisableUser("nobody"); err == nil {
		t.Error("DisableUser of an unknown subject succeeded")
	}

	if err := idp.EnableUser("sub-alice"); err != nil {
		t.Fatal(err)
	}
	login(t, idp, b, conf, alice)
	_, err = refresh(t, conf, tok.RefreshToken)
	wantOAuthError(t, err, "invalid_grant", 0) // revoked tokens stay revoked
}

func TestDisableUserBetweenLoginAndExchange(t *testing.T) {
	idp := startConfigured(t, nil)
	conf := webConfig(idp)
	q := authorizeCode(t, browser(t, webRedirect), conf, alice)
	if err := idp.DisableUser("sub-alice"); err != nil {
		t.Fatal(err)
	}
	_, err := conf.Exchange(ctxWithClient(t), q.Get("code"), oauth2.VerifierOption(q.Get("verifier")))
	wantOAuthError(t, err, "invalid_grant", http.StatusBadRequest)
}

// waitNextSecond waits until the clock is past t's second, so a new
// auth_time (seconds resolution) is strictly later.
func waitNextSecond(t time.Time) {
	time.Sleep(time.Until(t.Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
}

func TestSessionReuseAndForcedReauthentication(t *testing.T) {
	idp := startConfigured(t, nil)
	conf := webConfig(idp)
	b := browser(t, webRedirect)
	first := login(t, idp, b, conf, alice).claims.AuthTime.AsTime()
	waitNextSecond(first)

	// Same cookie jar, no hint: the SSO session answers, auth_time unchanged.
	if got := login(t, idp, b, conf, "").claims.AuthTime.AsTime(); !got.Equal(first) {
		t.Fatalf("session reuse: auth_time %v, want %v", got, first)
	}
	if got := login(t, idp, b, conf, alice, oauth2.SetAuthURLParam("max_age", "3600")).claims.AuthTime.AsTime(); !got.Equal(first) {
		t.Fatalf("max_age=3600: auth_time %v, want %v", got, first)
	}

	// max_age=0 forces a fresh authentication; with AutoLogin the hint re-authenticates.
	fresh := login(t, idp, b, conf, alice, oauth2.SetAuthURLParam("max_age", "0")).claims.AuthTime.AsTime()
	if !fresh.After(first) {
		t.Fatalf("max_age=0: auth_time %v not after %v", fresh, first)
	}
	waitNextSecond(fresh)
	again := login(t, idp, b, conf, alice, oauth2.SetAuthURLParam("prompt", "login")).claims.AuthTime.AsTime()
	if !again.After(fresh) {
		t.Fatalf("prompt=login: auth_time %v not after %v", again, fresh)
	}

	// max_age=0 without a hint cannot auto-login: the form is shown.
	verifier := oauth2.GenerateVerifier()
	resp, err := b.Get(conf.AuthCodeURL("s", oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("max_age", "0")))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `name="password"`) {
		t.Fatalf("max_age=0 without hint: %d %s", resp.StatusCode, body)
	}

	// A different hint than the session's user re-authenticates as that user.
	if got := login(t, idp, b, conf, bob).claims.Subject; got != "sub-bob" {
		t.Fatalf("hint bob signed in %q", got)
	}

	// prompt=none without a session: login_required.
	q := authorizeCode(t, browser(t, webRedirect), conf, "", oauth2.SetAuthURLParam("prompt", "none"))
	if q.Get("error") != "login_required" {
		t.Fatalf("prompt=none without session: %v", q)
	}
}

var (
	csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	reqRe  = regexp.MustCompile(`name="authRequestID" value="([^"]+)"`)
	actRe  = regexp.MustCompile(`<form method="post" action="([^"]+)"`)
	userRe = regexp.MustCompile(`name="username" value="([^"]*)"`)
)

type loginForm struct{ action, id, csrf, username string }

func getForm(t *testing.T, b *http.Client, authURL string) loginForm {
	t.Helper()
	resp, err := b.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("login page: %d %s", resp.StatusCode, body)
	}
	f := loginForm{}
	for _, m := range []struct {
		re  *regexp.Regexp
		dst *string
	}{{actRe, &f.action}, {reqRe, &f.id}, {csrfRe, &f.csrf}, {userRe, &f.username}} {
		sm := m.re.FindSubmatch(body)
		if sm == nil {
			t.Fatalf("login page lacks %s: %s", m.re, body)
		}
		*m.dst = string(sm[1])
	}
	return f
}

func postForm(t *testing.T, b *http.Client, f loginForm, username, password, csrf string) (*http.Response, string) {
	t.Helper()
	resp, err := b.PostForm(f.action, url.Values{"authRequestID": {f.id}, "csrf": {csrf}, "username": {username}, "password": {password}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusFound || resp.StatusCode == http.StatusSeeOther {
		return resp, ""
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

func TestFormLogin(t *testing.T) {
	idp := startConfigured(t, func(c *testidp.Config) { c.AutoLogin = false })
	conf := webConfig(idp)
	b := browser(t, webRedirect)
	verifier, state := oauth2.GenerateVerifier(), rand.Text()
	authURL := conf.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("login_hint", alice))

	f := getForm(t, b, authURL) // AutoLogin off: the hint only prefills the form
	if f.username != alice || !strings.HasPrefix(f.action, idp.Issuer()+"/") {
		t.Fatalf("form = %+v", f)
	}
	resp, body := postForm(t, b, f, alice, "wrong", f.csrf)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "Invalid username or password") {
		t.Fatalf("wrong password: %d %s", resp.StatusCode, body)
	}
	if resp, _ := postForm(t, b, f, "nobody", "x", f.csrf); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unknown user: %d", resp.StatusCode)
	}
	if resp, _ := postForm(t, b, f, alice, "alice-pw", "forged"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("forged CSRF token: %d", resp.StatusCode)
	}
	if resp, _ := postForm(t, b, f, alice, "alice-pw", ""); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("missing CSRF token: %d", resp.StatusCode)
	}
	// The CSRF token of another auth request does not work either.
	other := getForm(t, browser(t, webRedirect), conf.AuthCodeURL("x", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
	if resp, _ := postForm(t, b, f, alice, "alice-pw", other.csrf); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("CSRF token of another request: %d", resp.StatusCode)
	}

	resp, _ = postForm(t, b, f, alice, "alice-pw", f.csrf)
	q := redirectQuery(t, resp, webRedirect)
	if q.Get("state") != state || q.Get("code") == "" {
		t.Fatalf("redirect query %v", q)
	}
	tok, err := conf.Exchange(ctxWithClient(t), q.Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	if sub := checkIDToken(t, idp, "web", tok, "").claims.Subject; sub != "sub-alice" {
		t.Fatalf("sub %q", sub)
	}
	// The request is finished; replaying the form does not sign in again.
	if resp, _ := postForm(t, b, f, alice, "alice-pw", f.csrf); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("replayed form: %d", resp.StatusCode)
	}

	// A disabled user cannot sign in with the right password.
	if err := idp.DisableUser("sub-bob"); err != nil {
		t.Fatal(err)
	}
	fb := getForm(t, browser(t, webRedirect), conf.AuthCodeURL("y", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
	if resp, body := postForm(t, b, fb, bob, "bob-pw", fb.csrf); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "disabled") {
		t.Fatalf("disabled user: %d %s", resp.StatusCode, body)
	}
}

func TestPKCEAndCodeRules(t *testing.T) {
	idp := startConfigured(t, nil)
	conf := webConfig(idp)
	b := browser(t, webRedirect)
	hint := oauth2.SetAuthURLParam("login_hint", alice)

	for name, opts := range map[string][]oauth2.AuthCodeOption{
		"no PKCE":      {hint},
		"plain":        {hint, oauth2.SetAuthURLParam("code_challenge", "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopq"), oauth2.SetAuthURLParam("code_challenge_method", "plain")},
		"no method":    {hint, oauth2.SetAuthURLParam("code_challenge", "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopq")},
		"bogus method": {hint, oauth2.SetAuthURLParam("code_challenge", "abc"), oauth2.SetAuthURLParam("code_challenge_method", "S512")},
	} {
		q := authorize(t, b, conf.AuthCodeURL("st", opts...), webRedirect)
		if q.Get("error") != "invalid_request" || q.Get("code") != "" || q.Get("state") != "st" {
			t.Errorf("%s: redirect query %v", name, q)
		}
	}

	// Wrong verifier, then the right one: a code is single use.
	q := authorizeCode(t, b, conf, alice)
	_, err := conf.Exchange(ctxWithClient(t), q.Get("code"), oauth2.VerifierOption(oauth2.GenerateVerifier()))
	wantOAuthError(t, err, "invalid_grant", http.StatusBadRequest)
	q = authorizeCode(t, b, conf, alice)
	if _, err := conf.Exchange(ctxWithClient(t), q.Get("code"), oauth2.VerifierOption(q.Get("verifier"))); err != nil {
		t.Fatal(err)
	}
	_, err = conf.Exchange(ctxWithClient(t), q.Get("code"), oauth2.VerifierOption(q.Get("verifier")))
	wantOAuthError(t, err, "invalid_grant", http.StatusBadRequest)

	// Wrong client secret.
	q = authorizeCode(t, b, conf, alice)
	bad := *conf
	bad.ClientSecret = "nope"
	_, err = bad.Exchange(ctxWithClient(t), q.Get("code"), oauth2.VerifierOption(q.Get("verifier")))
	wantOAuthError(t, err, "invalid_client", http.StatusUnauthorized)

	// An unregistered redirect URI is not redirected to.
	u := conf.AuthCodeURL("st", oauth2.S256ChallengeOption(oauth2.GenerateVerifier()))
	u = strings.Replace(u, url.QueryEscape(webRedirect), url.QueryEscape("http://127.0.0.1:2/evil"), 1)
	resp, err := b.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("unregistered redirect_uri: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestPublicClientLoopbackRedirect(t *testing.T) {
	idp := startConfigured(t, nil)
	conf := &oauth2.Config{
		ClientID:    "cli",
		Endpoint:    idp.Endpoint(),
		RedirectURL: "http://127.0.0.1:49152/cli/cb", // native client: any loopback port
		Scopes:      []string{oidc.ScopeOpenID, oidc.ScopeOfflineAccess},
	}
	res := login(t, idp, browser(t, conf.RedirectURL), conf, alice)
	if res.claims.Subject != "sub-alice" || !slices.Contains([]string(res.claims.Audience), "cli") {
		t.Fatalf("claims %+v", res.claims)
	}
	if _, err := refresh(t, conf, res.token.RefreshToken); err != nil {
		t.Fatalf("public client refresh: %v", err)
	}
	conf.Endpoint.AuthStyle = oauth2.AuthStyleInParams
	res = login(t, idp, browser(t, conf.RedirectURL), conf, alice)
	if _, err := refresh(t, conf, res.token.RefreshToken); err != nil {
		t.Fatalf("public client refresh (params): %v", err)
	}
}

// TestRelyingParty runs zitadel's rp handlers with PKCE, the way alpd signs
// people in, against the IdP.
func TestRelyingParty(t *testing.T) {
	mux := http.NewServeMux()
	rpSrv := httptest.NewServer(mux)
	t.Cleanup(rpSrv.Close)
	redirect := rpSrv.URL + "/callback"
	idp := startConfigured(t, func(c *testidp.Config) {
		c.Clients = append(c.Clients, testidp.Client{ID: "alpd", Secret: "alpd-secret", RedirectURIs: []string{redirect}})
	})

	key := testkit.RandKey()
	cookies := httphelper.NewCookieHandler(key, key, httphelper.WithUnsecure())
	scopes := []string{oidc.ScopeOpenID, oidc.ScopeProfile, oidc.ScopeEmail, oidc.ScopeOfflineAccess}
	relying, err := rp.NewRelyingPartyOIDC(t.Context(), idp.Issuer(), "alpd", "alpd-secret", redirect, scopes, rp.WithPKCE(cookies))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		Sub, Tid, Refresh string
		Roles             []string
		AuthTime          int64
	}
	mux.Handle("/login", rp.AuthURLHandler(rand.Text, relying, rp.WithURLParam("login_hint", alice), rp.WithURLParam("max_age", "0")))
	mux.Handle("/callback", rp.CodeExchangeHandler(func(w http.ResponseWriter, _ *http.Request, tokens *oidc.Tokens[*oidc.IDTokenClaims], _ string, _ rp.RelyingParty) {
		var roles []string
		for _, r := range tokens.IDTokenClaims.Claims["roles"].([]any) {
			roles = append(roles, r.(string))
		}
		_ = json.NewEncoder(w).Encode(result{
			Sub: tokens.IDTokenClaims.Subject, Tid: tokens.IDTokenClaims.Claims["tid"].(string),
			Refresh: tokens.RefreshToken, Roles: roles, AuthTime: tokens.IDTokenClaims.AuthTime.AsTime().Unix(),
		})
	}, relying))

	resp, err := browser(t).Get(rpSrv.URL + "/login")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got result
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("rp callback: %d %v", resp.StatusCode, err)
	}
	if got.Sub != "sub-alice" || got.Tid != tenantID || !slices.Equal(got.Roles, []string{"approver", "admin"}) || got.Refresh == "" || got.AuthTime == 0 {
		t.Fatalf("rp result %+v", got)
	}

	tokens, err := rp.RefreshTokens[*oidc.IDTokenClaims](t.Context(), relying, got.Refresh, "", "")
	if err != nil {
		t.Fatalf("rp.RefreshTokens: %v", err)
	}
	if tokens.IDTokenClaims == nil || tokens.IDTokenClaims.AuthTime.AsTime().Unix() != got.AuthTime {
		t.Fatalf("refreshed ID token %+v", tokens.IDTokenClaims)
	}

	// IdP down: rp reports the 503 body's error code, not invalid_grant.
	idp.SetDown(true)
	_, err = rp.RefreshTokens[*oidc.IDTokenClaims](t.Context(), relying, tokens.RefreshToken, "", "")
	var oerr *oidc.Error
	if !errors.As(err, &oerr) || oerr.ErrorType != "temporarily_unavailable" {
		t.Fatalf("refresh while down: %v", err)
	}
	idp.SetDown(false)

	if err := idp.DisableUser("sub-alice"); err != nil {
		t.Fatal(err)
	}
	_, err = rp.RefreshTokens[*oidc.IDTokenClaims](t.Context(), relying, tokens.RefreshToken, "", "")
	if !errors.As(err, &oerr) || oerr.ErrorType != oidc.InvalidGrant {
		t.Fatalf("refresh of a disabled user: %v", err)
	}
}

func TestSetDown(t *testing.T) {
	idp := startConfigured(t, nil)
	conf := webConfig(idp)
	tok := login(t, idp, browser(t, webRedirect), conf, alice).token

	idp.SetDown(true)
	_, err := refresh(t, conf, tok.RefreshToken)
	wantOAuthError(t, err, "temporarily_unavailable", http.StatusServiceUnavailable)
	resp, err := http.Get(idp.Issuer() + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Error("/ready is OK while down")
	}
	resp, err = http.Get(idp.DiscoveryURL())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("discovery while down: %d", resp.StatusCode)
	}

	idp.SetDown(false)
	if _, err := refresh(t, conf, tok.RefreshToken); err != nil {
		t.Fatalf("refresh after coming back: %v", err)
	}
}

func TestDiscoveryAndJWKS(t *testing.T) {
	idp := startConfigured(t, nil)
	var disc oidc.DiscoveryConfiguration
	getJSON(t, idp.DiscoveryURL(), &disc)
	if disc.Issuer != idp.Issuer() || disc.TokenEndpoint != idp.Endpoint().TokenURL || disc.JwksURI != idp.JWKSURL() {
		t.Fatalf("discovery %+v", disc)
	}
	if !slices.Equal(disc.CodeChallengeMethodsSupported, []oidc.CodeChallengeMethod{oidc.CodeChallengeMethodS256}) {
		t.Errorf("code_challenge_methods_supported = %v", disc.CodeChallengeMethodsSupported)
	}
	if !slices.Contains(disc.ClaimsSupported, "tid") || !slices.Contains(disc.ScopesSupported, oidc.ScopeOfflineAccess) {
		t.Errorf("claims %v scopes %v", disc.ClaimsSupported, disc.ScopesSupported)
	}
	var jwks struct {
		Keys []struct{ Kty, Alg, Use, Kid string }
	}
	getJSON(t, idp.JWKSURL(), &jwks)
	if len(jwks.Keys) != 1 || jwks.Keys[0].Kty != "RSA" || jwks.Keys[0].Alg != "RS256" || jwks.Keys[0].Kid == "" {
		t.Fatalf("jwks %+v", jwks)
	}
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", u, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

type fakeListener struct{ addr net.Addr }

func (l fakeListener) Accept() (net.Conn, error) { return nil, errors.New("closed") }
func (l fakeListener) Close() error              { return nil }
func (l fakeListener) Addr() net.Addr            { return l.addr }

func TestLoopbackOnly(t *testing.T) {
	for _, iss := range []string{"https://idp.example.com", "http://10.1.2.3:8080", "http://[2001:db8::1]:80", "http://0.0.0.0:80"} {
		cfg := testConfig()
		cfg.Issuer = iss
		_, err := testidp.New(cfg)
		if err == nil || !strings.Contains(err.Error(), "non-loopback") {
			t.Errorf("issuer %s: err %v", iss, err)
		}
	}
	cfg := testConfig()
	cfg.Issuer, cfg.AllowNonLoopback = "https://idp.example.com/", true
	idp, err := testidp.New(cfg)
	if err != nil {
		t.Fatalf("AllowNonLoopback: %v", err)
	}
	if idp.Issuer() != "https://idp.example.com" {
		t.Errorf("issuer %q", idp.Issuer())
	}

	for _, iss := range []string{"http://127.0.0.1:0", "ftp://127.0.0.1", "http://127.0.0.1/?x=1", "127.0.0.1:80"} {
		cfg := testConfig()
		cfg.Issuer = iss
		if _, err := testidp.New(cfg); err == nil {
			t.Errorf("issuer %q accepted", iss)
		}
	}

	idp, err = testidp.New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "[::]:0"} {
		if err := idp.Start(addr); err == nil || !strings.Contains(err.Error(), "non-loopback") {
			_ = idp.Close()
			t.Errorf("Start(%q): %v", addr, err)
		}
	}
	if err := idp.Serve(fakeListener{&net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 80}}); err == nil {
		t.Error("Serve on a non-loopback listener succeeded")
	}
	if idp.Issuer() != "" {
		t.Errorf("a refused Start set the issuer to %q", idp.Issuer())
	}
	if err := idp.Start("localhost:0"); err != nil {
		t.Fatalf("Start(localhost:0): %v", err)
	}
	defer idp.Close()
	if err := idp.Start("127.0.0.1:0"); err == nil {
		t.Error("second Start succeeded")
	}
	if err := idp.Close(); err != nil {
		t.Error(err)
	}
	if err := idp.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestServeAndEmbeddedHandler(t *testing.T) {
	// Serve on a caller's listener with a preset issuer.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Issuer = "http://" + ln.Addr().String() + "/"
	idp, err := testidp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := idp.Serve(ln); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idp.Close() })
	login(t, idp, browser(t, webRedirect), webConfig(idp), alice)

	// Mounted by an embedder under a path prefix.
	srv := httptest.NewUnstartedServer(nil)
	cfg = testConfig()
	cfg.Issuer = "http://" + srv.Listener.Addr().String() + "/idp"
	emb, err := testidp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/idp/", http.StripPrefix("/idp", emb.Handler()))
	srv.Config.Handler = mux
	srv.Start()
	t.Cleanup(srv.Close)
	var disc oidc.DiscoveryConfiguration
	getJSON(t, emb.DiscoveryURL(), &disc)
	if disc.Issuer != cfg.Issuer || !strings.HasPrefix(disc.AuthorizationEndpoint, cfg.Issuer+"/") {
		t.Fatalf("embedded discovery %+v", disc)
	}
	res := login(t, emb, browser(t, webRedirect), webConfig(emb), alice)
	if res.claims.Issuer != cfg.Issuer {
		t.Fatalf("embedded iss %q", res.claims.Issuer)
	}

	// A handler without a known issuer refuses to serve.
	noIss, err := testidp.New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	noIss.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/.well-known/openid-configuration", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("handler without issuer: %d", rec.Code)
	}
}

func TestConfigValidation(t *testing.T) {
	for name, mutate := range map[string]func(*testidp.Config){
		"user without subject":    func(c *testidp.Config) { c.Users[0].Subject = "" },
		"user without username":   func(c *testidp.Config) { c.Users[0].Username = "" },
		"duplicate subject":       func(c *testidp.Config) { c.Users[1].Subject = c.Users[0].Subject },
		"duplicate username":      func(c *testidp.Config) { c.Users[1].Username = strings.ToUpper(c.Users[0].Username) },
		"client without id":       func(c *testidp.Config) { c.Clients[0].ID = "" },
		"duplicate client":        func(c *testidp.Config) { c.Clients[1].ID = c.Clients[0].ID },
		"client without redirect": func(c *testidp.Config) { c.Clients[0].RedirectURIs = nil },
		"relative redirect":       func(c *testidp.Config) { c.Clients[0].RedirectURIs = []string{"/cb"} },
		"negative lifetime":       func(c *testidp.Config) { c.AccessTokenLifetime = -time.Second },
		"reserved roles claim":    func(c *testidp.Config) { c.RolesClaim = "sub" },
		"standard roles scope":    func(c *testidp.Config) { c.RolesScope = "email" },
		"roles scope with space":  func(c *testidp.Config) { c.RolesScope = "my groups" },
		"bad dead token error":    func(c *testidp.Config) { c.DeadRefreshTokenError = "bad\"code" },
	} {
		cfg := testConfig()
		mutate(&cfg)
		if _, err := testidp.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// The IdP keeps its own copy of the config.
	cfg := testConfig()
	idp := func() *testidp.IdP {
		idp, err := testidp.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := idp.Start(""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = idp.Close() })
		return idp
	}()
	cfg.Users[0].Roles[0] = "mutated"
	res := login(t, idp, browser(t, webRedirect), webConfig(idp), alice)
	if roles, _ := res.raw["roles"].([]any); len(roles) == 0 || roles[0] != "approver" {
		t.Fatalf("roles %v", res.raw["roles"])
	}
}

func TestShortLifetimes(t *testing.T) {
	idp := startConfigured(t, func(c *testidp.Config) {
		c.AccessTokenLifetime = 2 * time.Second
		c.IDTokenLifetime = 3 * time.Second
	})
	res := login(t, idp, browser(t, webRedirect), webConfig(idp), alice)
	if d := time.Until(res.token.Expiry); d > 2*time.Second {
		t.Errorf("access token lifetime %v", d)
	}
	if d := res.claims.Expiration.AsTime().Sub(res.claims.IssuedAt.AsTime()); d > 3*time.Second {
		t.Errorf("ID token lifetime %v", d)
	}
}

func postToken(t *testing.T, u, user, pass string, form url.Values) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m := map[string]any{}
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

func TestIntrospectRevokeAndUnsupportedGrants(t *testing.T) {
	idp := startConfigured(t, nil)
	conf := webConfig(idp)
	tok := login(t, idp, browser(t, webRedirect), conf, alice).token
	var disc oidc.DiscoveryConfiguration
	getJSON(t, idp.DiscoveryURL(), &disc)

	status, m := postToken(t, disc.IntrospectionEndpoint, "web", webSecret, url.Values{"token": {tok.AccessToken}})
	if status != http.StatusOK || m["active"] != true || m["sub"] != "sub-alice" || m["client_id"] != "web" || m["tid"] != tenantID {
		t.Fatalf("introspection %d %v", status, m)
	}
	if status, _ := postToken(t, disc.IntrospectionEndpoint, "web", "wrong", url.Values{"token": {tok.AccessToken}}); status == http.StatusOK {
		t.Error("introspection with a wrong secret answered 200")
	}

	// Revoking the refresh token revokes its family, access tokens included.
	if status, m := postToken(t, disc.RevocationEndpoint, "web", webSecret, url.Values{"token": {tok.RefreshToken}, "token_type_hint": {"refresh_token"}}); status != http.StatusOK {
		t.Fatalf("revocation %d %v", status, m)
	}
	_, err := refresh(t, conf, tok.RefreshToken)
	wantOAuthError(t, err, "invalid_grant", http.StatusBadRequest)
	if status, _ := userinfo(t, idp, tok.AccessToken); status == http.StatusOK {
		t.Error("access token still valid after its refresh token was revoked")
	}
	if _, m := postToken(t, disc.IntrospectionEndpoint, "web", webSecret, url.Values{"token": {tok.AccessToken}}); m["active"] != false {
		t.Errorf("revoked access token introspects as %v", m)
	}

	// An unknown client is invalid_client, also on the refresh grant (where
	// op passes the storage's error through unchanged).
	for name, form := range map[string]url.Values{
		"refresh": {"grant_type": {"refresh_token"}, "client_id": {"nope"}, "refresh_token": {tok.RefreshToken}},
		"code":    {"grant_type": {"authorization_code"}, "client_id": {"nope"}, "code": {"x"}, "redirect_uri": {webRedirect}},
	} {
		if status, m := postToken(t, idp.Endpoint().TokenURL, "", "", form); status/100 != 4 || m["error"] == "server_error" {
			t.Errorf("unknown client on %s: %d %v", name, status, m)
		}
	}

	// op routes these grants regardless; testidp's storage refuses them.
	for name, form := range map[string]url.Values{
		"client_credentials": {"grant_type": {"client_credentials"}},
		"jwt-bearer":         {"grant_type": {string(oidc.GrantTypeBearer)}, "assertion": {"eyJhbGciOiJub25lIn0.eyJpc3MiOiJ3ZWIifQ."}},
		"implicit":           {"grant_type": {"implicit"}},
	} {
		status, m := postToken(t, idp.Endpoint().TokenURL, "web", webSecret, form)
		if status == http.StatusOK || m["access_token"] != nil {
			t.Errorf("%s: %d %v", name, status, m)
		}
	}
}

// TestAutoLoginByEmailHint: a relying party that hints the person's
// address (their email) rather than the username signs them in as that
// user.
func TestAutoLoginByEmailHint(t *testing.T) {
	idp := startConfigured(t, func(c *testidp.Config) {
		c.Users = append(c.Users, testidp.User{Subject: "sub-lee", Username: "lee", Email: "lee@example.org", EmailVerified: true})
	})
	res := login(t, idp, browser(t, webRedirect), webConfig(idp), "LEE@example.org")
	if res.claims.Subject != "sub-lee" {
		t.Fatalf("signed in as %q, want sub-lee", res.claims.Subject)
	}
}
