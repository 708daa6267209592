package oauthas

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/identitystore"
)

// VerifyAuthRequest finds the client and checks the redirect URI, exactly
// against the client's registered list. Its errors are answered with an
// error page, never a redirect (RFC 6749 §4.1.2.1): they are about the
// client or the redirect URI themselves. Everything else is checked in
// Authorize, after op has validated the redirect URI, so its failures go
// back to the client.
func (t *tenantAS) VerifyAuthRequest(ctx context.Context, r *op.Request[oidc.AuthRequest]) (*op.ClientRequest[oidc.AuthRequest], error) {
	d := r.Data
	if d.ClientID == "" {
		return nil, oidc.ErrInvalidRequestRedirectURI().WithDescription("client_id is missing")
	}
	c, err := t.lookupClient(ctx, d.ClientID)
	switch {
	case errors.Is(err, errClientUnavailable):
		return nil, op.NewStatusError(temporarilyUnavailable(err.Error()), http.StatusServiceUnavailable)
	case err != nil:
		e := oidc.ErrInvalidRequestRedirectURI().WithDescription("%s", err.Error())
		e.ErrorType = oidc.InvalidClient
		return nil, e
	}
	if d.RedirectURI == "" {
		return nil, oidc.ErrInvalidRequestRedirectURI().WithDescription("redirect_uri is missing")
	}
	if !slices.Contains(c.RedirectURIs, d.RedirectURI) {
		return nil, oidc.ErrInvalidRequestRedirectURI().WithDescription("redirect_uri is not registered for this client")
	}
	cl := &opClient{c: c, reqResponseType: d.ResponseType, reqResponseMode: d.ResponseMode}
	// Error redirects go in the query (Authorize refuses other modes).
	d.ResponseMode = ""
	if len(d.Scopes) == 0 {
		d.Scopes = slices.Clone(t.s.cfg.DefaultScopes)
	}
	return &op.ClientRequest[oidc.AuthRequest]{Request: r, Client: cl}, nil
}

// Authorize checks the rest of the request (response type, PKCE S256,
// resource, scopes) — failures go to the redirect URI with state and iss —
// then needs a signed-in person of this tenant (otherwise it sends the
// browser to sign in and come back), and answers a one-time authorization
// code.
func (t *tenantAS) Authorize(ctx context.Context, cr *op.ClientRequest[oidc.AuthRequest]) (*op.Redirect, error) {
	d := cr.Data
	cl, ok := cr.Client.(*opClient)
	if !ok {
		return nil, oidc.ErrServerError().WithDescription("internal error")
	}
	if d.RequestParam != "" {
		return nil, oidc.ErrRequestNotSupported().WithDescription("request objects are not supported")
	}
	if cl.reqResponseType != oidc.ResponseTypeCode {
		return nil, unsupportedResponseType("only response_type=code is supported")
	}
	if m := cl.reqResponseMode; m != "" && m != oidc.ResponseModeQuery {
		return nil, oidc.ErrInvalidRequest().WithDescription("only response_mode=query is supported")
	}
	if d.CodeChallenge == "" {
		return nil, oidc.ErrInvalidRequest().WithDescription("PKCE is required: send code_challenge with code_challenge_method=S256")
	}
	if d.CodeChallengeMethod != oidc.CodeChallengeMethodS256 {
		return nil, oidc.ErrInvalidRequest().WithDescription("only code_challenge_method=S256 is supported")
	}
	if !wellFormed(d.CodeChallenge, "") {
		return nil, oidc.ErrInvalidRequest().WithDescription("code_challenge must be the unpadded base64url SHA-256 of the code verifier")
	}
	resource, rerr := t.requestedResource(cr.Form, true)
	if rerr != nil {
		return nil, rerr
	}
	scopes, serr := t.checkScopes(d.Scopes)
	if serr != nil {
		return nil, serr
	}

	sess, err := t.s.deps.Sessions.Session(&http.Request{Method: cr.Method, URL: cr.URL, Header: cr.Header})
	if err != nil || sess == nil || sess.Tenant != t.tenant || sess.PersonID == "" {
		if slices.Contains(d.Prompt, oidc.PromptNone) {
			return nil, oidc.ErrLoginRequired().WithDescription("the person is not signed in")
		}
		return t.signInRedirect(cr), nil
	}

	now := t.s.now()
	if needsConsent(cl.c) {
		id, problem := t.s.checkConsent(t.tenant, sess, cr.Form)
		switch problem {
		case consentMissing, consentExpired:
			form := url.Values{}
			for k, v := range cr.Form {
				if k != consentParam {
					form[k] = v
				}
			}
			return op.NewRedirect(PathPrefix + t.tenant + PathConsent + "?" + form.Encode()), nil
		case consentMismatch:
			t.s.log.WarnContext(ctx, "oauthas: consent ticket refused: it does not match the request", "tenant", t.tenant, "client_id", cl.c.ID, "person_id", sess.PersonID)
			return nil, consentMismatched()
		}
		switch err := t.s.claimConsent(ctx, t.tenant, id, now.Add(consentTTL)); {
		case errors.Is(err, errConsentReplayed):
			t.s.log.WarnContext(ctx, "oauthas: consent ticket refused: already used", "tenant", t.tenant, "client_id", cl.c.ID, "person_id", sess.PersonID)
			return nil, consentReplayed()
		case err != nil:
			t.s.log.ErrorContext(ctx, "oauthas: claiming a consent ticket", "tenant", t.tenant, "err", err)
			return nil, temporarilyUnavailable("the authorization cannot be completed now; try again")
		}
	}
	if rerr := t.markUsed(ctx, cl.c); rerr != nil {
		return nil, rerr
	}

	code := newSecret(codePrefix)
	entry := codeEntry{
		State: codeIssued, Tenant: t.tenant, ClientID: cl.c.ID, RedirectURI: d.RedirectURI,
		Challenge: d.CodeChallenge, Resource: resource, Scopes: scopes, PersonID: sess.PersonID,
		AuthTime: sess.AuthTime, Issued: now, Expires: now.Add(t.s.cfg.CodeTTL),
	}
	if err := t.s.codes.create(ctx, code, entry); err != nil {
		t.s.log.ErrorContext(ctx, "oauthas: storing an authorization code", "tenant", t.tenant, "err", err)
		return nil, temporarilyUnavailable("the authorization cannot be completed now; try again")
	}
	t.s.log.InfoContext(ctx, "oauthas: authorization code issued", "tenant", t.tenant, "client_id", cl.c.ID, "person_id", sess.PersonID)

	u, err := url.Parse(d.RedirectURI)
	if err != nil {
		return nil, oidc.ErrInvalidRequestRedirectURI().WithDescription("redirect_uri is not a valid URI")
	}
	q := u.Query()
	q.Set("code", code)
	if d.State != "" {
		q.Set("state", d.State)
	}
	q.Set("iss", t.issuer) // RFC 9207
	u.RawQuery = q.Encode()
	return op.NewRedirect(u.String()), nil
}

// markUsed records the first authorization through a dynamically
// registered client, which keeps it from expiring (one event per client;
// afterwards the stored client says it is used and nothing is written).
func (t *tenantAS) markUsed(ctx context.Context, c identitystore.Client) *oidc.Error {
	if c.Kind != alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR || !c.FirstUsed.IsZero() {
		return nil
	}
	_, err := t.s.deps.Store.MarkClientUsed(ctx, t.tenant, c.ID)
	switch {
	case errors.Is(err, identitystore.ErrNotFound):
		// It expired between the request's start and now.
		return oidc.ErrUnauthorizedClient().WithDescription("the client's registration has expired; register again")
	case err != nil:
		t.s.log.ErrorContext(ctx, "oauthas: recording a client's first use", "tenant", t.tenant, "client_id", c.ID, "err", err)
		return temporarilyUnavailable("the authorization cannot be completed now; try again")
	}
	return nil
}

// signInRedirect sends the browser to sign in to this tenant and come back
// to the same authorization request; a login_hint is passed on.
func (t *tenantAS) signInRedirect(cr *op.ClientRequest[oidc.AuthRequest]) *op.Redirect {
	ret := PathPrefix + t.tenant + PathAuthorize + "?" + cr.Form.Encode()
	target := t.s.deps.Sessions.SignInURL(t.tenant, ret, false)
	if hint := cr.Data.LoginHint; hint != "" {
		if u, err := url.Parse(target); err == nil {
			q := u.Query()
			q.Set("login_hint", hint)
			u.RawQuery = q.Encode()
			target = u.String()
		}
	}
	return op.NewRedirect(target)
}

// requestedResource reads the RFC 8707 resource parameter: at most one,
// one of Config.Resources. required: missing is an error (authorization
// requests); otherwise "" is returned for a missing one.
func (t *tenantAS) requestedResource(form url.Values, required bool) (string, *oidc.Error) {
	vals := form["resource"]
	switch {
	case len(vals) == 0 && required:
		return "", invalidTarget("the resource parameter is required (RFC 8707)")
	case len(vals) == 0:
		return "", nil
	case len(vals) > 1:
		return "", invalidTarget("exactly one resource may be requested")
	case !slices.Contains(t.s.cfg.Resources, vals[0]):
		return "", invalidTarget("the resource is not served by this authorization server")
	}
	return vals[0], nil
}

// checkScopes: every scope must be one of Config.Scopes; the result is
// sorted and without duplicates.
func (t *tenantAS) checkScopes(scopes []string) ([]string, *oidc.Error) {
	out := make([]string, 0, len(scopes))
	for _, s := range scopes {
		if !slices.Contains(t.s.cfg.Scopes, s) {
			return nil, oidc.ErrInvalidScope().WithDescription("a requested scope is not supported; see scopes_supported")
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
