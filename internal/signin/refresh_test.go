package signin_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/testidp"
)

// signedInGrant signs dave in and returns the grant the keeper got.
func signedInGrant(t *testing.T, h *rig) signin.IdPGrant {
	t.Helper()
	if res, _ := h.signIn(h.browser(), mainTenant, "dave", ""); res.status != http.StatusSeeOther {
		t.Fatalf("sign-in: %d %s", res.status, res.body)
	}
	calls := h.keeper.all()
	if len(calls) == 0 {
		t.Fatal("no grant kept")
	}
	return calls[len(calls)-1].Grant
}

// TestRefreshedIDTokenMayRepeatTheSignInNonce: an IdP that puts the
// sign-in's nonce into refreshed ID tokens (Dex; OIDC Core §12.2 allows it)
// is re-checked fine, and each rotated refresh token is the one used next.
func TestRefreshedIDTokenMayRepeatTheSignInNonce(t *testing.T) {
	h := newRig(t, rigOptions{mainIdP: func(c *testidp.Config) { c.NonceInRefreshedIDToken = true }})
	grant := signedInGrant(t, h)
	if grant.Nonce == "" || grant.Subject != "sub-dave" {
		t.Fatalf("the kept grant lacks the sign-in's nonce or subject: nonce %t, subject %q", grant.Nonce != "", grant.Subject)
	}
	ctx := context.Background()
	for i := range 3 {
		next, err := h.svc.Refresh(ctx, mainTenant, grant)
		if err != nil {
			t.Fatalf("refresh %d: %v", i, err)
		}
		if next.RefreshToken == grant.RefreshToken || next.Nonce != grant.Nonce || next.Subject != grant.Subject {
			t.Fatalf("refresh %d: not rotated, or nonce/subject changed", i)
		}
		grant = next
	}
}

// TestRefreshKeepsTheRotatedTokenWhenTheIDTokenFails: the IdP rotates the
// refresh token but its new ID token carries a foreign nonce. The re-check
// fails, yet Refresh hands back the rotated token, which is the live one:
// the presented one is spent.
func TestRefreshKeepsTheRotatedTokenWhenTheIDTokenFails(t *testing.T) {
	h := newRig(t, rigOptions{})
	grant := signedInGrant(t, h)
	ctx := context.Background()

	h.idp.SetRefreshedIDTokenNonce("forged-nonce")
	next, err := h.svc.Refresh(ctx, mainTenant, grant)
	if !errors.Is(err, signin.ErrIDTokenRejected) {
		t.Fatalf("foreign nonce: %v, want ErrIDTokenRejected", err)
	}
	if errors.Is(err, signin.ErrIdPRefused) {
		t.Fatal("a bad ID token is not the IdP refusing the person")
	}
	if next.RefreshToken == "" || next.RefreshToken == grant.RefreshToken {
		t.Fatal("the rotated refresh token was not handed back")
	}
	h.idp.SetRefreshedIDTokenNonce("")
	if _, err := h.svc.Refresh(ctx, mainTenant, next); err != nil {
		t.Fatalf("the rotated token is not the live one: %v", err)
	}
}

// TestRefreshedIDTokenChecks: a refreshed ID token with another nonce than
// the sign-in's, or another subject, is rejected.
func TestRefreshedIDTokenChecks(t *testing.T) {
	h := newRig(t, rigOptions{mainIdP: func(c *testidp.Config) { c.NonceInRefreshedIDToken = true }})
	grant := signedInGrant(t, h)
	ctx := context.Background()
	other := grant
	other.Nonce = "another-sign-in"
	next, err := h.svc.Refresh(ctx, mainTenant, other)
	if !errors.Is(err, signin.ErrIDTokenRejected) || !strings.Contains(err.Error(), "nonce") {
		t.Fatalf("nonce of another sign-in: %v", err)
	}
	next.Nonce, next.Subject = grant.Nonce, "sub-somebody-else"
	if _, err := h.svc.Refresh(ctx, mainTenant, next); !errors.Is(err, signin.ErrIDTokenRejected) || !strings.Contains(err.Error(), "subject") {
		t.Fatalf("subject of somebody else: %v", err)
	}
}

// TestDeadRefreshTokenAnsweredInvalidRequest: Dex answers a dead refresh
// token with invalid_request, not invalid_grant; it still means "sign in
// again", not "the IdP is unavailable".
func TestDeadRefreshTokenAnsweredInvalidRequest(t *testing.T) {
	h := newRig(t, rigOptions{mainIdP: func(c *testidp.Config) { c.DeadRefreshTokenError = "invalid_request" }})
	grant := signedInGrant(t, h)
	ctx := context.Background()
	next, err := h.svc.Refresh(ctx, mainTenant, grant)
	if err != nil {
		t.Fatalf("live token: %v", err)
	}
	if err := h.idp.DisableUser("sub-dave"); err != nil {
		t.Fatal(err)
	}
	_, err = h.svc.Refresh(ctx, mainTenant, next)
	var re *signin.RefreshError
	if !errors.Is(err, signin.ErrIdPRefused) || !errors.As(err, &re) || re.Code != "invalid_request" || re.Transient() {
		t.Fatalf("dead token answered invalid_request: %v, want ErrIdPRefused with code invalid_request", err)
	}
}

// TestExtraScopesReachTheIdP: a tenant's extra scopes are asked for, so an
// IdP that sends the groups claim only for the "groups" scope (Dex, Okta)
// sends it, and the groups become the person's roles.
func TestExtraScopesReachTheIdP(t *testing.T) {
	h := newRig(t, rigOptions{
		mainIdP: func(c *testidp.Config) { c.RolesClaim, c.RolesScope = "groups", "groups" },
		mainTenant: func(ti *signin.TenantIdP) {
			ti.RolesClaim = "groups"
			ti.Scopes = []string{"groups"}
		},
	})
	a := get(t, h.noRedirect(), h.public+"/signin?tenant=example.org&login_hint=alice%40example.org")
	au, err := url.Parse(a.location)
	if err != nil || a.status != http.StatusFound {
		t.Fatalf("/signin: %d %s", a.status, a.body)
	}
	if got := au.Query().Get("scope"); got != "openid profile email offline_access groups" {
		t.Fatalf("scope %q", got)
	}
	if res, _ := h.signIn(h.browser(), mainTenant, "alice@example.org", ""); res.status != http.StatusSeeOther {
		t.Fatalf("sign-in: %d %s", res.status, res.body)
	}
	binds := h.binder.all()
	if len(binds) != 1 || !slices.Equal(binds[0].Roles, []string{"approver", "admin"}) {
		t.Fatalf("roles from the groups claim: %+v", binds)
	}
	// The refresh keeps the sign-in's scopes (none are sent).
	calls := h.keeper.all()
	if _, err := h.svc.Refresh(context.Background(), mainTenant, calls[len(calls)-1].Grant); err != nil {
		t.Fatalf("refresh: %v", err)
	}
}
