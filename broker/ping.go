package broker

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	approvalsv1 "github.com/alpd-project/alpd/gen/alp/approvals/v1"
	federationv1 "github.com/alpd-project/alpd/gen/alp/federation/v1"
	identityv1 "github.com/alpd-project/alpd/gen/alp/identity/v1"
	ingressv1 "github.com/alpd-project/alpd/gen/alp/ingress/v1"
	ledgerv1 "github.com/alpd-project/alpd/gen/alp/ledger/v1"
	policyv1 "github.com/alpd-project/alpd/gen/alp/policy/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

// PingResult is one service's answer to Ping.
type PingResult struct {
	Service  string
	Ready    bool
	Envelope *alpv1.Envelope
}

// Ping passes env through the gRPC API of service role, wherever it runs.
func Ping(ctx context.Context, conn grpc.ClientConnInterface, role alpv1.Role, env *alpv1.Envelope) (PingResult, error) {
	type answer interface {
		GetEnvelope() *alpv1.Envelope
		GetService() string
		GetReady() bool
	}
	var (
		res answer
		err error
	)
	switch role {
	case alpv1.Role_ROLE_INGRESS:
		res, err = ingressv1.NewIngressServiceClient(conn).Ping(ctx, &ingressv1.PingRequest{Envelope: env})
	case alpv1.Role_ROLE_IDENTITY:
		res, err = identityv1.NewIdentityServiceClient(conn).Ping(ctx, &identityv1.PingRequest{Envelope: env})
	case alpv1.Role_ROLE_POLICY:
		res, err = policyv1.NewPolicyServiceClient(conn).Ping(ctx, &policyv1.PingRequest{Envelope: env})
	case alpv1.Role_ROLE_FEDERATION:
		res, err = federationv1.NewFederationServiceClient(conn).Ping(ctx, &federationv1.PingRequest{Envelope: env})
	case alpv1.Role_ROLE_LEDGER:
		res, err = ledgerv1.NewLedgerServiceClient(conn).Ping(ctx, &ledgerv1.PingRequest{Envelope: env})
	case alpv1.Role_ROLE_APPROVALS:
		res, err = approvalsv1.NewApprovalsServiceClient(conn).Ping(ctx, &approvalsv1.PingRequest{Envelope: env})
	default:
		return PingResult{}, fmt.Errorf("broker: no service for role %s", role)
	}
	if err != nil {
		return PingResult{}, err
	}
	return PingResult{Service: res.GetService(), Ready: res.GetReady(), Envelope: res.GetEnvelope()}, nil
}

func (b *Broker) pingStatus(ctx context.Context, role alpv1.Role) string {
	conn, err := b.Client(role)
	if err != nil {
		return err.Error()
	}
	res, err := Ping(ctx, conn, role, &alpv1.Envelope{})
	switch {
	case err != nil:
		return err.Error()
	case !res.Ready:
		return "answered, not ready"
	}
	return "ok"
}
