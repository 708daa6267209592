package oauthas_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"golang.org/x/oauth2"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/services/identity/oauthas"
)

// TestConfidentialClient: a real x/oauth2 client of a company (confidential)
// client runs the code flow with PKCE through sign-in at the person's IdP;
// the access token verifies and names the person, agent, client and class
// company; refresh rotates.
func TestConfidentialClient(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	c := h.confidential(tenantA, "company-agent")
	f, tok := h.login(c, "ana")
	if tok.TokenType != "Bearer" || tok.RefreshToken == "" || !strings.HasPrefix(tok.RefreshToken, "alprt_") {
		t.Fatalf("token %+v", tok)
	}
	if d := time.Until(tok.Expiry); d < 4*time.Minute || d > 5*time.Minute+5*time.Second {
		t.Errorf("expires in %v, want 5m", d)
	}
	if s, _ := tok.Extra("scope").(string); s != "alp.read alp.send" {
		t.Errorf("scope %q", s)
	}
	cl, err := h.verify(tok.AccessToken)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	person, err := h.store.Person(t.Context(), tenantA, cl.Subject)
	if err != nil || person.Address != "ana@a.example" {
		t.Fatalf("person %+v, %v", person, err)
	}
	if cl.Tenant != tenantA || cl.ClientID != c.id || cl.Class != accesstoken.ClassCompany || cl.Audience != h.mcp ||
		cl.Issuer != h.issuer(tenantA) || !slices.Equal(cl.Scopes, []string{scopeRead, scopeSend}) ||
		cl.AgentID != oauthas.AgentID(tenantA, person.ID, c.id) || cl.Expiry.Sub(cl.IssuedAt) != 5*time.Minute {
		t.Fatalf("claims %+v", cl)
	}
	g := h.grantOf(tok.AccessToken)
	if g.PersonID != person.ID || g.ClientID != c.id || g.AgentID != cl.AgentID || g.Class != alpv1.TrustClass_TRUST_CLASS_COMPANY ||
		g.Resource != h.mcp || !g.RefreshSHA256.Equal(identitystore.HashSecret(tok.RefreshToken)) {
		t.Fatalf("grant %+v", g)
	}

	// Refresh through x/oauth2: a new refresh token, same grant.
	ts := f.cfg.TokenSource(ctxT(t), &oauth2.Token{RefreshToken: tok.RefreshToken, Expiry: time.Now().Add(-time.Hour)})
	tok2, err := ts.Token()
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	recordSecret("access token", tok2.AccessToken)
	recordSecret("refresh token", tok2.RefreshToken)
	if tok2.RefreshToken == tok.RefreshToken || tok2.AccessToken == tok.AccessToken {
		t.Fatal("refresh did not rotate")
	}
	cl2, err := h.verify(tok2.AccessToken)
	if err != nil || cl2.GrantID != cl.GrantID || cl2.Class != accesstoken.ClassCompany || cl2.AgentID != cl.AgentID {
		t.Fatalf("refreshed claims %+v, %v", cl2, err)
	}
	if g := h.grantOf(tok2.AccessToken); !g.RefreshSHA256.Equal(identitystore.HashSecret(tok2.RefreshToken)) || g.RefreshGeneration != 2 {
		t.Fatalf("grant after refresh %+v", g)
	}
	if h.recheck.calls != 1 {
		t.Errorf("re-check called %d times, want 1", h.recheck.calls)
	}

	// The same person authorizing the same client again: the same agent,
	// another grant. Another person: another agent.
	_, tok3 := h.login(c, "ana")
	cl3, err := h.verify(tok3.AccessToken)
	if err != nil || cl3.AgentID != cl.AgentID || cl3.GrantID == cl.GrantID {
		t.Fatalf("second authorization %+v, %v", cl3, err)
	}
	_, tok4 := h.login(c, "cy")
	cl4, err := h.verify(tok4.AccessToken)
	if err != nil || cl4.AgentID == cl.AgentID || cl4.Subject == cl.Subject || cl4.Class != accesstoken.ClassCompany {
		t.Fatalf("other person %+v, %v", cl4, err)
	}
}

// TestPublicClient: a public (consumer) client without a secret gets
// consumer tokens; refresh rotates; a vendor attestation makes a public
// client company.
func TestPublicClient(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	c := h.publicClient(tenantA, "dcr-agent")
	_, tok := h.login(c, "ana")
	cl, err := h.verify(tok.AccessToken)
	if err != nil || cl.Class != accesstoken.ClassConsumer || cl.ClientID != c.id {
		t.Fatalf("claims %+v, %v", cl, err)
	}
	if g := h.grantOf(tok.AccessToken); g.Class != alpv1.TrustClass_TRUST_CLASS_CONSUMER {
		t.Fatalf("grant class %v", g.Class)
	}
	tr := h.refresh(c, tok.RefreshToken)
	if tr.status != http.StatusOK || tr.RefreshToken == "" || tr.RefreshToken == tok.RefreshToken || tr.TokenType != "Bearer" {
		t.Fatalf("refresh: %d %s", tr.status, tr.body)
	}
	if cc := tr.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q", cc)
	}
	if cl2, err := h.verify(tr.AccessToken); err != nil || cl2.Class != accesstoken.ClassConsumer || cl2.GrantID != cl.GrantID {
		t.Fatalf("refreshed %+v, %v", cl2, err)
	}

	// A vendor client with an admin's attestation is company class.
	if _, err := h.store.RegisterClient(ctxT(t), identitystore.ClientSpec{
		Tenant: tenantA, ClientID: "vendor-agent", Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_VENDOR,
		RedirectURIs: []string{redirectURI}, RegisteredBy: h.admin[tenantA],
	}); err != nil {
		t.Fatal(err)
	}
	vendor := testClient{tenant: tenantA, id: "vendor-agent"}
	_, vtok := h.login(vendor, "ana")
	if cl, err := h.verify(vtok.AccessToken); err != nil || cl.Class != accesstoken.ClassConsumer {
		t.Fatalf("vendor without attestation %+v, %v", cl, err)
	}
	if _, err := h.store.BindVendorAttestation(ctxT(t), tenantA, "vendor-agent", "vendor contract 42", h.admin[tenantA]); err != nil {
		t.Fatal(err)
	}
	_, vtok = h.login(vendor, "ana")
	if cl, err := h.verify(vtok.AccessToken); err != nil || cl.Class != accesstoken.ClassCompany {
		t.Fatalf("attested vendor %+v, %v", cl, err)
	}
}

// authError runs an authorization request that must fail back at the
// client's redirect URI, and returns the error parameters (query or
// fragment).
func (h *rig) authError(c *http.Client, authURL string) url.Values {
	h.t.Helper()
	a := h.get(c, authURL)
	if a.status != http.StatusFound || !strings.HasPrefix(a.location, "http://127.0.0.1:9/") {
		h.t.Fatalf("want an error redirect to the client, got %d %q %s", a.status, a.location, a.body)
	}
	u, err := url.Parse(a.location)
	if err != nil {
		h.t.Fatal(err)
	}
	q := u.Query()
	if frag, err := url.ParseQuery(u.Fragment); err == nil {
		for k, v := range frag {
			q[k] = v
		}
	}
	if q.Get("code") != "" {
		h.t.Fatalf("error redirect carries a code: %v", q)
	}
	return q
}

func wantRedirectError(t *testing.T, q url.Values, code, state, iss string) {
	t.Helper()
	if q.Get("error") != code || q.Get("state") != state || q.Get("iss") != iss || q.Get("error_description") == "" {
		t.Fatalf("want error %s with state %q and iss %q, got %v", code, state, iss, q)
	}
}

// authURL builds an authorization request by hand.
func (h *rig) authURL(tenant string, params ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(params); i += 2 {
		q.Add(params[i], params[i+1])
	}
	return h.issuer(tenant) + "/authorize?" + q.Encode()
}

func challenge() (verifier, s256 string) {
	v := oauth2.GenerateVerifier()
	return v, oauth2.S256ChallengeFromVerifier(v)
}

func TestPKCE(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	c := h.publicClient(tenantA, "dcr-agent")
	iss := h.issuer(tenantA)
	base := []string{"response_type", "code", "client_id", c.id, "redirect_uri", redirectURI, "state", "st-1",
		"resource", h.mcp, "scope", "alp.read", "login_hint", "ana"}
	v, s256 := challenge()

	t.Run("missing", func(t *testing.T) {
		wantRedirectError(t, h.authError(h.browser(), h.authURL(tenantA, base...)), "invalid_request", "st-1", iss)
	})
	t.Run("plain", func(t *testing.T) {
		u := h.authURL(tenantA, append(base, "code_challenge", v, "code_challenge_method", "plain")...)
		wantRedirectError(t, h.authError(h.browser(), u), "invalid_request", "st-1", iss)
	})
	t.Run("no method", func(t *testing.T) { // RFC 7636 defaults to plain
		u := h.authURL(tenantA, append(base, "code_challenge", s256)...)
		wantRedirectError(t, h.authError(h.browser(), u), "invalid_request", "st-1", iss)
	})
	t.Run("malformed challenge", func(t *testing.T) {
		u := h.authURL(tenantA, append(base, "code_challenge", "short", "code_challenge_method", "S256")...)
		wantRedirectError(t, h.authError(h.browser(), u), "invalid_request", "st-1", iss)
	})
	t.Run("wrong verifier", func(t *testing.T) {
		f := h.startFlow(c, tenantA, "ana", h.browser())
		right := f.verifier
		f.verifier = oauth2.GenerateVerifier()
		_, err := h.exchange(f)
		wantRetrieveError(t, err, http.StatusBadRequest, "invalid_grant")
		// No verifier at all.
		tr := h.post(tenantA, "/token", c, false, url.Values{"grant_type": {"authorization_code"}, "code": {f.code},
			"redirect_uri": {redirectURI}})
		wantOAuthError(t, tr, http.StatusBadRequest, "invalid_request")
		// A failed verification does not spend the code: the right verifier
		// still works.
		f.verifier = right
		if _, err := h.exchange(f); err != nil {
			t.Fatalf("exchange with the right verifier: %v", err)
		}
	})
}

// TestRedirectURI: an unregistered redirect URI, or an unknown client, is
// an error page, never a redirect.
func TestRedirectURI(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	c := h.publicClient(tenantA, "dcr-agent")
	_, s256 := challenge()
	for name, params := range map[string][]string{
		"unregistered":   {"client_id", c.id, "redirect_uri", "http://127.0.0.1:9/evil"},
		"trailing slash": {"client_id", c.id, "redirect_uri", redirectURI + "/"},
		"other port":     {"client_id", c.id, "redirect_uri", "http://127.0.0.1:10/callback"},
		"missing":        {"client_id", c.id},
		"unknown client": {"client_id", "nobody", "redirect_uri", redirectURI},
		"no client":      {"redirect_uri", redirectURI},
	} {
		t.Run(name, func(t *testing.T) {
			u := h.authURL(tenantA, append(params, "response_type", "code", "state", "s", "resource", h.mcp,
				"code_challenge", s256, "code_challenge_method", "S256", "login_hint", "ana")...)
			a := h.get(h.browser(), u)
			if a.status != http.StatusBadRequest || a.location != "" {
				t.Fatalf("want an error page, got %d %q %s", a.status, a.location, a.body)
			}
			var e struct{ Error, ErrorDescription string }
			if err := json.Unmarshal([]byte(a.body), &e); err != nil || e.Error == "" {
				t.Fatalf("error page %q", a.body)
			}
		})
	}
}

func TestCodeReuse(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	c := h.confidential(tenantA, "company-agent")
	f := h.startFlow(c, tenantA, "ana", h.browser())
	tok, err := h.exchange(f)
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.exchange(f)
	wantRetrieveError(t, err, http.StatusBadRequest, "invalid_grant")
	if strings.Contains(err.Error(), f.code) {
		t.Fatal("the error names the code")
	}
	// The grant issued from the code is revoked.
	if _, err := h.verify(tok.AccessToken); !errors.Is(err, accesstoken.ErrRevoked) {
		t.Fatalf("first access token after code reuse: %v", err)
	}
	wantOAuthError(t, h.refresh(c, tok.RefreshToken), http.StatusBadRequest, "invalid_grant")
	if g := h.grantOfClaims(t, tok.AccessToken); !g.Revoked || g.RevokedReason != oauthas.ReasonCodeReuse {
		t.Fatalf("grant %+v", g)
	}
	// A made-up code.
	f.code = "alpac_" + strings.Repeat("A", 43)
	_, err = h.exchange(f)
	wantRetrieveError(t, err, http.StatusBadRequest, "invalid_grant")
}

// TestCodeBinding: a code is bound to its client, redirect URI and
// resource; a mismatch fails without spending it.
func TestCodeBinding(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	c := h.publicClient(tenantA, "dcr-agent")
	other := h.publicClient(tenantA, "other-agent")
	f := h.startFlow(c, tenantA, "ana", h.browser())
	form := func(mut func(url.Values)) url.Values {
		v := url.Values{"grant_type": {"authorization_code"}, "code": {f.code}, "redirect_uri": {redirectURI},
			"code_verifier": {f.verifier}, "resource": {h.mcp}}
		if mut != nil {
			mut(v)
		}
		return v
	}
	wantOAuthError(t, h.post(tenantA, "/token", other, false, form(nil)), http.StatusBadRequest, "invalid_grant")
	wantOAuthError(t, h.post(tenantA, "/token", c, false, form(func(v url.Values) { v.Set("redirect_uri", otherRedirectURI) })),
		http.StatusBadRequest, "invalid_grant")
	wantOAuthError(t, h.post(tenantA, "/token", c, false, form(func(v url.Values) { v.Del("redirect_uri") })),
		http.StatusBadRequest, "invalid_request")
	wantOAuthError(t, h.post(tenantA, "/token", c, false, form(func(v url.Values) { v.Set("resource", "https://evil.example/") })),
		http.StatusBadRequest, "invalid_target")
	wantOAuthError(t, h.post(tenantA, "/token", c, false, form(func(v url.Values) { v["resource"] = []string{h.mcp, h.rest} })),
		http.StatusBadRequest, "invalid_target")
	wantOAuthError(t, h.post(tenantA, "/token", c, false, form(func(v url.Values) { v.Set("code", "abc") })),
		http.StatusBadRequest, "invalid_grant")
	wantOAuthError(t, h.post(tenantA, "/token", c, false, form(func(v url.Values) { v.Set("grant_type", "password") })),
		http.StatusBadRequest, "unsupported_grant_type")
	if tr := h.post(tenantA, "/token", c, false, form(nil)); tr.status != http.StatusOK {
		t.Fatalf("the right request after the refusals: %s", tr.body)
	}
}

// grantOfClaims reads the grant of a token without verifying it (it may be
// revoked).
func (h *rig) grantOfClaims(t *testing.T, token string) identitystore.Grant {
	t.Helper()
	parts := strings.Split(token, ".")
	var cl struct{ Tenant, Grant string }
	b, err := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil || len(parts) != 3 {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b.UnsafePayloadWithoutVerification(), &cl); err != nil {
		t.Fatal(err)
	}
	g, err := h.store.Grant(cl.Tenant, cl.Grant)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestCodeReuseRace: concurrent exchanges of one code, as from several
// replicas: at most one succeeds, and any grant it got is revoked because
// the code was reused.
func TestCodeReuseRace(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	c := h.publicClient(tenantA, "dcr-agent")
	for round := range 3 {
		f := h.startFlow(c, tenantA, "ana", h.browser())
		var wg sync.WaitGroup
		var mu sync.Mutex
		var ok []*oauth2.Token
		for range 8 {
			wg.Go(func() {
				tok, err := h.exchange(f)
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					ok = append(ok, tok)
					return
				}
				var re *oauth2.RetrieveError
				if !errors.As(err, &re) || re.ErrorCode != "invalid_grant" {
					t.Errorf("round %d: %v", round, err)
				}
			})
		}
		wg.Wait()
		if len(ok) > 1 {
			t.Fatalf("round %d: %d exchanges of one code succeeded", round, len(ok))
		}
		for _, tok := range ok {
			if _, err := h.verify(tok.AccessToken); !errors.Is(err, accesstoken.ErrRevoked) {
				t.Fatalf("round %d: the winner's token after reuse: %v", round, err)
			}
		}
	}
}

func TestCodeExpiry(t *testing.T) {
	t.Parallel()
	h := newRig(t, rigOptions{codeTTL: time.Second})
	c := h.publicClient(tenantA, "dcr-agent")
	f := h.startFlow(c, tenantA, "ana", h.browser())
	time.Sleep(1100 * time.Millisecond)
	_, err := h.exchange(f)
	wantRetrieveError(t, err, http.StatusBadRequest, "invalid_grant")
}

func TestResource(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	c := h.publicClient(tenantA, "dcr-agent")
	iss := h.issuer(tenantA)
	_, s256 := challenge()
	base := []string{"response_type", "code", "client_id", c.id, "redirect_uri", redirectURI, "state", "st",
		"code_challenge", s256, "code_challenge_method", "S256", "login_hint", "ana"}
	for name, extra := range map[string][]string{
		"missing": nil,
		"unknown": {"resource", "https://evil.example/mcp"},
		"two":     {"resource", h.mcp, "resource", h.rest},
		"empty":   {"resource", ""},
	} {
		t.Run(name, func(t *testing.T) {
			wantRedirectError(t, h.authError(h.browser(), h.authURL(tenantA, append(base, extra...)...)), "invalid_target", "st", iss)
		})
	}

	t.Run("token request for another resource", func(t *testing.T) {
		f := h.startFlow(c, tenantA, "ana", h.browser())
		_, err := h.exchange(f, oauth2.SetAuthURLParam("resource", h.rest))
		wantRetrieveError(t, err, http.StatusBadRequest, "invalid_target")
		// Without resource at the token request: the authorized one.
		f.resource = ""
		tok, err := f.cfg.Exchange(ctxT(t), f.code, oauth2.VerifierOption(f.verifier))
		if err != nil {
			t.Fatal(err)
		}
		recordSecret("access token", tok.AccessToken)
		recordSecret("refresh token", tok.RefreshToken)
		if cl, err := h.verify(tok.AccessToken); err != nil || cl.Audience != h.mcp {
			t.Fatalf("%+v, %v", cl, err)
		}
		wantOAuthError(t, h.refresh(c, tok.RefreshToken, "resource", h.rest), http.StatusBadRequest, "invalid_target")
		if tr := h.refresh(c, tok.RefreshToken, "resource", h.mcp); tr.status != http.StatusOK {
			t.Fatalf("refresh naming the resource: %s", tr.body)
		}
	})

	t.Run("audience", func(t *testing.T) {
		f := &flow{cfg: h.oauth2Config(c, tenantA), verifier: oauth2.GenerateVerifier(), state: "s2", resource: h.rest}
		q := h.authorize(h.browser(), f.cfg.AuthCodeURL(f.state, oauth2.S256ChallengeOption(f.verifier),
			oauth2.SetAuthURLParam("resource", h.rest), oauth2.SetAuthURLParam("login_hint", "ana")))
		f.code = q.Get("code")
		tok, err := h.exchange(f)
		if err != nil {
			t.Fatal(err)
		}
		if cl, err := h.verifier(h.rest).Verify(ctxT(t), tok.AccessToken); err != nil || cl.Audience != h.rest {
			t.Fatalf("%+v, %v", cl, err)
		}
		if _, err := h.verify(tok.AccessToken); !errors.Is(err, accesstoken.ErrWrongAudience) {
			t.Fatalf("a /v1 token at /mcp: %v", err)
		}
	})
}

// TestCrossTenant: a company client of tenant A is unknown at tenant B's
// authorization server, at every endpoint.
func TestCrossTenant(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	c := h.confidential(tenantA, "company-a")
	_, s256 := challenge()
	a := h.get(h.browser(), h.authURL(tenantB, "response_type", "code", "client_id", c.id, "redirect_uri", redirectURI,
		"resource", h.mcp, "code_challenge", s256, "code_challenge_method", "S256", "login_hint", "bo"))
	if a.status != http.StatusBadRequest || a.location != "" || !strings.Contains(a.body, "invalid_client") {
		t.Fatalf("A's client at B's authorize: %d %q %s", a.status, a.location, a.body)
	}
	f, tok := h.login(c, "ana")
	cb := c
	cb.tenant = tenantB
	wantOAuthError(t, h.post(tenantB, "/token", cb, true, url.Values{"grant_type": {"authorization_code"},
		"code": {f.code}, "redirect_uri": {redirectURI}, "code_verifier": {f.verifier}}), http.StatusUnauthorized, "invalid_client")
	wantOAuthError(t, h.refresh(cb, tok.RefreshToken), http.StatusUnauthorized, "invalid_client")
	// A's code exchanged at B's token endpoint by a B client of the same id.
	h.confidentialWithSecret(tenantB, c.id, c.secret)
	wantOAuthError(t, h.post(tenantB, "/token", cb, true, url.Values{"grant_type": {"authorization_code"},
		"code": {f.code}, "redirect_uri": {redirectURI}, "code_verifier": {f.verifier}}), http.StatusBadRequest, "invalid_grant")
	wantOAuthError(t, h.refresh(cb, tok.RefreshToken), http.StatusBadRequest, "invalid_grant")
	if _, err := h.verify(tok.AccessToken); err != nil {
		t.Fatalf("A's token after B's refusals: %v", err)
	}
}

func (h *rig) confidentialWithSecret(tenant, id, secret string) {
	h.t.Helper()
	if _, err := h.store.RegisterClient(ctxT(h.t), identitystore.ClientSpec{
		Tenant: tenant, ClientID: id, Kind: alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL,
		RedirectURIs: []string{redirectURI}, SecretSHA256: identitystore.HashSecret(secret), RegisteredBy: h.admin[tenant],
	}); err != nil {
		h.t.Fatal(err)
	}
}

// TestSessionOfAnotherTenant: a browser signed in to tenant B is sent to
// sign in to tenant A at A's authorization server.
func TestSessionOfAnotherTenant(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	cb := h.publicClient(tenantB, "b-agent")
	ca := h.publicClient(tenantA, "a-agent")
	browser := h.browser()
	fb := h.startFlow(cb, tenantB, "bo", browser)
	if _, err := h.exchange(fb); err != nil {
		t.Fatal(err)
	}
	_, s256 := challenge()
	u := h.authURL(tenantA, "response_type", "code", "client_id", ca.id, "redirect_uri", redirectURI, "state", "x",
		"resource", h.mcp, "code_challenge", s256, "code_challenge_method", "S256", "login_hint", "ana")
	noFollow := *browser
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	a := h.get(&noFollow, u)
	loc, err := url.Parse(a.location)
	if a.status != http.StatusFound || err != nil || loc.Path != signin.PathSignIn || loc.Query().Get("tenant") != tenantA ||
		!strings.HasPrefix(loc.Query().Get("return"), "/oauth/"+tenantA+"/authorize?") || loc.Query().Get("login_hint") != "ana" {
		t.Fatalf("want a redirect to sign in to A, got %d %q", a.status, a.location)
	}
	// Following it signs ana in and comes back with a code for A's person.
	fa := h.startFlow(ca, tenantA, "ana", browser)
	tok, err := h.exchange(fa)
	if err != nil {
		t.Fatal(err)
	}
	if cl, err := h.verify(tok.AccessToken); err != nil || cl.Tenant != tenantA {
		t.Fatalf("%+v, %v", cl, err)
	}
	// prompt=none without a session of the tenant: login_required.
	q := h.authError(h.browser(), u+"&prompt=none")
	wantRedirectError(t, q, "login_required", "x", h.issuer(tenantA))
}

func TestClientAuthentication(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	pub := h.publicClient(tenantA, "dcr-agent")
	conf := h.confidential(tenantA, "company-agent")

	// A public client presenting a secret.
	f := h.startFlow(pub, tenantA, "ana", h.browser())
	withSecret := pub
	withSecret.secret = "made-up-secret"
	form := func() url.Values {
		return url.Values{"grant_type": {"authorization_code"}, "code": {f.code}, "redirect_uri": {redirectURI}, "code_verifier": {f.verifier}}
	}
	wantOAuthError(t, h.post(tenantA, "/token", withSecret, false, form()), http.StatusUnauthorized, "invalid_client")
	wantOAuthError(t, h.post(tenantA, "/token", withSecret, true, form()), http.StatusUnauthorized, "invalid_client")

	// A confidential client without its secret, or with a wrong one.
	f = h.startFlow(conf, tenantA, "ana", h.browser())
	noSecret := conf
	noSecret.secret = ""
	wantOAuthError(t, h.post(tenantA, "/token", noSecret, false, form()), http.StatusUnauthorized, "invalid_client")
	wrong := conf
	wrong.secret = conf.secret + "x"
	wantOAuthError(t, h.post(tenantA, "/token", wrong, true, form()), http.StatusUnauthorized, "invalid_client")
	wantOAuthError(t, h.post(tenantA, "/token", wrong, false, form()), http.StatusUnauthorized, "invalid_client")
	// client_secret_post works too, and the failures above did not spend
	// the code.
	tr := h.post(tenantA, "/token", conf, false, form())
	if tr.status != http.StatusOK {
		t.Fatalf("client_secret_post: %s", tr.body)
	}
	if cl, err := h.verify(tr.AccessToken); err != nil || cl.Class != accesstoken.ClassCompany {
		t.Fatalf("%+v, %v", cl, err)
	}
	// Refresh needs the secret too.
	wantOAuthError(t, h.refresh(noSecret, tr.RefreshToken), http.StatusUnauthorized, "invalid_client")
	// An unknown client refreshing: invalid_client, not a server error.
	wantOAuthError(t, h.refresh(testClient{tenant: tenantA, id: "nobody"}, tr.RefreshToken), http.StatusUnauthorized, "invalid_client")
	// Another client's refresh token.
	wantOAuthError(t, h.refresh(pub, tr.RefreshToken), http.StatusBadRequest, "invalid_grant")
	if tr2 := h.refresh(conf, tr.RefreshToken); tr2.status != http.StatusOK {
		t.Fatalf("refresh after the refusals: %s", tr2.body)
	}
}

// TestRefreshReuse: presenting a spent refresh token revokes the grant; the
// newest refresh token and access token fail afterwards too.
func TestRefreshReuse(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	c := h.publicClient(tenantA, "dcr-agent")
	_, tok := h.login(c, "ana")
	tr := h.refresh(c, tok.RefreshToken)
	if tr.status != http.StatusOK {
		t.Fatal(tr.body)
	}
	reuse := h.refresh(c, tok.RefreshToken)
	wantOAuthError(t, reuse, http.StatusBadRequest, "invalid_grant")
	if strings.Contains(reuse.body, tok.RefreshToken) {
		t.Fatal("the error names the token")
	}
	wantOAuthError(t, h.refresh(c, tr.RefreshToken), http.StatusBadRequest, "invalid_grant")
	if _, err := h.verify(tr.AccessToken); !errors.Is(err, accesstoken.ErrRevoked) {
		t.Fatalf("newest access token: %v", err)
	}
	if g := h.grantOfClaims(t, tr.AccessToken); !g.Revoked || g.RevokedReason != identitystore.ReasonRefreshReuse {
		t.Fatalf("grant %+v", g)
	}
	// Malformed and unknown refresh tokens.
	wantOAuthError(t, h.refresh(c, "not-a-token"), http.StatusBadRequest, "invalid_grant")
	wantOAuthError(t, h.refresh(c, "alprt_"+strings.Repeat("x", 43)), http.StatusBadRequest, "invalid_grant")
}

func TestRecheck(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	c1 := h.publicClient(tenantA, "agent-1")
	c2 := h.confidential(tenantA, "agent-2")
	_, t1 := h.login(c1, "ana")
	_, t2 := h.login(c2, "ana")
	_, tcy := h.login(c1, "cy")

	// The IdP cannot be reached: temporarily_unavailable, nothing revoked.
	h.recheck.set(errors.New("idp unreachable"))
	wantOAuthError(t, h.refresh(c1, t1.RefreshToken), http.StatusServiceUnavailable, "temporarily_unavailable")
	if _, err := h.verify(t1.AccessToken); err != nil {
		t.Fatalf("after a transient failure: %v", err)
	}
	h.recheck.set(nil)
	tr := h.refresh(c1, t1.RefreshToken) // the same token: it was not rotated
	if tr.status != http.StatusOK {
		t.Fatalf("refresh once the IdP is back: %s", tr.body)
	}

	// The IdP says the person is disabled: every grant of the person is
	// revoked, nobody else's.
	h.recheck.set(fmt.Errorf("idp: %w", oauthas.ErrPersonDisabled))
	wantOAuthError(t, h.refresh(c1, tr.RefreshToken), http.StatusBadRequest, "invalid_grant")
	h.recheck.set(nil)
	wantOAuthError(t, h.refresh(c2, t2.RefreshToken), http.StatusBadRequest, "invalid_grant")
	for _, at := range []string{tr.AccessToken, t2.AccessToken} {
		if _, err := h.verify(at); !errors.Is(err, accesstoken.ErrRevoked) {
			t.Fatalf("the disabled person's token: %v", err)
		}
	}
	if _, err := h.verify(tcy.AccessToken); err != nil {
		t.Fatalf("another person's token: %v", err)
	}
	// signin's ErrIdPRefused counts as disabled.
	h.recheck.set(fmt.Errorf("refresh: %w", signin.ErrIdPRefused))
	wantOAuthError(t, h.refresh(c1, tcy.RefreshToken), http.StatusBadRequest, "invalid_grant")
	if _, err := h.verify(tcy.AccessToken); !errors.Is(err, accesstoken.ErrRevoked) {
		t.Fatalf("cy's token: %v", err)
	}
	// Signing the agent in again works (the revocation voids what was
	// issued until then). Access tokens carry whole seconds, and one
	// issued in the second of the revocation counts as issued before it,
	// so wait for the next second.
	h.recheck.set(nil)
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
	_, again := h.login(c1, "ana")
	if _, err := h.verify(again.AccessToken); err != nil {
		t.Fatalf("new grant after revocation: %v", err)
	}
	if tr := h.refresh(c1, again.RefreshToken); tr.status != http.StatusOK {
		t.Fatalf("refresh of the new grant: %s", tr.body)
	}
}

func TestNoRecheckConfigured(t *testing.T) {
	t.Parallel()
	h := newRig(t, rigOptions{noRecheck: true})
	c := h.publicClient(tenantA, "dcr-agent")
	_, tok := h.login(c, "ana")
	if tr := h.refresh(c, tok.RefreshToken); tr.status != http.StatusOK {
		t.Fatal(tr.body)
	}
	if h.recheck.calls != 0 {
		t.Fatal("re-check called")
	}
}

func TestRevocation(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	c := h.confidential(tenantA, "company-agent")
	other := h.publicClient(tenantA, "other-agent")
	revoke := func(by testClient, token string) {
		t.Helper()
		tr := h.post(tenantA, "/revoke", by, true, url.Values{"token": {token}})
		if tr.status != http.StatusOK {
			t.Fatalf("revoke: %d %s", tr.status, tr.body)
		}
	}

	// A refresh token.
	_, tok := h.login(c, "ana")
	revoke(c, tok.RefreshToken)
	wantOAuthError(t, h.refresh(c, tok.RefreshToken), http.StatusBadRequest, "invalid_grant")
	if _, err := h.verify(tok.AccessToken); !errors.Is(err, accesstoken.ErrRevoked) {
		t.Fatalf("after revoking the refresh token: %v", err)
	}
	// An access token.
	_, tok = h.login(c, "ana")
	revoke(c, tok.AccessToken)
	if _, err := h.verify(tok.AccessToken); !errors.Is(err, accesstoken.ErrRevoked) {
		t.Fatalf("after revoking the access token: %v", err)
	}
	wantOAuthError(t, h.refresh(c, tok.RefreshToken), http.StatusBadRequest, "invalid_grant")
	// Another client's tokens and garbage: 200, nothing revoked.
	_, tok = h.login(c, "ana")
	revoke(other, tok.RefreshToken)
	revoke(other, tok.AccessToken)
	revoke(c, "garbage")
	if _, err := h.verify(tok.AccessToken); err != nil {
		t.Fatalf("after another client's attempts: %v", err)
	}
	// The revocation endpoint authenticates confidential clients.
	noSecret := c
	noSecret.secret = ""
	wantOAuthError(t, h.post(tenantA, "/revoke", noSecret, false, url.Values{"token": {tok.RefreshToken}}),
		http.StatusUnauthorized, "invalid_client")
	if _, err := h.verify(tok.AccessToken); err != nil {
		t.Fatalf("after an unauthenticated attempt: %v", err)
	}
}

func TestResponseTypeAndScopes(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	c := h.publicClient(tenantA, "dcr-agent")
	iss := h.issuer(tenantA)
	v, s256 := challenge()
	base := func(rt string, extra ...string) string {
		return h.authURL(tenantA, append([]string{"response_type", rt, "client_id", c.id, "redirect_uri", redirectURI,
			"state", "st", "resource", h.mcp, "code_challenge", s256, "code_challenge_method", "S256", "login_hint", "ana"}, extra...)...)
	}
	for _, rt := range []string{"token", "id_token", "code id_token", "code token"} {
		wantRedirectError(t, h.authError(h.browser(), base(rt)), "unsupported_response_type", "st", iss)
	}
	wantRedirectError(t, h.authError(h.browser(), base("code", "response_mode", "fragment")), "invalid_request", "st", iss)
	wantRedirectError(t, h.authError(h.browser(), base("code", "scope", "alp.read openid")), "invalid_scope", "st", iss)
	wantRedirectError(t, h.authError(h.browser(), base("code", "request", "eyJ.x.y")), "request_not_supported", "st", iss)

	// No scope: the default scopes.
	q := h.authorize(h.browser(), base("code"))
	tr := h.post(tenantA, "/token", c, false, url.Values{"grant_type": {"authorization_code"}, "code": {q.Get("code")},
		"redirect_uri": {redirectURI}, "code_verifier": {v}})
	if tr.status != http.StatusOK || tr.Scope != "alp.read alp.send" {
		t.Fatalf("default scopes: %s", tr.body)
	}
	// A refresh may narrow the scopes, not widen them.
	narrow := h.refresh(c, tr.RefreshToken, "scope", "alp.read")
	if narrow.status != http.StatusOK || narrow.Scope != "alp.read" {
		t.Fatalf("narrowed refresh: %s", narrow.body)
	}
	if cl, err := h.verify(narrow.AccessToken); err != nil || !slices.Equal(cl.Scopes, []string{"alp.read"}) {
		t.Fatalf("%+v, %v", cl, err)
	}
	wantOAuthError(t, h.refresh(c, narrow.RefreshToken, "scope", "alp.admin"), http.StatusBadRequest, "invalid_scope")
}

func TestPrivateKeyJWT(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	jwks, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: pub, KeyID: "k1", Algorithm: "EdDSA", Use: "sig"}}})
	if _, err := h.store.RegisterClient(ctxT(t), identitystore.ClientSpec{
		Tenant: tenantA, ClientID: "jwt-agent", Kind: alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL,
		RedirectURIs: []string{redirectURI}, JWKS: jwks, RegisteredBy: h.admin[tenantA],
	}); err != nil {
		t.Fatal(err)
	}
	c := testClient{tenant: tenantA, id: "jwt-agent"}
	assertion := func(key ed25519.PrivateKey, mutate func(map[string]any)) string {
		claims := map[string]any{"iss": c.id, "sub": c.id, "aud": h.issuer(tenantA) + "/token",
			"iat": time.Now().Unix(), "exp": time.Now().Add(time.Minute).Unix(), "jti": rand.Text()}
		if mutate != nil {
			mutate(claims)
		}
		payload, _ := json.Marshal(claims)
		signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: key},
			(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
		if err != nil {
			t.Fatal(err)
		}
		jws, err := signer.Sign(payload)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := jws.CompactSerialize()
		return recordSecret("client assertion", s)
	}
	post := func(form url.Values, a string) tokenResponse {
		form.Set("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
		form.Set("client_assertion", a)
		return h.post(tenantA, "/token", testClient{tenant: tenantA}, false, form)
	}
	f := h.startFlow(c, tenantA, "ana", h.browser())
	codeForm := func() url.Values {
		return url.Values{"grant_type": {"authorization_code"}, "code": {f.code}, "redirect_uri": {redirectURI}, "code_verifier": {f.verifier}}
	}
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	wantOAuthError(t, post(codeForm(), assertion(otherKey, nil)), http.StatusUnauthorized, "invalid_client")
	wantOAuthError(t, post(codeForm(), assertion(priv, func(m map[string]any) { m["aud"] = "https://elsewhere.example" })),
		http.StatusUnauthorized, "invalid_client")
	wantOAuthError(t, post(codeForm(), assertion(priv, func(m map[string]any) { m["exp"] = time.Now().Add(-time.Hour).Unix() })),
		http.StatusUnauthorized, "invalid_client")
	wantOAuthError(t, post(codeForm(), assertion(priv, func(m map[string]any) { m["exp"] = time.Now().Add(time.Hour).Unix() })),
		http.StatusUnauthorized, "invalid_client")
	wantOAuthError(t, post(codeForm(), assertion(priv, func(m map[string]any) { m["sub"] = "someone-else" })),
		http.StatusUnauthorized, "invalid_client")
	good := assertion(priv, nil)
	tr := post(codeForm(), good)
	if tr.status != http.StatusOK {
		t.Fatalf("private_key_jwt exchange: %s", tr.body)
	}
	if cl, err := h.verify(tr.AccessToken); err != nil || cl.Class != accesstoken.ClassCompany || cl.ClientID != c.id {
		t.Fatalf("%+v, %v", cl, err)
	}
	// A replayed assertion is refused; a fresh one refreshes.
	refreshForm := func() url.Values {
		return url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tr.RefreshToken}}
	}
	wantOAuthError(t, post(refreshForm(), good), http.StatusUnauthorized, "invalid_client")
	if tr2 := post(refreshForm(), assertion(priv, nil)); tr2.status != http.StatusOK {
		t.Fatalf("refresh with a new assertion: %s", tr2.body)
	}
	// A secret-less confidential client cannot use a secret.
	wantOAuthError(t, h.refresh(testClient{tenant: tenantA, id: c.id, secret: "guess"}, tr.RefreshToken),
		http.StatusUnauthorized, "invalid_client")
}

func TestMetadata(t *testing.T) {
	t.Parallel()
	h := newRig(t)
	c := &http.Client{Timeout: 10 * time.Second}
	getJSON := func(path string, into any) {
		t.Helper()
		a := h.get(c, h.public+path)
		if a.status != http.StatusOK || !strings.HasPrefix(a.header.Get("Content-Type"), "application/json") {
			t.Fatalf("GET %s: %d %s", path, a.status, a.body)
		}
		if err := json.Unmarshal([]byte(a.body), into); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	for _, tn := range []string{tenantA, tenantB} {
		iss := h.issuer(tn)
		var md map[string]any
		getJSON("/.well-known/oauth-authorization-server/oauth/"+tn, &md)
		want := map[string]any{
			"issuer": iss, "authorization_endpoint": iss + "/authorize", "token_endpoint": iss + "/token",
			"revocation_endpoint": iss + "/revoke", "jwks_uri": iss + "/jwks",
			"registration_endpoint":                          h.public + "/oauth/" + tn + "/register",
			"response_types_supported":                       []any{"code"},
			"grant_types_supported":                          []any{"authorization_code", "refresh_token"},
			"code_challenge_methods_supported":               []any{"S256"},
			"scopes_supported":                               []any{scopeRead, scopeSend},
			"token_endpoint_auth_methods_supported":          []any{"none", "client_secret_basic", "client_secret_post", "private_key_jwt"},
			"authorization_response_iss_parameter_supported": true,
			"client_id_metadata_document_supported":          true,
		}
		for k, v := range want {
			if got, _ := json.Marshal(md[k]); string(got) != mustJSON(v) {
				t.Errorf("%s: %s = %s, want %s", tn, k, got, mustJSON(v))
			}
		}
		// The OpenID Connect discovery location serves the same document.
		var oidcForm map[string]any
		getJSON("/oauth/"+tn+"/.well-known/openid-configuration", &oidcForm)
		if mustJSON(oidcForm) != mustJSON(md) {
			t.Errorf("%s: discovery forms differ", tn)
		}
		// JWKS: the tenant's key.
		var set jose.JSONWebKeySet
		getJSON("/oauth/"+tn+"/jwks", &set)
		active, _ := h.keys.Active(ctxT(t), tn, accesstoken.Purpose)
		if len(set.Keys) != 1 || set.Keys[0].KeyID != active.KeyID || set.Keys[0].Algorithm != "EdDSA" || !set.Keys[0].IsPublic() {
			t.Fatalf("%s: jwks %+v", tn, set)
		}
	}
	// Rotation: the retired key stays listed; a revoked one goes.
	old, _ := h.keys.Active(ctxT(t), tenantA, accesstoken.Purpose)
	cur, err := h.keys.Rotate(ctxT(t), tenantA, accesstoken.Purpose)
	if err != nil {
		t.Fatal(err)
	}
	var set jose.JSONWebKeySet
	getJSON("/oauth/"+tenantA+"/jwks", &set)
	if len(set.Keys) != 2 {
		t.Fatalf("after rotation %d keys", len(set.Keys))
	}
	if err := h.keys.Revoke(ctxT(t), tenantA, accesstoken.Purpose, old.KeyID, time.Time{}); err != nil {
		t.Fatal(err)
	}
	getJSON("/oauth/"+tenantA+"/jwks", &set)
	if len(set.Keys) != 1 || set.Keys[0].KeyID != cur.KeyID {
		t.Fatalf("after revocation %+v", set.Keys)
	}

	// RFC 9728: the root document is the main resource's; each resource
	// with a path has its own.
	for path, res := range map[string]string{"": h.mcp, "/mcp": h.mcp, "/v1": h.rest} {
		var prm oauthas.ResourceMetadata
		getJSON("/.well-known/oauth-protected-resource"+path, &prm)
		if prm.Resource != res || !slices.Equal(prm.AuthorizationServers, []string{h.issuer(tenantA), h.issuer(tenantB)}) ||
			!slices.Equal(prm.ScopesSupported, []string{scopeRead, scopeSend}) || !slices.Equal(prm.BearerMethodsSupported, []string{"header"}) {
			t.Errorf("%q: %+v", path, prm)
		}
	}
	if got := h.as.ResourceMetadataURL(h.rest); got != h.public+"/.well-known/oauth-protected-resource/v1" {
		t.Errorf("ResourceMetadataURL = %q", got)
	}
	if got := h.as.ResourceMetadataURL(h.mcp); got != h.public+"/.well-known/oauth-protected-resource/mcp" {
		t.Errorf("ResourceMetadataURL = %q", got)
	}
	if got := h.as.ResourceMetadataURL("https://elsewhere.example/mcp"); got != "" {
		t.Errorf("ResourceMetadataURL of another resource = %q", got)
	}
	// The token and revocation endpoints take POST with a body only.
	if a := h.get(c, h.issuer(tenantA)+"/token?grant_type=refresh_token&refresh_token=x&client_id=y"); a.status != http.StatusMethodNotAllowed {
		t.Errorf("GET /token: %d %s", a.status, a.body)
	}
	resp0, err := c.Post(h.issuer(tenantA)+"/revoke?token=x&client_id=y", "application/x-www-form-urlencoded", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp0.Body.Close()
	if resp0.StatusCode != http.StatusBadRequest {
		t.Errorf("POST /revoke with a query: %d", resp0.StatusCode)
	}
	// Dynamic registration is mounted per tenant.
	resp, err := c.Post(h.issuer(tenantB)+"/register", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || string(body) != "registration stub of "+tenantB {
		t.Errorf("register: %d %s", resp.StatusCode, body)
	}
	// Not hosted.
	if a := h.get(c, h.public+"/.well-known/oauth-authorization-server/oauth/c.example"); a.status != http.StatusNotFound {
		t.Errorf("unknown tenant metadata: %d", a.status)
	}
	if a := h.get(c, h.public+"/oauth/c.example/authorize"); a.status != http.StatusNotFound {
		t.Errorf("unknown tenant authorize: %d", a.status)
	}
	// Unsupported endpoints.
	for _, p := range []string{"/userinfo", "/introspect", "/end_session"} {
		if a := h.get(c, h.issuer(tenantA)+p); a.status != http.StatusNotFound {
			t.Errorf("%s: %d", p, a.status)
		}
	}
	tr := h.post(tenantA, "/token", h.publicClient(tenantA, "cc-agent"), false, url.Values{"grant_type": {"client_credentials"}})
	if tr.status != http.StatusBadRequest || (tr.Error != "unsupported_grant_type" && tr.Error != "unauthorized_client") {
		t.Errorf("client_credentials: %d %s", tr.status, tr.body)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestConfig(t *testing.T) {
	t.Parallel()
	good := oauthas.Config{ConsentKey: testConsentKey, PublicURL: "https://broker.example", Tenants: []string{"a.example"},
		Resource: "https://broker.example/mcp", Scopes: []string{"alp.read"}}
	for name, mut := range map[string]func(*oauthas.Config){
		"no public url":  func(c *oauthas.Config) { c.PublicURL = "" },
		"path":           func(c *oauthas.Config) { c.PublicURL = "https://broker.example/x" },
		"plain http":     func(c *oauthas.Config) { c.PublicURL = "http://broker.example" },
		"no tenants":     func(c *oauthas.Config) { c.Tenants = nil },
		"bad tenant":     func(c *oauthas.Config) { c.Tenants = []string{"A.example"} },
		"no resource":    func(c *oauthas.Config) { c.Resource = "" },
		"resource frag":  func(c *oauthas.Config) { c.Resource = "https://broker.example/mcp#x" },
		"no scopes":      func(c *oauthas.Config) { c.Scopes = nil },
		"bad scope":      func(c *oauthas.Config) { c.Scopes = []string{"a b"} },
		"default not in": func(c *oauthas.Config) { c.DefaultScopes = []string{"x"} },
		"long tokens":    func(c *oauthas.Config) { c.AccessTokenTTL = 11 * time.Minute },
		"long codes":     func(c *oauthas.Config) { c.CodeTTL = time.Hour },
	} {
		cfg := good
		mut(&cfg)
		if _, err := oauthas.New(cfg, oauthas.Deps{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := oauthas.New(good, oauthas.Deps{}); err == nil || !strings.Contains(err.Error(), "Deps") {
		t.Errorf("missing deps: %v", err)
	}
}
