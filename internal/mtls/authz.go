package mtls

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	approvalsv1 "github.com/alpd-project/alpd/gen/alp/approvals/v1"
	federationv1 "github.com/alpd-project/alpd/gen/alp/federation/v1"
	identityv1 "github.com/alpd-project/alpd/gen/alp/identity/v1"
	ingressv1 "github.com/alpd-project/alpd/gen/alp/ingress/v1"
	ledgerv1 "github.com/alpd-project/alpd/gen/alp/ledger/v1"
	policyv1 "github.com/alpd-project/alpd/gen/alp/policy/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

// Policy maps a full gRPC method name ("/alp.policy.v1.PolicyService/Ping")
// to the roles that may call it. A method with no entry may be called by
// nobody.
type Policy map[string][]alpv1.Role

// IdentityIntrospectMethod is identity's token introspection, which only
// ingress and approvals may call.
const IdentityIntrospectMethod = identityv1.IdentityService_Introspect_FullMethodName

// LedgerReadMethods are the ledger's person-facing read methods: each reads
// the ledger of the person whose bearer token is in the call's
// "authorization" metadata (services/ledger/api).
func LedgerReadMethods() []string {
	return []string{
		ledgerv1.LedgerService_GetHead_FullMethodName,
		ledgerv1.LedgerService_ListEntries_FullMethodName,
		ledgerv1.LedgerService_GetInclusionProof_FullMethodName,
		ledgerv1.LedgerService_GetConsistencyProof_FullMethodName,
		ledgerv1.LedgerService_Export_FullMethodName,
	}
}

// LedgerFederationMethods are the ledger's methods for exchanges with other
// brokers (commitments, receipts, cosignatures): federation's only.
func LedgerFederationMethods() []string {
	return []string{
		ledgerv1.LedgerService_EnvelopeCommitment_FullMethodName,
		ledgerv1.LedgerService_IssueReceipt_FullMethodName,
		ledgerv1.LedgerService_Cosign_FullMethodName,
		ledgerv1.LedgerService_RecordCosignature_FullMethodName,
		ledgerv1.LedgerService_WitnessProof_FullMethodName,
	}
}

// DefaultPolicy is alpd's authorization table:
//
//   - every service's Ping: all six services and the operator;
//   - identity's Introspect: ingress and approvals;
//   - identity's ErasePerson, RebindPerson and RevokePersonSessions, and
//     policy's PushRuleSet and DryRun: the operator only;
//   - policy's ListConnections: ingress (the agents' door answers an
//     agent it authenticated with its person's connections) and federation
//     (the receiver lets only connection requests through from strangers);
//   - the ledger's read methods (LedgerReadMethods): ingress only, the
//     agents' door, forwarding an agent's read with the person's bearer
//     token (the ledger checks that token; no role reads a ledger without
//     one, so roles that hold no person's token are not listed);
//   - grpc.health.v1 Check and Watch: every role.
//
// Every other method is denied. Each call returns a new map.
func DefaultPolicy() Policy {
	all := Roles()
	p := Policy{
		ingressv1.IngressService_Ping_FullMethodName:       all,
		identityv1.IdentityService_Ping_FullMethodName:     all,
		policyv1.PolicyService_Ping_FullMethodName:         all,
		federationv1.FederationService_Ping_FullMethodName: all,
		ledgerv1.LedgerService_Ping_FullMethodName:         all,
		approvalsv1.ApprovalsService_Ping_FullMethodName:   all,

		IdentityIntrospectMethod:                                       {alpv1.Role_ROLE_INGRESS, alpv1.Role_ROLE_APPROVALS},
		identityv1.IdentityService_ErasePerson_FullMethodName:          {alpv1.Role_ROLE_OPERATOR},
		identityv1.IdentityService_RebindPerson_FullMethodName:         {alpv1.Role_ROLE_OPERATOR},
		identityv1.IdentityService_RevokePersonSessions_FullMethodName: {alpv1.Role_ROLE_OPERATOR},
		policyv1.PolicyService_PushRuleSet_FullMethodName:              {alpv1.Role_ROLE_OPERATOR},
		policyv1.PolicyService_DryRun_FullMethodName:                   {alpv1.Role_ROLE_OPERATOR},
		policyv1.PolicyService_ListConnections_FullMethodName:          {alpv1.Role_ROLE_INGRESS, alpv1.Role_ROLE_FEDERATION},

		healthpb.Health_Check_FullMethodName: all,
		healthpb.Health_Watch_FullMethodName: all,
	}
	for _, m := range LedgerReadMethods() {
		p[m] = []alpv1.Role{alpv1.Role_ROLE_INGRESS}
	}
	for _, m := range LedgerFederationMethods() {
		p[m] = []alpv1.Role{alpv1.Role_ROLE_FEDERATION}
	}
	for m, roles := range p {
		p[m] = slices.Clone(roles)
	}
	return p
}

// Allowed reports whether role may call method.
func (p Policy) Allowed(method string, role alpv1.Role) bool {
	return slices.Contains(p[method], role)
}

// authorize checks the caller of method and returns ctx carrying its role.
func (p Policy) authorize(ctx context.Context, method string) (context.Context, error) {
	role, err := RoleFromContext(ctx)
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	allowed, listed := p[method]
	if !listed {
		return nil, status.Errorf(codes.PermissionDenied, "mtls: role %s may not call %s: the method has no authorization entry (default deny)",
			RoleName(role), method)
	}
	if !slices.Contains(allowed, role) {
		return nil, status.Errorf(codes.PermissionDenied, "mtls: role %s may not call %s (allowed: %s)",
			RoleName(role), method, roleList(allowed))
	}
	return context.WithValue(ctx, callerKey{}, role), nil
}

func (p Policy) clone() Policy {
	c := make(Policy, len(p))
	for m, roles := range p {
		c[m] = slices.Clone(roles)
	}
	return c
}

type callerKey struct{}

// CallerRole is the verified role of the caller, put into the context by
// [UnaryAuthorizer] or [StreamAuthorizer]; false outside an authorized call.
func CallerRole(ctx context.Context) (alpv1.Role, bool) {
	r, ok := ctx.Value(callerKey{}).(alpv1.Role)
	return r, ok
}

// UnaryAuthorizer enforces policy on unary calls: codes.Unauthenticated when
// the connection has no verified certificate with exactly one alpd role,
// codes.PermissionDenied when the role may not call the method (or the method
// is not in policy). The policy is copied: later changes to the map have no
// effect.
func UnaryAuthorizer(policy Policy) grpc.UnaryServerInterceptor {
	p := policy.clone()
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := p.authorize(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamAuthorizer is [UnaryAuthorizer] for streaming calls.
func StreamAuthorizer(policy Policy) grpc.StreamServerInterceptor {
	p := policy.clone()
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := p.authorize(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, &authorizedStream{ServerStream: ss, ctx: ctx})
	}
}

type authorizedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *authorizedStream) Context() context.Context { return s.ctx }

// PolicyTable renders policy as a Markdown table, one row per method in
// name order, roles in the order of [Roles].
func PolicyTable(policy Policy) string {
	methods := make([]string, 0, len(policy))
	for m := range policy {
		methods = append(methods, m)
	}
	sort.Strings(methods)
	var b strings.Builder
	b.WriteString("| Method | Allowed roles |\n|---|---|\n")
	for _, m := range methods {
		fmt.Fprintf(&b, "| `%s` | %s |\n", m, roleList(policy[m]))
	}
	return b.String()
}

// roleList names roles in the order of Roles (unknown ones last, by
// number), "nobody" for none.
func roleList(roles []alpv1.Role) string {
	var names []string
	seen := map[alpv1.Role]bool{}
	for _, r := range Roles() {
		if slices.Contains(roles, r) && !seen[r] {
			seen[r] = true
			names = append(names, RoleName(r))
		}
	}
	rest := []alpv1.Role{}
	for _, r := range roles {
		if !seen[r] {
			seen[r] = true
			rest = append(rest, r)
		}
	}
	slices.Sort(rest)
	for _, r := range rest {
		names = append(names, r.String())
	}
	if len(names) == 0 {
		return "nobody"
	}
	return strings.Join(names, ", ")
}
