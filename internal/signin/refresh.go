package signin

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"

	"github.com/zitadel/oidc/v3/pkg/client/rp"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"golang.org/x/oauth2"
)

// IdPGrant is what alpd keeps of a person's sign-in to re-check them later
// with their IdP. The RefreshKeeper stores all of it sealed.
type IdPGrant struct {
	// RefreshToken is the IdP's refresh token (offline_access).
	RefreshToken string
	// Nonce is the nonce of the sign-in that obtained the grant. A
	// refreshed ID token carries no nonce or exactly this one (OIDC Core
	// §12.2; Dex, for one, repeats it). Empty for grants kept before alpd
	// remembered it: the first refreshed ID token's nonce is then adopted.
	Nonce string
	// Subject is the sign-in's ID token subject; a refreshed ID token must
	// name the same one (OIDC Core §12.2). Empty like Nonce for old grants.
	Subject string
}

// ErrIdPRefused is wrapped when the IdP refuses a person's refresh token
// with an OAuth error that is not transient (invalid_grant, but also
// invalid_request, invalid_client, unauthorized_client, invalid_scope …):
// the token is dead, whatever the IdP calls it, and only a new sign-in
// gets another. The person was disabled there, their consent revoked, or
// alpd's client changed; either way they must sign in again.
var ErrIdPRefused = errors.New("signin: the IdP refused the refresh token")

// ErrIdPUnavailable is wrapped when the IdP could not answer (network,
// 5xx, 429, temporarily_unavailable, server_error, or an answer that is no
// OAuth error): a caller may tolerate it for a grace period, then must
// fail closed.
var ErrIdPUnavailable = errors.New("signin: the IdP is unavailable")

// ErrIDTokenRejected is wrapped when the IdP refreshed the grant but the ID
// token it returned failed its checks (signature, issuer, audience,
// expiry, nonce, subject, tenant id). The IdP did not vouch for the person
// then, but it did rotate the refresh token: the grant Refresh returns with
// this error must be kept all the same, or the next refresh presents a
// spent token.
var ErrIDTokenRejected = errors.New("signin: the IdP's refreshed ID token failed its checks")

// RefreshError is the error of a refresh the IdP's token endpoint answered
// with an error or that could not reach it. It wraps ErrIdPRefused or
// ErrIdPUnavailable. It never carries a token.
type RefreshError struct {
	Tenant string
	// Status is the token endpoint's HTTP status, 0 when it did not answer.
	Status int
	// Code is the OAuth error code the IdP answered ("" when none).
	Code string
	// Description is the IdP's error_description, sanitized and cut.
	Description string
	kind        error
	cause       error
}

func (e *RefreshError) Error() string {
	msg := fmt.Sprintf("%v (tenant %s", e.kind, e.Tenant)
	if e.Status != 0 {
		msg += fmt.Sprintf(", HTTP %d", e.Status)
	}
	if e.Code != "" {
		msg += ", " + e.Code
	}
	if e.Description != "" {
		msg += ": " + e.Description
	}
	msg += ")"
	if e.cause != nil {
		msg += ": " + e.cause.Error()
	}
	return msg
}

func (e *RefreshError) Unwrap() error { return e.kind }

// Transient reports whether the failure may go away by itself (the caller
// tolerates it within its grace period), as opposed to a refused token.
func (e *RefreshError) Transient() bool { return e.kind == ErrIdPUnavailable }

// transientOAuthErrors are the OAuth error codes (RFC 6749 §5.2 and §4.1.2.1)
// that say "ask again later" rather than "this token is dead".
var transientOAuthErrors = map[string]bool{"temporarily_unavailable": true, "server_error": true}

// classifyRefreshError maps a failed refresh request to ErrIdPUnavailable
// or ErrIdPRefused:
//   - transient: no answer (network, timeout), 5xx, 429, or the OAuth
//     errors temporarily_unavailable and server_error, or a 4xx without an
//     OAuth error code (a proxy's or a misrouted answer, not the IdP's word);
//   - refused: every other OAuth error code. RFC 6749 §5.2 says a dead
//     refresh token is invalid_grant, but IdPs differ (Dex answers
//     invalid_request), and waiting out a grace period for a token the IdP
//     will never accept would keep a revoked person working.
func classifyRefreshError(tenant string, err error) *RefreshError {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		// Never the token: the oauth2 and net errors name only URLs.
		return &RefreshError{Tenant: tenant, kind: ErrIdPUnavailable, cause: err}
	}
	e := &RefreshError{Tenant: tenant, Code: sanitize(re.ErrorCode, 64), Description: sanitize(re.ErrorDescription, 200), kind: ErrIdPRefused}
	if re.Response != nil {
		e.Status = re.Response.StatusCode
	}
	if e.Status >= 500 || e.Status == http.StatusTooManyRequests || transientOAuthErrors[e.Code] || e.Code == "" {
		e.kind = ErrIdPUnavailable
	}
	return e
}

// Refresh re-checks a person with their organization's IdP by using their
// grant's refresh token, and returns the grant to keep: the IdP's rotated
// refresh token (the old one when the IdP does not rotate) with the
// sign-in's nonce and subject. A refreshed ID token, when the IdP sends
// one, is checked like the sign-in's (signature, issuer, audience, expiry,
// tenant id) and must carry the same subject and no nonce or the
// sign-in's.
//
// On error the returned grant is the one to keep: the rotated one with
// ErrIDTokenRejected, the presented one otherwise. Errors from the token
// endpoint are a *RefreshError.
func (s *Service) Refresh(ctx context.Context, tenant string, grant IdPGrant) (IdPGrant, error) {
	t, ok := s.tenants[tenant]
	if !ok {
		return grant, fmt.Errorf("signin: no IdP for tenant %q", tenant)
	}
	if grant.RefreshToken == "" {
		return grant, &RefreshError{Tenant: tenant, kind: ErrIdPRefused, cause: errors.New("no refresh token is kept")}
	}
	// golang.org/x/oauth2 rather than rp.RefreshTokens: the latter drops the
	// whole response, rotated refresh token included, when the ID token
	// fails verification, and it keeps no HTTP status to classify errors by.
	// The request carries no scope: the IdP keeps the sign-in's (RFC 6749 §6).
	ctx = context.WithValue(ctx, oauth2.HTTPClient, t.rp.HttpClient())
	tok, err := t.rp.OAuthConfig().TokenSource(ctx, &oauth2.Token{RefreshToken: grant.RefreshToken}).Token()
	if err != nil {
		return grant, classifyRefreshError(tenant, err)
	}
	next := grant
	if tok.RefreshToken != "" {
		next.RefreshToken = tok.RefreshToken
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		// OIDC Core §12.2: a refresh response might not contain an ID token.
		return next, nil
	}
	claims, err := t.checkRefreshedIDToken(ctx, tok.AccessToken, raw, grant)
	if err != nil {
		return next, fmt.Errorf("%w (tenant %s): %v", ErrIDTokenRejected, tenant, err)
	}
	if next.Nonce == "" {
		next.Nonce = claims.Nonce
	}
	if next.Subject == "" {
		next.Subject = claims.Subject
	}
	return next, nil
}

// checkRefreshedIDToken verifies an ID token from a refresh response
// against the grant's sign-in (OIDC Core §12.2).
func (t *tenant) checkRefreshedIDToken(ctx context.Context, accessToken, raw string, grant IdPGrant) (*oidc.IDTokenClaims, error) {
	// The sign-in's verifier expects exactly the sign-in cookie's nonce; a
	// refreshed token may instead omit it, so the nonce is checked below.
	v := *t.rp.IDTokenVerifier()
	v.Nonce = nil
	claims, err := rp.VerifyTokens[*oidc.IDTokenClaims](ctx, accessToken, raw, &v)
	if err != nil {
		return nil, err
	}
	if claims.Nonce != "" && grant.Nonce != "" && subtle.ConstantTimeCompare([]byte(claims.Nonce), []byte(grant.Nonce)) != 1 {
		return nil, errors.New("nonce differs from the sign-in's")
	}
	if grant.Subject != "" && claims.Subject != grant.Subject {
		return nil, errors.New("subject differs from the sign-in's")
	}
	if t.TenantID != "" {
		if tid, _ := claims.Claims["tid"].(string); tid != t.TenantID {
			return nil, errors.New("tenant id (tid) is not the tenant's")
		}
	}
	return claims, nil
}

// Issuer returns the pinned issuer of tenant's IdP, "" for a tenant
// without one.
func (s *Service) Issuer(tenant string) string {
	if t, ok := s.tenants[tenant]; ok {
		return t.Issuer
	}
	return ""
}
