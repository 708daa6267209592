package oauthas

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/loopback"
	"github.com/alpd-project/alpd/internal/signin"
)

// Defaults and limits.
const (
	// DefaultAccessTokenTTL is the access token lifetime when
	// Config.AccessTokenTTL is zero; accesstoken.MaxLifetime (10 minutes) is
	// the most allowed.
	DefaultAccessTokenTTL = 5 * time.Minute
	// DefaultCodeTTL is how long an authorization code may be exchanged
	// when Config.CodeTTL is zero; MaxCodeTTL is the most allowed (RFC 6749
	// §4.1.2 recommends at most 10 minutes).
	DefaultCodeTTL = 60 * time.Second
	MaxCodeTTL     = 10 * time.Minute
	// DefaultCodesRetention is the TTL CodesBucketConfig gives the code
	// bucket: a code is usable for CodeTTL only (its entry says until when),
	// but its entry is kept this long after its last change so that a
	// reused code is still recognised and the grant issued from it revoked.
	DefaultCodesRetention = 10 * time.Minute
)

// PathPrefix is the path under which every tenant's authorization server
// lives: the issuer of tenant T is <PublicURL>/oauth/T.
const PathPrefix = "/oauth/"

// IssuerURL is the issuer of tenant's authorization server on a broker at
// publicURL: <publicURL>/oauth/<tenant>.
func IssuerURL(publicURL, tenant string) string {
	return strings.TrimRight(publicURL, "/") + PathPrefix + tenant
}

// Paths of a tenant's endpoints, relative to its issuer.
const (
	PathAuthorize = "/authorize"
	PathToken     = "/token"
	PathRevoke    = "/revoke"
	PathJWKS      = "/jwks"
	PathRegister  = "/register"
)

// Well-known paths (RFC 8414 §3, RFC 9728 §3).
const (
	WellKnownAS       = "/.well-known/oauth-authorization-server"
	WellKnownResource = "/.well-known/oauth-protected-resource"
)

// RefreshTokenPrefix starts every refresh token: "alprt_" followed by 32
// random bytes in unpadded base64url. Only its SHA-256 is stored.
const RefreshTokenPrefix = "alprt_"

// ErrPersonDisabled is what a PersonRechecker wraps when the person's
// organization says the person may no longer use the broker (the IdP
// refused their refresh token: account disabled, consent withdrawn). The
// authorization server then revokes all of the person's agents. An error
// wrapping signin.ErrIdPRefused counts as the same.
var ErrPersonDisabled = errors.New("oauthas: person disabled at their organization")

// PersonRechecker re-checks a person with their organization's IdP on each
// agent token refresh (ARCHITECTURE.md §7). Recheck returns nil when the
// person may go on, an error wrapping ErrPersonDisabled (or
// signin.ErrIdPRefused) when they may not, and any other error when the
// question could not be answered now (the refresh is then refused with
// temporarily_unavailable; a grace period for an unreachable IdP is the
// rechecker's business).
type PersonRechecker interface {
	Recheck(ctx context.Context, tenant, personID string) error
}

// PersonRecheckFunc adapts a function to PersonRechecker.
type PersonRecheckFunc func(ctx context.Context, tenant, personID string) error

// Recheck calls f.
func (f PersonRecheckFunc) Recheck(ctx context.Context, tenant, personID string) error {
	return f(ctx, tenant, personID)
}

// ClientSource finds the OAuth client of a tenant by client id. Every client
// lookup of the authorization server goes through it. The default,
// StoreClients, knows registered clients only; services/identity/clientreg provides
// one that also understands Client ID Metadata Documents.
//
// An error matching identitystore.ErrNotFound or ErrNotHosted is an unknown
// client (invalid_client); ErrStale and ErrClosed are answered
// temporarily_unavailable; any other error is a client that could not be
// accepted (invalid_client, e.g. a metadata document that is invalid or
// unreachable), and is logged.
type ClientSource interface {
	Client(ctx context.Context, tenant, clientID string) (identitystore.Client, error)
}

// StoreClients is the ClientSource of registered clients.
type StoreClients struct {
	Store interface {
		Client(tenant, clientID string) (identitystore.Client, error)
	}
}

// Client is Store.Client.
func (s StoreClients) Client(_ context.Context, tenant, clientID string) (identitystore.Client, error) {
	return s.Store.Client(tenant, clientID)
}

// Store is the part of *identitystore.Store the authorization server uses.
type Store interface {
	Client(tenant, clientID string) (identitystore.Client, error)
	Person(ctx context.Context, tenant, id string) (identitystore.Person, error)
	Grant(tenant, grantID string) (identitystore.Grant, error)
	GrantByRefreshHash(tenant string, hash identitystore.Hash) (identitystore.Grant, error)
	IssueGrant(ctx context.Context, spec identitystore.GrantSpec) (identitystore.Grant, error)
	RotateRefresh(ctx context.Context, tenant, grantID string, presented, next identitystore.Hash) error
	RevokeGrant(ctx context.Context, tenant, grantID, reason string) error
	RevokePersonAgents(ctx context.Context, tenant, personID, reason string) error
	// MarkClientUsed records a client's first authorization (dynamic
	// clients never used expire).
	MarkClientUsed(ctx context.Context, tenant, clientID string) (identitystore.Client, error)
	// Revoked and Fresh make the store the access token verifier's
	// revocation checker (accesstoken.RevocationChecker).
	Revoked(tenant, personID, grantID string, issuedAt time.Time) (bool, string)
	Fresh(maxStaleness time.Duration) error
}

var _ Store = (*identitystore.Store)(nil)

// Sessions is the people's sign-in (*signin.Service).
type Sessions interface {
	Session(r *http.Request) (*signin.Session, error)
	SignInURL(tenant, returnPath string, fresh bool) string
	// CheckCSRF guards the consent form.
	CheckCSRF(r *http.Request) error
}

var _ Sessions = (*signin.Service)(nil)

// Config configures the authorization servers of a broker.
type Config struct {
	// ConsentKey (at least 32 bytes, the same on every replica) signs the
	// consent tickets that carry a person's approval of a consumer agent
	// from the consent page back to the authorization endpoint.
	ConsentKey []byte
	// PublicURL is the broker's public base URL, scheme://host[:port] with
	// no path, e.g. "https://broker.example.org". https, or http on a
	// loopback host (tests, local experiments).
	PublicURL string
	// Tenants are the hosted tenants; each gets its own authorization server
	// with issuer <PublicURL>/oauth/<tenant>.
	Tenants []string
	// Resource is the canonical URI of the broker's protected resource for
	// agents (the MCP endpoint, e.g. "https://broker.example.org/mcp"): the
	// "resource" of the RFC 9728 metadata at the root well-known path.
	Resource string
	// Resources are every resource indicator (RFC 8707) an authorization
	// request may name; Resource is always one of them.
	Resources []string
	// Scopes are the scopes an agent may ask for (scopes_supported).
	// Required.
	Scopes []string
	// DefaultScopes are granted when an authorization request names no
	// scope; default Scopes.
	DefaultScopes []string
	// AccessTokenTTL is the access token lifetime: default 5 minutes, at
	// most 10.
	AccessTokenTTL time.Duration
	// CodeTTL bounds the time between issuing and exchanging an
	// authorization code: default 60s, at most 10 minutes.
	CodeTTL time.Duration
	// RegistrationEndpoint is advertised as registration_endpoint; the
	// string "{tenant}" in it is replaced by the tenant. When empty and
	// Deps.Registration is set, <issuer>/register is advertised.
	RegistrationEndpoint string
	// ClientIDMetadataDocumentSupported is advertised as
	// client_id_metadata_document_supported (set it when Deps.Clients
	// resolves URL client ids).
	ClientIDMetadataDocumentSupported bool
}

// Deps are the authorization servers' collaborators.
type Deps struct {
	// Store is the identity store (grants, people, clients). Required.
	Store Store
	// Clients resolves client ids; default StoreClients{Store}.
	Clients ClientSource
	// Keys holds the tenants' TOKEN keys (signing and JWKS). Required.
	Keys keystore.KeyStore
	// Sessions is the people's sign-in. Required.
	Sessions Sessions
	// Codes is the JetStream KV bucket of authorization codes, shared by
	// every replica (see CodesBucketConfig). Required.
	Codes jetstream.KeyValue
	// Recheck re-checks the person with their IdP on each refresh; nil
	// means no re-check is configured.
	Recheck PersonRechecker
	// Registration, when set, is the route of a tenant's dynamic client
	// registration, mounted at <issuer>/register with its body limit
	// (services/identity/clientreg's DCRRoute).
	Registration func(tenant string) httproute.Route
	// Logger; nil discards. Tokens, codes and secrets are never logged.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// CodesBucketConfig is the configuration of the authorization code bucket
// that the identity service creates (jetstream.CreateOrUpdateKeyValue).
// Entries are small and short-lived; one revision per key is enough, since
// one-time use is enforced by compare-and-set on the latest revision.
func CodesBucketConfig(bucket string, replicas int) jetstream.KeyValueConfig {
	if replicas < 1 {
		replicas = 1
	}
	return jetstream.KeyValueConfig{
		Bucket:       bucket,
		Description:  "alpd OAuth authorization codes (SHA-256 keyed, one-time)",
		History:      1,
		TTL:          DefaultCodesRetention,
		MaxValueSize: 4 << 10,
		Storage:      jetstream.FileStorage,
		Replicas:     replicas,
	}
}

func (c *Config) normalize() error {
	if c.PublicURL == "" {
		return errors.New("oauthas: PublicURL is required")
	}
	u, err := url.Parse(c.PublicURL)
	if err != nil || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("oauthas: PublicURL %q must be scheme://host[:port] without a path", c.PublicURL)
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !loopback.Host(u.Hostname()) {
			return fmt.Errorf("oauthas: PublicURL %q: plain http only on a loopback host", c.PublicURL)
		}
	default:
		return fmt.Errorf("oauthas: PublicURL %q: want https", c.PublicURL)
	}
	c.PublicURL = strings.TrimSuffix(c.PublicURL, "/")
	if len(c.Tenants) == 0 {
		return errors.New("oauthas: no tenants")
	}
	seen := map[string]bool{}
	for _, t := range c.Tenants {
		if err := alp.ValidateTenant(t); err != nil {
			return fmt.Errorf("oauthas: tenant %q: %w", t, err)
		}
		if seen[t] {
			return fmt.Errorf("oauthas: tenant %q listed twice", t)
		}
		seen[t] = true
	}
	if c.Resource == "" {
		return errors.New("oauthas: Resource is required")
	}
	if !slices.Contains(c.Resources, c.Resource) {
		c.Resources = append([]string{c.Resource}, c.Resources...)
	}
	for _, r := range c.Resources {
		if err := checkResourceURI(r); err != nil {
			return fmt.Errorf("oauthas: resource %q: %w", r, err)
		}
	}
	if len(c.Scopes) == 0 {
		return errors.New("oauthas: Scopes are required")
	}
	for _, s := range c.Scopes {
		if !scopeToken(s) {
			return fmt.Errorf("oauthas: scope %q is not an RFC 6749 scope token", s)
		}
	}
	if len(c.DefaultScopes) == 0 {
		c.DefaultScopes = slices.Clone(c.Scopes)
	}
	for _, s := range c.DefaultScopes {
		if !slices.Contains(c.Scopes, s) {
			return fmt.Errorf("oauthas: default scope %q is not in Scopes", s)
		}
	}
	switch {
	case c.AccessTokenTTL == 0:
		c.AccessTokenTTL = DefaultAccessTokenTTL
	case c.AccessTokenTTL < 0 || c.AccessTokenTTL > accesstoken.MaxLifetime:
		return fmt.Errorf("oauthas: AccessTokenTTL %v: want (0, %v]", c.AccessTokenTTL, accesstoken.MaxLifetime)
	}
	c.AccessTokenTTL = c.AccessTokenTTL.Truncate(time.Second)
	if c.AccessTokenTTL < time.Second {
		return errors.New("oauthas: AccessTokenTTL below one second")
	}
	switch {
	case c.CodeTTL == 0:
		c.CodeTTL = DefaultCodeTTL
	case c.CodeTTL < 0 || c.CodeTTL > MaxCodeTTL:
		return fmt.Errorf("oauthas: CodeTTL %v: want (0, %v]", c.CodeTTL, MaxCodeTTL)
	}
	return nil
}

// checkResourceURI: an absolute https URI (http on loopback) without
// fragment (RFC 8707 §2).
func checkResourceURI(r string) error {
	u, err := url.Parse(r)
	switch {
	case err != nil:
		return errors.New("not a URI")
	case u.Scheme != "https" && !(u.Scheme == "http" && loopback.Host(u.Hostname())):
		return errors.New("want https (http only on loopback)")
	case u.Host == "" || u.User != nil:
		return errors.New("want an absolute URI with a host and no user information")
	case u.Fragment != "" || strings.Contains(r, "#"):
		return errors.New("must not contain a fragment")
	}
	return nil
}

// scopeToken: an RFC 6749 §3.3 scope-token of at most 256 bytes.
func scopeToken(s string) bool { return len(s) <= 256 && alp.IsScopeToken(s) }
