// Package federation connects this broker to remote brokers: discovery, signed
// outbound envelopes, verification of inbound ones, receipts and retries. It
// owns its streams (the verified-inbound event log and the outbox work
// queue) and serves its gRPC API; docs/architecture.md ("Services today")
// lists what of the protocol is built.
package federation

import (
	"context"

	"google.golang.org/grpc"

	federationv1 "github.com/alpd-project/alpd/gen/alp/federation/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/service"
)

// Service is the federation service.
type Service struct {
	service.Base
	federationv1.UnimplementedFederationServiceServer
}

// New builds the federation service.
func New(d service.Deps) *Service {
	return &Service{Base: service.NewBase(alpv1.Role_ROLE_FEDERATION, d)}
}

// Start creates the streams the service owns.
func (s *Service) Start(ctx context.Context) error {
	if err := s.EnsureOwnedStreams(ctx); err != nil {
		return err
	}
	s.MarkStarted()
	return nil
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
