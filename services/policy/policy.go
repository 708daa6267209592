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
	workers int
}

// New builds the policy service; workers is the number of concurrent
// handler loops in this process (default 1).
func New(d service.Deps, workers int) *Service {
	return &Service{Base: service.NewBase(alpv1.Role_ROLE_POLICY, d), workers: workers}
}

// Start creates the decided stream and the work queue and starts the workers.
func (s *Service) Start(ctx context.Context) error {
	if err := s.EnsureOwnedStreams(ctx); err != nil {
		return err
	}
	for _, c := range streams.OwnedConsumers(s.Role(), 0) {
		spec := c.Spec()
		spec.Workers = s.workers
		spec.EnsureStream = s.EnsureStream(c.Stream)
		if err := s.Consume(ctx, spec, s.handle); err != nil {
			return err
		}
	}
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
