package accesstoken

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/keystore"
)

// Verifier defaults and limits.
const (
	// DefaultLeeway is the clock skew allowed when Verifier.Leeway is zero.
	DefaultLeeway = 30 * time.Second
	// MaxLeeway is the largest Verifier.Leeway accepted.
	MaxLeeway = time.Minute
	// DefaultMaxStaleness is used when Verifier.MaxStaleness is zero.
	DefaultMaxStaleness = time.Minute
	// MaxTokenLength: longer tokens are refused before any parsing.
	MaxTokenLength = 8 << 10
)

// PublicKeys gives a tenant's token keys, in every state, with their
// public keys (keystore.KeyStore.Keys for the TOKEN purpose does).
type PublicKeys interface {
	PublicKeys(ctx context.Context, tenant string) ([]keystore.KeyInfo, error)
}

// PublicKeysFunc adapts a function to PublicKeys.
type PublicKeysFunc func(ctx context.Context, tenant string) ([]keystore.KeyInfo, error)

// PublicKeys calls f.
func (f PublicKeysFunc) PublicKeys(ctx context.Context, tenant string) ([]keystore.KeyInfo, error) {
	return f(ctx, tenant)
}

// FromKeyStore returns the TOKEN-purpose keys of ks as PublicKeys.
func FromKeyStore(ks keystore.KeyStore) PublicKeys {
	return PublicKeysFunc(func(ctx context.Context, tenant string) ([]keystore.KeyInfo, error) {
		return ks.Keys(ctx, tenant, Purpose)
	})
}

// RevocationChecker answers from the revocation projection.
type RevocationChecker interface {
	// Revoked reports whether a token of the person under the grant that
	// was issued at issuedAt has been revoked, and why (for the error
	// description: it must not hold secrets).
	Revoked(tenant, personID, grantID string, issuedAt time.Time) (revoked bool, reason string)
	// Fresh returns an error if the projection may be missing revocations
	// older than maxStaleness (e.g. it has not caught up with its stream).
	Fresh(maxStaleness time.Duration) error
}

// Verifier checks access tokens locally. Its fields must not change once
// Verify is in use; it is then safe for concurrent use.
type Verifier struct {
	// Keys gives each tenant's token keys (see FromKeyStore).
	Keys PublicKeys
	// Resource is this resource server's canonical URI: the only audience
	// accepted.
	Resource string
	// Issuers maps each accepted tenant to its issuer. Tokens of tenants
	// not in the map are refused.
	Issuers map[string]string
	// Revocations is required: without it every token is refused.
	Revocations RevocationChecker
	// MaxStaleness is passed to Revocations.Fresh; zero means
	// DefaultMaxStaleness.
	MaxStaleness time.Duration
	// Leeway is the clock skew allowed on exp, iat and nbf; zero means
	// DefaultLeeway, negative means none, more than MaxLeeway is a
	// configuration error.
	Leeway time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// verifiedClaims is the JSON form accepted by Verify.
type verifiedClaims struct {
	Issuer    string          `json:"iss"`
	Subject   string          `json:"sub"`
	Audience  json.RawMessage `json:"aud"`
	Expiry    *int64          `json:"exp"`
	IssuedAt  *int64          `json:"iat"`
	NotBefore *int64          `json:"nbf"`
	ID        string          `json:"jti"`
	ClientID  string          `json:"client_id"`
	Scope     string          `json:"scope"`
	Tenant    string          `json:"tenant"`
	AgentID   string          `json:"agent"`
	GrantID   string          `json:"grant"`
	Class     string          `json:"class"`
}

var acceptedAlgs = []jose.SignatureAlgorithm{jose.EdDSA}

// Verify checks token and returns its claims, or an *Error (see the
// sentinels). In order: size and compact JWS form; alg EdDSA only; typ
// at+jwt; no crit, b64 or embedded jwk; the tenant named in the claims is
// one of Issuers; kid is a token key of that tenant that is ACTIVE or
// RETIRED (REVOKED: ErrKeyRevoked); the signature; required claims (iss,
// sub, aud, exp, iat, jti, client_id, tenant, agent, grant, class) and
// class; iss equals the tenant's issuer; aud is exactly Resource (one
// audience, as a string or a one-element array); exp - iat within
// MaxLifetime; exp, iat and nbf against the clock with Leeway; revocation
// data fresh (else ErrStale); not revoked (ErrRevoked with the reason).
func (v *Verifier) Verify(ctx context.Context, token string) (*Claims, error) {
	leeway, maxStale, err := v.settings()
	if err != nil {
		return nil, err
	}
	if token == "" {
		return nil, newError(ErrMalformed, "no token")
	}
	if len(token) > MaxTokenLength {
		return nil, newError(ErrMalformed, "token too long")
	}

	jws, err := jose.ParseSignedCompact(token, acceptedAlgs)
	if err != nil {
		if _, ok := errors.AsType[*jose.ErrUnexpectedSignatureAlgorithm](err); ok {
			return nil, newError(ErrBadAlgorithm, "signing algorithm not accepted (only EdDSA)")
		}
		return nil, newError(ErrMalformed, "not a compact JWS")
	}
	if len(jws.Signatures) != 1 {
		return nil, newError(ErrMalformed, "not exactly one signature")
	}
	h := jws.Signatures[0].Protected
	if h.Algorithm != string(jose.EdDSA) {
		return nil, newError(ErrBadAlgorithm, "signing algorithm not accepted (only EdDSA)")
	}
	if typ, _ := h.ExtraHeaders[jose.HeaderType].(string); !isTokenType(typ) {
		return nil, newError(ErrMalformed, `token type is not "at+jwt"`)
	}
	if _, ok := h.ExtraHeaders["crit"]; ok {
		return nil, newError(ErrMalformed, "critical header parameters not accepted")
	}
	if _, ok := h.ExtraHeaders["b64"]; ok {
		return nil, newError(ErrMalformed, "unencoded payload not accepted")
	}
	if h.JSONWebKey != nil {
		return nil, newError(ErrMalformed, "embedded keys not accepted")
	}
	if h.KeyID == "" {
		return nil, newError(ErrUnknownKey, "no key id")
	}

	// Decoded before the signature is checked, only to learn which
	// tenant's keys to verify with: nothing else is used, or reported in
	// an error, until the signature verified with a key of that tenant.
	var wc verifiedClaims
	if err := json.Unmarshal(jws.UnsafePayloadWithoutVerification(), &wc); err != nil {
		return nil, newError(ErrMalformed, "claims are not a valid JSON object")
	}
	if wc.Tenant == "" {
		return nil, newError(ErrMalformed, "missing claim tenant")
	}
	issuer, ok := v.Issuers[wc.Tenant]
	if !ok || issuer == "" {
		return nil, newError(ErrWrongIssuer, "tenant not accepted here")
	}
	keys, err := v.Keys.PublicKeys(ctx, wc.Tenant)
	if err != nil {
		return nil, newError(ErrUnavailable, "signing keys unavailable")
	}
	var pub ed25519.PublicKey
	for _, k := range keys {
		if k.KeyID != h.KeyID || k.Tenant != wc.Tenant || k.Purpose != Purpose {
			continue
		}
		switch k.State {
		case alpv1.KeyState_KEY_STATE_ACTIVE, alpv1.KeyState_KEY_STATE_RETIRED:
		case alpv1.KeyState_KEY_STATE_REVOKED:
			return nil, newError(ErrKeyRevoked, "signing key revoked")
		default:
			continue
		}
		if k.Algorithm == keystore.AlgEd25519 && len(k.PublicKey) == ed25519.PublicKeySize {
			pub = ed25519.PublicKey(k.PublicKey)
		}
		break
	}
	if pub == nil {
		return nil, newError(ErrUnknownKey, "unknown signing key")
	}
	if _, err := jws.Verify(pub); err != nil {
		return nil, newError(ErrBadSignature, "signature does not verify")
	}

	// From here on the claims are the issuer's.
	for _, f := range [...]struct{ name, v string }{
		{"iss", wc.Issuer}, {"sub", wc.Subject}, {"jti", wc.ID}, {"client_id", wc.ClientID},
		{"agent", wc.AgentID}, {"grant", wc.GrantID}, {"class", wc.Class},
	} {
		if f.v == "" {
			return nil, newError(ErrMalformed, "missing claim "+f.name)
		}
	}
	if len(wc.Audience) == 0 || string(wc.Audience) == "null" {
		return nil, newError(ErrMalformed, "missing claim aud")
	}
	if wc.Expiry == nil {
		return nil, newError(ErrMalformed, "missing claim exp")
	}
	if wc.IssuedAt == nil {
		return nil, newError(ErrMalformed, "missing claim iat")
	}
	if !validClass(wc.Class) {
		return nil, newError(ErrMalformed, "invalid class")
	}
	if wc.Issuer != issuer {
		return nil, newError(ErrWrongIssuer, "issuer does not match the tenant's")
	}
	aud, err := singleAudience(wc.Audience)
	if err != nil {
		return nil, err
	}
	if aud != v.Resource {
		return nil, newError(ErrWrongAudience, "token is for another resource")
	}
	exp, iat := time.Unix(*wc.Expiry, 0), time.Unix(*wc.IssuedAt, 0)
	if life := exp.Sub(iat); life <= 0 || life > MaxLifetime {
		return nil, newError(ErrLifetime, "token lifetime over 10 minutes or not positive")
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	t := now()
	if !t.Before(exp.Add(leeway)) {
		return nil, newError(ErrExpired, "token expired")
	}
	if iat.After(t.Add(leeway)) {
		return nil, newError(ErrNotYetValid, "token issued in the future")
	}
	if wc.NotBefore != nil && time.Unix(*wc.NotBefore, 0).After(t.Add(leeway)) {
		return nil, newError(ErrNotYetValid, "token not yet valid")
	}

	if err := v.Revocations.Fresh(maxStale); err != nil {
		return nil, newError(ErrStale, "revocation data is stale, try again later")
	}
	if revoked, reason := v.Revocations.Revoked(wc.Tenant, wc.Subject, wc.GrantID, iat); revoked {
		d := "token revoked"
		if reason != "" {
			d += ": " + reason
		}
		return nil, newError(ErrRevoked, d)
	}

	var scopes []string
	if wc.Scope != "" {
		scopes = strings.Fields(wc.Scope)
	}
	return &Claims{
		Issuer:   wc.Issuer,
		Subject:  wc.Subject,
		Audience: aud,
		Tenant:   wc.Tenant,
		ClientID: wc.ClientID,
		AgentID:  wc.AgentID,
		GrantID:  wc.GrantID,
		Class:    wc.Class,
		Scopes:   scopes,
		IssuedAt: iat,
		Expiry:   exp,
		ID:       wc.ID,
	}, nil
}

func (v *Verifier) settings() (leeway, maxStale time.Duration, err error) {
	switch {
	case v == nil:
		return 0, 0, newError(ErrMisconfigured, "no verifier")
	case v.Keys == nil:
		return 0, 0, newError(ErrMisconfigured, "verifier has no keys")
	case v.Resource == "":
		return 0, 0, newError(ErrMisconfigured, "verifier has no resource")
	case v.Revocations == nil:
		return 0, 0, newError(ErrMisconfigured, "verifier has no revocation checker")
	case v.Leeway > MaxLeeway:
		return 0, 0, newError(ErrMisconfigured, "verifier leeway is over the limit")
	case v.MaxStaleness < 0:
		return 0, 0, newError(ErrMisconfigured, "verifier max staleness is negative")
	}
	leeway = v.Leeway
	switch {
	case leeway == 0:
		leeway = DefaultLeeway
	case leeway < 0:
		leeway = 0
	}
	maxStale = v.MaxStaleness
	if maxStale == 0 {
		maxStale = DefaultMaxStaleness
	}
	return leeway, maxStale, nil
}

// isTokenType accepts "at+jwt" and "application/at+jwt" (RFC 9068 §4,
// RFC 7515 §4.1.9), case-insensitively.
func isTokenType(typ string) bool {
	typ = strings.ToLower(typ)
	return typ == TokenType || typ == "application/"+TokenType
}

func singleAudience(raw json.RawMessage) (string, error) {
	var s string
	if raw[0] == '[' {
		var list []string
		if err := json.Unmarshal(raw, &list); err != nil {
			return "", newError(ErrMalformed, "invalid claim aud")
		}
		if len(list) != 1 {
			return "", newError(ErrWrongAudience, "token must name exactly one audience")
		}
		s = list[0]
	} else if err := json.Unmarshal(raw, &s); err != nil {
		return "", newError(ErrMalformed, "invalid claim aud")
	}
	if s == "" {
		return "", newError(ErrMalformed, "missing claim aud")
	}
	return s, nil
}
