// Package signin signs people in to the broker's web pages through their
// organization's OpenID Connect provider, and keeps their web sessions.
//
// Each tenant (an address domain) is pinned to one IdP: its exact issuer
// (checked at discovery and in every ID token), its client, and optionally
// its tenant id (the Entra "tid" claim). Sign-in is the authorization code
// flow with PKCE (S256) and a nonce, scopes openid profile email
// offline_access plus the tenant's TenantIdP.Scopes; the state, PKCE
// verifier, nonce and return path live in a short-lived signed and
// encrypted cookie bound to the state.
//
// A person is bound to (issuer, subject) through the Binder, which answers
// an opaque person id. The address comes, in this order, from the
// admin-provisioned Directory ("sub:<subject>"), from a configured immutable
// claim (AddressClaim: a value with '@' must be in the tenant's
// VerifiedDomains, any other value is looked up in the Directory as
// "<claim>:<value>"), or from the plain email claim only when
// email_verified is true and the domain is allow-listed (EmailDomains). No
// address means 403 and nothing is stored. App roles (RolesClaim, default
// "roles") become session attributes for policy. The IdP refresh token
// (offline_access), with the sign-in's nonce and subject (an IdPGrant),
// goes to the RefreshKeeper, to be stored sealed; an IdP that grants none
// fails the sign-in. Refresh uses it later to re-check the person.
//
// A fresh sign-in (/signin?fresh=1) asks the IdP for max_age=0 and
// prompt=login and accepts only an auth_time newer than the sign-in's
// start and within Config.FreshMaxAge; RequireFresh sends stale sessions
// there (approval pages use it).
//
// Web sessions are a securecookie-encoded (HMAC-SHA256 signed, AES-256
// encrypted) cookie "alpd_session": Secure (unless Config.Insecure, allowed
// only for http on loopback), HttpOnly, SameSite=Lax (the IdP callback is a
// top-level cross-site GET), Path=/. Every session also has a server-side
// record (Config.Sessions), checked on every use: signing out deletes it,
// so a copied cookie stops working too, and an operator can revoke all of
// a person's sessions. When the records cannot be read, sessions are
// refused (503 sessions_unavailable): fail closed.
// State-changing forms are protected by CheckCSRF: a per-session token
// (HMAC of the session id) in the form field "csrf" (or header
// X-CSRF-Token) plus a same-origin Origin/Referer check.
//
// Errors answer problem details (httpjson) with a stable code (see the
// Code constants). Tokens, authorization codes and cookie values
// are never logged.
package signin

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/gorilla/securecookie"
	"github.com/zitadel/oidc/v3/pkg/client/rp"
	httphelper "github.com/zitadel/oidc/v3/pkg/http"
	"github.com/zitadel/oidc/v3/pkg/oidc"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
)

// Binder binds a person signed in at (issuer, subject) of a tenant to an
// opaque person id, recording the address and roles. It is called on every
// sign-in and must be idempotent for the same (tenant, issuer, subject).
// It may return an *httpjson.Error to refuse with a chosen status and code.
type Binder interface {
	BindPerson(ctx context.Context, tenant, issuer, subject, address string, roles []string) (personID string, err error)
}

// RefreshKeeper stores the person's IdP grant (sealed: the refresh token
// and the sign-in's nonce); a newer grant replaces an older one. It may
// return an *httpjson.Error.
type RefreshKeeper interface {
	KeepRefreshToken(ctx context.Context, tenant, personID string, grant IdPGrant) error
}

// Scopes requested from every IdP, before the tenant's TenantIdP.Scopes.
var Scopes = []string{oidc.ScopeOpenID, oidc.ScopeProfile, oidc.ScopeEmail, oidc.ScopeOfflineAccess}

// Paths served by Handler.
const (
	PathSignIn   = "/signin"
	PathCallback = "/signin/callback/" // + tenant
	PathSignOut  = "/signout"
)

// Cookie names.
const (
	SessionCookie    = "alpd_session"
	flowCookiePrefix = "alpd_signin_"
)

// Service is the sign-in service. Its methods are safe for concurrent use.
type Service struct {
	cfg     Config
	origin  string
	tenants map[string]*tenant
	binder  Binder
	keeper  RefreshKeeper
	log     *slog.Logger
	now     func() time.Time
	secure  bool

	sessionCodec *securecookie.SecureCookie
	flowCodec    *securecookie.SecureCookie
	csrfKey      []byte
	mux          *http.ServeMux
}

type tenant struct {
	*tenantConfig
	rp       rp.RelyingParty
	callback string
}

type nonceKey struct{}

// New validates cfg and runs OpenID discovery for every tenant's IdP. A
// configuration or discovery problem is reported per tenant.
func New(ctx context.Context, cfg Config, binder Binder, keeper RefreshKeeper) (*Service, error) {
	ncfg, tcs, origin, err := cfg.normalize()
	if binder == nil {
		err = errors.Join(err, errors.New("signin: a Binder is required"))
	}
	if keeper == nil {
		err = errors.Join(err, errors.New("signin: a RefreshKeeper is required"))
	}
	if cfg.Sessions == nil {
		err = errors.Join(err, errors.New("signin: Config.Sessions is required (server-side session records)"))
	}
	if err != nil {
		return nil, err
	}
	s := &Service{
		cfg:     ncfg,
		origin:  origin,
		tenants: map[string]*tenant{},
		binder:  binder,
		keeper:  keeper,
		log:     ncfg.Logger,
		now:     ncfg.Now,
		secure:  !ncfg.Insecure,
	}
	s.sessionCodec = securecookie.New(ncfg.HashKey, ncfg.BlockKey).
		SetSerializer(securecookie.JSONEncoder{}).
		MaxAge(int((ncfg.SessionTTL + time.Minute) / time.Second)).
		MaxLength(0) // setSession checks the size itself
	s.flowCodec = securecookie.New(ncfg.HashKey, ncfg.BlockKey).
		SetSerializer(securecookie.JSONEncoder{}).
		MaxAge(int((flowTTL + time.Minute) / time.Second))
	s.csrfKey = deriveKey(ncfg.HashKey, "alpd/signin/csrf-key/v1")

	// rp insists on a cookie handler with PKCE; this package keeps its own
	// flow cookie, so this one only serves rp's own handlers (unused).
	cookieOpts := []httphelper.CookieHandlerOpt{httphelper.WithSameSite(http.SameSiteLaxMode), httphelper.WithMaxAge(int(flowTTL / time.Second))}
	if !s.secure {
		cookieOpts = append(cookieOpts, httphelper.WithUnsecure())
	}
	rpCookies := httphelper.NewCookieHandler(deriveKey(ncfg.HashKey, "alpd/signin/rp-hash/v1"), deriveKey(ncfg.HashKey, "alpd/signin/rp-block/v1"), cookieOpts...)

	var errs []error
	for _, tc := range tcs {
		callback := origin + PathCallback + url.PathEscape(tc.Tenant)
		issuer := tc.Issuer
		scopes := append(slices.Clone(Scopes), tc.Scopes...)
		relying, err := rp.NewRelyingPartyOIDC(ctx, issuer, tc.ClientID, tc.ClientSecret, callback, scopes,
			rp.WithPKCE(rpCookies),
			rp.WithHTTPClient(ncfg.HTTPClient),
			rp.WithVerifierOpts(
				rp.WithISSVerifier(oidc.DefaultISSVerifier(issuer)),
				rp.WithNonce(func(ctx context.Context) string {
					n, _ := ctx.Value(nonceKey{}).(string)
					return n
				}),
			),
		)
		if err != nil {
			errs = append(errs, fmt.Errorf("signin: tenant %q: OpenID discovery at issuer %s failed: %w", tc.Tenant, issuer, err))
			continue
		}
		s.tenants[tc.Tenant] = &tenant{tenantConfig: tc, rp: relying, callback: callback}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	s.mux = httproute.Handler(s.Routes())
	return s, nil
}

// Routes are GET /signin, GET /signin/callback/{tenant}, POST /signout and
// GET /signin/session. Only sign-out takes a body: its small form.
func (s *Service) Routes() []httproute.Route {
	return []httproute.Route{
		{Pattern: PathSignIn, Handler: http.HandlerFunc(s.serveSignIn), Caller: httproute.Public, BodyLimit: httproute.NoBody},
		{Pattern: PathCallback + "{tenant}", Handler: http.HandlerFunc(s.serveCallback), Caller: httproute.Public, BodyLimit: httproute.NoBody},
		{Pattern: PathSignOut, Handler: http.HandlerFunc(s.serveSignOut), Caller: httproute.Public, BodyLimit: httproute.FormBody},
		{Method: http.MethodGet, Pattern: PathSession, Handler: http.HandlerFunc(s.serveSession), Caller: httproute.Person, BodyLimit: httproute.NoBody},
	}
}

// Handler serves Routes. Mount it at the root of PublicURL for the patterns
// "/signin", "/signin/" and "/signout" (or for "/" if nothing else is
// served there).
func (s *Service) Handler() http.Handler { return s.mux }

// CallbackURL returns the redirect URI to register at tenant's IdP.
func (s *Service) CallbackURL(tenant string) string {
	return s.origin + PathCallback + url.PathEscape(tenant)
}

// SignInURL returns the path that starts a sign-in to tenant ("" when only
// one tenant is configured) returning to returnPath; fresh asks for a fresh
// authentication.
func (s *Service) SignInURL(tenant, returnPath string, fresh bool) string {
	q := url.Values{}
	if tenant != "" {
		q.Set("tenant", tenant)
	}
	if returnPath != "" {
		q.Set("return", returnPath)
	}
	if fresh {
		q.Set("fresh", "1")
	}
	if len(q) == 0 {
		return PathSignIn
	}
	return PathSignIn + "?" + q.Encode()
}

func deriveKey(key []byte, label string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	return m.Sum(nil)
}

// singleTenant returns the only tenant's name, or "".
func (s *Service) singleTenant() string {
	if len(s.tenants) != 1 {
		return ""
	}
	for name := range s.tenants {
		return name
	}
	return ""
}

// PathSession answers the signed-in person's session, with the CSRF token
// their scripts and tools send on state-changing requests. It is plain JSON
// without CORS, so other origins cannot read it.
const PathSession = "/signin/session"

func (s *Service) serveSession(w http.ResponseWriter, r *http.Request) {
	sess, err := s.Session(r)
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, struct {
		*Session
		CSRF string `json:"csrf"`
	}{sess, sess.CSRFToken()})
}
