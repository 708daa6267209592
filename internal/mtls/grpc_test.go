package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	identityv1 "github.com/alpd-project/alpd/gen/alp/identity/v1"
	policyv1 "github.com/alpd-project/alpd/gen/alp/policy/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

func TestEveryRoleMayPingAndCheckHealth(t *testing.T) {
	p := newPKI(t)
	addr := startServer(t, p.role(alpv1.Role_ROLE_POLICY), DefaultPolicy())
	for _, r := range Roles() {
		cc := conn(t, addr, dialOpt(t, p.role(r)))
		caller, _, err := pingOn(t, cc)
		if err != nil {
			t.Fatalf("%s: policy Ping: %v", RoleName(r), err)
		}
		if caller != RoleName(r) {
			t.Errorf("%s: server saw caller %q", RoleName(r), caller)
		}
		if _, err := identityv1.NewIdentityServiceClient(cc).Ping(ctx(t), &identityv1.PingRequest{}); err != nil {
			t.Errorf("%s: identity Ping: %v", RoleName(r), err)
		}
		resp, err := healthpb.NewHealthClient(cc).Check(ctx(t), &healthpb.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("%s: health Check: %v, %v", RoleName(r), resp, err)
		}
		w, err := healthpb.NewHealthClient(cc).Watch(ctx(t), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("%s: health Watch: %v", RoleName(r), err)
		}
		if first, err := w.Recv(); err != nil || first.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("%s: health Watch: %v, %v", RoleName(r), first, err)
		}
	}
}

func TestRoleNotAllowed(t *testing.T) {
	p := newPKI(t)
	policy := Policy{
		policyv1.PolicyService_Ping_FullMethodName: {alpv1.Role_ROLE_INGRESS},
		healthpb.Health_Check_FullMethodName:       Roles(),
		// identity Ping and health Watch: no entry.
	}
	addr := startServer(t, p.role(alpv1.Role_ROLE_POLICY), policy)

	if caller, _, err := pingPolicy(t, addr, dialOpt(t, p.role(alpv1.Role_ROLE_INGRESS))); err != nil || caller != "ingress" {
		t.Fatalf("ingress: %q, %v", caller, err)
	}

	cc := conn(t, addr, dialOpt(t, p.role(alpv1.Role_ROLE_APPROVALS)))
	_, _, err := pingOn(t, cc)
	wantCode(t, err, codes.PermissionDenied)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "approvals") || !strings.Contains(msg, policyv1.PolicyService_Ping_FullMethodName) {
		t.Errorf("message %q should name the role and the method", msg)
	}
	// The same connection may call what it is allowed.
	if _, err := healthpb.NewHealthClient(cc).Check(ctx(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("approvals health Check: %v", err)
	}
	// No entry: default deny, for unary and streams.
	_, err = identityv1.NewIdentityServiceClient(cc).Ping(ctx(t), &identityv1.PingRequest{})
	wantCode(t, err, codes.PermissionDenied)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "default deny") {
		t.Errorf("message %q should say the method is denied by default", msg)
	}
	w, err := healthpb.NewHealthClient(cc).Watch(ctx(t), &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	wantCode(t, err, codes.PermissionDenied)
}

func TestNoClientCertificate(t *testing.T) {
	p := newPKI(t)
	addr := startServer(t, p.role(alpv1.Role_ROLE_POLICY), DefaultPolicy())
	roots := x509.NewCertPool()
	roots.AddCert(p.ca.Cert)
	// A client that trusts the server but has no certificate of its own.
	opt := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}))
	_, _, err := pingPolicy(t, addr, opt)
	wantCode(t, err, codes.Unavailable, codes.Unauthenticated)
	// TLS 1.2 is refused too.
	opt = grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, MaxVersion: tls.VersionTLS12}))
	_, _, err = pingPolicy(t, addr, opt)
	wantCode(t, err, codes.Unavailable)
}

func TestOtherCA(t *testing.T) {
	p, other := newPKI(t), newPKI(t)
	addr := startServer(t, p.role(alpv1.Role_ROLE_POLICY), DefaultPolicy())

	// A client certificate from another CA, client trusting the right CA.
	f := other.role(alpv1.Role_ROLE_INGRESS)
	f.CA = p.caFile()
	_, _, err := pingPolicy(t, addr, dialOpt(t, f))
	wantCode(t, err, codes.Unavailable, codes.Unauthenticated)

	// A client that does not trust the server's CA.
	f = p.role(alpv1.Role_ROLE_INGRESS)
	f.CA = other.caFile()
	_, _, err = pingPolicy(t, addr, dialOpt(t, f))
	wantCode(t, err, codes.Unavailable)
	if !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("error %v should say the server's CA is unknown", err)
	}
}

func TestExpiredCertificates(t *testing.T) {
	p := newPKI(t)
	expired := leafSpec{
		uris:      roleURIs(t, alpv1.Role_ROLE_INGRESS),
		notBefore: time.Now().Add(-48 * time.Hour),
		notAfter:  time.Now().Add(-time.Hour),
	}
	notYet := leafSpec{
		uris:      roleURIs(t, alpv1.Role_ROLE_INGRESS),
		notBefore: time.Now().Add(time.Hour),
		notAfter:  time.Now().Add(2 * time.Hour),
	}
	addr := startServer(t, p.role(alpv1.Role_ROLE_POLICY), DefaultPolicy())
	for name, s := range map[string]leafSpec{"expired": expired, "not yet valid": notYet} {
		_, _, err := pingPolicy(t, addr, dialOpt(t, p.custom("client-"+strings.ReplaceAll(name, " ", "-"), s)))
		wantCode(t, err, codes.Unavailable, codes.Unauthenticated)
	}

	// An expired server certificate is refused by the client.
	s := expired
	s.uris = roleURIs(t, alpv1.Role_ROLE_POLICY)
	addr = startServer(t, p.custom("server-expired", s), DefaultPolicy())
	_, _, err := pingPolicy(t, addr, dialOpt(t, p.role(alpv1.Role_ROLE_INGRESS)))
	wantCode(t, err, codes.Unavailable)
	if !strings.Contains(err.Error(), "expired") {
		t.Errorf("error %v should say the certificate expired", err)
	}
}

func TestCertificateWithoutRole(t *testing.T) {
	p := newPKI(t)
	addr := startServer(t, p.role(alpv1.Role_ROLE_POLICY), DefaultPolicy())
	for name, s := range map[string]leafSpec{
		"no-role":      {},
		"two-roles":    {uris: roleURIs(t, alpv1.Role_ROLE_INGRESS, alpv1.Role_ROLE_OPERATOR)},
		"foreign-only": {uris: []*url.URL{mustURL(t, "spiffe://example.org/role/ingress")}},
		"unknown-role": {uris: []*url.URL{mustURL(t, "spiffe://alpd/role/mailer")}},
	} {
		_, _, err := pingPolicy(t, addr, dialOpt(t, p.custom(name, s)))
		wantCode(t, err, codes.Unauthenticated)
	}
}

func TestClientOnlyCertificateCannotServe(t *testing.T) {
	p := newPKI(t)
	s := leafSpec{uris: roleURIs(t, alpv1.Role_ROLE_POLICY), extKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	addr := startServer(t, p.custom("client-only", s), DefaultPolicy())
	_, _, err := pingPolicy(t, addr, dialOpt(t, p.role(alpv1.Role_ROLE_INGRESS)))
	wantCode(t, err, codes.Unavailable)

	// And a server-only certificate cannot be a client.
	addr = startServer(t, p.role(alpv1.Role_ROLE_POLICY), DefaultPolicy())
	s = leafSpec{uris: roleURIs(t, alpv1.Role_ROLE_INGRESS), extKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	_, _, err = pingPolicy(t, addr, dialOpt(t, p.custom("server-only", s)))
	wantCode(t, err, codes.Unavailable, codes.Unauthenticated)
}

func TestServerHostAndRoleAreVerified(t *testing.T) {
	p := newPKI(t)
	ingress := p.role(alpv1.Role_ROLE_INGRESS)

	// A certificate for another host.
	s := leafSpec{uris: roleURIs(t, alpv1.Role_ROLE_POLICY), hosts: []string{"policy.elsewhere.example"}}
	addr := startServer(t, p.custom("elsewhere", s), DefaultPolicy())
	_, _, err := pingPolicy(t, addr, dialOpt(t, ingress))
	wantCode(t, err, codes.Unavailable)
	if !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("error %v should name the host", err)
	}

	// DialOptionFor checks the server's role as well.
	addr = startServer(t, p.role(alpv1.Role_ROLE_IDENTITY), DefaultPolicy())
	forPolicy, err := DialOptionFor(ingress, alpv1.Role_ROLE_POLICY)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = pingPolicy(t, addr, forPolicy)
	wantCode(t, err, codes.Unavailable)
	if !strings.Contains(err.Error(), "is identity, expected policy") {
		t.Errorf("error %v should name both roles", err)
	}
	forIdentity, err := DialOptionFor(ingress, alpv1.Role_ROLE_IDENTITY)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := pingPolicy(t, addr, forIdentity); err != nil {
		t.Errorf("identity server with DialOptionFor(identity): %v", err)
	}
	if _, err := DialOptionFor(ingress, alpv1.Role_ROLE_UNSPECIFIED); err == nil {
		t.Error("DialOptionFor(unspecified) accepted")
	}

	// Dialled by name: the certificate names localhost.
	if _, _, err := pingPolicy(t, strings.Replace(addr, "127.0.0.1", "localhost", 1), forIdentity); err != nil {
		t.Errorf("dialled as localhost: %v", err)
	}
}

// TestPlainTLS uses ServerTLS and ClientTLS without gRPC.
func TestPlainTLS(t *testing.T) {
	p := newPKI(t)
	srvCfg, err := ServerTLS(p.role(alpv1.Role_ROLE_LEDGER))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if err := c.(*tls.Conn).Handshake(); err != nil {
					return
				}
				state := c.(*tls.Conn).ConnectionState()
				r, err := RoleFromCert(state.VerifiedChains[0][0])
				if err != nil {
					return
				}
				io.WriteString(c, RoleName(r))
			}()
		}
	}()
	client := p.role(alpv1.Role_ROLE_OPERATOR)
	cfg, err := ClientTLS(client, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.Dial("tcp", lis.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(c)
	c.Close()
	if string(got) != "operator" {
		t.Errorf("server saw %q, want operator", got)
	}
	if c.ConnectionState().Version != tls.VersionTLS13 {
		t.Errorf("TLS version %x", c.ConnectionState().Version)
	}

	// With no server name and an IP address, there is nothing to verify against.
	cfg, err = ClientTLS(client, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.Dial("tcp", lis.Addr().String(), cfg); err == nil || !strings.Contains(err.Error(), "no server name") {
		t.Errorf("dial without server name: %v", err)
	}
	// With the wrong one, it fails.
	cfg, _ = ClientTLS(client, "ledger.example")
	if _, err := tls.Dial("tcp", lis.Addr().String(), cfg); err == nil {
		t.Error("dial with the wrong server name succeeded")
	}
	// By name, the SNI is used.
	cfg, _ = ClientTLS(client, "")
	c, err = tls.Dial("tcp", strings.Replace(lis.Addr().String(), "127.0.0.1", "localhost", 1), cfg)
	if err != nil {
		t.Fatalf("dial localhost: %v", err)
	}
	c.Close()
}
