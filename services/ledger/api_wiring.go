package ledger

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	ledgerv1 "github.com/alpd-project/alpd/gen/alp/ledger/v1"
	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/webui"
	"github.com/alpd-project/alpd/services/ledger/api"
	"github.com/alpd-project/alpd/services/ledger/pages"
)

// The person-facing read API (services/ledger/api) hangs off the service
// here, so that ledger.go stays about writing. The broker hands it what only
// it knows (the OAuth issuers, the public URL, and identity's sign-in when
// identity runs in the same process) in Options.API; Start serves it, its
// HTTP routes are HTTPRoutes, and the gRPC read methods of LedgerService
// are the methods below.

// APIOptions configure the read API.
type APIOptions struct {
	// Issuers maps each tenant to its OAuth issuer; Resource is the
	// audience agents' tokens must carry (the broker's public URL), as for
	// ingress.
	Issuers  map[string]string
	Resource string
	// ResourceMetadataURL is sent in every authentication challenge.
	ResourceMetadataURL string
	// MaxStaleness of identity's revocations before every token is
	// refused (default agentauth.DefaultMaxStaleness).
	MaxStaleness time.Duration
	// Auth, if set, checks bearer credentials instead of a follower of
	// the ledger's own: in all-in-one mode ingress's, so that one process
	// keeps one identity projection for agents' tokens.
	Auth api.Authenticator
	// Sessions lets signed-in people read with their web session; nil
	// where identity runs in another process (split mode): bearer only.
	Sessions api.Sessions
	Limits   api.Limits
	// UI, if set, serves the person's ledger page (services/ledger/pages).
	UI *webui.UI
}

// apiState is the service's read API, once Start has served it.
type apiState struct {
	api   atomic.Pointer[api.API]
	pages atomic.Pointer[[]httproute.Route]
}

// serveAPI starts the read API. Without o.Auth it follows identity's
// stream (to check agents' tokens against revocations) until ctx ends.
func (s *Service) serveAPI(ctx context.Context, o APIOptions) {
	auth := o.Auth
	if auth == nil {
		auth = followerAuth{agentauth.Follow(ctx, agentauth.FollowOptions{
			Bus: s.Bus, Tenants: s.Tenants, Keys: s.Keys,
			Issuers: o.Issuers, Resource: o.Resource, ResourceMetadataURL: o.ResourceMetadataURL,
			MaxStaleness: o.MaxStaleness, Logger: s.Logger,
		})}
	}
	if o.UI != nil {
		routes := pages.New(pages.Options{Backend: s, UI: o.UI, Logger: s.Logger.With("component", "pages")}).Routes()
		s.reads.pages.Store(&routes)
	}
	s.reads.api.Store(api.New(api.Options{Backend: s, Auth: auth, Sessions: o.Sessions, Limits: o.Limits,
		Logger: s.Logger.With("component", "api")}))
}

// HTTPRoutes are the read API's routes (/v1/ledger, within URLSpace); nil
// until Start serves it.
func (s *Service) HTTPRoutes() []httproute.Route {
	a := s.reads.api.Load()
	if a == nil {
		return nil
	}
	routes := a.Routes()
	if p := s.reads.pages.Load(); p != nil {
		routes = append(routes, *p...)
	}
	return routes
}

// readAPI is the read API, or, before it is served, one that refuses every
// call as unavailable (it has no way to check a credential).
func (s *Service) readAPI() *api.API {
	if a := s.reads.api.Load(); a != nil {
		return a
	}
	return api.New(api.Options{Backend: s})
}

// followerAuth authenticates with the follower's current authenticator,
// which changes once identity's projection is open.
type followerAuth struct{ f *agentauth.Follower }

func (a followerAuth) Authenticate(ctx context.Context, authorization string, scopes ...string) (agentauth.Principal, error) {
	return a.f.Authenticator().Authenticate(ctx, authorization, scopes...)
}

// GetHead implements LedgerService.GetHead (api.API.GetHead).
func (s *Service) GetHead(ctx context.Context, req *ledgerv1.GetHeadRequest) (*ledgerv1.GetHeadResponse, error) {
	return s.readAPI().GetHead(ctx, req)
}

// ListEntries implements LedgerService.ListEntries.
func (s *Service) ListEntries(ctx context.Context, req *ledgerv1.ListEntriesRequest) (*ledgerv1.ListEntriesResponse, error) {
	return s.readAPI().ListEntries(ctx, req)
}

// GetInclusionProof implements LedgerService.GetInclusionProof.
func (s *Service) GetInclusionProof(ctx context.Context, req *ledgerv1.GetInclusionProofRequest) (*ledgerv1.GetInclusionProofResponse, error) {
	return s.readAPI().GetInclusionProof(ctx, req)
}

// GetConsistencyProof implements LedgerService.GetConsistencyProof.
func (s *Service) GetConsistencyProof(ctx context.Context, req *ledgerv1.GetConsistencyProofRequest) (*ledgerv1.GetConsistencyProofResponse, error) {
	return s.readAPI().GetConsistencyProof(ctx, req)
}

// Export implements LedgerService.Export.
func (s *Service) Export(req *ledgerv1.ExportRequest, stream grpc.ServerStreamingServer[ledgerv1.ExportResponse]) error {
	return s.readAPI().Export(req, stream)
}
