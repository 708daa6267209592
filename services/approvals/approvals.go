// Package approvals holds what waits for a person's decision (held fields,
// commitments, strangers' connection requests). It owns the approvals stream
// and serves its gRPC API; docs/architecture.md ("Services today") lists
// what is built.
package approvals

import (
	"context"

	"google.golang.org/grpc"

	approvalsv1 "github.com/alpd-project/alpd/gen/alp/approvals/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/service"
)

// Service is the approvals service.
type Service struct {
	service.Base
	approvalsv1.UnimplementedApprovalsServiceServer
}

// New builds the approvals service.
func New(d service.Deps) *Service {
	return &Service{Base: service.NewBase(alpv1.Role_ROLE_APPROVALS, d)}
}

// Start creates the streams the service owns.
func (s *Service) Start(ctx context.Context) error {
	if err := s.EnsureOwnedStreams(ctx); err != nil {
		return err
	}
	s.MarkStarted()
	return nil
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
