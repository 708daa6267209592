package oauthas_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/oauth2"

	"github.com/alpd-project/alpd/services/identity/oauthas"
)

func authURL(h *rig, c testClient, tenant, challengeVerifier string) string {
	return h.oauth2Config(c, tenant).AuthCodeURL("st", oauth2.S256ChallengeOption(challengeVerifier),
		oauth2.SetAuthURLParam("resource", h.mcp), oauth2.SetAuthURLParam("login_hint", "ana"))
}

// TestConsent: a consumer agent needs the person's approval on their own
// broker's page; a company agent (vetted by the organization) does not.
func TestConsent(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	h.consent = "" // the browser stops at the consent page
	public := h.publicClient(tenantA, "dcr-agent")
	b := h.browser()

	page := h.get(b, authURL(h, public, tenantA, oauth2.GenerateVerifier()))
	if page.status != http.StatusOK || !strings.Contains(page.body, "Allow") || !strings.Contains(page.body, public.id) {
		t.Fatalf("consumer agent: no consent page: %d %q %s", page.status, page.location, page.body)
	}
	if page.header.Get("X-Frame-Options") != "DENY" {
		t.Error("consent page can be framed")
	}
	pageURL := h.public + oauthas.PathPrefix + tenantA + oauthas.PathConsent

	// Deny: the agent is told access_denied, with state and iss.
	a := h.decide(b, pageURL, page.body, "deny")
	u, _ := url.Parse(a.location)
	if a.status != http.StatusSeeOther || u.Query().Get("error") != "access_denied" || u.Query().Get("state") != "st" || u.Query().Get("iss") == "" {
		t.Fatalf("deny: %d %s", a.status, a.location)
	}

	// A POST without the CSRF token (a cross-site form) is refused.
	form := url.Values{"decision": {"allow"}, "request": {"client_id=" + public.id}}
	req, _ := http.NewRequest(http.MethodPost, pageURL, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", h.public)
	resp, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("consent without CSRF: %d", resp.StatusCode)
	}

	// Allow: the browser comes back to authorize with a ticket and the
	// agent gets a code.
	page = h.get(b, authURL(h, public, tenantA, oauth2.GenerateVerifier()))
	a = h.decide(b, pageURL, page.body, "allow")
	if a.status != http.StatusFound || !strings.Contains(a.location, "code=alpac_") {
		t.Fatalf("allow: %d %q %s", a.status, a.location, a.body)
	}

	// A forged ticket is refused, and no code is issued.
	forged := authURL(h, public, tenantA, oauth2.GenerateVerifier()) + "&consent=AAAAAAAAAAAAAAAAAAAAAA.9999999999.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	wantConsentRefused(t, h.get(b, forged), oauthas.CodeConsentMismatch)

	// A company agent goes straight to its code.
	company := h.confidential(tenantA, "company-agent")
	direct := h.get(b, authURL(h, company, tenantA, oauth2.GenerateVerifier()))
	if direct.status != http.StatusFound || !strings.Contains(direct.location, "code=alpac_") {
		t.Fatalf("company agent asked for consent: %d %q", direct.status, direct.location)
	}
}

// wantConsentRefused: the authorization endpoint itself answers a refused
// consent ticket (400, JSON code), and nothing goes to the client.
func wantConsentRefused(t *testing.T, a answer, code string) {
	t.Helper()
	var body struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	_ = json.Unmarshal([]byte(a.body), &body)
	if a.status != http.StatusBadRequest || body.Error != code || body.Description == "" || a.location != "" {
		if q, err := url.Parse(a.location); err == nil {
			recordSecret("authorization code", q.Query().Get("code"))
		}
		t.Fatalf("want 400 %s, got %d %q %s", code, a.status, a.location, a.body)
	}
}

// approvedAuthorization has the person in browser b approve client c's
// request (made by edit from the default one) on the consent page, and
// returns the authorization URL the consent page sends the browser back
// to, carrying the ticket.
func approvedAuthorization(t *testing.T, h *rig, b *http.Client, c testClient) *url.URL {
	t.Helper()
	page := h.get(b, authURL(h, c, tenantA, oauth2.GenerateVerifier()))
	if page.status != http.StatusOK || !strings.Contains(page.body, "Allow") {
		t.Fatalf("no consent page: %d %q", page.status, page.location)
	}
	stop := &http.Client{Jar: b.Jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	a := h.decide(stop, h.public+oauthas.PathPrefix+tenantA+oauthas.PathConsent, page.body, "allow")
	u, err := url.Parse(a.location)
	if a.status != http.StatusSeeOther || err != nil || u.Query().Get("consent") == "" {
		t.Fatalf("allow: %d %q", a.status, a.location)
	}
	recordSecret("consent ticket", u.Query().Get("consent"))
	base, err := url.Parse(h.public)
	if err != nil {
		t.Fatal(err)
	}
	return base.ResolveReference(u)
}

// TestConsentTicketBoundToRequest: a ticket approves exactly the request
// the person saw, in their session: changing any parameter after the
// approval (scope, state, PKCE challenge, redirect URI, resource, nonce,
// client) gets consent_mismatch and no code (issue 10, finding 9).
func TestConsentTicketBoundToRequest(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	h.consent = ""
	public := h.publicClient(tenantA, "dcr-bound")
	h.publicClient(tenantA, "dcr-other")
	b := h.browser()

	tampered := map[string]func(q url.Values){
		"narrower scope": func(q url.Values) { q.Set("scope", scopeRead) },
		"other state":    func(q url.Values) { q.Set("state", "another-state") },
		"no state":       func(q url.Values) { q.Del("state") },
		"other challenge": func(q url.Values) {
			q.Set("code_challenge", oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier()))
		},
		"other redirect":  func(q url.Values) { q.Set("redirect_uri", otherRedirectURI) },
		"other resource":  func(q url.Values) { q.Set("resource", h.rest) },
		"added nonce":     func(q url.Values) { q.Set("nonce", "n-0S6_WzA2Mj") },
		"other client":    func(q url.Values) { q.Set("client_id", "dcr-other") },
		"added parameter": func(q url.Values) { q.Set("prompt", "login") },
	}
	for name, edit := range tampered {
		t.Run(name, func(t *testing.T) {
			u := approvedAuthorization(t, h, b, public)
			q := u.Query()
			edit(q)
			u.RawQuery = q.Encode()
			wantConsentRefused(t, h.get(b, u.String()), oauthas.CodeConsentMismatch)
		})
	}

	// The untouched request gets its code; the person's other session does
	// not accept the ticket.
	u := approvedAuthorization(t, h, b, public)
	wantConsentRefused(t, h.get(h.browser(), u.String()), oauthas.CodeConsentMismatch)
	if q := h.authorize(b, u.String()); !strings.HasPrefix(q.Get("code"), "alpac_") || q.Get("state") != "st" {
		t.Fatalf("approved request: %v", q)
	}
}

// TestConsentTicketSingleUse: a ticket gives one code; replayed (within its
// lifetime, on this replica or another sharing the code bucket) it gets
// consent_replayed and no code (issue 10, finding 9).
func TestConsentTicketSingleUse(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	h.consent = ""
	public := h.publicClient(tenantA, "dcr-once")
	b := h.browser()
	u := approvedAuthorization(t, h, b, public)
	if c, _ := h.store.Client(tenantA, public.id); !c.FirstUsed.IsZero() {
		t.Fatalf("client used before any authorization: %+v", c)
	}
	if q := h.authorize(b, u.String()); !strings.HasPrefix(q.Get("code"), "alpac_") {
		t.Fatalf("first use: %v", q)
	}
	// The first authorization marks the dynamic client used (it will not
	// expire).
	if c, err := h.store.Client(tenantA, public.id); err != nil || c.FirstUsed.IsZero() {
		t.Fatalf("client not marked used: %+v, %v", c, err)
	}
	wantConsentRefused(t, h.get(b, u.String()), oauthas.CodeConsentReplayed)

	// Another replica: another authorization server on the same store and
	// code bucket.
	other := h.replica()
	u2 := approvedAuthorization(t, h, b, public)
	if q := h.authorize(b, u2.String()); !strings.HasPrefix(q.Get("code"), "alpac_") {
		t.Fatalf("first use: %v", q)
	}
	replayed := *u2
	replayed.Scheme, replayed.Host = "http", other
	wantConsentRefused(t, h.get(b, replayed.String()), oauthas.CodeConsentReplayed)
}
