package alpdtest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/alpd-project/alpd/internal/testkit"
)

// Session is a person signed in at a broker's test IdP: their browser (a
// client with a cookie jar) and the session's CSRF token.
type Session struct {
	// Base is the broker's public URL (scheme://host[:port]).
	Base     string
	Tenant   string
	Client   *http.Client
	CSRF     string
	PersonID string
}

// SignIn signs username in to tenant at the broker at base, whose test IdP
// knows them. c carries the transport (TLS roots, dial mapping) and timeout;
// the session gets a copy of it with its own cookie jar.
func SignIn(t testing.TB, c *http.Client, base, tenant, username string) *Session {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	browser := *c
	browser.Jar = jar
	browser.CheckRedirect = nil
	resp, err := browser.Get(base + "/signin?tenant=" + url.QueryEscape(tenant) + "&login_hint=" + url.QueryEscape(username) + "&return=/healthz")
	if err != nil {
		t.Fatalf("sign-in of %s@%s: %v", username, tenant, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/healthz" {
		t.Fatalf("sign-in of %s@%s ended at %s with %d", username, tenant, resp.Request.URL, resp.StatusCode)
	}
	resp, err = browser.Get(base + "/signin/session")
	if err != nil {
		t.Fatal(err)
	}
	var sess struct {
		CSRF     string `json:"csrf"`
		PersonID string `json:"person_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&sess)
	resp.Body.Close()
	if err != nil || sess.CSRF == "" || sess.PersonID == "" {
		t.Fatalf("session of %s@%s: %v %+v", username, tenant, err, sess)
	}
	return &Session{Base: base, Tenant: tenant, Client: &browser, CSRF: sess.CSRF, PersonID: sess.PersonID}
}

// Do sends a request of the signed-in person's browser (same origin, with
// the CSRF token) and returns the status and the body.
func (s *Session) Do(t testing.TB, method, path string, body []byte) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, s.Base+path, bytes.NewReader(body))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Origin", s.Base)
	req.Header.Set("X-CSRF-Token", s.CSRF)
	resp, err := s.Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// PAT mints the person a personal access token for an agent of that name
// (the name the sender line gives the agent) with scopes, and waits until
// ingress knows it.
func (s *Session) PAT(t testing.TB, name string, scopes ...string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"name": name, "scopes": scopes})
	status, raw := s.Do(t, http.MethodPost, "/v1/pats", body)
	var minted struct {
		Token string `json:"token"`
	}
	if status != http.StatusCreated || json.Unmarshal(raw, &minted) != nil || !strings.HasPrefix(minted.Token, "alppat_") {
		t.Fatalf("PAT for %s: %d %s", s.PersonID, status, raw)
	}
	// Ingress learns of the PAT from identity's stream a moment later:
	// wait until it knows the token (an unknown envelope is then 404, not
	// 401), as an agent would retry its first request. No cookies: the
	// agent has none.
	agent := *s.Client
	agent.Jar = nil
	testkit.Eventually(t, 10*time.Second, func() error {
		req, _ := http.NewRequest(http.MethodGet, s.Base+"/nlip/envelopes/00000000-0000-4000-8000-000000000000", nil)
		req.Header.Set("Authorization", "Bearer "+minted.Token)
		resp, err := agent.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized {
			return fmt.Errorf("ingress does not know %s's PAT yet", s.PersonID)
		}
		return nil
	})
	return minted.Token
}

// CompanyAgent is what an organization's admin and one of its people do
// to give the person a company-class agent: the admin registers a
// confidential client named name (POST /v1/admin/clients), and the agent
// runs the authorization code flow with PKCE S256 and the resource
// indicator for the person (company agents skip the consent page),
// authenticating with the client's secret. It returns the access token.
func CompanyAgent(t testing.TB, admin, person *Session, name string, scopes ...string) string {
	t.Helper()
	public := person.Base
	redirect := "http://127.0.0.1:9/" + url.PathEscape(name)
	reg, _ := json.Marshal(map[string]any{"name": name, "redirect_uris": []string{redirect}})
	status, body := admin.Do(t, http.MethodPost, "/v1/admin/clients", reg)
	var client struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
		Class        string `json:"class"`
	}
	if err := json.Unmarshal(body, &client); status != http.StatusCreated || err != nil || client.ClientSecret == "" || client.Class != "company" {
		t.Fatalf("registering %s: %d %s", name, status, body)
	}
	issuer := public + "/oauth/" + person.Tenant
	conf := &oauth2.Config{ClientID: client.ClientID, ClientSecret: client.ClientSecret, RedirectURL: redirect, Scopes: scopes,
		Endpoint: oauth2.Endpoint{AuthURL: issuer + "/authorize", TokenURL: issuer + "/token", AuthStyle: oauth2.AuthStyleInHeader}}
	verifier := oauth2.GenerateVerifier()
	authURL := conf.AuthCodeURL("st4te-"+name, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", public))
	// The person's browser, already signed in: the broker sends it on to
	// the agent's redirect URI, where we stop.
	browser := *person.Client
	browser.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), redirect) {
			return http.ErrUseLastResponse
		}
		return nil
	}
	resp, err := browser.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	code := loc.Query().Get("code")
	if resp.StatusCode != http.StatusFound || code == "" {
		t.Fatalf("authorizing %s ended with %d at %s (%s)", name, resp.StatusCode, resp.Request.URL, loc)
	}
	agent := *person.Client
	agent.Jar = nil
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, &agent)
	tok, err := conf.Exchange(ctx, code, oauth2.VerifierOption(verifier), oauth2.SetAuthURLParam("resource", public))
	if err != nil {
		t.Fatalf("token for %s: %v", name, err)
	}
	if c := JWTClaims(t, tok.AccessToken); c["class"] != "company" {
		t.Fatalf("%s's token is %v, want company class", name, c["class"])
	}
	return tok.AccessToken
}

// JWTClaims decodes the claims of a JWT without verifying it (the tests
// check what a broker issued, which its own verifier already checks).
func JWTClaims(t testing.TB, token string) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", token)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatalf("JWT payload: %v", err)
	}
	var claims map[string]any
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatalf("JWT claims: %v", err)
	}
	return claims
}

// OptInFreeText has the signed-in person drop the template's freetext-off
// policy from their recipient rules (their web session may loosen; an
// agent may not), so free-text fields reach their agents.
func (s *Session) OptInFreeText(t testing.TB) {
	t.Helper()
	status, raw := s.Do(t, http.MethodGet, "/v1/rules/recipient", nil)
	var set struct {
		Text string `json:"text"`
	}
	if status != http.StatusOK || json.Unmarshal(raw, &set) != nil {
		t.Fatalf("GET /v1/rules/recipient: %d %s", status, raw)
	}
	start := strings.Index(set.Text, `@id("freetext-off")`)
	if start < 0 {
		t.Fatalf("no freetext-off policy in %s", set.Text)
	}
	end := start + strings.Index(set.Text[start:], "};") + 2
	req, _ := http.NewRequest(http.MethodPut, s.Base+"/v1/rules/recipient", strings.NewReader(set.Text[:start]+set.Text[end:]))
	req.Header.Set("Origin", s.Base)
	req.Header.Set("X-CSRF-Token", s.CSRF)
	req.Header.Set("If-Match", `"0"`)
	resp, err := s.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("opting in to free text: %d %s", resp.StatusCode, raw)
	}
}
