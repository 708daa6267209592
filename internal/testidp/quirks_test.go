package testidp_test

import (
	"net/http"
	"slices"
	"testing"

	"golang.org/x/oauth2"

	"github.com/alpd-project/alpd/internal/testidp"
)

// TestNonceInRefreshedIDToken: by default a refreshed ID token has no nonce
// (zitadel/oidc); with the switch it repeats the sign-in's, as Dex does, and
// SetRefreshedIDTokenNonce forges one.
func TestNonceInRefreshedIDToken(t *testing.T) {
	for _, dex := range []bool{false, true} {
		idp := startConfigured(t, func(c *testidp.Config) { c.NonceInRefreshedIDToken = dex })
		conf := webConfig(idp)
		q := authorizeCode(t, browser(t, webRedirect), conf, alice)
		tok, err := conf.Exchange(ctxWithClient(t), q.Get("code"), oauth2.VerifierOption(q.Get("verifier")))
		if err != nil {
			t.Fatal(err)
		}
		checkIDToken(t, idp, "web", tok, q.Get("nonce"))
		next, err := refresh(t, conf, tok.RefreshToken)
		if err != nil {
			t.Fatal(err)
		}
		want := ""
		if dex {
			want = q.Get("nonce")
		}
		checkIDToken(t, idp, "web", next, want)
		// The nonce stays with the token family.
		next, err = refresh(t, conf, next.RefreshToken)
		if err != nil {
			t.Fatal(err)
		}
		checkIDToken(t, idp, "web", next, want)

		idp.SetRefreshedIDTokenNonce("forged")
		forged, err := refresh(t, conf, next.RefreshToken)
		if err != nil {
			t.Fatal(err)
		}
		checkIDToken(t, idp, "web", forged, "forged")
		if forged.RefreshToken == next.RefreshToken {
			t.Fatal("not rotated")
		}
	}
}

// TestDeadRefreshTokenError: the error code for a dead refresh token can be
// Dex's invalid_request instead of invalid_grant; other errors and the code
// exchange are untouched.
func TestDeadRefreshTokenError(t *testing.T) {
	idp := startConfigured(t, func(c *testidp.Config) { c.DeadRefreshTokenError = "invalid_request" })
	conf := webConfig(idp)
	rt := login(t, idp, browser(t, webRedirect), conf, alice).token.RefreshToken
	next, err := refresh(t, conf, rt)
	if err != nil {
		t.Fatalf("live token: %v", err)
	}
	_, err = refresh(t, conf, "no-such-token")
	wantOAuthError(t, err, "invalid_request", http.StatusBadRequest)
	if err := idp.DisableUser("sub-alice"); err != nil {
		t.Fatal(err)
	}
	_, err = refresh(t, conf, next.RefreshToken)
	wantOAuthError(t, err, "invalid_request", http.StatusBadRequest)
	_, err = conf.Exchange(ctxWithClient(t), "no-such-code")
	wantOAuthError(t, err, "invalid_grant", http.StatusBadRequest)
}

// TestRolesScope: with RolesScope the roles claim comes only when that
// scope is asked for, like the groups claim of Dex and Okta.
func TestRolesScope(t *testing.T) {
	idp := startConfigured(t, func(c *testidp.Config) { c.RolesClaim, c.RolesScope = "groups", "groups" })
	conf := webConfig(idp)
	if res := login(t, idp, browser(t, webRedirect), conf, alice); res.raw["groups"] != nil {
		t.Fatalf("groups without the groups scope: %v", res.raw["groups"])
	}
	conf.Scopes = append(conf.Scopes, "groups")
	res := login(t, idp, browser(t, webRedirect), conf, alice)
	got, _ := res.raw["groups"].([]any)
	if len(got) != 2 || got[0] != "approver" || got[1] != "admin" {
		t.Fatalf("groups %v", res.raw["groups"])
	}
	next, err := refresh(t, conf, res.token.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	if raw := jwtPayload(t, next.Extra("id_token").(string)); raw["groups"] == nil {
		t.Fatal("groups lost on refresh")
	}
	var disc struct {
		Scopes []string `json:"scopes_supported"`
	}
	getJSON(t, idp.DiscoveryURL(), &disc)
	if !slices.Contains(disc.Scopes, "groups") {
		t.Fatalf("scopes_supported %v", disc.Scopes)
	}
}
