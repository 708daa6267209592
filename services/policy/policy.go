// Package policy decides, per field, what of a message may cross. Policy
// workers share one durable consumer on the send stream and keep no
// state of their own beyond projections every replica rebuilds (people,
// relationships, rule sets, organizations' types), so SREs scale them by
// adding replicas; a replica is not ready while a projection is stale.
//
// For each SendRequested the worker opens the body in memory, runs the
// sender side and, for a recipient hosted here, the recipient side
// (services/policy/decision), and publishes the recipient's Deliverable
// (views and held items sealed with the recipient's data key) before the
// sender's Decided (docs/message-path.md follows a message through them).
// For each InboundVerified (an envelope another broker sent, which
// federation verified) it runs the recipient side only and publishes the
// Deliverable, a refusal included, for the sender broker's receipt
// (inbound.go).
// For each ApprovalDecided of a connection request it answers the
// connection as the person decided, and tells an asker at another broker
// (approvals.go).
// Nothing in clear reaches a stream.
package policy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	nlipv1 "github.com/alpd-project/alpd/gen/alp/nlip/v1"
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
	opts    Options
	state   *state
	api     apiState
	inbound inboundMetrics
}

// DefaultMaxStaleness is how long a projection may go unconfirmed before
// the replica stops being ready.
const DefaultMaxStaleness = 10 * time.Second

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
	// Registerer takes policy's metrics (nil: not exported).
	Registerer prometheus.Registerer
}

// New builds the policy service.
func New(d service.Deps, o Options) *Service {
	if o.MaxStaleness <= 0 {
		o.MaxStaleness = DefaultMaxStaleness
	}
	return &Service{Base: service.NewBase(alpv1.Role_ROLE_POLICY, d), opts: o, inbound: newInboundMetrics()}
}

// Start creates policy's streams, opens its projections, starts the
// workers and serves the REST API.
func (s *Service) Start(ctx context.Context) error {
	if err := s.EnsureOwnedStreams(ctx); err != nil {
		return err
	}
	if s.opts.Registerer != nil {
		if err := s.inbound.register(s.opts.Registerer); err != nil {
			return err
		}
	}
	st, err := s.openState(ctx)
	if err != nil {
		return err
	}
	s.state = st
	for _, c := range streams.OwnedConsumers(s.Role(), 0) {
		spec := c.Spec()
		spec.Workers = s.opts.Workers
		spec.EnsureStream = s.EnsureStream(c.Stream)
		if err := s.Consume(ctx, spec, s.handle); err != nil {
			st.close()
			return err
		}
	}
	// The projections close once the workers have drained: a decision in
	// flight at shutdown still reads them (and records a connection
	// request) rather than failing into a redelivery.
	stopped := s.Stopped()
	go func() {
		<-ctx.Done()
		<-stopped
		st.close()
	}()
	s.serveAPI()
	s.MarkStarted()
	return nil
}

// Ready adds the freshness of every projection to the base checks, naming
// each stale one (what /readyz?verbose=1 shows).
func (s *Service) Ready() error {
	base := s.Base.Ready()
	if s.state == nil {
		return errors.Join(base, errors.New("policy: projections not open"))
	}
	return errors.Join(base, s.state.fresh(s.opts.MaxStaleness))
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
	case *alpv1.Event_InboundVerified:
		return s.decideInbound(ctx, d.Event, body.InboundVerified)
	case *alpv1.Event_ApprovalRequested, *alpv1.Event_ApprovalDecided:
		return s.onApproval(ctx, d.Event)
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
	v, err := s.decide(ctx, tenant, req, env)
	if err != nil {
		return err
	}
	hop.End(env)

	v.decided.Envelope = env
	v.decided.SenderPersonId = req.GetSenderPersonId()
	decided := s.NewEvent("decided", tenant, cause, env.GetId(), nil)
	decided.Body = &alpv1.Event_Decided{Decided: v.decided}
	if v.deliverable == nil {
		return appendOnce(ctx, s.Bus, subject, decided)
	}

	// The recipient's Deliverable and the sender's Decided are stored side
	// by side, each once per envelope (a redelivery finds them there). The
	// SendRequested is acknowledged only when both are stored: should the
	// Decided land and the Deliverable fail, the redelivery stores it, so
	// the recipient's side never goes missing behind an answered sender.
	dsubj, err := streams.DeliverSubject(v.recipient.tenant, v.recipient.personID, env.GetId())
	if err != nil {
		return bus.Permanent(err)
	}
	// Only the ALP header crosses: the agent's NLIP parts were for its own
	// broker and stay sealed to the sender.
	header := proto.CloneOf(env)
	header.Body, header.SealedBody = nil, nil
	proto.ClearExtension(header, nlipv1.E_Nlip)
	v.deliverable.Envelope = header
	deliverable := s.NewEvent("deliverable", v.recipient.tenant, cause, env.GetId(), nil)
	deliverable.Body = &alpv1.Event_Deliverable{Deliverable: v.deliverable}
	done := make(chan error, 1)
	go func() { done <- appendOnce(ctx, s.Bus, dsubj, deliverable) }()
	return errors.Join(appendOnce(ctx, s.Bus, subject, decided), <-done)
}

// appendOnce stores ev as the only event on subject; one already there
// (an earlier delivery's) stays and is not an error.
func appendOnce(ctx context.Context, b *bus.Bus, subject string, ev *alpv1.Event) error {
	if _, err := b.Append(ctx, subject, 0, ev); err != nil && !errors.Is(err, bus.ErrConflict) {
		return err
	}
	return nil
}
