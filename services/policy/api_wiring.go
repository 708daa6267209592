package policy

import (
	"sync/atomic"
	"time"

	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/webui"
	"github.com/alpd-project/alpd/services/policy/api"
	"github.com/alpd-project/alpd/services/policy/pages"
)

// The REST endpoints (services/policy/api) hang off the service here, so
// that policy.go stays about deciding. The broker hands them what only it
// knows in Options.API: the OAuth issuers and public URL agents' tokens
// are checked against, ingress's authenticator in all-in-one mode, and
// identity's sign-in when identity runs in the same process.

// APIOptions configure the REST endpoints.
type APIOptions struct {
	// Issuers maps each tenant to its OAuth issuer; Resource is the
	// audience agents' tokens must carry (the broker's public URL).
	Issuers  map[string]string
	Resource string
	// ResourceMetadataURL is sent in every authentication challenge.
	ResourceMetadataURL string
	// MaxStaleness of identity's revocations before every agent token is
	// refused (default agentauth.DefaultMaxStaleness).
	MaxStaleness time.Duration
	// Auth, if set, checks agents' bearer credentials instead of the
	// replica's own identity projection: in all-in-one mode ingress's, so
	// one process checks agents' tokens one way.
	Auth api.Authenticator
	// Sessions lets signed-in people and admins use their web session;
	// nil where identity runs in another process (split mode): the person
	// and admin routes then answer 503 web_sessions_unavailable.
	Sessions api.Sessions
	// AdminRole is an organization admin's session role (default
	// alp.AdminRole, as identity's).
	AdminRole string
	// UI, if set, serves the person's connections and rules pages and the
	// admin's relationships page (services/policy/pages).
	UI *webui.UI
}

// apiState is the service's REST API once Start has served it.
type apiState struct {
	api   atomic.Pointer[api.API]
	pages atomic.Pointer[[]httproute.Route]
}

// serveAPI builds the REST API on the open projections. Without o.Auth it
// checks agents' tokens against the replica's own identity projection.
func (s *Service) serveAPI() {
	o := s.opts.API
	st := s.state
	auth := o.Auth
	if auth == nil {
		auth = agentauth.NewAuthenticator(st.people, agentauth.FollowOptions{
			Tenants: s.Tenants, Keys: s.Keys, Issuers: o.Issuers, Resource: o.Resource,
			ResourceMetadataURL: o.ResourceMetadataURL, MaxStaleness: o.MaxStaleness,
		})
	}
	s.api.api.Store(api.New(api.Options{
		Ready:         s.Ready,
		Relationships: st.rels, Rules: st.rules, Types: st.types,
		MaxRuleBytes: st.engine.Limits().MaxBytes,
		Auth:         auth, Sessions: o.Sessions, AdminRole: o.AdminRole,
		Accepted: s.acceptedByAPI,
		Logger:   s.Logger.With("component", "api"),
	}))
	if o.UI != nil {
		routes := pages.New(pages.Options{Relationships: st.rels, Rules: st.rules, Ready: s.Ready, UI: o.UI,
			Logger: s.Logger.With("component", "pages")}).Routes()
		s.api.pages.Store(&routes)
	}
}

// HTTPRoutes are the REST routes (within URLSpace); nil until Start serves
// them.
func (s *Service) HTTPRoutes() []httproute.Route {
	a := s.api.api.Load()
	if a == nil {
		return nil
	}
	routes := a.Routes()
	if p := s.api.pages.Load(); p != nil {
		routes = append(routes, *p...)
	}
	return routes
}
