// Package approvals holds what waits for a person's decision (held
// confidential fields, commitments, strangers' connection requests): it
// makes an item of every held item of a deliverable, keeps the items and
// the person's standing rules on the approvals stream, expires what is not
// decided in time, notifies the person, and serves their pages and JSON API.
// What a decision releases, the other services carry out from the stream
// (ingress delivers the fields, policy answers the connection, the ledger
// records it). docs/approvals.md describes it.
package approvals

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	approvalsv1 "github.com/alpd-project/alpd/gen/alp/approvals/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/service"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/approvals/api"
	"github.com/alpd-project/alpd/services/approvals/items"
	"github.com/alpd-project/alpd/services/approvals/notify"
	"github.com/alpd-project/alpd/services/approvals/storage"
)

// Options configure the service.
type Options struct {
	// PublicURL is the broker's public base URL (links to items).
	PublicURL string
	// Sessions reads people's web sessions (nil: no pages or API here).
	Sessions api.Sessions
	// FreshMaxAge is how recent a sign-in must be to decide (default 5m).
	FreshMaxAge time.Duration
	Expiry      storage.Expiry
	// SweepEvery is how often pending items are checked for expiry
	// (default 30s).
	SweepEvery time.Duration
	// Notifications, if set, tell people of new items (webhooks, email);
	// its PublicURL defaults to PublicURL.
	Notifications *notify.Config
	// Pages, if set, builds the HTML pages over the store.
	Pages func(items.Store) []httproute.Route
}

// Service is the approvals service.
type Service struct {
	service.Base
	approvalsv1.UnimplementedApprovalsServiceServer
	opts Options

	store    atomic.Pointer[storage.Store]
	people   atomic.Pointer[identitystore.Store]
	routes   atomic.Pointer[[]httproute.Route]
	notifier *notify.Notifier
}

// New builds the approvals service.
func New(d service.Deps, o Options) *Service {
	if o.SweepEvery <= 0 {
		o.SweepEvery = 30 * time.Second
	}
	return &Service{Base: service.NewBase(alpv1.Role_ROLE_APPROVALS, d), opts: o}
}

// Start creates the approvals stream, opens its projection and identity's,
// and runs the consumers and the expiry sweep.
func (s *Service) Start(ctx context.Context) error {
	if err := s.EnsureOwnedStreams(ctx); err != nil {
		return err
	}
	if s.Sealer == nil {
		return errors.New("approvals: no sealer (the data-key bucket)")
	}
	st, err := storage.Open(ctx, storage.Config{Bus: s.Bus, Sealer: s.Sealer, Tenants: s.Tenants, Expiry: s.opts.Expiry,
		Log: s.Logger})
	if err != nil {
		return err
	}
	s.store.Store(st)
	context.AfterFunc(ctx, st.Close)
	go s.followIdentity(ctx)
	if c := s.opts.Notifications; c != nil {
		cfg := *c
		if cfg.PublicURL == "" {
			cfg.PublicURL = s.opts.PublicURL
		}
		if s.notifier, err = notify.New(cfg, notify.Deps{Bus: s.Bus, Logger: s.Logger.With("component", "notify"),
			Address: s.addressOf, Pending: st.List}); err != nil {
			return fmt.Errorf("approvals: notifications: %w", err)
		}
	}

	handlers := map[string]bus.Handler{streams.ApprovalsHeld: s.onDeliverable, streams.ApprovalsNotify: s.onItem}
	for _, c := range streams.OwnedConsumers(s.Role(), 0) {
		h, ok := handlers[c.Durable]
		if !ok {
			return fmt.Errorf("approvals: no handler for consumer %s", c.Durable)
		}
		spec := c.Spec()
		spec.Workers = 4
		if c.Durable == streams.ApprovalsNotify {
			// Notifications keep their own retry time (bus.Later).
			spec.MaxDeliver = -1
		} else {
			// policy creates DELIVER; approvals may start first.
			spec.EnsureStream = s.EnsureStream(c.Stream)
		}
		if err := s.Consume(ctx, spec, h); err != nil {
			return err
		}
	}
	go s.sweep(ctx, st)

	var tester api.Tester
	if s.notifier != nil {
		tester = s.notifier
	}
	routes := api.New(api.Options{Store: st, Sessions: s.opts.Sessions, Ready: s.Ready, FreshMaxAge: s.opts.FreshMaxAge,
		Tester: tester, Logger: s.Logger.With("component", "api")}).Routes()
	if s.opts.Pages != nil {
		routes = append(routes, s.opts.Pages(st)...)
	}
	s.routes.Store(&routes)
	s.MarkStarted()
	return nil
}

// HTTPRoutes are the JSON API's and the pages' routes, once started.
func (s *Service) HTTPRoutes() []httproute.Route {
	if r := s.routes.Load(); r != nil {
		return *r
	}
	return nil
}

// Store is the items store, once started (nil before).
func (s *Service) Store() *storage.Store { return s.store.Load() }

// Ready adds the projections' freshness to the base checks.
func (s *Service) Ready() error {
	base := s.Base.Ready()
	st := s.store.Load()
	if st == nil {
		return errors.Join(base, errors.New("approvals: store not open"))
	}
	if err := st.Fresh(10 * time.Second); err != nil {
		return errors.Join(base, fmt.Errorf("approvals: %w", err))
	}
	if s.people.Load() == nil {
		return errors.Join(base, errors.New("approvals: identity projection not open"))
	}
	return base
}

// onDeliverable makes items of a deliverable's held items.
func (s *Service) onDeliverable(ctx context.Context, d bus.Delivery) error {
	dv := d.Event.GetDeliverable()
	if dv == nil {
		return bus.Permanent(fmt.Errorf("approvals: %s on the deliveries' stream", bus.Kind(d.Event)))
	}
	if len(dv.GetHeld()) == 0 {
		return nil
	}
	people := s.people.Load()
	if people == nil {
		return bus.Later(time.Second, errors.New("approvals: identity projection not open yet"))
	}
	return s.store.Load().Request(ctx, d.Event, dv, s.senderOf(people, dv))
}

// senderOf says who sent a deliverable: the agent as identity knows it
// (a sender on this broker), or as the origin broker signed it.
func (s *Service) senderOf(people *identitystore.Store, dv *alpv1.Deliverable) storage.Sender {
	env := dv.GetEnvelope()
	if ob := dv.GetOriginBroker(); ob != "" {
		domain := env.GetFrom()
		if a, err := alp.ParseAddress(env.GetFrom()); err == nil {
			domain = a.Domain()
		}
		class := dv.GetSenderAgentClass()
		if class != "company" {
			class = "consumer"
		}
		return storage.Sender{AgentClass: class, Attested: class == "company",
			Verification: "signed by " + domain + "'s home broker (" + ob + ")"}
	}
	out := storage.Sender{AgentClass: "consumer", Verification: "signed in at this broker"}
	a, err := alp.ParseAddress(env.GetFrom())
	if err != nil {
		return out
	}
	tenant := a.Domain()
	agent, err := people.AgentOf(tenant, dv.GetSenderPersonId(), env.GetFromAgent())
	if err != nil {
		out.Verification = "signed in at this broker (agent no longer known)"
		return out
	}
	out.AgentName, out.Attested = agent.Name, agent.Attested
	if agent.Class == alpv1.TrustClass_TRUST_CLASS_COMPANY {
		out.AgentClass = "company"
	}
	return out
}

// onItem hands new items to the notifier.
func (s *Service) onItem(ctx context.Context, d bus.Delivery) error {
	if s.notifier == nil || d.Event.GetApprovalRequested() == nil {
		return nil
	}
	return s.notifier.Handle(ctx, d)
}

// addressOf is a person's address (where their notifications go unless
// configured otherwise), from identity's projection.
func (s *Service) addressOf(ctx context.Context, tenant, personID string) (string, error) {
	people := s.people.Load()
	if people == nil {
		return "", errors.New("approvals: identity projection not open yet")
	}
	p, err := people.Person(ctx, tenant, personID)
	if err != nil {
		return "", err
	}
	return p.Address, nil
}

// sweep expires pending items whose time is up, and cancels connection
// requests answered on the connections page.
func (s *Service) sweep(ctx context.Context, st *storage.Store) {
	t := time.NewTicker(s.opts.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-st.Answers():
		}
		if n, err := st.Sweep(ctx); err != nil {
			s.Logger.WarnContext(ctx, "approvals: sweeping items", "err", err)
		} else if n > 0 {
			s.Logger.InfoContext(ctx, "approvals: items expired or answered elsewhere", "count", n)
		}
	}
}

// followIdentity opens identity's projection once its stream exists.
func (s *Service) followIdentity(ctx context.Context) {
	for delay := 100 * time.Millisecond; ctx.Err() == nil; delay = min(2*delay, 5*time.Second) {
		st, err := identitystore.Open(ctx, s.Bus, s.Keys, s.Tenants, s.Logger)
		if err == nil {
			s.people.Store(st)
			context.AfterFunc(ctx, st.Close)
			return
		}
		s.Logger.Info("approvals: waiting for identity's projection", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
	}
}

// RegisterGRPC registers the approvals gRPC API.
func (s *Service) RegisterGRPC(r grpc.ServiceRegistrar) {
	approvalsv1.RegisterApprovalsServiceServer(r, s)
}

// Ping implements ApprovalsService.Ping.
func (s *Service) Ping(_ context.Context, req *approvalsv1.PingRequest) (*approvalsv1.PingResponse, error) {
	env, ready := s.Pass(req.GetEnvelope(), "ping")
	return &approvalsv1.PingResponse{Envelope: env, Service: s.Name(), Ready: ready}, nil
}
