package testidp

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"

	"github.com/alpd-project/alpd/internal/loopback"
)

// Default lifetimes. Access and ID tokens are short on purpose: tests that
// exercise expiry shorten them further through Config.
const (
	DefaultAccessTokenLifetime  = 5 * time.Minute
	DefaultIDTokenLifetime      = 5 * time.Minute
	DefaultRefreshTokenLifetime = 24 * time.Hour
	DefaultSessionLifetime      = 8 * time.Hour
	DefaultRolesClaim           = "roles"

	// authRequestLifetime bounds how long a sign-in may take between the
	// authorization request and the code exchange.
	authRequestLifetime = 10 * time.Minute
	// codeLifetime bounds how long an issued authorization code is valid.
	codeLifetime = time.Minute
)

// Config describes a test OpenID Provider.
type Config struct {
	// Issuer is the issuer URL, e.g. "http://127.0.0.1:8123". It must be
	// http(s) on a loopback address (127.0.0.0/8, ::1) or localhost unless
	// AllowNonLoopback is set. Leave it empty to let Start or Serve derive it
	// from the listener ("http://127.0.0.1:<port>"). An embedder that mounts
	// Handler itself must set it. A trailing slash is removed.
	Issuer string
	// AllowNonLoopback lets the issuer and the listener use a non-loopback
	// address. testidp is a test tool with known passwords; leave this off
	// unless a test really needs it.
	AllowNonLoopback bool

	// TenantID is emitted as the "tid" claim (like Microsoft Entra ID) in ID
	// tokens, access tokens and userinfo. Empty means no "tid" claim.
	TenantID string
	// RolesClaim names the claim that carries User.Roles. Default "roles".
	RolesClaim string

	Users   []User
	Clients []Client

	// AutoLogin makes the login page sign the user in without a form when
	// the authorization request carries login_hint=<username> (or the
	// user's Subject). An unknown or disabled user gets error=access_denied
	// at the redirect URI. TEST ONLY: it skips password verification
	// entirely. Without a login_hint the form is shown as usual.
	AutoLogin bool

	// Token lifetimes; zero means the default.
	AccessTokenLifetime  time.Duration
	IDTokenLifetime      time.Duration
	RefreshTokenLifetime time.Duration
	// SessionLifetime bounds the IdP's own single sign-on session (the
	// cookie that lets a second authorization request skip the login).
	SessionLifetime time.Duration

	// RolesScope, when set, is a scope the client must ask for (and the
	// IdP then grants) for the roles claim to be emitted at all, like the
	// "groups" scope of Dex and Okta. Empty: the roles claim is always
	// emitted (like Entra app roles).
	RolesScope string

	// Behaviours of real IdPs that differ from zitadel/oidc's, for the
	// relying party's regression tests.
	//
	// NonceInRefreshedIDToken puts the sign-in's nonce into ID tokens
	// issued on the refresh grant, as Dex does (OIDC Core §12.2 allows it;
	// zitadel/oidc omits it).
	NonceInRefreshedIDToken bool
	// DeadRefreshTokenError, when set, is the OAuth error code answered for
	// a refresh grant whose refresh token is dead (unknown, expired, reused,
	// or of a disabled user) instead of RFC 6749's invalid_grant; Dex
	// answers "invalid_request".
	DeadRefreshTokenError string

	// Logger receives testidp's own log lines; nil discards them. Note that
	// zitadel/oidc's op package logs through slog.Default().
	Logger *slog.Logger
}

// User is a test user.
type User struct {
	// Subject is the stable "sub" claim. Required and unique.
	Subject string
	// Username is what the login form and login_hint take, and the
	// "preferred_username" claim (scope profile). Required, unique
	// (case-insensitively).
	Username string
	// Password for the login form. Empty means the user can only sign in
	// through AutoLogin.
	Password      string
	Email         string // "email" claim (scope email)
	EmailVerified bool   // "email_verified" claim (scope email); false is emitted explicitly
	Name          string // "name" claim (scope profile)
	// Roles are emitted in Config.RolesClaim (default "roles") whenever
	// non-empty, like Entra app roles.
	Roles []string
	// ImmutableID is emitted as the "oid" claim whenever non-empty, like the
	// Entra object id.
	ImmutableID string
	// Disabled starts the user disabled (see IdP.DisableUser).
	Disabled bool
}

// Client is a registered OAuth client. A client with a Secret is
// confidential (client_secret_basic or client_secret_post); one without is
// public (no client authentication, native-app redirect rules: loopback
// redirect URIs match on any port). Every client gets the authorization_code
// and refresh_token grants; PKCE with S256 is required for all clients.
type Client struct {
	ID           string
	Secret       string
	RedirectURIs []string
}

// Public reports whether the client has no secret.
func (c Client) Public() bool { return c.Secret == "" }

// reservedClaims are claims RolesClaim must not shadow.
var reservedClaims = []string{
	"iss", "sub", "aud", "exp", "iat", "nbf", "jti", "auth_time", "nonce", "acr", "amr",
	"azp", "at_hash", "c_hash", "client_id", "scope", "scopes", "tid", "oid", "email",
	"email_verified", "name", "preferred_username", "act", "sid",
}

// normalize validates cfg and fills in defaults. It returns a deep copy.
func (cfg Config) normalize() (Config, error) {
	out := cfg
	var errs []error
	if out.Issuer != "" {
		iss, err := checkIssuer(out.Issuer, out.AllowNonLoopback)
		if err != nil {
			errs = append(errs, err)
		}
		out.Issuer = iss
	}
	if out.RolesClaim == "" {
		out.RolesClaim = DefaultRolesClaim
	}
	if slices.Contains(reservedClaims, out.RolesClaim) {
		errs = append(errs, fmt.Errorf("testidp: RolesClaim %q would shadow a standard claim", out.RolesClaim))
	}
	if sc := out.RolesScope; sc != "" && (!oauthToken(sc, false) || slices.Contains(standardScopes, sc)) {
		errs = append(errs, fmt.Errorf("testidp: RolesScope %q must be a scope token other than the standard scopes", sc))
	}
	if code := out.DeadRefreshTokenError; code != "" && !oauthToken(code, true) {
		errs = append(errs, fmt.Errorf("testidp: DeadRefreshTokenError %q is not an OAuth error code", code))
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"AccessTokenLifetime", &out.AccessTokenLifetime, DefaultAccessTokenLifetime},
		{"IDTokenLifetime", &out.IDTokenLifetime, DefaultIDTokenLifetime},
		{"RefreshTokenLifetime", &out.RefreshTokenLifetime, DefaultRefreshTokenLifetime},
		{"SessionLifetime", &out.SessionLifetime, DefaultSessionLifetime},
	} {
		switch {
		case *d.v < 0:
			errs = append(errs, fmt.Errorf("testidp: %s is negative (%s)", d.name, *d.v))
		case *d.v == 0:
			*d.v = d.def
		}
	}

	out.Users = make([]User, len(cfg.Users))
	subjects := map[string]bool{}
	usernames := map[string]bool{}
	for i, u := range cfg.Users {
		u.Roles = slices.Clone(u.Roles)
		out.Users[i] = u
		switch {
		case u.Subject == "":
			errs = append(errs, fmt.Errorf("testidp: user %d (%q) has no Subject", i, u.Username))
		case subjects[u.Subject]:
			errs = append(errs, fmt.Errorf("testidp: duplicate user Subject %q", u.Subject))
		}
		subjects[u.Subject] = true
		key := strings.ToLower(u.Username)
		switch {
		case u.Username == "":
			errs = append(errs, fmt.Errorf("testidp: user %q has no Username", u.Subject))
		case usernames[key]:
			errs = append(errs, fmt.Errorf("testidp: duplicate Username %q", u.Username))
		}
		usernames[key] = true
	}

	out.Clients = make([]Client, len(cfg.Clients))
	ids := map[string]bool{}
	for i, c := range cfg.Clients {
		c.RedirectURIs = slices.Clone(c.RedirectURIs)
		out.Clients[i] = c
		switch {
		case c.ID == "":
			errs = append(errs, fmt.Errorf("testidp: client %d has no ID", i))
		case ids[c.ID]:
			errs = append(errs, fmt.Errorf("testidp: duplicate client ID %q", c.ID))
		}
		ids[c.ID] = true
		if len(c.RedirectURIs) == 0 {
			errs = append(errs, fmt.Errorf("testidp: client %q has no RedirectURIs", c.ID))
		}
		for _, r := range c.RedirectURIs {
			u, err := url.Parse(r)
			if err != nil || u.Scheme == "" || u.Fragment != "" || ((u.Scheme == "http" || u.Scheme == "https") && u.Host == "") {
				errs = append(errs, fmt.Errorf("testidp: client %q: redirect URI %q is not an absolute URI without fragment", c.ID, r))
			}
		}
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out, errors.Join(errs...)
}

// checkIssuer validates an issuer URL and returns it without a trailing slash.
func checkIssuer(raw string, allowNonLoopback bool) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("testidp: issuer %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("testidp: issuer %q must be an http or https URL", raw)
	}
	if u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", fmt.Errorf("testidp: issuer %q must be scheme://host[:port][/path] without user info, query or fragment", raw)
	}
	if u.Port() == "0" {
		return "", fmt.Errorf("testidp: issuer %q has port 0; leave Config.Issuer empty to derive it from the listener", raw)
	}
	if !allowNonLoopback && !loopback.Host(u.Hostname()) {
		return "", fmt.Errorf("testidp: refusing non-loopback issuer %q: testidp is a test tool with known passwords and only serves 127.0.0.0/8, ::1 or localhost unless Config.AllowNonLoopback is set", raw)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// standardScopes are the scopes op grants to every client.
var standardScopes = []string{oidc.ScopeOpenID, oidc.ScopeProfile, oidc.ScopeEmail, oidc.ScopePhone, oidc.ScopeAddress, oidc.ScopeOfflineAccess}

// oauthToken reports whether s is an RFC 6749 scope token (NQCHAR, §3.3)
// or, with space, an error code (NQSCHAR, §5.2).
func oauthToken(s string, space bool) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return (r < 0x21 && !(space && r == ' ')) || r > 0x7e || r == '"' || r == '\\'
	})
}
