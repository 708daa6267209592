// Package broker is alpd's embedding API: a whole ALP broker (or some of its
// services) as a value. Workspace platforms that run one broker per tenant
// create several in one process; cmd/alpd is a thin wrapper around it.
//
//	b, err := broker.New(cfg, broker.Deps{NATS: nc, KeyStore: ks, Logger: log, Registerer: reg})
//	go b.Run(ctx)
//	http.Handle("/", b.Handler())
//
// Dependencies are injected and nothing is global: the broker never opens a
// listener, never reads the environment and never registers metrics on the
// default registry.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natsauth"
	"github.com/alpd-project/alpd/internal/seal"
	"github.com/alpd-project/alpd/internal/service"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/webui"
	"github.com/alpd-project/alpd/services/approvals"
	"github.com/alpd-project/alpd/services/federation"
	"github.com/alpd-project/alpd/services/identity"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/mcpapi"
	"github.com/alpd-project/alpd/services/ingress/nlipapi"
	"github.com/alpd-project/alpd/services/ingress/restapi"
	"github.com/alpd-project/alpd/services/ledger"
	ledgerapi "github.com/alpd-project/alpd/services/ledger/api"
	"github.com/alpd-project/alpd/services/policy"
)

// Config is what a broker is.
type Config struct {
	// Name namespaces the broker's streams, buckets and consumers on NATS.
	Name string
	// Tenants are the domains this broker is home for.
	Tenants []string
	// Services to run here (by name); empty runs all six.
	Services []string
	// Peers are gRPC addresses of services running elsewhere (split mode).
	Peers map[string]string
	Bus   BusConfig
	// Limits are the stream retention limits.
	Limits streams.Limits
	// PolicyWorkers is the number of policy handler loops (default 1).
	PolicyWorkers int
	// PublicURL is the broker's external base URL (OAuth issuers, resource);
	// default http://127.0.0.1 (tests and embedding without HTTP).
	PublicURL string
	// IdPs are the tenants' organization OpenID providers (people sign-in).
	IdPs []signin.TenantIdP
	// InsecureCookies allows non-Secure cookies (http on loopback only).
	InsecureCookies bool
	// RecheckGrace: how long agents keep working while a person's IdP is
	// unreachable (default 15m).
	RecheckGrace time.Duration
	// Operators may run diagnostics (trace) through Handler.
	Operators []Operator
	OpsLimits OpsLimits
	// Door tunes the send path all agent doors share: one set of rate
	// limits per agent, person and tenant, the decision wait and the NMP
	// rules (zero values: defaults).
	Door ingress.DoorConfig
	// NLIP tunes the agents' NLIP endpoints (zero values: defaults).
	NLIP nlipapi.Config
	// MCP tunes the agents' MCP endpoint (zero values: defaults; its
	// public URL is the broker's).
	MCP mcpapi.Config
	// REST tunes the agents' REST door under /v1/agent/ (zero values:
	// defaults; the broker sets its URL, issuers, peers and log).
	REST restapi.Config
	// Ledger tunes the ledger service (zero values: defaults; the broker
	// sets the metrics registerer).
	Ledger ledger.Options
	// LedgerAPI bounds the ledger's read API (exports; zero values:
	// defaults).
	LedgerAPI ledgerapi.Limits
	// DynamicClients bounds dynamic client registration and expires the
	// clients nobody used (zero values: defaults).
	DynamicClients identity.DynamicClients
	// Federation tunes federation (zero values: defaults; the broker sets
	// its public URL and, unless given, its name: PublicURL's host, or
	// <Name>.localhost when that host is no DNS name).
	Federation federation.Config
	// Approvals tunes the approvals service (zero values: defaults).
	Approvals ApprovalsConfig
	// FreshMaxAge is how recent a person's IdP sign-in must be to decide
	// an approval (default 5m).
	FreshMaxAge time.Duration
}

// BusConfig tunes JetStream use; zero values take the bus defaults.
type BusConfig struct {
	Replicas   int
	Duplicates time.Duration
	MaxDeliver int
	AckWait    time.Duration
}

// Deps are injected by the embedder.
type Deps struct {
	// NATS is a connected client (embedded or external). Required.
	NATS *nats.Conn
	// KeyStore holds the broker's private keys. Required.
	KeyStore keystore.KeyStore
	Logger   *slog.Logger
	// Registerer receives the broker's metrics, labelled broker=<name> so
	// brokers can share one registry. Default: a private registry.
	Registerer prometheus.Registerer
	// Gatherer serves /metrics from Handler; nil leaves /metrics out.
	Gatherer prometheus.Gatherer
	// GRPCServers get the local services' gRPC APIs and health registered
	// before Started is closed (split mode serves one on a listener).
	GRPCServers []grpc.ServiceRegistrar
	// PeerDialOptions gives the options to dial a remote peer of a role
	// (mTLS checking that peer's role, in production).
	PeerDialOptions func(peer alpv1.Role) []grpc.DialOption
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// Broker is one ALP broker.
type Broker struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	bus  *bus.Bus

	started   chan struct{}
	mu        sync.Mutex
	services  []service.Service
	ingress   *ingress.Service
	identity  *identity.Service
	grpc      *inProcessGRPC
	peers     map[alpv1.Role]*grpc.ClientConn
	probes    []*nats.Subscription
	runErr    error
	runCalled bool
	ops       *opsAuth
	// spaces are the services' parts of the URL space; http is what
	// Handler serves (mountHTTP).
	spaces []httproute.Space
	http   atomic.Pointer[httpSurface]
	// webUI is the pages' shared UI, built once (ui()).
	uiOnce sync.Once
	webUI  *webui.UI
}

// New checks the configuration and dependencies. It does no I/O: streams
// and consumers are created by Run.
func New(cfg Config, deps Deps) (*Broker, error) {
	var errs []error
	if !nameRE.MatchString(cfg.Name) {
		errs = append(errs, fmt.Errorf("broker: name %q must match %s", cfg.Name, nameRE))
	}
	if len(cfg.Tenants) == 0 {
		errs = append(errs, errors.New("broker: at least one tenant domain is required"))
	}
	for _, t := range cfg.Tenants {
		if alp.ValidateTenant(t) != nil {
			errs = append(errs, fmt.Errorf("broker: tenant %q is not a lowercase domain name", t))
		}
	}
	for _, s := range cfg.Services {
		if _, ok := envelope.RoleByName(s); !ok {
			errs = append(errs, fmt.Errorf("broker: unknown service %q", s))
		}
	}
	for s := range cfg.Peers {
		if _, ok := envelope.RoleByName(s); !ok {
			errs = append(errs, fmt.Errorf("broker: peer %q is not a service", s))
		}
	}
	if err := validOperators(cfg.Operators); err != nil {
		errs = append(errs, err)
	}
	if deps.NATS == nil {
		errs = append(errs, errors.New("broker: a NATS connection is required"))
	}
	if deps.KeyStore == nil {
		errs = append(errs, errors.New("broker: a KeyStore is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Registerer == nil {
		deps.Registerer = prometheus.NewRegistry()
	}
	log := deps.Logger.With("broker", cfg.Name)
	reg := prometheus.WrapRegistererWith(prometheus.Labels{"broker": cfg.Name}, deps.Registerer)
	b, err := bus.New(deps.NATS, bus.Options{
		Namespace:  cfg.Name,
		Replicas:   cfg.Bus.Replicas,
		Duplicates: cfg.Bus.Duplicates,
		MaxDeliver: cfg.Bus.MaxDeliver,
		AckWait:    cfg.Bus.AckWait,
		Logger:     log,
		// Every consumer checks that an event's producer may produce it.
		CheckProducer: streams.CheckProducer,
		Registerer:    reg,
	})
	if err != nil {
		return nil, err
	}
	br := &Broker{cfg: cfg, deps: deps, log: log, bus: b, started: make(chan struct{}),
		ops: newOpsAuth(cfg.Operators, cfg.OpsLimits), spaces: urlSpaces()}
	// Until Run has started the services, their spaces answer 503; a URL
	// plan with overlapping spaces fails here, before anything runs.
	if err := br.mountHTTP(nil); err != nil {
		return nil, err
	}
	return br, nil
}

// federationConfig is the federation configuration with the broker's
// URL and name filled in.
func (b *Broker) federationConfig() federation.Config {
	c := b.cfg.Federation
	c.PublicURL = b.publicURL()
	if c.BrokerName == "" {
		// A NATS namespace may hold '_', a DNS label may not.
		c.BrokerName = strings.ToLower(strings.ReplaceAll(b.cfg.Name, "_", "-")) + ".localhost"
		if u, err := url.Parse(c.PublicURL); err == nil && alp.ValidateTenant(u.Hostname()) == nil {
			c.BrokerName = u.Hostname()
		} else if alp.ValidateTenant(c.BrokerName) != nil {
			c.BrokerName = "alpd.localhost"
		}
	}
	return c
}

func (b *Broker) publicURL() string {
	if b.cfg.PublicURL != "" {
		return b.cfg.PublicURL
	}
	return "http://127.0.0.1"
}

// issuers maps each tenant to its agents' OAuth issuer, which access
// tokens must name.
func (b *Broker) issuers() map[string]string {
	return identity.Issuers(b.publicURL(), b.cfg.Tenants)
}

// Runs reports whether this broker runs service name.
func (b *Broker) Runs(name string) bool {
	return len(b.cfg.Services) == 0 || slices.Contains(b.cfg.Services, name)
}

// Bus is the broker's event bus.
func (b *Broker) Bus() *bus.Bus { return b.bus }

// Started is closed once every local service has started (or Run failed).
func (b *Broker) Started() <-chan struct{} { return b.started }

// StartError is the error that stopped Run from starting, once Started is
// closed; nil while starting or when the start succeeded.
func (b *Broker) StartError() error {
	select {
	case <-b.started:
	default:
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.runErr
}

// Ingress is the local ingress service, nil before Started or when ingress
// runs elsewhere.
func (b *Broker) Ingress() *ingress.Service {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ingress
}

// Identity is the local identity service, nil before Started or when it
// runs elsewhere.
func (b *Broker) Identity() *identity.Service {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.identity
}

// Run starts the local services and blocks until ctx is done, then drains
// the consumers (finishing what they pulled) and returns. A start-up failure
// is returned at once.
func (b *Broker) Run(ctx context.Context) error {
	b.mu.Lock()
	if b.runCalled {
		b.mu.Unlock()
		return errors.New("broker: Run called twice")
	}
	b.runCalled = true
	b.mu.Unlock()

	err := b.start(ctx)
	b.mu.Lock()
	b.runErr = err
	b.mu.Unlock()
	close(b.started)
	if err != nil {
		b.stop()
		return err
	}
	b.log.Info("broker running", "tenants", b.cfg.Tenants, "services", b.names())
	<-ctx.Done()
	b.log.Info("broker stopping: draining consumers")
	for _, s := range b.services {
		select {
		case <-s.Stopped():
		case <-time.After(30 * time.Second):
			b.log.Warn("service did not drain in 30s", "service", envelope.ServiceName(s.Role()))
		}
	}
	b.stop()
	return nil
}

func (b *Broker) start(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// Only the services that seal, open or erase bodies get the data-key
	// bucket (and a Sealer): the other roles' NATS users may not touch it.
	var sealer *seal.Sealer
	for _, r := range envelope.Roles() {
		if sealer != nil || !natsauth.UsesDataKeys(r) || !b.Runs(envelope.ServiceName(r)) {
			continue
		}
		kv, err := b.bus.JetStream().CreateOrUpdateKeyValue(sctx, seal.BucketConfig(b.bus.StreamName(natsauth.DataKeysBucket)))
		if err != nil {
			return fmt.Errorf("broker: data key bucket: %w", err)
		}
		sealer = seal.New(kv, b.deps.KeyStore)
	}
	deps := service.Deps{
		Bus: b.bus, Logger: b.log, Keys: b.deps.KeyStore, Sealer: sealer,
		Tenants: b.cfg.Tenants, Limits: b.cfg.Limits,
	}
	var svcs []service.Service
	// Identity first: it provisions the tenant keys the others use.
	if b.Runs("identity") {
		b.identity = identity.New(deps, identity.Options{
			PublicURL: b.publicURL(), IdPs: b.cfg.IdPs, InsecureCookies: b.cfg.InsecureCookies,
			RecheckGrace: b.cfg.RecheckGrace, DynamicClients: b.cfg.DynamicClients, FreshMaxAge: b.cfg.FreshMaxAge,
		})
		svcs = append(svcs, b.identity)
	}
	if b.Runs("ingress") {
		nc := b.cfg.NLIP
		nc.PublicURL = b.publicURL()
		nlipLog := b.log.With("component", "nlip")
		mc := b.cfg.MCP
		mc.PublicURL = b.publicURL()
		mcpLog := b.log.With("component", "mcp")
		b.ingress = ingress.New(deps, ingress.Options{Issuers: b.issuers(), Resource: b.publicURL(),
			ResourceMetadataURL: b.publicURL() + identity.ResourceMetadataPath, Peer: b.Client, Door: b.cfg.Door,
			Bindings: []ingress.Binding{func(s *ingress.Service) []httproute.Route {
				return nlipapi.New(s, nc, nlipLog).Routes()
			}, func(s *ingress.Service) []httproute.Route {
				return mcpapi.New(s, mc, mcpLog).Routes()
			}, func(s *ingress.Service) []httproute.Route {
				rc := b.cfg.REST
				rc.PublicURL, rc.Issuers, rc.Log = b.publicURL(), b.issuers(), b.log.With("component", "rest")
				return restapi.New(s, rc).Routes()
			}}})
		svcs = append(svcs, b.ingress)
	}
	if b.Runs("policy") {
		svcs = append(svcs, policy.New(deps, b.policyOptions()))
	}
	if b.Runs("federation") {
		svcs = append(svcs, federation.New(deps, federation.Options{Config: b.federationConfig(), Peer: b.Client}))
	}
	if b.Runs("ledger") {
		// The ledger's metrics carry the broker label like the bus's.
		lo := b.cfg.Ledger
		lo.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"broker": b.cfg.Name}, b.deps.Registerer)
		lo.API = b.ledgerAPIOptions()
		svcs = append(svcs, ledger.New(deps, lo))
	}
	if b.Runs("approvals") {
		svcs = append(svcs, approvals.New(deps, b.approvalsOptions()))
	}
	b.mu.Lock()
	b.services = svcs
	b.mu.Unlock()

	for _, s := range svcs {
		if err := s.Start(ctx); err != nil {
			return fmt.Errorf("broker: start %s: %w", envelope.ServiceName(s.Role()), err)
		}
	}
	for _, s := range svcs {
		sub, err := service.ServeProbes(b.deps.NATS, b.cfg.Name, s)
		if err != nil {
			return err
		}
		b.probes = append(b.probes, sub)
	}
	g, err := newInProcessGRPC(svcs)
	if err != nil {
		return err
	}
	b.grpc = g
	for _, r := range b.deps.GRPCServers {
		for _, s := range svcs {
			s.RegisterGRPC(r)
		}
		g.registerHealth(r)
	}
	go g.watchHealth(ctx, svcs)
	if err := b.dialPeers(); err != nil {
		return err
	}
	return b.mountHTTP(svcs)
}

func (b *Broker) dialPeers() error {
	b.peers = map[alpv1.Role]*grpc.ClientConn{}
	for name, addr := range b.cfg.Peers {
		if b.Runs(name) {
			continue
		}
		role, _ := envelope.RoleByName(name)
		var opts []grpc.DialOption
		if b.deps.PeerDialOptions != nil {
			opts = b.deps.PeerDialOptions(role)
		}
		conn, err := grpc.NewClient(addr, opts...)
		if err != nil {
			return fmt.Errorf("broker: peer %s at %s: %w", name, addr, err)
		}
		b.peers[role] = conn
	}
	return nil
}

func (b *Broker) stop() {
	for _, s := range b.probes {
		_ = s.Unsubscribe()
	}
	if b.grpc != nil {
		b.grpc.stop()
	}
	for _, c := range b.peers {
		_ = c.Close()
	}
}

func (b *Broker) names() []string {
	var out []string
	for _, s := range b.services {
		out = append(out, envelope.ServiceName(s.Role()))
	}
	return out
}

// Client is a gRPC connection to service role: in-process when it runs
// here, else the configured peer.
func (b *Broker) Client(role alpv1.Role) (grpc.ClientConnInterface, error) {
	select {
	case <-b.started:
	default:
		return nil, errors.New("broker: not started")
	}
	if b.Runs(envelope.ServiceName(role)) {
		if b.grpc == nil {
			return nil, errors.New("broker: not running")
		}
		return b.grpc.client, nil
	}
	if c, ok := b.peers[role]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("broker: %s runs elsewhere and no peer address is configured", envelope.ServiceName(role))
}

// Ready is nil when Run has started every local service and each is ready.
func (b *Broker) Ready() error {
	select {
	case <-b.started:
	default:
		return errors.New("broker: starting")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.runErr != nil {
		return b.runErr
	}
	var errs []error
	if !b.deps.NATS.IsConnected() {
		errs = append(errs, fmt.Errorf("broker: NATS connection is %s", b.deps.NATS.Status()))
	}
	for _, s := range b.services {
		if err := s.Ready(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
