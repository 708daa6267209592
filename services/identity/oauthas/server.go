package oauthas

import (
	"context"
	"crypto/ed25519"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/rs/cors"
	httphelper "github.com/zitadel/oidc/v3/pkg/http"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/httproute"
)

// Server is the authorization servers of all hosted tenants. It is safe for
// concurrent use.
type Server struct {
	cfg       Config
	deps      Deps
	log       *slog.Logger
	now       func() time.Time
	clients   ClientSource
	minter    *accesstoken.Issuer
	verifiers []*accesstoken.Verifier // one per resource, for revocation
	codes     codeStore
	tenants   map[string]*tenantAS
	routes    []httproute.Route
	handler   http.Handler
}

// tenantAS is one tenant's authorization server: an op.Server.
type tenantAS struct {
	op.UnimplementedServer
	s      *Server
	tenant string
	issuer string
}

var _ op.Server = (*tenantAS)(nil)

// New builds the authorization servers of cfg.Tenants.
func New(cfg Config, deps Deps) (*Server, error) {
	cfg.Tenants = slices.Clone(cfg.Tenants)
	cfg.Resources = slices.Clone(cfg.Resources)
	cfg.Scopes = slices.Clone(cfg.Scopes)
	cfg.DefaultScopes = slices.Clone(cfg.DefaultScopes)
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	switch {
	case len(cfg.ConsentKey) < 32:
		return nil, errNoConsentKey
	case deps.Store == nil:
		return nil, errors.New("oauthas: Deps.Store is required")
	case deps.Keys == nil:
		return nil, errors.New("oauthas: Deps.Keys is required")
	case deps.Sessions == nil:
		return nil, errors.New("oauthas: Deps.Sessions is required")
	case deps.Codes == nil:
		return nil, errors.New("oauthas: Deps.Codes is required")
	}
	s := &Server{cfg: cfg, deps: deps, log: deps.Logger, now: deps.Now, clients: deps.Clients,
		tenants: map[string]*tenantAS{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.clients == nil {
		s.clients = StoreClients{Store: deps.Store}
	}
	s.codes = codeStore{kv: deps.Codes}
	issuers := map[string]string{}
	for _, t := range cfg.Tenants {
		ts := &tenantAS{s: s, tenant: t, issuer: IssuerURL(cfg.PublicURL, t)}
		s.tenants[t] = ts
		issuers[t] = ts.issuer
	}
	s.minter = &accesstoken.Issuer{Keys: deps.Keys, Issuers: issuers, MaxLifetime: cfg.AccessTokenTTL, Now: s.now}
	for _, r := range cfg.Resources {
		s.verifiers = append(s.verifiers, &accesstoken.Verifier{
			Keys: accesstoken.FromKeyStore(deps.Keys), Resource: r, Issuers: maps.Clone(issuers),
			Revocations: deps.Store, Now: s.now,
		})
	}
	s.routes = s.buildRoutes()
	s.handler = httproute.Handler(s.routes)
	return s, nil
}

// Issuer returns tenant's issuer URL, or "" for a tenant not hosted.
func (s *Server) Issuer(tenant string) string {
	if t := s.tenants[tenant]; t != nil {
		return t.issuer
	}
	return ""
}

// Issuers maps every hosted tenant to its issuer (for accesstoken.Verifier).
func (s *Server) Issuers() map[string]string {
	out := map[string]string{}
	for t, ts := range s.tenants {
		out[t] = ts.issuer
	}
	return out
}

// ResourceMetadataURL is where the RFC 9728 metadata of resource (one of
// Config.Resources) is served, as RFC 9728 §3.1 builds it: the well-known
// path with the resource's path appended (the root well-known path for a
// resource without a path). This is the resource_metadata of a
// WWW-Authenticate challenge. "" for a resource not configured.
func (s *Server) ResourceMetadataURL(resource string) string {
	if !slices.Contains(s.cfg.Resources, resource) {
		return ""
	}
	u, err := url.Parse(resource)
	if err != nil {
		return ""
	}
	if p := u.EscapedPath(); p != "/" {
		return s.cfg.PublicURL + WellKnownResource + p
	}
	return s.cfg.PublicURL + WellKnownResource
}

// Patterns are the http.ServeMux patterns to route to Handler when the
// broker mounts it beside other handlers.
func (s *Server) Patterns() []string {
	return []string{PathPrefix, WellKnownAS + PathPrefix, WellKnownResource, WellKnownResource + "/"}
}

// Handler serves every tenant's authorization server under
// /oauth/<tenant>/ (authorize, token, revoke, jwks, register and the OpenID
// Connect discovery form of the metadata), the RFC 8414 metadata at
// /.well-known/oauth-authorization-server/oauth/<tenant>, and the RFC 9728
// protected resource metadata at /.well-known/oauth-protected-resource (and
// /.well-known/oauth-protected-resource<path> for each resource with a
// path): its Routes.
func (s *Server) Handler() http.Handler { return s.handler }

// ConsentBody bounds the consent form: the authorization request it carries
// back (its query, form-encoded once more), the CSRF token and the decision.
const ConsentBody int64 = 32 << 10

// Routes are every route Handler serves, with their body limits. op parses
// the token, revocation and authorization requests with ParseForm, which
// reads up to 10 MB; the route's limit applies before it.
func (s *Server) Routes() []httproute.Route { return slices.Clone(s.routes) }

func (s *Server) buildRoutes() []httproute.Route {
	endpoints := op.Endpoints{
		Authorization: op.NewEndpoint(PathAuthorize),
		Token:         op.NewEndpoint(PathToken),
		Revocation:    op.NewEndpoint(PathRevoke),
		JwksURI:       op.NewEndpoint(PathJWKS),
	}
	// Browser-based agents call the token, revocation and key endpoints
	// cross-origin; none of them uses cookies, so no credentials.
	corsOpts := &cors.Options{
		AllowedOrigins: []string{"*"},
		AllowedMethods: []string{http.MethodGet, http.MethodHead, http.MethodPost},
		AllowedHeaders: []string{"Authorization", "Content-Type", "Accept", "MCP-Protocol-Version"},
	}
	public := func(pattern string, h http.Handler, limit int64) httproute.Route {
		rt := httproute.Route{Pattern: pattern, Handler: h, Caller: httproute.Public, BodyLimit: limit}
		if limit > 0 {
			rt.TooLarge = oauthTooLarge
		}
		return rt
	}
	var routes []httproute.Route
	for _, t := range slices.Sorted(maps.Keys(s.tenants)) {
		ts := s.tenants[t]
		prefix := PathPrefix + t
		opH := noStore(http.StripPrefix(prefix, methodGuard(op.RegisterServer(ts, endpoints,
			op.WithEncoder(issEncoder{inner: oidc.NewEncoder(), iss: ts.issuer}),
			op.WithServerCORSOptions(corsOpts)))))
		routes = append(routes,
			public(prefix+PathToken, opH, httproute.FormBody),
			public(prefix+PathRevoke, opH, httproute.FormBody),
			public(prefix+PathAuthorize, opH, httproute.FormBody),
			public(prefix+PathJWKS, opH, httproute.NoBody),
			public(prefix+oidc.DiscoveryEndpoint, opH, httproute.NoBody),
			// The rest of op's routes (its probes) and its not-found answer.
			public(prefix+"/", opH, httproute.NoBody),
			httproute.Route{Pattern: prefix + PathConsent, Handler: noStore(ts.consentHandler()),
				Caller: httproute.Person, BodyLimit: ConsentBody},
			public(WellKnownAS+prefix, metadataHandler(func() any { return ts.metadata() }), httproute.NoBody),
		)
		if s.deps.Registration != nil {
			if reg := s.deps.Registration(t); reg.Handler != nil {
				reg.Pattern = prefix + PathRegister
				routes = append(routes, reg)
			}
		}
	}
	routes = append(routes, public(WellKnownResource, metadataHandler(func() any { return s.resourceMetadata(s.cfg.Resource) }), httproute.NoBody))
	for _, r := range s.cfg.Resources {
		u, _ := url.Parse(r)
		if p := u.EscapedPath(); p != "" && p != "/" {
			routes = append(routes, public(WellKnownResource+p, metadataHandler(func() any { return s.resourceMetadata(r) }), httproute.NoBody))
		}
	}
	return routes
}

// oauthTooLarge answers a refused body as an OAuth error (RFC 6749 §5.2),
// which is what OAuth clients parse.
func oauthTooLarge(w http.ResponseWriter, r *http.Request, limit int64) {
	w.Header().Set("Cache-Control", "no-store")
	op.WriteError(w, r, op.NewStatusError(oidc.ErrInvalidRequest().WithDescription("the request body exceeds %d bytes", limit),
		http.StatusRequestEntityTooLarge), nil)
}

// noStore marks every answer of the authorization endpoints as not to be
// cached (RFC 6749 §5.1); the JWKS handler overrides it.
func noStore(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Pragma", "no-cache")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		next.ServeHTTP(w, r)
	})
}

// methodGuard enforces what op does not: the token and revocation endpoints
// take POST with their parameters in the body only (RFC 6749 §3.2, RFC 7009
// §2.1), so that secrets never travel in a URL (and into access logs); the
// authorization endpoint takes GET or POST. CORS preflights pass.
func methodGuard(next http.Handler) http.Handler {
	refuse := func(w http.ResponseWriter, r *http.Request, status int, desc string) {
		op.WriteError(w, r, op.NewStatusError(oidc.ErrInvalidRequest().WithDescription("%s", desc), status), nil)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodOptions {
			next.ServeHTTP(w, r)
			return
		}
		switch r.URL.Path {
		case PathToken, PathRevoke:
			if r.Method != http.MethodPost {
				w.Header().Set("Allow", http.MethodPost)
				refuse(w, r, http.StatusMethodNotAllowed, "use POST")
				return
			}
			if r.URL.RawQuery != "" {
				refuse(w, r, http.StatusBadRequest, "send the parameters in the request body, not in the URL")
				return
			}
		case PathAuthorize:
			if r.Method != http.MethodGet && r.Method != http.MethodPost {
				w.Header().Set("Allow", "GET, POST")
				refuse(w, r, http.StatusMethodNotAllowed, "use GET or POST")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// issEncoder adds the issuer to every authorization error response that op
// builds (RFC 9207): op encodes only error, error_description and state.
type issEncoder struct {
	inner httphelper.Encoder
	iss   string
}

func (e issEncoder) Encode(src any, dst map[string][]string) error {
	if err := e.inner.Encode(src, dst); err != nil {
		return err
	}
	dst["iss"] = []string{e.iss}
	return nil
}

// Keys serves the tenant's token keys that verify: ACTIVE and RETIRED, never
// REVOKED ones.
func (t *tenantAS) Keys(ctx context.Context, _ *op.Request[struct{}]) (*op.Response, error) {
	infos, err := t.s.deps.Keys.Keys(ctx, t.tenant, accesstoken.Purpose)
	if err != nil {
		t.s.log.ErrorContext(ctx, "oauthas: reading token keys", "tenant", t.tenant, "err", err)
		return nil, op.NewStatusError(temporarilyUnavailable("the signing keys cannot be read now"), http.StatusServiceUnavailable)
	}
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{}}
	for _, k := range infos {
		if k.State != alpv1.KeyState_KEY_STATE_ACTIVE && k.State != alpv1.KeyState_KEY_STATE_RETIRED {
			continue
		}
		if len(k.PublicKey) != ed25519.PublicKeySize {
			continue
		}
		set.Keys = append(set.Keys, jose.JSONWebKey{
			Key: ed25519.PublicKey(k.PublicKey), KeyID: k.KeyID, Algorithm: string(jose.EdDSA), Use: "sig",
		})
	}
	resp := op.NewResponse(set)
	resp.Header.Set("Cache-Control", "public, max-age=60")
	resp.Header["Pragma"] = nil
	return resp, nil
}

// Discovery serves the authorization server metadata at the OpenID Connect
// discovery location of the issuer too (RFC 8414 §5 allows it); the
// document is the RFC 8414 one: this is not an OpenID provider (no ID
// tokens).
func (t *tenantAS) Discovery(context.Context, *op.Request[struct{}]) (*op.Response, error) {
	resp := op.NewResponse(t.metadata())
	resp.Header.Set("Cache-Control", "public, max-age=300")
	resp.Header["Pragma"] = nil
	return resp, nil
}
