package oauthas

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/identitystore"
)

// opClient is an identitystore client as op sees it, with how it
// authenticated on this request.
type opClient struct {
	c             identitystore.Client
	method        oidc.AuthMethod
	authenticated bool // a secret or an assertion was verified

	// Authorization requests only: what the request asked for, so that
	// Authorize (not op) refuses it with the right error.
	reqResponseType oidc.ResponseType
	reqResponseMode oidc.ResponseMode
}

var _ op.Client = (*opClient)(nil)

func (o *opClient) GetID() string                    { return o.c.ID }
func (o *opClient) RedirectURIs() []string           { return slices.Clone(o.c.RedirectURIs) }
func (o *opClient) PostLogoutRedirectURIs() []string { return nil }

// ApplicationType: public clients are native apps (RFC 8252: loopback and
// private-use scheme redirects), confidential ones web apps.
func (o *opClient) ApplicationType() op.ApplicationType {
	if o.c.Kind == alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL {
		return op.ApplicationTypeWeb
	}
	return op.ApplicationTypeNative
}

func (o *opClient) AuthMethod() oidc.AuthMethod {
	if o.method != "" {
		return o.method
	}
	if o.c.Kind == alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL {
		return oidc.AuthMethodBasic
	}
	return oidc.AuthMethodNone
}

// ResponseTypes lets whatever the request asked for through op's check, so
// that Authorize refuses everything but "code" with
// unsupported_response_type (op would say unauthorized_client).
func (o *opClient) ResponseTypes() []oidc.ResponseType {
	rt := []oidc.ResponseType{oidc.ResponseTypeCode}
	if o.reqResponseType != "" && o.reqResponseType != oidc.ResponseTypeCode {
		rt = append(rt, o.reqResponseType)
	}
	return rt
}

func (o *opClient) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken}
}
func (o *opClient) LoginURL(string) string               { return "" }
func (o *opClient) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeJWT }
func (o *opClient) IDTokenLifetime() time.Duration       { return 0 }
func (o *opClient) DevMode() bool                        { return false }
func (o *opClient) IDTokenUserinfoClaimsAssertion() bool { return false }
func (o *opClient) ClockSkew() time.Duration             { return 0 }
func (o *opClient) IsScopeAllowed(string) bool           { return true } // Authorize checks scopes
func (o *opClient) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (o *opClient) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

// Client lookup failures.
var (
	errUnknownClient     = errors.New("unknown client")
	errClientRefused     = errors.New("the client could not be accepted")
	errClientUnavailable = errors.New("the client cannot be checked now")
)

// lookupClient resolves clientID through the ClientSource. Errors are
// errUnknownClient, errClientRefused or errClientUnavailable.
func (t *tenantAS) lookupClient(ctx context.Context, clientID string) (identitystore.Client, error) {
	if clientID == "" || len(clientID) > 2048 {
		return identitystore.Client{}, errUnknownClient
	}
	c, err := t.s.clients.Client(ctx, t.tenant, clientID)
	switch {
	case err == nil:
	case errors.Is(err, identitystore.ErrNotFound), errors.Is(err, identitystore.ErrNotHosted):
		return identitystore.Client{}, errUnknownClient
	case errors.Is(err, identitystore.ErrStale), errors.Is(err, identitystore.ErrClosed),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		t.s.log.WarnContext(ctx, "oauthas: client lookup unavailable", "tenant", t.tenant, "err", err)
		return identitystore.Client{}, errClientUnavailable
	default:
		t.s.log.InfoContext(ctx, "oauthas: client refused by the client source", "tenant", t.tenant, "err", err)
		return identitystore.Client{}, errClientRefused
	}
	// Clients are per tenant: a client of another tenant is unknown here.
	if c.Tenant != t.tenant || c.ID != clientID {
		return identitystore.Client{}, errUnknownClient
	}
	return c, nil
}

// clientError is the token/revocation endpoint answer to a lookup failure.
func clientError(err error) error {
	if errors.Is(err, errClientUnavailable) {
		return unavailable(err.Error())
	}
	return invalidClient(err.Error())
}

func isPublic(k alpv1.ClientKind) bool {
	switch k {
	case alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR, alpv1.ClientKind_CLIENT_KIND_PUBLIC_CIMD, alpv1.ClientKind_CLIENT_KIND_PUBLIC_VENDOR:
		return true
	}
	return false
}

// VerifyClient authenticates the client of a token or revocation request:
// public clients use no authentication and must not send a secret;
// confidential clients must authenticate with client_secret_basic,
// client_secret_post (against the registered SHA-256, in constant time) or
// private_key_jwt (against their registered JWK Set).
func (t *tenantAS) VerifyClient(ctx context.Context, r *op.Request[op.ClientCredentials]) (op.Client, error) {
	cc := r.Data
	if cc.ClientAssertion != "" {
		return t.verifyAssertion(ctx, cc)
	}
	c, err := t.lookupClient(ctx, cc.ClientID)
	if err != nil {
		return nil, clientError(err)
	}
	switch {
	case c.Kind == alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL:
		if c.SecretSHA256.IsZero() {
			return nil, invalidClient("this client must authenticate with private_key_jwt")
		}
		if cc.ClientSecret == "" {
			return nil, invalidClient("client authentication is required for this client")
		}
		if !identitystore.HashSecret(cc.ClientSecret).Equal(c.SecretSHA256) {
			t.s.log.InfoContext(ctx, "oauthas: client authentication failed", "tenant", t.tenant, "client_id", c.ID)
			return nil, invalidClient("client authentication failed")
		}
		method := oidc.AuthMethodPost
		if _, _, ok := (&http.Request{Header: r.Header}).BasicAuth(); ok {
			method = oidc.AuthMethodBasic
		}
		return &opClient{c: c, method: method, authenticated: true}, nil
	case isPublic(c.Kind):
		if cc.ClientSecret != "" {
			return nil, invalidClient("a public client must not send a client secret")
		}
		return &opClient{c: c, method: oidc.AuthMethodNone}, nil
	default:
		return nil, invalidClient(errUnknownClient.Error())
	}
}

// Limits on client assertions (RFC 7523 §3).
const (
	maxAssertionLifetime = 5 * time.Minute
	assertionLeeway      = 30 * time.Second
	maxAssertionBytes    = 8 << 10
)

type assertionClaims struct {
	Issuer    string       `json:"iss"`
	Subject   string       `json:"sub"`
	Audience  audience     `json:"aud"`
	Expiry    *json.Number `json:"exp"`
	IssuedAt  *json.Number `json:"iat"`
	NotBefore *json.Number `json:"nbf"`
	ID        string       `json:"jti"`
}

// audience is a JWT "aud": a string or an array of strings.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*a = audience{s}
		return nil
	}
	var l []string
	if err := json.Unmarshal(b, &l); err != nil {
		return err
	}
	*a = l
	return nil
}

func numTime(n *json.Number) (time.Time, bool) {
	if n == nil {
		return time.Time{}, false
	}
	f, err := n.Float64()
	if err != nil || f <= 0 || f > 1<<40 {
		return time.Time{}, false
	}
	return time.Unix(int64(f), 0), true
}

// verifyAssertion authenticates a private_key_jwt client (RFC 7523 §2.2,
// §3): iss = sub = client id, aud naming this issuer or one of its
// endpoints, a short life, a jti never seen before (remembered in the code
// bucket), and a signature by a key of the client's registered JWK Set.
// Clients that registered only a jwks_uri are not supported yet.
func (t *tenantAS) verifyAssertion(ctx context.Context, cc *op.ClientCredentials) (op.Client, error) {
	fail := func(desc string) (op.Client, error) {
		return nil, invalidClient(desc)
	}
	if cc.ClientSecret != "" {
		return fail("client authentication must not use more than one method")
	}
	if len(cc.ClientAssertion) > maxAssertionBytes {
		return fail("the client assertion is too large")
	}
	algs := make([]jose.SignatureAlgorithm, len(assertionAlgs))
	for i, a := range assertionAlgs {
		algs[i] = jose.SignatureAlgorithm(a)
	}
	sig, err := jose.ParseSignedCompact(cc.ClientAssertion, algs)
	if err != nil || len(sig.Signatures) != 1 {
		return fail("the client assertion is not a signed JWT with an accepted algorithm")
	}
	var unverified assertionClaims
	if err := json.Unmarshal(sig.UnsafePayloadWithoutVerification(), &unverified); err != nil {
		return fail("the client assertion's claims are malformed")
	}
	clientID := unverified.Issuer
	if clientID == "" || unverified.Subject != clientID || (cc.ClientID != "" && cc.ClientID != clientID) {
		return fail("the client assertion must have iss and sub equal to the client id")
	}
	c, err := t.lookupClient(ctx, clientID)
	if err != nil {
		return nil, clientError(err)
	}
	if c.Kind != alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL || len(c.JWKS) == 0 {
		if c.JWKSURI != "" && len(c.JWKS) == 0 {
			return fail("clients with a jwks_uri are not supported yet; register the JWK Set itself")
		}
		return fail("this client does not authenticate with private_key_jwt")
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(c.JWKS, &set); err != nil {
		t.s.log.WarnContext(ctx, "oauthas: registered JWK Set unreadable", "tenant", t.tenant, "client_id", c.ID, "err", err)
		return fail("client authentication failed")
	}
	kid := sig.Signatures[0].Header.KeyID
	var payload []byte
	for _, k := range set.Keys {
		if (kid != "" && k.KeyID != kid) || !k.Valid() || !k.IsPublic() || (k.Use != "" && k.Use != "sig") {
			continue
		}
		if k.Algorithm != "" && k.Algorithm != sig.Signatures[0].Header.Algorithm {
			continue
		}
		if p, err := sig.Verify(k.Key); err == nil {
			payload = p
			break
		}
	}
	if payload == nil {
		t.s.log.InfoContext(ctx, "oauthas: client assertion signature did not verify", "tenant", t.tenant, "client_id", c.ID)
		return fail("client authentication failed")
	}
	var cl assertionClaims
	if err := json.Unmarshal(payload, &cl); err != nil || cl.Issuer != clientID || cl.Subject != clientID {
		return fail("client authentication failed")
	}
	if !slices.ContainsFunc(cl.Audience, func(a string) bool {
		return a == t.issuer || a == t.issuer+PathToken || a == t.issuer+PathRevoke
	}) {
		return fail("the client assertion's audience must be this issuer or its token endpoint")
	}
	now := t.s.now()
	exp, ok := numTime(cl.Expiry)
	switch {
	case !ok:
		return fail("the client assertion has no valid exp")
	case !now.Before(exp.Add(assertionLeeway)):
		return fail("the client assertion has expired")
	case exp.Sub(now) > maxAssertionLifetime+assertionLeeway:
		return fail("the client assertion lives too long (at most 5 minutes)")
	}
	if iat, ok := numTime(cl.IssuedAt); ok && iat.After(now.Add(assertionLeeway)) {
		return fail("the client assertion was issued in the future")
	}
	if nbf, ok := numTime(cl.NotBefore); ok && nbf.After(now.Add(assertionLeeway)) {
		return fail("the client assertion is not valid yet")
	}
	if cl.ID == "" || len(cl.ID) > 256 {
		return fail("the client assertion needs a jti")
	}
	h := sha256.Sum256([]byte(t.tenant + "\x00" + clientID + "\x00" + cl.ID))
	if _, err := t.s.codes.kv.Create(ctx, "j_"+hex.EncodeToString(h[:]), []byte(`{}`)); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return fail("the client assertion was already used")
		}
		t.s.log.WarnContext(ctx, "oauthas: recording a client assertion id", "tenant", t.tenant, "err", err)
		return nil, unavailable("client authentication cannot be completed now")
	}
	return &opClient{c: c, method: oidc.AuthMethodPrivateKeyJWT, authenticated: true}, nil
}
