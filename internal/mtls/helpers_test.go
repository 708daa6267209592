package mtls

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	identityv1 "github.com/alpd-project/alpd/gen/alp/identity/v1"
	policyv1 "github.com/alpd-project/alpd/gen/alp/policy/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

var localHosts = []string{"127.0.0.1", "localhost"}

// pki is a test CA with its certificate written to dir/ca.pem.
type pki struct {
	t   *testing.T
	dir string
	ca  *CA
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	ca, err := NewCA("test CA "+t.Name(), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{t: t, dir: t.TempDir(), ca: ca}
	if err := os.WriteFile(p.caFile(), ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pki) caFile() string { return filepath.Join(p.dir, "ca.pem") }

// role issues a certificate for role (for 127.0.0.1 and localhost) and
// writes it as dir/<name>.pem and dir/<name>-key.pem.
func (p *pki) role(r alpv1.Role) Files {
	p.t.Helper()
	c, k, err := p.ca.Issue(r, localHosts, time.Hour)
	if err != nil {
		p.t.Fatal(err)
	}
	return p.write(RoleName(r), c, k)
}

// custom issues a certificate Issue would not make.
func (p *pki) custom(name string, s leafSpec) Files {
	p.t.Helper()
	if s.commonName == "" {
		s.commonName = name
	}
	if s.hosts == nil {
		s.hosts = localHosts
	}
	if s.notBefore.IsZero() {
		s.notBefore = time.Now().Add(-time.Minute)
	}
	if s.notAfter.IsZero() {
		s.notAfter = time.Now().Add(time.Hour)
	}
	c, k, err := p.ca.issue(s)
	if err != nil {
		p.t.Fatal(err)
	}
	return p.write(name, c, k)
}

func (p *pki) write(name string, certPEM, keyPEM []byte) Files {
	p.t.Helper()
	f := Files{CA: p.caFile(), Cert: filepath.Join(p.dir, name+".pem"), Key: filepath.Join(p.dir, name+"-key.pem")}
	if err := WriteCertAndKey(f.Cert, f.Key, certPEM, keyPEM); err != nil {
		p.t.Fatal(err)
	}
	return f
}

func roleURIs(t *testing.T, roles ...alpv1.Role) []*url.URL {
	t.Helper()
	var us []*url.URL
	for _, r := range roles {
		u, err := RoleURI(r)
		if err != nil {
			t.Fatal(err)
		}
		us = append(us, u)
	}
	return us
}

// testPolicy and testIdentity answer Ping with the caller's role in the
// "caller" response header.
type testPolicy struct {
	policyv1.UnimplementedPolicyServiceServer
}

func (testPolicy) Ping(ctx context.Context, req *policyv1.PingRequest) (*policyv1.PingResponse, error) {
	if err := sendCaller(ctx); err != nil {
		return nil, err
	}
	return &policyv1.PingResponse{Envelope: req.GetEnvelope(), Service: "policy", Ready: true}, nil
}

type testIdentity struct {
	identityv1.UnimplementedIdentityServiceServer
}

func (testIdentity) Ping(ctx context.Context, req *identityv1.PingRequest) (*identityv1.PingResponse, error) {
	if err := sendCaller(ctx); err != nil {
		return nil, err
	}
	return &identityv1.PingResponse{Envelope: req.GetEnvelope(), Service: "identity", Ready: true}, nil
}

func sendCaller(ctx context.Context) error {
	r, ok := CallerRole(ctx)
	if !ok {
		return status.Error(codes.Internal, "handler reached without a caller role")
	}
	return grpc.SetHeader(ctx, metadata.Pairs("caller", RoleName(r)))
}

// startServer serves the policy, identity and health services on
// 127.0.0.1:0 with mTLS from files and policy enforced.
func startServer(t *testing.T, files Files, policy Policy) string {
	t.Helper()
	creds, err := ServerCredentials(files)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(creds),
		grpc.ChainUnaryInterceptor(UnaryAuthorizer(policy)),
		grpc.ChainStreamInterceptor(StreamAuthorizer(policy)))
	policyv1.RegisterPolicyServiceServer(srv, testPolicy{})
	identityv1.RegisterIdentityServiceServer(srv, testIdentity{})
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func dialOpt(t *testing.T, files Files) grpc.DialOption {
	t.Helper()
	opt, err := DialOption(files)
	if err != nil {
		t.Fatal(err)
	}
	return opt
}

func conn(t *testing.T, addr string, opt grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// pingPolicy calls policy's Ping on a new connection and returns the caller
// role the server saw and the serial number of the certificate it presented.
func pingPolicy(t *testing.T, addr string, opt grpc.DialOption) (caller string, serial *big.Int, err error) {
	t.Helper()
	cc := conn(t, addr, opt)
	defer cc.Close()
	return pingOn(t, cc)
}

func pingOn(t *testing.T, cc *grpc.ClientConn) (caller string, serial *big.Int, err error) {
	t.Helper()
	var hdr metadata.MD
	var p peer.Peer
	_, err = policyv1.NewPolicyServiceClient(cc).Ping(ctx(t), &policyv1.PingRequest{}, grpc.Header(&hdr), grpc.Peer(&p))
	if err != nil {
		return "", nil, err
	}
	if v := hdr.Get("caller"); len(v) == 1 {
		caller = v[0]
	}
	if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
		serial = info.State.PeerCertificates[0].SerialNumber
	}
	return caller, serial, nil
}

func wantCode(t *testing.T, err error, want ...codes.Code) {
	t.Helper()
	t.Logf("error: %v", err)
	got := status.Code(err)
	for _, c := range want {
		if got == c {
			return
		}
	}
	t.Fatalf("error %v: code %v, want one of %v", err, got, want)
}

func serialOf(t *testing.T, certFile string) *big.Int {
	t.Helper()
	data, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s: no PEM", certFile)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber
}
