package policy

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	policyv1 "github.com/alpd-project/alpd/gen/alp/policy/v1"
	"github.com/alpd-project/alpd/internal/mtls"
	"github.com/alpd-project/alpd/internal/projection"
	"github.com/alpd-project/alpd/services/policy/rules"
	"github.com/alpd-project/alpd/services/policy/rulestore"
)

// OperatorMetadata is the gRPC metadata key naming the operator on whose
// behalf an in-process caller pushes (the broker's /v1/ops/policy/push
// sets it from the operator token). It is believed only from an in-process
// caller: over mTLS the operator is the certificate's role.
const OperatorMetadata = "alp-operator"

// PushRuleSet implements PolicyService.PushRuleSet: an operator stores a
// new version of any party's set (rulestore.ByOperator). The caller's
// right to do so is the gRPC authorization table's (operators only).
func (s *Service) PushRuleSet(ctx context.Context, req *policyv1.PushRuleSetRequest) (*policyv1.PushRuleSetResponse, error) {
	st := s.state
	if st == nil {
		return nil, status.Error(codes.Unavailable, "policy: not started")
	}
	tenant, party, owner := req.GetTenant(), rules.Party(req.GetParty()), req.GetOwner()
	if !s.Tenants.Hosts(tenant) {
		return nil, status.Errorf(codes.InvalidArgument, "policy: tenant %q is not hosted here", tenant)
	}
	if (party == rules.PartySenderOrg || party == rules.PartyRecipientOrg) && owner == "" {
		owner = tenant
	}
	expect := req.GetExpectVersion()
	if req.ExpectVersion == nil {
		// The pushed text is the truth: replace whatever is current. A
		// write landing in between still makes Put refuse this one.
		if !party.Valid() {
			return nil, pushRefusal(&rules.ValidationError{Party: party, Problems: []rules.Problem{{Code: rules.CodeUnknownParty,
				Message: fmt.Sprintf("unknown party %q: want sender, sender_org, recipient_org or recipient", party)}}})
		}
		cur, err := st.rules.Get(tenant, party, owner)
		if err != nil {
			return nil, pushRefusal(err)
		}
		expect = cur.Version
	}
	by := rulestore.Author{Writer: rulestore.ByOperator, ID: operatorName(ctx)}
	version, err := st.rules.Put(ctx, tenant, party, owner, []byte(req.GetText()), by, expect)
	if err != nil {
		s.Logger.InfoContext(ctx, "operator's rule set refused", "tenant", tenant, "party", party, "owner", owner, "operator", by.ID, "err", err)
		return nil, pushRefusal(err)
	}
	v, err := st.rules.Get(tenant, party, owner)
	if err != nil {
		return nil, pushRefusal(err)
	}
	s.Logger.InfoContext(ctx, "operator's rule set stored", "tenant", tenant, "party", party, "owner", owner, "version", version, "operator", by.ID)
	return &policyv1.PushRuleSetResponse{Version: version, Digest: v.Digest}, nil
}

// operatorName is who pushes, for the event's actor.
func operatorName(ctx context.Context) string {
	if role, ok := mtls.CallerRole(ctx); ok {
		return mtls.RoleName(role)
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(OperatorMetadata); len(v) == 1 && v[0] != "" && len(v[0]) <= 100 {
			return "operator " + v[0]
		}
	}
	return "in-process caller"
}

// pushRefusal maps a rulestore error to a status, with a RuleSetRefused detail
// for a refused text or version.
func pushRefusal(err error) error {
	var ve *rules.ValidationError
	var ce *rulestore.ConflictError
	switch {
	case errors.As(err, &ve):
		d := &policyv1.RuleSetRefused{Code: string(rules.CodeCedarParse)}
		if len(ve.Problems) > 0 {
			d.Code = string(ve.Problems[0].Code)
		}
		for _, p := range ve.Problems {
			d.Problems = append(d.Problems, &policyv1.RuleSetProblem{Code: string(p.Code), Message: p.Message, PolicyId: p.PolicyID,
				Line: uint32(max(p.Line, 0)), Column: uint32(max(p.Column, 0))})
		}
		return withDetail(codes.InvalidArgument, ve.Error(), d)
	case errors.As(err, &ce):
		return withDetail(codes.Aborted, ce.Error(), &policyv1.RuleSetRefused{Code: rulestore.CodeVersionConflict, CurrentVersion: ce.Current})
	case errors.Is(err, rulestore.ErrInvalid), errors.Is(err, rulestore.ErrNotHosted):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, projection.ErrClosed):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func withDetail(c codes.Code, msg string, d *policyv1.RuleSetRefused) error {
	st, err := status.New(c, msg).WithDetails(d)
	if err != nil {
		return status.Error(c, msg)
	}
	return st.Err()
}
