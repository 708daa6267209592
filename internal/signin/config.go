package signin

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/loopback"
)

// Defaults.
const (
	DefaultSessionTTL  = 8 * time.Hour
	DefaultFreshMaxAge = 5 * time.Minute
	DefaultRolesClaim  = "roles"

	// MaxExtraScopes and MaxScopeLen bound TenantIdP.Scopes: they all go
	// into every authorization URL.
	MaxExtraScopes = 16
	MaxScopeLen    = 128

	// flowTTL bounds how long a sign-in may take between /signin and the
	// callback.
	flowTTL = 10 * time.Minute
	// clockSkew is the tolerance between our clock and the IdP's for
	// auth_time checks.
	clockSkew = 30 * time.Second
	// defaultHTTPTimeout bounds each call to an IdP when Config.HTTPClient
	// is nil.
	defaultHTTPTimeout = 15 * time.Second
)

// TenantIdP pins one tenant (an address domain served by this broker) to
// its organization's OpenID provider.
type TenantIdP struct {
	// Tenant is the tenant's domain, e.g. "example.org".
	Tenant string
	// Issuer is the IdP's exact issuer URL. Discovery must report exactly
	// this issuer and every ID token must carry it. https, or http on a
	// loopback host (test IdPs).
	Issuer       string
	ClientID     string
	ClientSecret string
	// TenantID, when set, must equal the ID token's "tid" claim (Microsoft
	// Entra ID's tenant id). Empty means not checked.
	TenantID string

	// AddressClaim names an immutable ID token claim (e.g. "oid", "upn")
	// that identifies the person. A value containing '@' is taken as the
	// address itself and must be in VerifiedDomains; any other value is
	// looked up in Directory under "<AddressClaim>:<value>". Mutable claims
	// (email, preferred_username, name …) are refused here. Empty means no
	// such claim is used.
	AddressClaim string
	// VerifiedDomains are the domains the organization has verified at its
	// IdP; every address this tenant binds (directory, immutable claim,
	// email) must be in one of them (exact match, no subdomains). Empty
	// means just Tenant.
	VerifiedDomains []string
	// EmailDomains allow-lists domains for which the plain "email" claim
	// may give the address, and then only with email_verified == true. It
	// must be a subset of VerifiedDomains. Empty means the email claim is
	// never used.
	EmailDomains []string
	// Directory is the admin-provisioned directory: keys "sub:<subject>"
	// (the ID token subject at this tenant's issuer) or
	// "<AddressClaim>:<value>" (e.g. "oid:8c1e…"), values addresses.
	Directory map[string]string
	// RolesClaim names the claim carrying the person's app roles (a string
	// or an array of strings). Default "roles".
	RolesClaim string
	// Scopes are asked for besides openid, profile, email and
	// offline_access, e.g. "groups" for an IdP (Dex, Okta) that sends the
	// groups claim only when asked. At most MaxExtraScopes scope tokens
	// (RFC 6749 §3.3), no duplicates.
	Scopes []string
}

// Config configures the sign-in service.
type Config struct {
	// PublicURL is the broker's public base URL (scheme://host[:port], no
	// path), e.g. "https://broker.example.org". The callback of tenant T is
	// <PublicURL>/signin/callback/<T>; register it at the IdP.
	PublicURL string
	Tenants   []TenantIdP
	// HashKey (32 bytes or more) signs and BlockKey (exactly 32 bytes,
	// AES-256) encrypts the cookies. In alpd they come from the KeyStore's
	// cookie purpose. They must differ.
	HashKey  []byte
	BlockKey []byte
	// SessionTTL is the lifetime of a web session. Default 8h.
	SessionTTL time.Duration
	// FreshMaxAge is how recent auth_time must be for RequireFresh and for
	// a fresh sign-in to be accepted. Default 5m.
	FreshMaxAge time.Duration
	// Insecure drops the Secure attribute from cookies. Allowed only (and
	// then required) when PublicURL is http on a loopback host.
	Insecure bool
	// HTTPClient talks to the IdPs (discovery, JWKS, token endpoint).
	// Default: a client with a 15 s timeout.
	HTTPClient *http.Client
	// Logger; nil discards. Tokens, codes and cookies are never logged.
	Logger *slog.Logger
	// Now is the clock for sessions and freshness; default time.Now.
	Now func() time.Time
	// Sessions keeps the server-side records of web sessions (required):
	// a session cookie is honored only while its record exists, so
	// signing out and revocation end it everywhere (KVSessions).
	Sessions SessionStore
}

// forbiddenAddressClaims are mutable or unverified claims that must not
// name a person.
var forbiddenAddressClaims = []string{
	"email", "email_verified", "preferred_username", "name", "given_name", "family_name",
	"nickname", "unique_name", "sub", "iss", "aud", "tid", "roles",
}

// tenantConfig is a validated, normalized TenantIdP.
type tenantConfig struct {
	TenantIdP
	verified  map[string]bool
	emailOK   map[string]bool
	directory map[string]string
}

// normalize validates cfg and returns a copy with defaults filled in, and
// whether cookies carry the Secure attribute, and the public origin.
func (cfg Config) normalize() (Config, []*tenantConfig, string, error) {
	out := cfg
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("signin: "+format, a...)) }

	origin := ""
	u, err := url.Parse(cfg.PublicURL)
	switch {
	case cfg.PublicURL == "":
		bad("PublicURL is required")
	case err != nil:
		bad("PublicURL %q: %v", cfg.PublicURL, err)
	case u.Scheme != "http" && u.Scheme != "https":
		bad("PublicURL %q must be an http(s) URL", cfg.PublicURL)
	case u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || (u.Path != "" && u.Path != "/"):
		bad("PublicURL %q must be scheme://host[:port] without path, user info, query or fragment", cfg.PublicURL)
	default:
		host := strings.ToLower(u.Hostname())
		port := u.Port()
		if (u.Scheme == "https" && port == "443") || (u.Scheme == "http" && port == "80") {
			port = ""
		}
		hp := host
		if strings.Contains(host, ":") {
			hp = "[" + host + "]"
		}
		if port != "" {
			hp += ":" + port
		}
		origin = u.Scheme + "://" + hp
		switch {
		case u.Scheme == "https" && cfg.Insecure:
			bad("Insecure is set but PublicURL %q is https: refusing to send cookies without the Secure attribute", cfg.PublicURL)
		case u.Scheme == "http" && !loopback.Host(host):
			bad("refusing PublicURL %q: plain http is allowed only on a loopback host (127.0.0.0/8, ::1, localhost)", cfg.PublicURL)
		case u.Scheme == "http" && !cfg.Insecure:
			bad("PublicURL %q is plain http: Secure cookies would never be sent back; set Insecure (allowed on loopback only) or use https", cfg.PublicURL)
		}
	}
	out.PublicURL = origin

	if len(cfg.HashKey) < 32 {
		bad("HashKey must be at least 32 bytes (got %d)", len(cfg.HashKey))
	}
	if len(cfg.BlockKey) != 32 {
		bad("BlockKey must be exactly 32 bytes (got %d)", len(cfg.BlockKey))
	}
	if len(cfg.HashKey) > 0 && bytes.Equal(cfg.HashKey, cfg.BlockKey) {
		bad("HashKey and BlockKey must differ")
	}
	out.HashKey = bytes.Clone(cfg.HashKey)
	out.BlockKey = bytes.Clone(cfg.BlockKey)

	switch {
	case cfg.SessionTTL < 0:
		bad("SessionTTL is negative")
	case cfg.SessionTTL == 0:
		out.SessionTTL = DefaultSessionTTL
	}
	switch {
	case cfg.FreshMaxAge < 0:
		bad("FreshMaxAge is negative")
	case cfg.FreshMaxAge == 0:
		out.FreshMaxAge = DefaultFreshMaxAge
	}
	if out.HTTPClient == nil {
		out.HTTPClient = &http.Client{Timeout: defaultHTTPTimeout}
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.Now == nil {
		out.Now = time.Now
	}

	if len(cfg.Tenants) == 0 {
		bad("no tenants configured")
	}
	seen := map[string]bool{}
	var tenants []*tenantConfig
	for i, t := range cfg.Tenants {
		tc, terrs := normalizeTenant(t)
		name := t.Tenant
		if name == "" {
			name = fmt.Sprintf("#%d", i)
		}
		for _, e := range terrs {
			bad("tenant %q: %s", name, e)
		}
		if tc == nil {
			continue
		}
		if seen[tc.Tenant] {
			bad("tenant %q is configured twice", tc.Tenant)
		}
		seen[tc.Tenant] = true
		tenants = append(tenants, tc)
	}
	out.Tenants = nil
	for _, t := range tenants {
		out.Tenants = append(out.Tenants, t.TenantIdP)
	}
	return out, tenants, origin, errors.Join(errs...)
}

func normalizeTenant(t TenantIdP) (*tenantConfig, []string) {
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }

	tc := &tenantConfig{TenantIdP: t, verified: map[string]bool{}, emailOK: map[string]bool{}, directory: map[string]string{}}
	if tenant, err := alp.ParseTenant(t.Tenant); err != nil {
		bad("Tenant must be a domain name like example.org")
	} else {
		tc.Tenant = string(tenant)
	}

	iu, err := url.Parse(t.Issuer)
	switch {
	case t.Issuer == "":
		bad("Issuer is required")
	case err != nil:
		bad("Issuer %q: %v", t.Issuer, err)
	case iu.Host == "" || iu.User != nil || iu.RawQuery != "" || iu.Fragment != "":
		bad("Issuer %q must be an absolute URL without user info, query or fragment", t.Issuer)
	case iu.Scheme == "https":
	case iu.Scheme == "http" && loopback.Host(iu.Hostname()):
	default:
		bad("Issuer %q must be https (plain http only on a loopback host)", t.Issuer)
	}
	if t.ClientID == "" {
		bad("ClientID is required")
	}

	if tc.RolesClaim == "" {
		tc.RolesClaim = DefaultRolesClaim
	}
	for _, problem := range scopeProblems(t.Scopes) {
		bad("Scopes: %s", problem)
	}
	tc.Scopes = slices.Clone(t.Scopes)
	if tc.AddressClaim != "" && slices.Contains(forbiddenAddressClaims, tc.AddressClaim) {
		bad("AddressClaim %q is not an immutable identifier; use e.g. \"oid\" or \"upn\" (the email claim is governed by EmailDomains)", tc.AddressClaim)
	}

	tc.VerifiedDomains = nil
	verified := t.VerifiedDomains
	if len(verified) == 0 {
		verified = []string{tc.Tenant}
	}
	for _, v := range verified {
		d, err := alp.ParseTenant(v)
		if err != nil {
			bad("VerifiedDomains: %q is not a domain name", v)
			continue
		}
		tc.verified[string(d)] = true
		tc.VerifiedDomains = append(tc.VerifiedDomains, string(d))
	}
	tc.EmailDomains = nil
	for _, v := range t.EmailDomains {
		d, err := alp.ParseTenant(v)
		switch {
		case err != nil:
			bad("EmailDomains: %q is not a domain name", v)
		case !tc.verified[string(d)]:
			bad("EmailDomains: %q is not one of the tenant's VerifiedDomains", d)
		default:
			tc.emailOK[string(d)] = true
			tc.EmailDomains = append(tc.EmailDomains, string(d))
		}
	}
	for k, v := range t.Directory {
		prefix, rest, ok := strings.Cut(k, ":")
		switch {
		case !ok || rest == "":
			bad("Directory key %q must be \"sub:<subject>\" or \"<AddressClaim>:<value>\"", k)
			continue
		case prefix != "sub" && (tc.AddressClaim == "" || prefix != tc.AddressClaim):
			bad("Directory key %q: prefix %q is neither \"sub\" nor the AddressClaim %q", k, prefix, tc.AddressClaim)
			continue
		}
		addr, err := alp.ParseAddress(v)
		if err != nil {
			bad("Directory[%q]: %v", k, err)
			continue
		}
		if !tc.verified[addr.Domain()] {
			bad("Directory[%q]: %q is not in the tenant's VerifiedDomains", k, addr)
			continue
		}
		tc.directory[k] = addr.String()
	}
	tc.Directory = tc.directory
	if len(errs) > 0 {
		return nil, errs
	}
	return tc, nil
}

// scopeProblems checks a tenant's extra scopes: each a scope token (RFC
// 6749 §3.3: printable ASCII without space, '"' or '\') of at most
// MaxScopeLen bytes, none of the scopes always asked for, no duplicates, at
// most MaxExtraScopes. It returns one message per problem.
func scopeProblems(scopes []string) []string {
	var out []string
	if len(scopes) > MaxExtraScopes {
		out = append(out, fmt.Sprintf("at most %d extra scopes (got %d)", MaxExtraScopes, len(scopes)))
	}
	seen := map[string]bool{}
	for _, sc := range scopes {
		switch {
		case sc == "":
			out = append(out, "an empty scope")
		case len(sc) > MaxScopeLen:
			out = append(out, fmt.Sprintf("scope %.20q… is longer than %d bytes", sc, MaxScopeLen))
		case !alp.IsScopeToken(sc):
			out = append(out, fmt.Sprintf("%q is not a scope token (printable ASCII without space, '\"' or '\\')", sc))
		case slices.Contains(Scopes, sc):
			out = append(out, fmt.Sprintf("%q is always requested; list only extra scopes", sc))
		case seen[sc]:
			out = append(out, fmt.Sprintf("%q is listed twice", sc))
		}
		seen[sc] = true
	}
	return out
}
