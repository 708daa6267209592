// Package testidp is an in-process OpenID Provider for tests and the demo.
//
// It is a real OpenID Connect provider built on zitadel/oidc's op package
// with in-memory storage: discovery, JWKS (an RS256 key generated per IdP),
// authorization code with PKCE (S256 required), refresh tokens with
// offline_access (rotated on every use, reuse revokes the token family),
// userinfo, introspection and revocation, served over real HTTP. ID tokens
// carry Entra-like claims: "tid" (Config.TenantID), "oid" (User.ImmutableID)
// and the user's roles (claim "roles" by default), plus email/email_verified
// and name/preferred_username for the email and profile scopes, and
// auth_time.
//
// Sign-in goes through a login page served by this package: a minimal HTML
// form (username and password, CSRF-protected by a per-request token) or,
// for browser-less tests, Config.AutoLogin, which signs in the user named by
// the authorization request's login_hint without any form. AutoLogin is a
// TEST-ONLY shortcut that skips password checks. The IdP keeps a single
// sign-on session cookie: a later authorization request from the same
// cookie jar reuses it (same auth_time) unless prompt=login or max_age
// demands a fresh authentication.
//
// testidp refuses non-loopback issuers and listeners unless
// Config.AllowNonLoopback is set: its users and passwords are test data.
//
// Test hooks: DisableUser/EnableUser (a disabled user's refresh tokens fail
// with invalid_grant and new sign-ins are denied), SetDown (the token
// endpoint answers 503) and SetRefreshedIDTokenNonce (refreshed ID tokens
// carry a foreign nonce). Config switches reproduce other IdPs' behaviour:
// NonceInRefreshedIDToken and DeadRefreshTokenError (Dex), RolesScope (Dex's
// and Okta's groups scope).
package testidp

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/oauth2"

	"github.com/alpd-project/alpd/internal/loopback"
)

const (
	loginPath        = "/login"
	authRequestParam = "authRequestID"
)

// IdP is a running (or mountable) test OpenID Provider. Its methods are safe
// for concurrent use.
type IdP struct {
	cfg        Config
	log        *slog.Logger
	store      *storage
	provider   *op.Provider
	handler    http.Handler
	cookieName string

	issuerMu sync.RWMutex
	issuer   string

	down atomic.Bool

	srvMu sync.Mutex
	srv   *http.Server
}

// New builds an IdP from cfg. It does not listen: call Start or Serve, or
// mount Handler (then Config.Issuer must be set).
func New(cfg Config) (*IdP, error) {
	ncfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	idp := &IdP{
		cfg:        ncfg,
		log:        ncfg.Logger,
		issuer:     ncfg.Issuer,
		cookieName: "testidp_sso_" + strings.ToLower(rand.Text()[:10]),
	}
	idp.store, err = newStorage(ncfg, idp.Issuer, idp.down.Load)
	if err != nil {
		return nil, err
	}
	var cryptoKey [32]byte
	if _, err := rand.Read(cryptoKey[:]); err != nil {
		return nil, fmt.Errorf("testidp: crypto key: %w", err)
	}
	opCfg := &op.Config{
		CryptoKey:             cryptoKey,
		CodeMethodS256:        true,
		AuthMethodPost:        true,
		GrantTypeRefreshToken: true,
		SupportedScopes:       []string{oidc.ScopeOpenID, oidc.ScopeProfile, oidc.ScopeEmail, oidc.ScopeOfflineAccess},
		SupportedClaims:       append(append([]string{}, op.DefaultSupportedClaims...), "tid", "oid", ncfg.RolesClaim),
	}
	if ncfg.RolesScope != "" {
		opCfg.SupportedScopes = append(opCfg.SupportedScopes, ncfg.RolesScope)
	}
	issuerFn := func(bool) (op.IssuerFromRequest, error) {
		return func(*http.Request) string { return idp.Issuer() }, nil
	}
	idp.provider, err = op.NewProvider(opCfg, idp.store, issuerFn, op.WithAllowInsecure())
	if err != nil {
		return nil, fmt.Errorf("testidp: %w", err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc(loginPath, idp.serveLogin)
	mux.Handle("/", idp.provider)
	tokenPath := idp.provider.TokenEndpoint().Relative()
	idp.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if idp.Issuer() == "" {
			http.Error(w, "testidp: issuer unknown: set Config.Issuer or call Start/Serve", http.StatusServiceUnavailable)
			return
		}
		if idp.down.Load() && r.URL.Path == tokenPath {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]string{
				"error":             "temporarily_unavailable",
				"error_description": "testidp is set down",
			})
			return
		}
		if ncfg.DeadRefreshTokenError != "" && r.URL.Path == tokenPath {
			idp.serveDeadRefreshTokenError(w, r, mux)
			return
		}
		mux.ServeHTTP(w, r)
	})
	return idp, nil
}

// Handler serves the whole IdP (OIDC endpoints and the login page) at paths
// relative to the issuer: mount it at the issuer's path, stripping any
// prefix (http.StripPrefix).
func (idp *IdP) Handler() http.Handler { return idp.handler }

// Issuer returns the issuer URL, or "" before Start/Serve when
// Config.Issuer was empty.
func (idp *IdP) Issuer() string {
	idp.issuerMu.RLock()
	defer idp.issuerMu.RUnlock()
	return idp.issuer
}

// DiscoveryURL returns the OpenID configuration document's URL.
func (idp *IdP) DiscoveryURL() string { return idp.Issuer() + oidc.DiscoveryEndpoint }

// Endpoint returns the authorization and token endpoints for
// golang.org/x/oauth2, with client_secret_basic (HTTP Basic) client
// authentication: it works for confidential clients and, with an empty
// secret, for public ones.
func (idp *IdP) Endpoint() oauth2.Endpoint {
	iss := idp.Issuer()
	return oauth2.Endpoint{
		AuthURL:   idp.provider.AuthorizationEndpoint().Absolute(iss),
		TokenURL:  idp.provider.TokenEndpoint().Absolute(iss),
		AuthStyle: oauth2.AuthStyleInHeader,
	}
}

// UserinfoURL returns the userinfo endpoint.
func (idp *IdP) UserinfoURL() string { return idp.provider.UserinfoEndpoint().Absolute(idp.Issuer()) }

// JWKSURL returns the JWKS endpoint.
func (idp *IdP) JWKSURL() string { return idp.provider.KeysEndpoint().Absolute(idp.Issuer()) }

// Start listens on addr and serves in the background; it returns once the
// listener is open. An empty addr means the issuer's host:port, or
// "127.0.0.1:0" when Config.Issuer is empty (the issuer is then derived from
// the chosen port). addr must be a loopback address unless
// Config.AllowNonLoopback is set.
func (idp *IdP) Start(addr string) error {
	if addr == "" {
		addr = "127.0.0.1:0"
		if iss := idp.Issuer(); iss != "" {
			u, err := url.Parse(iss)
			if err != nil {
				return fmt.Errorf("testidp: issuer: %w", err)
			}
			port := u.Port()
			if port == "" {
				port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
			}
			addr = net.JoinHostPort(u.Hostname(), port)
		}
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("testidp: listen address %q: %w", addr, err)
	}
	if !idp.cfg.AllowNonLoopback && !loopback.Host(host) {
		return fmt.Errorf("testidp: refusing to listen on non-loopback address %q: use 127.0.0.1, ::1 or localhost, or set Config.AllowNonLoopback", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("testidp: %w", err)
	}
	if err := idp.Serve(ln); err != nil {
		_ = ln.Close()
		return err
	}
	return nil
}

// Serve serves on ln in the background and returns at once; Close stops it
// and closes ln. A TCP listener must be on a loopback address unless
// Config.AllowNonLoopback is set. When Config.Issuer is empty the issuer
// becomes "http://" + ln.Addr().
func (idp *IdP) Serve(ln net.Listener) error {
	tcp, isTCP := ln.Addr().(*net.TCPAddr)
	if !idp.cfg.AllowNonLoopback {
		if !isTCP || !tcp.IP.IsLoopback() {
			return fmt.Errorf("testidp: refusing to serve on non-loopback listener %s: set Config.AllowNonLoopback to allow it", ln.Addr())
		}
	}
	idp.srvMu.Lock()
	defer idp.srvMu.Unlock()
	if idp.srv != nil {
		return errors.New("testidp: already serving; Close first")
	}
	idp.issuerMu.Lock()
	if idp.issuer == "" {
		if !isTCP {
			idp.issuerMu.Unlock()
			return fmt.Errorf("testidp: cannot derive an issuer from listener %s; set Config.Issuer", ln.Addr())
		}
		idp.issuer = "http://" + tcp.String()
	}
	idp.issuerMu.Unlock()

	// A test tool, but it listens on a port: the same kind of bounds as
	// alpd's own server (no body it takes is larger than a login form).
	srv := &http.Server{Handler: http.MaxBytesHandler(idp.handler, maxBody), ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10}
	idp.srv = srv
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			idp.log.Error("testidp: serve", "err", err)
		}
	}()
	idp.log.Info("testidp: serving", "issuer", idp.Issuer(), "addr", ln.Addr().String())
	return nil
}

// maxBody bounds every request body the test IdP reads (login and token
// forms).
const maxBody = 64 << 10

// Close stops the server started by Start or Serve, closing its listener and
// connections. It is safe to call more than once.
func (idp *IdP) Close() error {
	idp.srvMu.Lock()
	defer idp.srvMu.Unlock()
	if idp.srv == nil {
		return nil
	}
	err := idp.srv.Close()
	idp.srv = nil
	return err
}

// DisableUser disables a user: its refresh tokens now fail with
// invalid_grant, its access tokens stop working at userinfo and
// introspection, its SSO sessions end and new sign-ins are denied.
// Revoked tokens stay revoked after EnableUser.
func (idp *IdP) DisableUser(subject string) error {
	if err := idp.store.setDisabled(subject, true); err != nil {
		return err
	}
	idp.log.Info("testidp: user disabled", "sub", subject)
	return nil
}

// EnableUser lets a disabled user sign in again.
func (idp *IdP) EnableUser(subject string) error {
	if err := idp.store.setDisabled(subject, false); err != nil {
		return err
	}
	idp.log.Info("testidp: user enabled", "sub", subject)
	return nil
}

// SetDown simulates an unhealthy IdP: while down, the token endpoint answers
// 503 with error "temporarily_unavailable" and /ready fails. Discovery,
// JWKS, authorization and userinfo keep working.
func (idp *IdP) SetDown(down bool) {
	idp.down.Store(down)
	idp.log.Info("testidp: set down", "down", down)
}
