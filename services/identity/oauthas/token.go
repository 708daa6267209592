package oauthas

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/signin"
)

// Revocation reasons recorded on grants (they hold no secrets).
const (
	ReasonCodeReuse      = "authorization code reuse"
	ReasonClientRevoked  = "revoked by the client"
	ReasonPersonDisabled = "person disabled at the organization's identity provider"
	reasonUnrecorded     = "grant could not be recorded with its authorization code"
	reasonMintFailed     = "access token could not be issued"
)

// AgentID is the agent id of a person's agent using a client: stable for
// (tenant, person, client), so that re-authorizing the same client gives
// the same agent, while each authorization is its own grant. It is
// "agt_" + the first 128 bits of SHA-256 over the three, in hex: opaque,
// and it reveals neither the person nor the client.
func AgentID(tenant, personID, clientID string) string {
	h := sha256.Sum256([]byte("alpd/agent\x00" + tenant + "\x00" + personID + "\x00" + clientID))
	return "agt_" + hex.EncodeToString(h[:16])
}

// trustClass is company only for a client of this tenant (hence of the
// person's tenant) that is confidential and authenticated on this request,
// or that carries a vendor attestation bound by an admin; every other
// client is consumer. Nothing the agent says is considered.
func (t *tenantAS) trustClass(cl *opClient, person identitystore.Person) alpv1.TrustClass {
	c := cl.c
	if c.Tenant != t.tenant || person.Tenant != t.tenant || c.Class() != alpv1.TrustClass_TRUST_CLASS_COMPANY {
		return alpv1.TrustClass_TRUST_CLASS_CONSUMER
	}
	if c.Kind == alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL && !cl.authenticated {
		return alpv1.TrustClass_TRUST_CLASS_CONSUMER
	}
	return alpv1.TrustClass_TRUST_CLASS_COMPANY
}

func className(c alpv1.TrustClass) string {
	if c == alpv1.TrustClass_TRUST_CLASS_COMPANY {
		return accesstoken.ClassCompany
	}
	return accesstoken.ClassConsumer
}

// pkceOK checks an RFC 7636 code verifier against an S256 challenge.
func pkceOK(verifier, challenge string) bool {
	if len(verifier) < 43 || len(verifier) > 128 {
		return false
	}
	for i := 0; i < len(verifier); i++ {
		c := verifier[i]
		if !(b64urlChar(c) || c == '.' || c == '~') {
			return false
		}
	}
	sum := sha256.Sum256([]byte(verifier))
	got := base64.RawURLEncoding.EncodeToString(sum[:])
	return subtle.ConstantTimeCompare([]byte(got), []byte(challenge)) == 1
}

// CodeExchange exchanges an authorization code (once) for a grant, a
// refresh token and an access token.
func (t *tenantAS) CodeExchange(ctx context.Context, cr *op.ClientRequest[oidc.AccessTokenRequest]) (*op.Response, error) {
	cl, ok := cr.Client.(*opClient)
	if !ok {
		return nil, serverError()
	}
	req := cr.Data
	if !wellFormed(req.Code, codePrefix) {
		return nil, invalidGrant(descBadCode)
	}
	key := codeKey(req.Code)
	e, rev, err := t.s.codes.get(ctx, key)
	switch {
	case errors.Is(err, errCodeNotFound):
		return nil, invalidGrant(descBadCode)
	case err != nil:
		t.s.log.ErrorContext(ctx, "oauthas: reading an authorization code", "tenant", t.tenant, "err", err)
		return nil, unavailable("the code cannot be checked now; try again")
	case e.Tenant != t.tenant:
		return nil, invalidGrant(descBadCode)
	case e.State != codeIssued:
		return nil, t.codeReuse(ctx, key, e, rev)
	case !t.s.now().Before(e.Expires):
		return nil, invalidGrant(descBadCode)
	case e.ClientID != cl.c.ID:
		t.s.log.WarnContext(ctx, "oauthas: authorization code presented by another client", "tenant", t.tenant, "client_id", cl.c.ID)
		return nil, invalidGrant(descBadCode)
	case req.RedirectURI != e.RedirectURI:
		return nil, invalidGrant("redirect_uri differs from the authorization request's")
	case req.CodeVerifier == "":
		return nil, oidc.ErrInvalidRequest().WithDescription("code_verifier is required (PKCE)")
	case !pkceOK(req.CodeVerifier, e.Challenge):
		return nil, invalidGrant("PKCE verification failed: the code_verifier does not match the code_challenge")
	}
	resource, rerr := t.requestedResource(cr.Form, false)
	if rerr != nil {
		return nil, rerr
	}
	if resource != "" && resource != e.Resource {
		return nil, invalidTarget("the resource differs from the one authorized")
	}

	// Consume the code: compare-and-set on the revision read above.
	consumed := e
	consumed.State = codeConsumed
	crev, err := t.s.codes.update(ctx, key, consumed, rev)
	switch {
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		return nil, t.codeReuseAfterRace(ctx, key)
	case err != nil:
		t.s.log.ErrorContext(ctx, "oauthas: consuming an authorization code", "tenant", t.tenant, "err", err)
		return nil, unavailable("the code cannot be exchanged now; try again")
	}

	person, err := t.s.deps.Store.Person(ctx, t.tenant, e.PersonID)
	if err != nil {
		t.s.log.WarnContext(ctx, "oauthas: the code's person is not known", "tenant", t.tenant, "person_id", e.PersonID, "err", err)
		return nil, invalidGrant("the person who authorized the code is not known; authorize again")
	}
	refresh := newSecret(RefreshTokenPrefix)
	g, err := t.s.deps.Store.IssueGrant(ctx, identitystore.GrantSpec{
		Tenant: t.tenant, PersonID: person.ID, ClientID: cl.c.ID, AgentID: AgentID(t.tenant, person.ID, cl.c.ID),
		Class: t.trustClass(cl, person), Scopes: e.Scopes, Resource: e.Resource,
		RefreshSHA256: identitystore.HashSecret(refresh),
	})
	if err != nil {
		t.s.log.ErrorContext(ctx, "oauthas: issuing a grant", "tenant", t.tenant, "client_id", cl.c.ID, "err", err)
		if errors.Is(err, identitystore.ErrNotFound) {
			return nil, invalidGrant("the client or the person is no longer known; authorize again")
		}
		return nil, unavailable("the grant cannot be issued now; authorize again")
	}

	// Record the grant with the code, so that a reuse revokes it.
	used := consumed
	used.State = codeUsed
	used.GrantID = g.ID
	if _, err := t.s.codes.update(ctx, key, used, crev); err != nil {
		t.revokeGrant(ctx, g.ID, ReasonCodeReuse)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			t.s.log.WarnContext(ctx, "oauthas: authorization code reused during its exchange; grant revoked",
				"tenant", t.tenant, "client_id", cl.c.ID, "grant_id", g.ID)
			return nil, invalidGrant(descBadCode)
		}
		t.s.log.ErrorContext(ctx, "oauthas: recording a grant with its code", "tenant", t.tenant, "err", err)
		return nil, unavailable("the grant cannot be issued now; authorize again")
	}

	resp, err := t.tokenResponse(ctx, g, g.Scopes, refresh)
	if err != nil {
		t.revokeGrant(ctx, g.ID, reasonMintFailed)
		return nil, err
	}
	t.s.log.InfoContext(ctx, "oauthas: grant issued", "tenant", t.tenant, "client_id", cl.c.ID,
		"person_id", person.ID, "grant_id", g.ID, "agent_id", g.AgentID, "class", className(g.Class))
	return resp, nil
}

// codeReuse handles the exchange of a code that is no longer "issued":
// it fails, and revokes the grant issued from the code (RFC 6749 §4.1.2). A
// code whose winner has not recorded its grant yet is marked "reused", which
// makes the winner revoke the grant itself.
func (t *tenantAS) codeReuse(ctx context.Context, key string, e codeEntry, rev uint64) error {
	for range 5 {
		switch e.State {
		case codeConsumed:
			r := e
			r.State = codeReused
			_, err := t.s.codes.update(ctx, key, r, rev)
			if err == nil {
				t.s.log.WarnContext(ctx, "oauthas: authorization code reused while being exchanged", "tenant", t.tenant, "client_id", e.ClientID)
				return invalidGrant(descBadCode)
			}
			if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				t.s.log.ErrorContext(ctx, "oauthas: marking a reused code", "tenant", t.tenant, "err", err)
				return invalidGrant(descBadCode)
			}
		case codeUsed, codeReused:
			if e.GrantID != "" {
				t.s.log.WarnContext(ctx, "oauthas: authorization code reused; revoking its grant",
					"tenant", t.tenant, "client_id", e.ClientID, "grant_id", e.GrantID)
				t.revokeGrant(ctx, e.GrantID, ReasonCodeReuse)
			}
			return invalidGrant(descBadCode)
		default:
			return invalidGrant(descBadCode)
		}
		var err error
		if e, rev, err = t.s.codes.get(ctx, key); err != nil {
			return invalidGrant(descBadCode)
		}
	}
	return invalidGrant(descBadCode)
}

// codeReuseAfterRace: another exchange consumed the code between our read
// and our compare-and-set.
func (t *tenantAS) codeReuseAfterRace(ctx context.Context, key string) error {
	e, rev, err := t.s.codes.get(ctx, key)
	if err != nil {
		return invalidGrant(descBadCode)
	}
	return t.codeReuse(ctx, key, e, rev)
}

func (t *tenantAS) revokeGrant(ctx context.Context, grantID, reason string) {
	if err := t.s.deps.Store.RevokeGrant(ctx, t.tenant, grantID, reason); err != nil {
		t.s.log.ErrorContext(ctx, "oauthas: revoking a grant", "tenant", t.tenant, "grant_id", grantID, "reason", reason, "err", err)
	}
}

// tokenResponse mints an access token under grant g for scopes and answers
// it with refresh.
func (t *tenantAS) tokenResponse(ctx context.Context, g identitystore.Grant, scopes []string, refresh string) (*op.Response, error) {
	now := t.s.now()
	ttl := t.s.cfg.AccessTokenTTL
	at, err := t.s.minter.Mint(ctx, accesstoken.Claims{
		Subject: g.PersonID, Audience: g.Resource, Tenant: t.tenant, ClientID: g.ClientID, AgentID: g.AgentID,
		GrantID: g.ID, Class: className(g.Class), Scopes: scopes, IssuedAt: now, Expiry: now.Add(ttl),
	})
	if err != nil {
		t.s.log.ErrorContext(ctx, "oauthas: minting an access token", "tenant", t.tenant, "grant_id", g.ID, "err", err)
		return nil, unavailable("the access token cannot be issued now; try again")
	}
	resp := op.NewResponse(&oidc.AccessTokenResponse{
		AccessToken: at, TokenType: oidc.BearerToken, RefreshToken: refresh,
		ExpiresIn: uint64(ttl.Seconds()), Scope: scopes,
	})
	resp.Header.Set("Cache-Control", "no-store")
	resp.Header.Set("Pragma", "no-cache")
	return resp, nil
}

// RefreshToken rotates a refresh token: the presented one must be the
// grant's current one (a spent one is reuse: the store revokes the grant),
// of this client, under a grant that is not revoked, and the person must
// pass the re-check with their IdP.
func (t *tenantAS) RefreshToken(ctx context.Context, cr *op.ClientRequest[oidc.RefreshTokenRequest]) (*op.Response, error) {
	cl, ok := cr.Client.(*opClient)
	if !ok {
		return nil, serverError()
	}
	rt := cr.Data.RefreshToken
	if !wellFormed(rt, RefreshTokenPrefix) {
		return nil, invalidGrant(descBadRefresh)
	}
	h := identitystore.HashSecret(rt)
	g, err := t.s.deps.Store.GrantByRefreshHash(t.tenant, h)
	switch {
	case errors.Is(err, identitystore.ErrNotFound), errors.Is(err, identitystore.ErrNotHosted):
		return nil, invalidGrant(descBadRefresh)
	case err != nil:
		t.s.log.ErrorContext(ctx, "oauthas: looking up a refresh token", "tenant", t.tenant, "err", err)
		return nil, unavailable("the refresh token cannot be checked now; try again")
	case g.ClientID != cl.c.ID:
		t.s.log.WarnContext(ctx, "oauthas: refresh token presented by another client", "tenant", t.tenant,
			"client_id", cl.c.ID, "grant_id", g.ID)
		return nil, invalidGrant(descBadRefresh)
	case !g.RefreshSHA256.Equal(h):
		// A spent refresh token: reuse of a stolen (or replayed) token.
		// RotateRefresh revokes the grant and reports ErrRefreshReuse.
		err := t.s.deps.Store.RotateRefresh(ctx, t.tenant, g.ID, h, identitystore.HashSecret(newSecret(RefreshTokenPrefix)))
		t.s.log.WarnContext(ctx, "oauthas: refresh token reuse; grant revoked", "tenant", t.tenant,
			"client_id", cl.c.ID, "grant_id", g.ID, "err", err)
		return nil, invalidGrant(descBadRefresh)
	}
	if revoked, _ := t.s.deps.Store.Revoked(t.tenant, g.PersonID, g.ID, g.Issued); revoked || g.Revoked || g.Resource == "" {
		return nil, invalidGrant(descBadRefresh)
	}
	scopes := g.Scopes
	if len(cr.Data.Scopes) > 0 {
		var serr *oidc.Error
		if scopes, serr = t.checkScopes(cr.Data.Scopes); serr != nil {
			return nil, serr
		}
		for _, s := range scopes {
			if !containsString(g.Scopes, s) {
				return nil, oidc.ErrInvalidScope().WithDescription("a requested scope was not granted")
			}
		}
	}
	resource, rerr := t.requestedResource(cr.Form, false)
	if rerr != nil {
		return nil, rerr
	}
	if resource != "" && resource != g.Resource {
		return nil, invalidTarget("the resource differs from the one authorized")
	}

	if rc := t.s.deps.Recheck; rc != nil {
		if err := rc.Recheck(ctx, t.tenant, g.PersonID); err != nil {
			if errors.Is(err, ErrPersonDisabled) || errors.Is(err, signin.ErrIdPRefused) {
				t.s.log.WarnContext(ctx, "oauthas: person disabled at their IdP; revoking their agents", "tenant", t.tenant,
					"person_id", g.PersonID, "reason", err.Error())
				if rerr := t.s.deps.Store.RevokePersonAgents(ctx, t.tenant, g.PersonID, ReasonPersonDisabled); rerr != nil {
					t.s.log.ErrorContext(ctx, "oauthas: revoking a disabled person's agents", "tenant", t.tenant,
						"person_id", g.PersonID, "err", rerr)
				}
				return nil, invalidGrant("the person's organization no longer allows this authorization")
			}
			t.s.log.WarnContext(ctx, "oauthas: person re-check failed", "tenant", t.tenant, "person_id", g.PersonID, "err", err)
			return nil, unavailable("the person's organization cannot be asked now; try again later")
		}
	}

	// Mint first: a failure then leaves the current refresh token usable.
	next := newSecret(RefreshTokenPrefix)
	resp, err := t.tokenResponse(ctx, g, scopes, next)
	if err != nil {
		return nil, err
	}
	switch err := t.s.deps.Store.RotateRefresh(ctx, t.tenant, g.ID, h, identitystore.HashSecret(next)); {
	case err == nil:
	case errors.Is(err, identitystore.ErrRefreshReuse), errors.Is(err, identitystore.ErrRevoked), errors.Is(err, identitystore.ErrNotFound):
		t.s.log.WarnContext(ctx, "oauthas: refresh refused by the store", "tenant", t.tenant, "grant_id", g.ID, "err", err)
		return nil, invalidGrant(descBadRefresh)
	default:
		t.s.log.ErrorContext(ctx, "oauthas: rotating a refresh token", "tenant", t.tenant, "grant_id", g.ID, "err", err)
		return nil, unavailable("the refresh token cannot be rotated now; try again")
	}
	return resp, nil
}

func containsString(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

// Revocation revokes the grant of a refresh token or access token of the
// authenticated client (RFC 7009). Unknown, invalid, expired or other
// clients' tokens are answered 200 like revoked ones (RFC 7009 §2.2), and
// nothing is revoked.
func (t *tenantAS) Revocation(ctx context.Context, cr *op.ClientRequest[oidc.RevocationRequest]) (*op.Response, error) {
	cl, ok := cr.Client.(*opClient)
	if !ok {
		return nil, serverError()
	}
	tok := cr.Data.Token
	grantID := ""
	switch {
	case wellFormed(tok, RefreshTokenPrefix):
		g, err := t.s.deps.Store.GrantByRefreshHash(t.tenant, identitystore.HashSecret(tok))
		switch {
		case err == nil && g.ClientID == cl.c.ID:
			grantID = g.ID
		case err != nil && !errors.Is(err, identitystore.ErrNotFound) && !errors.Is(err, identitystore.ErrNotHosted):
			t.s.log.ErrorContext(ctx, "oauthas: looking up a refresh token to revoke", "tenant", t.tenant, "err", err)
			return nil, unavailable("the token cannot be revoked now; try again")
		}
	case len(tok) <= accesstoken.MaxTokenLength && strings.Count(tok, ".") == 2:
		for _, v := range t.s.verifiers {
			claims, err := v.Verify(ctx, tok)
			if err == nil {
				if claims.Tenant == t.tenant && claims.ClientID == cl.c.ID {
					grantID = claims.GrantID
				}
				break
			}
			if errors.Is(err, accesstoken.ErrStale) || errors.Is(err, accesstoken.ErrUnavailable) {
				return nil, unavailable("the token cannot be revoked now; try again")
			}
		}
	}
	if grantID != "" {
		if err := t.s.deps.Store.RevokeGrant(ctx, t.tenant, grantID, ReasonClientRevoked); err != nil {
			t.s.log.ErrorContext(ctx, "oauthas: revoking a grant", "tenant", t.tenant, "grant_id", grantID, "err", err)
			return nil, unavailable("the token cannot be revoked now; try again")
		}
		t.s.log.InfoContext(ctx, "oauthas: grant revoked by its client", "tenant", t.tenant, "client_id", cl.c.ID, "grant_id", grantID)
	}
	resp := op.NewResponse(struct{}{})
	resp.Header.Set("Cache-Control", "no-store")
	return resp, nil
}
