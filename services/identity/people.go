package identity

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	identityv1 "github.com/alpd-project/alpd/gen/alp/identity/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/mtls"
	"github.com/alpd-project/alpd/internal/natsauth"
	"github.com/alpd-project/alpd/internal/signin"
)

// binder binds people at sign-in (signin.Binder) and turns a taken address
// into a clear refusal: one person per address, and only an operator moves
// an address to another IdP account.
type binder struct{ store *identitystore.Store }

func (b binder) BindPerson(ctx context.Context, tenant, issuer, subject, address string, roles []string) (string, error) {
	p, err := b.store.BindPerson(ctx, tenant, issuer, subject, address, roles)
	if errors.Is(err, identitystore.ErrAddressTaken) {
		return "", &httpjson.Error{Status: http.StatusConflict, Code: signin.CodeAddressTaken, Message: fmt.Sprintf(
			"%s already belongs to a person who signs in with another account of this organization's identity provider "+
				"(its issuer or the account's subject changed); an operator must re-bind the address before this account can sign in "+
				"(docs/identity.md, \"One person per address\")", address)}
	}
	return p.ID, err
}

// sessionStore is the sign-in's server-side session records: the sessions
// bucket, plus the identity projection's word on the person (erased, or
// all sessions revoked by an operator).
func (s *Service) sessionStore(ctx context.Context) (signin.SessionStore, error) {
	kv, err := s.Bus.JetStream().CreateOrUpdateKeyValue(ctx, signin.SessionsBucketConfig(
		s.Bus.StreamName(natsauth.SessionsBucket), signin.DefaultSessionTTL, s.Bus.Options().Replicas))
	if err != nil {
		return nil, fmt.Errorf("identity: sessions bucket: %w", err)
	}
	store := s.store
	return signin.KVSessions{KV: kv, Valid: func(_ context.Context, tenant, personID string, issued time.Time) error {
		err := store.SessionValid(tenant, personID, issued)
		if errors.Is(err, identitystore.ErrRevoked) || errors.Is(err, identitystore.ErrNotFound) {
			return fmt.Errorf("%w: %v", signin.ErrSessionRevoked, err)
		}
		return err
	}}, nil
}

// operatorActor names the gRPC caller: the operator certificate's role in
// split mode, an in-process caller otherwise.
func operatorActor(ctx context.Context) *alpv1.Actor {
	name := "in-process caller"
	if role, ok := mtls.CallerRole(ctx); ok {
		name = mtls.RoleName(role)
	}
	return &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_OPERATOR, Id: name}
}

// grpcError maps the store's errors to gRPC codes; messages never hold
// more than the request did.
func grpcError(err error) error {
	switch {
	case errors.Is(err, identitystore.ErrInvalid), errors.Is(err, identitystore.ErrNotHosted):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, identitystore.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, identitystore.ErrAccountTaken), errors.Is(err, identitystore.ErrAddressTaken):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, identitystore.ErrClosed), errors.Is(err, identitystore.ErrStale):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// RebindPerson implements IdentityService.RebindPerson (operators only, by
// the authorization table): the explicit, audited re-binding of a person
// to another IdP account.
func (s *Service) RebindPerson(ctx context.Context, req *identityv1.RebindPersonRequest) (*identityv1.RebindPersonResponse, error) {
	if s.store == nil {
		return nil, status.Error(codes.Unavailable, "identity: not started")
	}
	tenant, id, address := req.GetTenant(), req.GetPersonId(), strings.TrimSpace(req.GetAddress())
	if !s.Tenants.Hosts(tenant) {
		return nil, status.Errorf(codes.InvalidArgument, "identity: tenant %q is not hosted here", tenant)
	}
	if (id == "") == (address == "") {
		return nil, status.Error(codes.InvalidArgument, "identity: name the person by person_id or by address (exactly one)")
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "re-bound by an operator"
	}
	if address != "" {
		p, err := s.store.PersonByAddress(ctx, tenant, address)
		if err != nil {
			return nil, grpcError(err)
		}
		id = p.ID
	}
	actor := operatorActor(ctx)
	p, err := s.store.RebindPerson(identitystore.WithActor(ctx, actor), tenant, id, req.GetIssuer(), req.GetSubject(), reason)
	if err != nil {
		return nil, grpcError(err)
	}
	s.Logger.Info("person re-bound by an operator", "tenant", tenant, "person_id", p.ID, "operator", actor.GetId())
	return &identityv1.RebindPersonResponse{PersonId: p.ID}, nil
}

// RevokePersonSessions implements IdentityService.RevokePersonSessions
// (operators only): every web session of the person issued until now is
// refused from then on, on every identity replica.
func (s *Service) RevokePersonSessions(ctx context.Context, req *identityv1.RevokePersonSessionsRequest) (*identityv1.RevokePersonSessionsResponse, error) {
	if s.store == nil {
		return nil, status.Error(codes.Unavailable, "identity: not started")
	}
	if !s.Tenants.Hosts(req.GetTenant()) {
		return nil, status.Errorf(codes.InvalidArgument, "identity: tenant %q is not hosted here", req.GetTenant())
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "revoked by an operator"
	}
	actor := operatorActor(ctx)
	if err := s.store.RevokePersonSessions(identitystore.WithActor(ctx, actor), req.GetTenant(), req.GetPersonId(), reason); err != nil {
		return nil, grpcError(err)
	}
	s.Logger.Info("person's sessions revoked by an operator", "tenant", req.GetTenant(), "person_id", req.GetPersonId(), "operator", actor.GetId())
	return &identityv1.RevokePersonSessionsResponse{}, nil
}
