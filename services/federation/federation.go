// Package federation connects this broker to other brokers
// (docs/federation.md). Outbound, it takes what the sender side cleared for
// a recipient at another broker off policy's decisions into the outbox,
// signs it as an alp-wire/v1 envelope with the broker's key and delivers
// it to the recipient domain's home broker, with retries, backoff and a
// circuit breaker per remote; the remote's signed answers become the
// envelope's delivery status. Inbound, it serves the domains' and the
// broker's discovery documents and the broker-to-broker API, checks every
// request in a fixed order (each refusal recorded, nothing of it
// delivered), hands what passes to policy's recipient side, and answers
// each deliverable of a remote sender with this side's signed receipt.
package federation

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"

	federationv1 "github.com/alpd-project/alpd/gen/alp/federation/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alpwire"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/internal/service"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/federation/discovery"
)

// Config tunes federation; zero values take the defaults below.
type Config struct {
	// Disabled: this broker does not federate (plain http off loopback, or
	// an embedded broker without federation). Nothing goes to other
	// brokers: an envelope for a remote recipient fails at once with
	// federation_disabled, and the broker-to-broker API answers 404.
	Disabled bool
	// BrokerName is this broker's name, the signer of what it sends
	// (default: the host of PublicURL).
	BrokerName string
	// PublicURL is the broker's https base URL, published in the domains'
	// and the broker's documents.
	PublicURL string
	// Discovery tunes how remote domains and brokers are found.
	Discovery discovery.Config
	// Skew bounds the difference between a request's or an envelope's time
	// and this broker's clock (default 5m).
	Skew time.Duration
	// OutboxMaxAge: an item not delivered within it fails, and the sender
	// is told (default 24h).
	OutboxMaxAge time.Duration
	// RetryMin and RetryMax bound the outbox's exponential backoff, with
	// jitter (defaults 1s and 5m).
	RetryMin, RetryMax time.Duration
	// StrangerRate limits connection requests from strangers, per sender
	// and per sending broker (default 5 a minute, burst 5).
	StrangerRate Rate
	// Senders is the number of outbox items sent at once by this process
	// (default 64); PerRemote caps those going to one remote domain
	// (default 16), so a slow remote cannot hold every sender.
	Senders, PerRemote int
	// RequestTimeout bounds one request to a remote broker (default 15s).
	RequestTimeout time.Duration
}

// Rate is a token bucket: PerMinute requests a minute, Burst at once.
type Rate struct {
	PerMinute float64
	Burst     int
}

func (c Config) withDefaults() Config {
	if c.Skew <= 0 {
		c.Skew = 5 * time.Minute
	}
	if c.OutboxMaxAge <= 0 {
		c.OutboxMaxAge = 24 * time.Hour
	}
	if c.RetryMin <= 0 {
		c.RetryMin = time.Second
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 5 * time.Minute
	}
	c.RetryMax = max(c.RetryMax, c.RetryMin)
	if c.StrangerRate.PerMinute <= 0 {
		c.StrangerRate = Rate{PerMinute: 5, Burst: 5}
	}
	if c.StrangerRate.Burst <= 0 {
		c.StrangerRate.Burst = 1
	}
	if c.Senders <= 0 {
		c.Senders = 64
	}
	if c.PerRemote <= 0 {
		c.PerRemote = 16
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 15 * time.Second
	}
	return c
}

// Options are what the broker hands federation besides the shared deps.
type Options struct {
	Config
	// Peer reaches the other services over gRPC: policy (a recipient's
	// connections) and the ledger (commitments, receipts).
	Peer func(alpv1.Role) (grpc.ClientConnInterface, error)
}

// Service is the federation service.
type Service struct {
	service.Base
	federationv1.UnimplementedFederationServiceServer
	opts     Options
	resolver *discovery.Resolver
	// client sends to other brokers (the resolver's fences; one, so that
	// connections to a peer are reused).
	client    *http.Client
	publisher *discovery.Publisher
	// types are the built-in message types: an envelope from another
	// broker must be of one of them.
	types     *msgtypes.Registry
	people    atomic.Pointer[identitystore.Store]
	strangers *strangerLimits
	remotes   *remotes
	nonces    *nonceCache
	// witnessed is the size each witness (broker, domain) was last seen to
	// hold of each log here: the old_size of the next cosigning. Lost on a
	// restart, it costs one size-mismatch round.
	witnessed sync.Map
	// refusalRecords bounds the refusals recorded on the log.
	refusalRecords *rate.Limiter
	m              metrics
}

// New builds the federation service.
func New(d service.Deps, o Options) *Service {
	o.Config = o.Config.withDefaults()
	return &Service{Base: service.NewBase(alpv1.Role_ROLE_FEDERATION, d), opts: o}
}

// Start creates the streams the service owns, makes sure the broker has a
// federation key, follows identity's projection and starts the outbound,
// outbox and receipt consumers.
func (s *Service) Start(ctx context.Context) error {
	if err := s.EnsureOwnedStreams(ctx); err != nil {
		return err
	}
	var err error
	if s.m, err = newMetrics(s.Bus.Options().Registerer); err != nil {
		return err
	}
	if !s.opts.Disabled {
		if err := s.startFederating(ctx); err != nil {
			return err
		}
	}
	s.strangers = newStrangerLimits(s.opts.StrangerRate)
	s.remotes = newRemotes(s.opts.PerRemote, min(30*time.Second, s.opts.RetryMax))
	s.nonces = newNonceCache(2 * s.opts.Skew)
	s.refusalRecords = rate.NewLimiter(20, 200)
	go s.followIdentity(ctx)

	handlers := map[string]bus.Handler{
		streams.FederationOutbound: s.onDecided,
		streams.FederationOutbox:   s.onOutboxItem,
		streams.FederationReceipts: s.onDeliverable,
	}
	for _, c := range streams.OwnedConsumers(s.Role(), 0) {
		h, ok := handlers[c.Durable]
		if !ok {
			return fmt.Errorf("federation: no handler for consumer %s", c.Durable)
		}
		spec := c.Spec()
		if c.Stream == streams.Outbox {
			spec.EnsureStream = s.EnsureStream(c.Stream)
			// The outbox keeps its own time (OutboxMaxAge) and backoff
			// (bus.Later): never a dead letter for a remote that is down.
			spec.MaxDeliver = -1
			spec.Workers = s.opts.Senders
			// A sender waiting on a slow remote holds no other item: with
			// a buffer, items for other remotes pulled behind it would
			// wait for its request's timeout.
			spec.OneAtATime = true
			spec.AckWait = s.opts.RequestTimeout + 15*time.Second
		} else {
			spec.Workers = 4
		}
		if err := s.Consume(ctx, spec, h); err != nil {
			return err
		}
	}
	s.MarkStarted()
	return nil
}

// startFederating prepares what talking to other brokers takes: the
// resolver, the documents this broker publishes, the known message types
// and the broker's federation key.
func (s *Service) startFederating(ctx context.Context) error {
	if s.opts.BrokerName == "" {
		return errors.New("federation: no broker name")
	}
	r, err := discovery.New(s.opts.Discovery)
	if err != nil {
		return fmt.Errorf("federation: discovery: %w", err)
	}
	s.resolver, s.client = r, r.Client()
	if s.publisher, err = discovery.NewPublisher(discovery.PublisherConfig{BrokerName: s.opts.BrokerName, BrokerURL: s.opts.PublicURL,
		Tenants: s.Tenants, Keys: s.Keys, Logger: s.Logger}); err != nil {
		return fmt.Errorf("federation: %w", err)
	}
	if s.types, err = msgtypes.New(); err != nil {
		return fmt.Errorf("federation: message types: %w", err)
	}
	_, err = s.brokerKey(ctx)
	return err
}

// followIdentity opens identity's projection once its stream exists
// (identity may start later in split mode): the receiver resolves each
// arriving envelope's recipient with it.
func (s *Service) followIdentity(ctx context.Context) {
	for delay := 100 * time.Millisecond; ctx.Err() == nil; delay = min(2*delay, 5*time.Second) {
		st, err := identitystore.Open(ctx, s.Bus, s.Keys, s.Tenants, s.Logger)
		if err == nil {
			s.people.Store(st)
			go func() {
				<-ctx.Done()
				st.Close()
			}()
			return
		}
		s.Logger.Info("federation: waiting for identity's projection", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
	}
}

// Ready adds the identity projection to the base checks.
func (s *Service) Ready() error {
	base := s.Base.Ready()
	if s.people.Load() == nil {
		return errors.Join(base, errors.New("federation: identity projection not open"))
	}
	return base
}

// HTTPRoutes are the discovery documents and the broker-to-broker API.
func (s *Service) HTTPRoutes() []httproute.Route {
	if s.opts.Disabled {
		off := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			httpjson.WriteError(w, httpjson.Errorf(http.StatusNotFound, CodeDisabled, "this broker does not federate"))
		})
		return []httproute.Route{
			{Method: http.MethodGet, Pattern: discovery.DomainDocPath, Handler: off, Caller: httproute.Public, BodyLimit: httproute.NoBody},
			{Method: http.MethodGet, Pattern: discovery.BrokerKeysPath, Handler: off, Caller: httproute.Public, BodyLimit: httproute.NoBody},
			{Pattern: alpwire.FederationPath + "/", Handler: off, Caller: httproute.Broker, BodyLimit: maxRequestBytes},
		}
	}
	return []httproute.Route{
		{Method: http.MethodGet, Pattern: discovery.DomainDocPath, Handler: http.HandlerFunc(s.publisher.ServeDomainDoc),
			Caller: httproute.Public, BodyLimit: httproute.NoBody},
		{Method: http.MethodGet, Pattern: discovery.BrokerKeysPath, Handler: http.HandlerFunc(s.publisher.ServeBrokerKeys),
			Caller: httproute.Public, BodyLimit: httproute.NoBody},
		{Method: http.MethodPost, Pattern: SendPath, Handler: http.HandlerFunc(s.handleSend),
			Caller: httproute.Broker, BodyLimit: maxRequestBytes},
		{Method: http.MethodPost, Pattern: ReceiptsPath, Handler: http.HandlerFunc(s.handleReceipt),
			Caller: httproute.Broker, BodyLimit: maxRequestBytes},
		{Method: http.MethodPost, Pattern: CosignPath, Handler: http.HandlerFunc(s.handleCosign),
			Caller: httproute.Broker, BodyLimit: maxRequestBytes},
	}
}

// RegisterGRPC registers the federation gRPC API.
func (s *Service) RegisterGRPC(r grpc.ServiceRegistrar) {
	federationv1.RegisterFederationServiceServer(r, s)
}

// Ping implements FederationService.Ping.
func (s *Service) Ping(_ context.Context, req *federationv1.PingRequest) (*federationv1.PingResponse, error) {
	env, ready := s.Pass(req.GetEnvelope(), "ping")
	return &federationv1.PingResponse{Envelope: env, Service: s.Name(), Ready: ready}, nil
}
