// Package ledger keeps one append-only, verifiable log per person. This first
// version owns the ledger stream (deletes and purges denied by configuration)
// and its gRPC API; the Merkle logs, checkpoints and receipts arrive in the
// ledger issue.
package ledger

import (
	"context"

	"google.golang.org/grpc"

	ledgerv1 "github.com/alpd-project/alpd/gen/alp/ledger/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/service"
)

// Service is the ledger service.
type Service struct {
	service.Base
	ledgerv1.UnimplementedLedgerServiceServer
}

// New builds the ledger service.
func New(d service.Deps) *Service {
	return &Service{Base: service.NewBase(alpv1.Role_ROLE_LEDGER, d)}
}

// Start creates the streams the service owns.
func (s *Service) Start(ctx context.Context) error {
	if err := s.EnsureOwnedStreams(ctx); err != nil {
		return err
	}
	s.MarkStarted()
	return nil
}

// RegisterGRPC registers the ledger gRPC API.
func (s *Service) RegisterGRPC(r grpc.ServiceRegistrar) { ledgerv1.RegisterLedgerServiceServer(r, s) }

// Ping implements LedgerService.Ping.
func (s *Service) Ping(_ context.Context, req *ledgerv1.PingRequest) (*ledgerv1.PingResponse, error) {
	env, ready := s.Pass(req.GetEnvelope(), "ping")
	return &ledgerv1.PingResponse{Envelope: env, Service: s.Name(), Ready: ready}, nil
}
