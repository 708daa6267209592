package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	approvalsv1 "github.com/alpd-project/alpd/gen/alp/approvals/v1"
	federationv1 "github.com/alpd-project/alpd/gen/alp/federation/v1"
	identityv1 "github.com/alpd-project/alpd/gen/alp/identity/v1"
	ingressv1 "github.com/alpd-project/alpd/gen/alp/ingress/v1"
	ledgerv1 "github.com/alpd-project/alpd/gen/alp/ledger/v1"
	policyv1 "github.com/alpd-project/alpd/gen/alp/policy/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

// TestDefaultPolicyCoversEveryMethod fails when an RPC is added to a
// service's proto without a line in DefaultPolicy (it would be denied to
// everyone).
func TestDefaultPolicyCoversEveryMethod(t *testing.T) {
	p := DefaultPolicy()
	for _, sd := range []grpc.ServiceDesc{
		ingressv1.IngressService_ServiceDesc, identityv1.IdentityService_ServiceDesc,
		policyv1.PolicyService_ServiceDesc, federationv1.FederationService_ServiceDesc,
		ledgerv1.LedgerService_ServiceDesc, approvalsv1.ApprovalsService_ServiceDesc,
		healthpb.Health_ServiceDesc,
	} {
		var methods []string
		for _, m := range sd.Methods {
			methods = append(methods, m.MethodName)
		}
		for _, s := range sd.Streams {
			methods = append(methods, s.StreamName)
		}
		for _, m := range methods {
			full := "/" + sd.ServiceName + "/" + m
			if full == healthpb.Health_List_FullMethodName {
				continue // deliberately not granted: peers need Check and Watch only
			}
			if len(p[full]) == 0 {
				t.Errorf("DefaultPolicy has no roles for %s", full)
			}
		}
	}
}

func TestDefaultPolicy(t *testing.T) {
	p := DefaultPolicy()
	all := Roles()
	for _, m := range []string{
		ingressv1.IngressService_Ping_FullMethodName, identityv1.IdentityService_Ping_FullMethodName,
		policyv1.PolicyService_Ping_FullMethodName, federationv1.FederationService_Ping_FullMethodName,
		ledgerv1.LedgerService_Ping_FullMethodName, approvalsv1.ApprovalsService_Ping_FullMethodName,
		"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch",
	} {
		for _, r := range all {
			if !p.Allowed(m, r) {
				t.Errorf("%s may not call %s", RoleName(r), m)
			}
		}
	}
	for _, r := range all {
		want := r == alpv1.Role_ROLE_INGRESS || r == alpv1.Role_ROLE_APPROVALS
		if got := p.Allowed("/alp.identity.v1.IdentityService/Introspect", r); got != want {
			t.Errorf("%s may call Introspect: %v, want %v", RoleName(r), got, want)
		}
		if p.Allowed("/alp.identity.v1.IdentityService/Unknown", r) || p.Allowed(healthpb.Health_List_FullMethodName, r) || p.Allowed("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", r) {
			t.Errorf("%s may call an unlisted method", RoleName(r))
		}
		if p.Allowed(policyv1.PolicyService_Ping_FullMethodName, alpv1.Role_ROLE_UNSPECIFIED) {
			t.Error("unspecified role allowed")
		}
	}
	// Each call returns a fresh table.
	p[policyv1.PolicyService_Ping_FullMethodName][0] = alpv1.Role_ROLE_UNSPECIFIED
	delete(p, identityv1.IdentityService_Ping_FullMethodName)
	q := DefaultPolicy()
	if !q.Allowed(policyv1.PolicyService_Ping_FullMethodName, all[0]) || !q.Allowed(identityv1.IdentityService_Ping_FullMethodName, all[0]) {
		t.Error("changing one DefaultPolicy changed the next")
	}
	if !p.Allowed(ledgerv1.LedgerService_Ping_FullMethodName, all[0]) {
		t.Error("entries share role slices")
	}
}

// peerCtx is a server context whose peer verified a certificate with uris.
func peerCtx(t *testing.T, uris ...string) context.Context {
	t.Helper()
	leaf := &x509.Certificate{}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		leaf.URIs = append(leaf.URIs, u)
	}
	return peer.NewContext(context.Background(), &peer.Peer{
		Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4242},
		AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{
			PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}},
		}},
	})
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (f fakeStream) Context() context.Context { return f.ctx }

func TestAuthorizersDirectly(t *testing.T) {
	policy := DefaultPolicy()
	unary := UnaryAuthorizer(policy)
	stream := StreamAuthorizer(policy)
	// Changing the map afterwards does not change the authorizers.
	policy[IdentityIntrospectMethod] = Roles()

	call := func(ctx context.Context, method string) (alpv1.Role, error) {
		var seen alpv1.Role
		_, err := unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, func(ctx context.Context, _ any) (any, error) {
			r, ok := CallerRole(ctx)
			if !ok {
				t.Error("handler without caller role")
			}
			seen = r
			return nil, nil
		})
		var sseen alpv1.Role
		serr := stream(nil, fakeStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: method}, func(_ any, ss grpc.ServerStream) error {
			sseen, _ = CallerRole(ss.Context())
			return nil
		})
		if status.Code(err) != status.Code(serr) || seen != sseen {
			t.Errorf("%s: unary %v/%v and stream %v/%v disagree", method, seen, err, sseen, serr)
		}
		return seen, err
	}

	for _, tc := range []struct {
		uri  string
		code codes.Code
	}{
		{"spiffe://alpd/role/ingress", codes.OK},
		{"spiffe://alpd/role/approvals", codes.OK},
		{"spiffe://alpd/role/policy", codes.PermissionDenied},
		{"spiffe://alpd/role/operator", codes.PermissionDenied},
		{"spiffe://example.org/role/ingress", codes.Unauthenticated},
	} {
		role, err := call(peerCtx(t, tc.uri), IdentityIntrospectMethod)
		if status.Code(err) != tc.code {
			t.Errorf("%s calling Introspect: %v, want %v", tc.uri, err, tc.code)
		}
		if tc.code == codes.OK && RoleName(role) != strings.TrimPrefix(tc.uri, "spiffe://alpd/role/") {
			t.Errorf("%s: handler saw role %v", tc.uri, role)
		}
		if tc.code == codes.PermissionDenied {
			msg := status.Convert(err).Message()
			if !strings.Contains(msg, strings.TrimPrefix(tc.uri, "spiffe://alpd/role/")) || !strings.Contains(msg, IdentityIntrospectMethod) {
				t.Errorf("message %q should name the role and the method", msg)
			}
		}
	}
	if _, err := call(context.Background(), policyv1.PolicyService_Ping_FullMethodName); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no peer: %v", err)
	}
	if _, ok := CallerRole(context.Background()); ok {
		t.Error("CallerRole outside a call")
	}
}

func TestPolicyTable(t *testing.T) {
	got := PolicyTable(DefaultPolicy())
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if lines[0] != "| Method | Allowed roles |" || lines[1] != "|---|---|" {
		t.Errorf("header:\n%s", got)
	}
	if len(lines) != 2+len(DefaultPolicy()) {
		t.Errorf("%d lines for %d methods:\n%s", len(lines), len(DefaultPolicy()), got)
	}
	if !slices.IsSorted(lines[2:]) {
		t.Errorf("rows not in order:\n%s", got)
	}
	for _, want := range []string{
		"| `/alp.identity.v1.IdentityService/Introspect` | ingress, approvals |",
		"| `/alp.ledger.v1.LedgerService/GetHead` | ingress |",
		"| `/alp.ledger.v1.LedgerService/Export` | ingress |",
		"| `/alp.policy.v1.PolicyService/Ping` | ingress, policy, federation, ledger, approvals, identity, operator |",
		"| `/grpc.health.v1.Health/Watch` | ingress, policy, federation, ledger, approvals, identity, operator |",
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("missing row %s in\n%s", want, got)
		}
	}
	odd := PolicyTable(Policy{"/x/Y": nil, "/x/Z": {alpv1.Role(42), alpv1.Role_ROLE_LEDGER, alpv1.Role_ROLE_LEDGER}})
	if !strings.Contains(odd, "| `/x/Y` | nobody |") || !strings.Contains(odd, "| `/x/Z` | ledger, 42 |") {
		t.Errorf("odd policy:\n%s", odd)
	}
	t.Logf("\n%s", got)
}

// TestOperationsDocShowsPolicy keeps docs/operations.md in step with the
// authorization table.
func TestOperationsDocShowsPolicy(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), PolicyTable(DefaultPolicy())) {
		t.Fatalf("docs/operations.md does not contain the current authorization table:\n%s", PolicyTable(DefaultPolicy()))
	}
}
