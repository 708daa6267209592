package policy

import (
	"context"
	"errors"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	policyv1 "github.com/alpd-project/alpd/gen/alp/policy/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/services/policy/decision"
	"github.com/alpd-project/alpd/services/policy/rules"
)

// dryRunAgent names the hypothetical sending agent in a dry run, so that a
// rule naming one agent by id never matches it by accident.
const dryRunAgent = "alpctl-policy-check"

// DryRun implements PolicyService.DryRun: the worker's evaluation of a
// message that is never sent. Nothing is stored (a connection request is
// not recorded) and no body is sealed. The caller's right is the gRPC
// authorization table's (operators only).
func (s *Service) DryRun(ctx context.Context, req *policyv1.DryRunRequest) (*policyv1.DryRunResponse, error) {
	st := s.state
	if st == nil {
		return nil, status.Error(codes.Unavailable, "policy: not started")
	}
	tenant := req.GetTenant()
	if !s.Tenants.Hosts(tenant) {
		return nil, status.Errorf(codes.InvalidArgument, "policy: tenant %q is not hosted here", tenant)
	}
	from, err := alp.ParseAddress(req.GetFrom())
	if err != nil || from.Domain() != tenant {
		return nil, status.Errorf(codes.InvalidArgument, "policy: from must be an address of %s", tenant)
	}
	if _, err := alp.ParseAddress(req.GetTo()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "policy: to: %v", err)
	}
	class := req.GetTrustClass()
	if class == "" {
		class = rules.TrustConsumer
	}
	if class != rules.TrustConsumer && class != rules.TrustCompany {
		return nil, status.Errorf(codes.InvalidArgument, "policy: trust_class %q: want consumer or company", class)
	}
	agents := req.GetRecipientAgentClasses()
	for _, c := range agents {
		if c != rules.TrustConsumer && c != rules.TrustCompany {
			return nil, status.Errorf(codes.InvalidArgument, "policy: recipient agent class %q: want consumer or company", c)
		}
	}
	if len(agents) == 0 {
		agents = nil
	}
	senderID, _, err := st.people.OwnerOf(ctx, tenant, from.String())
	if errors.Is(err, identitystore.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "policy: no person of %s has the address %s", tenant, from)
	} else if err != nil {
		return nil, status.Errorf(codes.Unavailable, "policy: %v", err)
	}
	ev, err := st.evaluate(ctx, side{tenant: tenant, address: from.String(), personID: senderID},
		rules.Agent{ID: dryRunAgent, Person: senderID, TrustClass: class, Tenant: tenant},
		req.GetTo(), req.GetType(), req.GetBody(), agents)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "policy: %v", err)
	}
	out := &policyv1.DryRunResponse{RuleVersions: ev.versions, RecipientLocal: ev.recipient.local(),
		SenderRelationship: string(ev.senderRel), RecipientRelationship: string(ev.recipientRel)}
	if ev.refused != nil {
		r := decision.Reason{Party: decision.PartyBroker, Code: ev.refused.code}
		out.Outcome, out.SenderOutcome = outcomeProto(decision.Refuse), outcomeProto(decision.Refuse)
		out.Reasons = reasonsProto([]decision.Reason{r})
		out.Reasons[0].Message = ev.refused.message
		return out, nil
	}
	// The operator's view: both stages with every party's policy id.
	all := ev.d.Sender
	if ev.d.Recipient != nil {
		all = decision.Merge(ev.d.Sender, *ev.d.Recipient, false)
		for _, v := range ev.d.Recipient.Views {
			out.Views = append(out.Views, &policyv1.DryRunView{TrustClass: v.TrustClass, Pointers: slices.Clone(v.Pointers)})
		}
		for _, h := range ev.d.Recipient.Held {
			out.Held = append(out.Held, &policyv1.DryRunHeld{Kind: heldKindProto(h.Kind), Pointers: slices.Clone(h.Pointers), Commits: h.Commits})
		}
	}
	out.Outcome, out.SenderOutcome = outcomeProto(all.Outcome), outcomeProto(ev.d.Sender.Outcome)
	out.Reasons, out.Fields = reasonsProto(all.Reasons), fieldsProto(all.Fields)
	return out, nil
}
