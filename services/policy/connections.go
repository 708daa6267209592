package policy

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	policyv1 "github.com/alpd-project/alpd/gen/alp/policy/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/services/policy/relationships"
)

// ListConnections implements PolicyService.ListConnections: the person's
// connections as their agents see them, the other side by address (a
// person id means nothing to an agent), blocked parties marked as such.
// The caller (ingress) authenticated the agent; the gRPC authorization
// table lets nobody else ask.
func (s *Service) ListConnections(ctx context.Context, req *policyv1.ListConnectionsRequest) (*policyv1.ListConnectionsResponse, error) {
	st := s.state
	if st == nil {
		return nil, status.Error(codes.Unavailable, "policy: not started")
	}
	tenant, person := req.GetTenant(), req.GetPersonId()
	if !s.Tenants.Hosts(tenant) {
		return nil, status.Errorf(codes.InvalidArgument, "policy: tenant %q is not hosted here", tenant)
	}
	if err := alp.ValidatePersonID(person); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "policy: person_id: %v", err)
	}
	all, err := st.rels.Connections(tenant, person)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "policy: connections: %v", err)
	}
	out := &policyv1.ListConnectionsResponse{Connections: make([]*policyv1.Connection, 0, len(all))}
	for _, c := range all {
		other := c.Other(person)
		with, err := st.addressOf(ctx, tenant, other)
		if errors.Is(err, identitystore.ErrNotFound) {
			continue // the other person was erased: nothing left to show
		}
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "policy: %v", err)
		}
		state := string(c.State)
		if c.State == relationships.ConnAccepted {
			state = "connected"
		}
		if blocked, err := st.rels.BlockedBy(tenant, person, relationships.Party{Person: other.Person, Address: with}); err != nil {
			return nil, status.Errorf(codes.Internal, "policy: blocks: %v", err)
		} else if blocked {
			state = "blocked"
		}
		direction := "outgoing"
		if c.To == person {
			direction = "incoming"
		}
		pc := &policyv1.Connection{Id: c.ID, With: with, State: state, Direction: direction, Requested: timestamppb.New(c.Requested)}
		if !c.Decided.IsZero() {
			pc.Decided = timestamppb.New(c.Decided)
		}
		out.Connections = append(out.Connections, pc)
	}
	return out, nil
}

// addressOf is a party's address: a remote party's own, a person's from
// identity's projection.
func (st *state) addressOf(ctx context.Context, tenant string, p relationships.Party) (string, error) {
	if p.Person == "" {
		return p.Address, nil
	}
	person, err := st.people.Person(ctx, tenant, p.Person)
	if err != nil {
		return "", fmt.Errorf("the other person of a connection: %w", err)
	}
	return person.Address, nil
}
