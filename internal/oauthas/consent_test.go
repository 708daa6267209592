package oauthas_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/oauth2"

	"github.com/alpd-project/alpd/internal/oauthas"
)

func authURL(h *harness, c testClient, tenant, challengeVerifier string) string {
	return h.oauth2Config(c, tenant).AuthCodeURL("st", oauth2.S256ChallengeOption(challengeVerifier),
		oauth2.SetAuthURLParam("resource", h.mcp), oauth2.SetAuthURLParam("login_hint", "ana"))
}

// TestConsent: a consumer agent needs the person's approval on their own
// broker's page; a company agent (vetted by the organization) does not.
func TestConsent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
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

	// A forged ticket is not accepted: the consent page comes again.
	forged := authURL(h, public, tenantA, oauth2.GenerateVerifier()) + "&consent=9999999999.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	if again := h.get(b, forged); again.status != http.StatusOK || !strings.Contains(again.body, "Allow") {
		t.Fatalf("forged consent ticket accepted: %d %q", again.status, again.location)
	}

	// A company agent goes straight to its code.
	company := h.confidential(tenantA, "company-agent")
	direct := h.get(b, authURL(h, company, tenantA, oauth2.GenerateVerifier()))
	if direct.status != http.StatusFound || !strings.Contains(direct.location, "code=alpac_") {
		t.Fatalf("company agent asked for consent: %d %q", direct.status, direct.location)
	}
}
