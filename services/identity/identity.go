package identity

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	identityv1 "github.com/alpd-project/alpd/gen/alp/identity/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natsauth"
	"github.com/alpd-project/alpd/internal/service"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/identity/clientreg"
	"github.com/alpd-project/alpd/services/identity/oauthas"
)

// Service is the identity service.
type Service struct {
	service.Base
	identityv1.UnimplementedIdentityServiceServer
	opts      Options
	store     *identitystore.Store
	verifier  *accesstoken.Verifier
	signin    *signin.Service
	recheck   *Rechecker
	routes    []httproute.Route
	registrar *clientreg.Registrar
	sweeper   *ClientSweeper
}

// Options are identity's own settings.
type Options struct {
	// PublicURL is the broker's external base URL; each tenant's OAuth
	// issuer is IssuerURL(PublicURL, tenant).
	PublicURL string
	// Resource is the audience agents' access tokens are bound to (RFC
	// 8707); default PublicURL.
	Resource string
	// MaxStaleness of the revocation projection before verification fails
	// closed (default 30s).
	MaxStaleness time.Duration
	// IdPs are the organizations' OpenID providers, one per tenant; with
	// none, people cannot sign in (and HTTPRoutes holds only dynamic client
	// registration).
	IdPs []signin.TenantIdP
	// InsecureCookies: http on loopback only (tests, the demo).
	InsecureCookies bool
	// RecheckGrace is how long a person's agents keep working while their
	// IdP is unreachable (default 15m); then refreshes fail closed.
	RecheckGrace time.Duration
	// HTTPClient talks to the IdPs (default: 15 s timeout).
	HTTPClient *http.Client
	// DynamicClients bounds dynamic client registration and expires the
	// clients nobody used (zero values: defaults).
	DynamicClients DynamicClients
	// FreshMaxAge is how recent auth_time must be where a fresh sign-in
	// is required (signin.Config.FreshMaxAge; default 5m).
	FreshMaxAge time.Duration
}

// New builds the identity service.
func New(d service.Deps, o Options) *Service {
	if o.Resource == "" {
		o.Resource = o.PublicURL
	}
	if o.MaxStaleness == 0 {
		o.MaxStaleness = 30 * time.Second
	}
	if o.RecheckGrace == 0 {
		o.RecheckGrace = 15 * time.Minute
	}
	o.DynamicClients.complete()
	return &Service{Base: service.NewBase(alpv1.Role_ROLE_IDENTITY, d), opts: o}
}

// Store is the event-sourced identity state (nil before Start).
func (s *Service) Store() *identitystore.Store { return s.store }

// Verifier checks agents' access tokens locally with revocations (nil
// before Start).
func (s *Service) Verifier() *accesstoken.Verifier { return s.verifier }

// Ready adds the freshness of the identity projection to the base checks.
func (s *Service) Ready() error {
	if err := s.Base.Ready(); err != nil {
		return err
	}
	if s.store == nil {
		return errors.New("identity: store not open")
	}
	return s.store.Fresh(s.opts.MaxStaleness)
}

// Purposes are the keys every tenant has.
func Purposes() []alpv1.KeyPurpose {
	return []alpv1.KeyPurpose{
		alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER,
		alpv1.KeyPurpose_KEY_PURPOSE_TOKEN, alpv1.KeyPurpose_KEY_PURPOSE_COOKIE,
		alpv1.KeyPurpose_KEY_PURPOSE_DATA,
	}
}

// Start creates the identity stream and provisions missing tenant keys.
func (s *Service) Start(ctx context.Context) error {
	if err := s.EnsureOwnedStreams(ctx); err != nil {
		return err
	}
	for _, tenant := range s.Tenants {
		if err := s.provision(ctx, tenant); err != nil {
			return err
		}
	}
	store, err := identitystore.Open(ctx, s.Bus, s.Keys, s.Tenants, s.Logger)
	if err != nil {
		return fmt.Errorf("identity: open store: %w", err)
	}
	s.store = store
	// Earlier versions kept bindings in clear on the stream, one person per
	// account even for a shared address: move them into the person map
	// (one person per address) before anyone signs in.
	migrated, superseded, err := store.MigrateBindings(ctx)
	if err != nil {
		store.Close()
		return fmt.Errorf("identity: migrate bindings: %w", err)
	}
	if migrated+superseded > 0 {
		s.Logger.Info("earlier bindings moved into the person map", "migrated", migrated, "superseded", superseded)
	}
	go func() {
		<-ctx.Done()
		store.Close()
	}()
	s.verifier = &accesstoken.Verifier{
		Keys:         accesstoken.FromKeyStore(s.Keys),
		Resource:     s.opts.Resource,
		Issuers:      Issuers(s.opts.PublicURL, s.Tenants),
		Revocations:  store,
		MaxStaleness: s.opts.MaxStaleness,
	}
	if len(s.opts.IdPs) > 0 {
		if err := s.startSignIn(ctx); err != nil {
			return err
		}
	}
	if err := s.buildHTTP(ctx); err != nil {
		return err
	}
	s.sweeper = &ClientSweeper{Store: store, Tenants: s.Tenants, TTL: s.opts.DynamicClients.UnusedTTL, Logger: s.Logger}
	go s.sweeper.Run(ctx, s.opts.DynamicClients.SweepInterval)
	s.MarkStarted()
	return nil
}

// startSignIn connects to the tenants' IdPs. The cookie keys are a broker
// secret sealed under the first tenant's cookie key, shared by replicas.
func (s *Service) startSignIn(ctx context.Context) error {
	keys, err := s.sealedSecret(ctx, s.Tenants[0], "cookie", alpv1.KeyPurpose_KEY_PURPOSE_COOKIE, 64)
	if err != nil {
		return fmt.Errorf("identity: cookie keys: %w", err)
	}
	sessions, err := s.sessionStore(ctx)
	if err != nil {
		return err
	}
	svc, err := signin.New(ctx, signin.Config{
		Sessions:    sessions,
		PublicURL:   s.opts.PublicURL,
		Tenants:     s.opts.IdPs,
		HashKey:     keys[:32],
		BlockKey:    keys[32:],
		Insecure:    s.opts.InsecureCookies,
		HTTPClient:  s.opts.HTTPClient,
		FreshMaxAge: s.opts.FreshMaxAge,
		Logger:      s.Logger,
	}, binder{s.store}, refreshKeeper{s})
	if err != nil {
		return err
	}
	s.signin = svc
	s.recheck = &Rechecker{s: s, signin: svc, Grace: s.opts.RecheckGrace}
	return nil
}

// ClientSweeper expires the dynamic clients nobody used (nil before
// Start); Start runs it every DynamicClients.SweepInterval.
func (s *Service) ClientSweeper() *ClientSweeper { return s.sweeper }

// SignIn is the people sign-in service (nil before Start or without IdPs).
func (s *Service) SignIn() *signin.Service { return s.signin }

// Recheck is the IdP re-check for agent refreshes (nil without IdPs).
func (s *Service) Recheck() *Rechecker { return s.recheck }

// HTTPRoutes are identity's public HTTP routes (nil before Start), within
// URLSpace: people's sign-in, the agents' authorization servers, client
// registration and personal access tokens.
func (s *Service) HTTPRoutes() []httproute.Route { return slices.Clone(s.routes) }

func (s *Service) authorizationServer(ctx context.Context, reg *clientreg.Registrar) (*oauthas.Server, error) {
	codes, err := s.Bus.JetStream().CreateOrUpdateKeyValue(ctx,
		oauthas.CodesBucketConfig(s.Bus.StreamName(natsauth.OAuthCodesBucket), s.Bus.Options().Replicas))
	if err != nil {
		return nil, fmt.Errorf("identity: authorization code bucket: %w", err)
	}
	consentKey, err := s.sealedSecret(ctx, s.Tenants[0], "oauth-consent", alpv1.KeyPurpose_KEY_PURPOSE_COOKIE, 32)
	if err != nil {
		return nil, fmt.Errorf("identity: consent key: %w", err)
	}
	as, err := oauthas.New(oauthas.Config{
		ConsentKey:                        consentKey,
		PublicURL:                         s.opts.PublicURL,
		Tenants:                           s.Tenants,
		Resource:                          s.opts.Resource,
		Scopes:                            alp.Scopes(),
		RegistrationEndpoint:              s.opts.PublicURL + "/oauth/{tenant}/register",
		ClientIDMetadataDocumentSupported: true,
	}, oauthas.Deps{
		Store:        s.store,
		Clients:      &clientreg.CIMDSource{Store: s.store, Logger: s.Logger},
		Keys:         s.Keys,
		Sessions:     s.signin,
		Codes:        codes,
		Recheck:      s.recheck,
		Registration: reg.DCRRoute,
		Logger:       s.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("identity: authorization server: %w", err)
	}
	return as, nil
}

func (s *Service) buildHTTP(ctx context.Context) error {
	var routes []httproute.Route
	cfg := s.opts.DynamicClients.registrarConfig(clientreg.Config{Store: s.store, Bus: s.Bus, Scopes: alp.Scopes(), Logger: s.Logger})
	if s.signin != nil {
		routes = append(routes, s.signin.Routes()...)
		cfg.Sessions = s.signin
	}
	reg, err := clientreg.New(cfg)
	if err != nil {
		return fmt.Errorf("identity: client registration: %w", err)
	}
	if s.signin != nil {
		// Agents' OAuth 2.1 authorization server, one per tenant; it needs
		// people's sign-in to authorize.
		as, err := s.authorizationServer(ctx, reg)
		if err != nil {
			return err
		}
		routes = append(routes, as.Routes()...)
	} else {
		for _, t := range s.Tenants {
			routes = append(routes, reg.DCRRoute(t))
		}
	}
	if s.signin != nil {
		routes = append(routes, reg.AdminRoutes()...)
		routes = append(routes, reg.PATRoutes()...)
	}
	s.registrar = reg
	s.routes = routes
	return nil
}

// Introspect implements IdentityService.Introspect. An invalid token is
// an inactive answer with the OAuth error, not an RPC error.
func (s *Service) Introspect(ctx context.Context, req *identityv1.IntrospectRequest) (*identityv1.IntrospectResponse, error) {
	if s.verifier == nil {
		return nil, status.Error(codes.Unavailable, "identity: not started")
	}
	claims, err := s.verifier.Verify(ctx, req.GetToken())
	if err != nil {
		res := &identityv1.IntrospectResponse{ErrorCode: "invalid_token", ErrorDescription: "token rejected"}
		var te *accesstoken.Error
		if errors.As(err, &te) {
			res.ErrorCode, res.ErrorDescription = te.Code, te.Description
		}
		return res, nil
	}
	return &identityv1.IntrospectResponse{
		Active: true, Tenant: claims.Tenant, PersonId: claims.Subject, AgentId: claims.AgentID,
		ClientId: claims.ClientID, GrantId: claims.GrantID, TrustClass: claims.Class,
		Scopes: claims.Scopes, Audience: claims.Audience, Expires: timestamppb.New(claims.Expiry),
	}, nil
}

// provision makes sure tenant has an active key per purpose and that the
// identity stream knows every key's current state. Publishing is idempotent
// (the event id follows key id and state), so this runs at every start.
func (s *Service) provision(ctx context.Context, tenant string) error {
	for _, p := range Purposes() {
		if _, err := s.Keys.Active(ctx, tenant, p); errors.Is(err, keystore.ErrNoActiveKey) || errors.Is(err, keystore.ErrNotFound) {
			info, err := s.Keys.Generate(ctx, tenant, p)
			switch {
			case errors.Is(err, keystore.ErrActiveKeyExists):
				// Another identity replica provisioned it first.
			case err != nil:
				return fmt.Errorf("identity: generate %s key for %s: %w", p, tenant, err)
			default:
				s.Logger.Info("key generated", "tenant", tenant, "purpose", p.String(), "key_id", info.KeyID)
			}
		} else if err != nil {
			return fmt.Errorf("identity: %s key for %s: %w", p, tenant, err)
		}
		keys, err := s.Keys.Keys(ctx, tenant, p)
		if err != nil {
			return fmt.Errorf("identity: list %s keys for %s: %w", p, tenant, err)
		}
		for _, k := range keys {
			if err := s.PublishKey(ctx, k.Lifecycle()); err != nil {
				return err
			}
		}
	}
	return nil
}

// PublishKey records a key's lifecycle state on the identity stream.
func (s *Service) PublishKey(ctx context.Context, kl *alpv1.KeyLifecycle) error {
	subject, err := streams.IdentitySubject(kl.GetTenant(), streams.IdentityKeys, kl.GetKeyId())
	if err != nil {
		return err
	}
	ev := s.NewEvent("key_lifecycle", kl.GetTenant(), nil, kl.GetKeyId(), nil)
	ev.Header.EventId = uuid.NewSHA1(uuid.NameSpaceOID, []byte("key_lifecycle\x00"+kl.GetKeyId()+"\x00"+kl.GetState().String())).String()
	ev.Body = &alpv1.Event_KeyLifecycle{KeyLifecycle: kl}
	if _, err := s.Bus.Publish(ctx, subject, ev); err != nil {
		return fmt.Errorf("identity: publish key %s: %w", kl.GetKeyId(), err)
	}
	return nil
}

// ErrNotHosted: the tenant is not one of this broker's.
var ErrNotHosted = errors.New("identity: tenant is not hosted by this broker")

// Erase removes the person from the person map (their address and IdP
// account: no stream or bucket holds them afterwards), destroys their data
// key, making every body sealed with it unreadable, and appends the
// tombstone, which every replica's projection applies (the person's
// sessions, grants and tokens are void from then on). Streams are not
// rewritten; events name the person by id only. Running it again after a
// failure completes it.
func (s *Service) Erase(ctx context.Context, tenant, personID string, operator string) error {
	if !s.Tenants.Hosts(tenant) {
		return fmt.Errorf("%w: %q", ErrNotHosted, tenant)
	}
	if err := alp.ValidatePersonID(personID); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	subject, err := streams.IdentitySubject(tenant, streams.IdentityErasure, personID)
	if err != nil {
		return fmt.Errorf("identity: person id: %w", err)
	}
	if s.store == nil {
		return errors.New("identity: not started")
	}
	if err := s.store.ErasePeople(ctx, tenant, personID); err != nil {
		return fmt.Errorf("identity: erase the person's mapping: %w", err)
	}
	if err := s.Sealer.Destroy(ctx, tenant, personID); err != nil {
		return fmt.Errorf("identity: destroy data key: %w", err)
	}
	ev := s.NewEvent("data_key_destroyed", tenant, nil, personID,
		&alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_OPERATOR, Id: operator})
	ev.Body = &alpv1.Event_DataKeyDestroyed{DataKeyDestroyed: &alpv1.DataKeyDestroyed{Tenant: tenant, PersonId: personID}}
	if _, err := s.Bus.Publish(ctx, subject, ev); err != nil {
		return fmt.Errorf("identity: record erasure: %w", err)
	}
	return nil
}

// ErasePerson implements IdentityService.ErasePerson; the caller (an
// operator, by the authorization table) is named in the tombstone.
func (s *Service) ErasePerson(ctx context.Context, req *identityv1.ErasePersonRequest) (*identityv1.ErasePersonResponse, error) {
	switch err := s.Erase(ctx, req.GetTenant(), req.GetPersonId(), operatorActor(ctx).GetId()); {
	case errors.Is(err, ErrNotHosted), errors.Is(err, alp.ErrInvalidPersonID), errors.Is(err, alp.ErrInvalidTenant):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case err != nil:
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &identityv1.ErasePersonResponse{}, nil
}

// RegisterGRPC registers the identity gRPC API.
func (s *Service) RegisterGRPC(r grpc.ServiceRegistrar) {
	identityv1.RegisterIdentityServiceServer(r, s)
}

// Ping implements IdentityService.Ping.
func (s *Service) Ping(_ context.Context, req *identityv1.PingRequest) (*identityv1.PingResponse, error) {
	env, ready := s.Pass(req.GetEnvelope(), "ping")
	return &identityv1.PingResponse{Envelope: env, Service: s.Name(), Ready: ready}, nil
}

// IssuerURL is the issuer of tenant's agents' authorization server on a
// broker at publicURL (<publicURL>/oauth/<tenant>): access tokens name it,
// and every service that verifies them must expect it.
func IssuerURL(publicURL, tenant string) string { return oauthas.IssuerURL(publicURL, tenant) }

// Issuers maps each of tenants to its IssuerURL.
func Issuers(publicURL string, tenants []string) map[string]string {
	m := make(map[string]string, len(tenants))
	for _, t := range tenants {
		m[t] = IssuerURL(publicURL, t)
	}
	return m
}

// ResourceMetadataPath is where identity serves the protected-resource
// metadata (RFC 9728); every agent-facing service names it in its
// authentication challenges.
const ResourceMetadataPath = oauthas.WellKnownResource
