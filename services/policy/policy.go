// Package policy decides, per field, what of a message may cross. Policy
// workers are stateless and share one durable consumer on the policy work
// queue, so SREs scale them by adding replicas.
//
// With no rules to evaluate (docs/architecture.md, "Services today", says
// what is still to come), every message meets alpd's default: deny, with a
// reason naming the broker rule. The consumer, the Decided event, its
// idempotency and the envelope hop are the ones rules plug into
// (docs/message-path.md follows a message through them).
package policy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	policyv1 "github.com/alpd-project/alpd/gen/alp/policy/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/service"
	"github.com/alpd-project/alpd/internal/streams"
)

// Service is the policy service.
type Service struct {
	service.Base
	policyv1.UnimplementedPolicyServiceServer
	opts Options
	// stores are the replica's projections of the policy stream (nil
	// before Start).
	stores *stores
	api    apiState
}

// Options are policy's own settings.
type Options struct {
	// Workers is the number of concurrent handler loops in this process
	// (default 1).
	Workers int
	// MaxStaleness of the projections before the replica is not ready
	// (default DefaultMaxStaleness).
	MaxStaleness time.Duration
	// API configures the REST endpoints (api_wiring.go).
	API APIOptions
}

// New builds the policy service.
func New(d service.Deps, o Options) *Service {
	if o.MaxStaleness <= 0 {
		o.MaxStaleness = DefaultMaxStaleness
	}
	return &Service{Base: service.NewBase(alpv1.Role_ROLE_POLICY, d), opts: o}
}

// Ready adds the freshness of every projection to the base checks, naming
// each stale one.
func (s *Service) Ready() error {
	base := s.Base.Ready()
	st := s.stores
	if st == nil {
		return errors.Join(base, errors.New("policy: stores not open"))
	}
	return errors.Join(base, st.fresh(s.opts.MaxStaleness))
}

// Start creates policy's streams, opens its projections, starts the
// workers and serves the REST API.
func (s *Service) Start(ctx context.Context) error {
	if err := s.EnsureOwnedStreams(ctx); err != nil {
		return err
	}
	st, err := openStores(ctx, s.Bus, s.Tenants, s.Logger)
	if err != nil {
		return err
	}
	s.stores = st
	go func() {
		<-ctx.Done()
		// Workers finish what they pulled with the projections still
		// following; then they stop.
		<-s.Stopped()
		st.close()
	}()
	for _, c := range streams.OwnedConsumers(s.Role(), 0) {
		spec := c.Spec()
		spec.Workers = s.opts.Workers
		spec.EnsureStream = s.EnsureStream(c.Stream)
		if err := s.Consume(ctx, spec, s.handle); err != nil {
			return err
		}
	}
	s.serveAPI(ctx)
	s.MarkStarted()
	return nil
}

// RegisterGRPC registers the policy gRPC API.
func (s *Service) RegisterGRPC(r grpc.ServiceRegistrar) { policyv1.RegisterPolicyServiceServer(r, s) }

// Ping implements PolicyService.Ping.
func (s *Service) Ping(_ context.Context, req *policyv1.PingRequest) (*policyv1.PingResponse, error) {
	env, ready := s.Pass(req.GetEnvelope(), "ping")
	return &policyv1.PingResponse{Envelope: env, Service: s.Name(), Ready: ready}, nil
}

func (s *Service) handle(ctx context.Context, d bus.Delivery) error {
	switch body := d.Event.GetBody().(type) {
	case *alpv1.Event_SendRequested:
		return s.decideSend(ctx, d.Event, body.SendRequested)
	default:
		return bus.Permanent(fmt.Errorf("policy: cannot handle %s", bus.Kind(d.Event)))
	}
}

func (s *Service) decideSend(ctx context.Context, cause *alpv1.Event, req *alpv1.SendRequested) error {
	tenant := cause.GetHeader().GetTenant()
	if !s.Tenants.Hosts(tenant) || req.GetEnvelope() == nil || req.GetSenderPersonId() == "" {
		return bus.Permanent(errors.New("policy: send request without hosted tenant, envelope or sender"))
	}
	env := proto.CloneOf(req.GetEnvelope())
	// One subject per envelope: ingress finds an envelope's decision with a
	// direct get of the last message on it.
	subject, err := streams.DecidedSubject(tenant, req.GetSenderPersonId(), env.GetId())
	if err != nil {
		return bus.Permanent(err)
	}
	hop := envelope.Begin(alpv1.Role_ROLE_POLICY, "decide")
	hop.End(env)

	ev := s.NewEvent("decided", tenant, cause, env.GetId(), nil)
	ev.Body = &alpv1.Event_Decided{Decided: &alpv1.Decided{
		Envelope:       env,
		Outcome:        alpv1.Outcome_OUTCOME_REFUSE,
		SenderPersonId: req.GetSenderPersonId(),
		Reasons: []*alpv1.Reason{{
			Party:   "broker",
			Rule:    "default-deny",
			Message: "no policy rule allows this message; alpd denies by default",
		}},
	}}
	_, err = s.Bus.Publish(ctx, subject, ev)
	return err
}
