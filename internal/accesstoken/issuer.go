package accesstoken

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/keystore"
)

// Purpose is the key store purpose of access token keys.
const Purpose = alpv1.KeyPurpose_KEY_PURPOSE_TOKEN

// Issuer mints access tokens. It is safe for concurrent use once set up.
type Issuer struct {
	// Keys holds the tenants' token keys; tokens are signed with the
	// tenant's ACTIVE key.
	Keys keystore.KeyStore
	// Issuers maps a tenant to its issuer URL (the "iss" of its tokens).
	Issuers map[string]string
	// MaxLifetime is the default and longest lifetime; zero means
	// MaxLifetime (10 minutes), and more than that is refused.
	MaxLifetime time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Mint signs c as an access token for c.Tenant and returns it in compact
// form. Zero IssuedAt means now, zero Expiry means IssuedAt + MaxLifetime,
// empty ID gets a random jti, empty Issuer gets the tenant's issuer (a
// non-empty one must equal it). Subject, Audience, Tenant, ClientID, AgentID,
// GrantID and a valid Class are required; each scope must be an RFC 6749
// scope-token. A lifetime over the limit, an IssuedAt in the future or an
// Expiry not after IssuedAt are refused (the first wraps ErrLifetime).
func (is *Issuer) Mint(ctx context.Context, c Claims) (string, error) {
	if is.Keys == nil {
		return "", fmt.Errorf("accesstoken: mint: %w: no key store", ErrMisconfigured)
	}
	maxLife := is.MaxLifetime
	if maxLife == 0 {
		maxLife = MaxLifetime
	}
	if maxLife < 0 || maxLife > MaxLifetime {
		return "", fmt.Errorf("accesstoken: mint: %w: MaxLifetime %v is over the %v cap", ErrMisconfigured, maxLife, MaxLifetime)
	}
	issuer, ok := is.Issuers[c.Tenant]
	if !ok || issuer == "" {
		return "", fmt.Errorf("accesstoken: mint: %w: no issuer for tenant %q", ErrMisconfigured, c.Tenant)
	}
	if c.Issuer == "" {
		c.Issuer = issuer
	} else if c.Issuer != issuer {
		return "", fmt.Errorf("accesstoken: mint: issuer %q is not tenant %q's issuer", c.Issuer, c.Tenant)
	}
	for _, f := range [...]struct{ name, v string }{{"subject", c.Subject}, {"audience", c.Audience}, {"client id", c.ClientID}, {"agent id", c.AgentID}, {"grant id", c.GrantID}} {
		if f.v == "" {
			return "", fmt.Errorf("accesstoken: mint: %s is required", f.name)
		}
	}
	if strings.ContainsAny(c.Audience, " \t\r\n") {
		return "", errors.New("accesstoken: mint: audience must be a single resource URI")
	}
	if !validClass(c.Class) {
		return "", fmt.Errorf("accesstoken: mint: class %q is not %q or %q", c.Class, ClassCompany, ClassConsumer)
	}
	for _, s := range c.Scopes {
		if !validScopeToken(s) {
			return "", fmt.Errorf("accesstoken: mint: invalid scope %q", s)
		}
	}

	now := time.Now
	if is.Now != nil {
		now = is.Now
	}
	t := now()
	if c.IssuedAt.IsZero() {
		c.IssuedAt = t
	}
	c.IssuedAt = c.IssuedAt.Truncate(time.Second)
	if c.IssuedAt.After(t) {
		return "", errors.New("accesstoken: mint: issued-at is in the future")
	}
	if c.Expiry.IsZero() {
		c.Expiry = c.IssuedAt.Add(maxLife)
	}
	c.Expiry = c.Expiry.Truncate(time.Second)
	life := c.Expiry.Sub(c.IssuedAt)
	if life > maxLife {
		return "", fmt.Errorf("accesstoken: mint: %w: lifetime %v is over %v", ErrLifetime, life, maxLife)
	}
	if life <= 0 {
		return "", fmt.Errorf("accesstoken: mint: %w: expiry not after issued-at", ErrLifetime)
	}
	if !c.Expiry.After(t) {
		return "", errors.New("accesstoken: mint: expiry is in the past")
	}
	if c.ID == "" {
		var b [16]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
		c.ID = base64.RawURLEncoding.EncodeToString(b[:])
	}

	payload, err := json.Marshal(wireClaims{
		Issuer:   c.Issuer,
		Subject:  c.Subject,
		Audience: c.Audience,
		Expiry:   c.Expiry.Unix(),
		IssuedAt: c.IssuedAt.Unix(),
		ID:       c.ID,
		ClientID: c.ClientID,
		Scope:    strings.Join(c.Scopes, " "),
		Tenant:   c.Tenant,
		AgentID:  c.AgentID,
		GrantID:  c.GrantID,
		Class:    c.Class,
	})
	if err != nil {
		return "", fmt.Errorf("accesstoken: mint: encode claims: %w", err)
	}

	// The active key can be rotated between Active and Sign (the store's
	// signer then refuses); try once more with the new active key.
	for attempt := 0; ; attempt++ {
		tok, err := is.sign(ctx, c.Tenant, payload)
		if err == nil {
			return tok, nil
		}
		if attempt == 0 && (errors.Is(err, keystore.ErrKeyNotUsable) || errors.Is(err, keystore.ErrKeyRevoked) || errors.Is(err, keystore.ErrNotFound)) {
			continue
		}
		return "", fmt.Errorf("accesstoken: mint for tenant %q: %w", c.Tenant, err)
	}
}

func (is *Issuer) sign(ctx context.Context, tenant string, payload []byte) (string, error) {
	info, err := is.Keys.Active(ctx, tenant, Purpose)
	if err != nil {
		return "", err
	}
	if info.Algorithm != keystore.AlgEd25519 {
		return "", fmt.Errorf("token key %q has algorithm %q, want %q", info.KeyID, info.Algorithm, keystore.AlgEd25519)
	}
	s, err := is.Keys.Signer(ctx, tenant, Purpose, info.KeyID)
	if err != nil {
		return "", err
	}
	op, err := NewOpaqueSigner(s, info.KeyID)
	if err != nil {
		return "", err
	}
	js, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: op}, (&jose.SignerOptions{}).WithType(TokenType))
	if err != nil {
		return "", err
	}
	obj, err := js.Sign(payload)
	if err != nil {
		return "", err
	}
	return obj.CompactSerialize()
}

// OpaqueSigner is a go-jose OpaqueSigner (EdDSA only) over a crypto.Signer
// holding an Ed25519 key, such as the key store's: the private key never
// leaves the signer.
type OpaqueSigner struct {
	signer crypto.Signer
	jwk    jose.JSONWebKey
}

var _ jose.OpaqueSigner = (*OpaqueSigner)(nil)

// NewOpaqueSigner wraps s, whose public key must be Ed25519; keyID becomes
// the JWS "kid".
func NewOpaqueSigner(s crypto.Signer, keyID string) (*OpaqueSigner, error) {
	pub, ok := s.Public().(ed25519.PublicKey)
	if !ok || len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("accesstoken: signer %q is not Ed25519", keyID)
	}
	return &OpaqueSigner{signer: s, jwk: jose.JSONWebKey{Key: pub, KeyID: keyID, Algorithm: string(jose.EdDSA), Use: "sig"}}, nil
}

// Public returns the public JWK (with kid).
func (o *OpaqueSigner) Public() *jose.JSONWebKey {
	k := o.jwk
	return &k
}

// Algs returns EdDSA.
func (o *OpaqueSigner) Algs() []jose.SignatureAlgorithm { return []jose.SignatureAlgorithm{jose.EdDSA} }

// SignPayload signs payload with pure Ed25519.
func (o *OpaqueSigner) SignPayload(payload []byte, alg jose.SignatureAlgorithm) ([]byte, error) {
	if alg != jose.EdDSA {
		return nil, fmt.Errorf("accesstoken: algorithm %q not supported, only EdDSA", alg)
	}
	return o.signer.Sign(rand.Reader, payload, crypto.Hash(0))
}
