package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

func TestRoleNamesAndURIs(t *testing.T) {
	if got := len(Roles()); got != 7 {
		t.Fatalf("Roles() has %d roles, want the six services and operator", got)
	}
	for _, r := range Roles() {
		back, ok := RoleByName(RoleName(r))
		if !ok || back != r {
			t.Errorf("RoleByName(RoleName(%v)) = %v, %v", r, back, ok)
		}
		u, err := RoleURI(r)
		if err != nil {
			t.Fatal(err)
		}
		if want := "spiffe://alpd/role/" + RoleName(r); u.String() != want {
			t.Errorf("RoleURI(%v) = %s, want %s", r, u, want)
		}
	}
	if u, _ := RoleURI(alpv1.Role_ROLE_OPERATOR); u.String() != "spiffe://alpd/role/operator" {
		t.Errorf("operator URI %s", u)
	}
	for _, bad := range []alpv1.Role{alpv1.Role_ROLE_UNSPECIFIED, alpv1.Role(99)} {
		if _, err := RoleURI(bad); err == nil {
			t.Errorf("RoleURI(%v) succeeded", bad)
		}
		if RoleName(bad) != "" {
			t.Errorf("RoleName(%v) = %q", bad, RoleName(bad))
		}
	}
	for _, bad := range []string{"", "unspecified", "mailer", "Policy"} {
		if _, ok := RoleByName(bad); ok {
			t.Errorf("RoleByName(%q) succeeded", bad)
		}
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestRoleFromCert(t *testing.T) {
	cert := func(uris ...string) *x509.Certificate {
		c := &x509.Certificate{}
		c.Subject.CommonName = "test"
		for _, s := range uris {
			c.URIs = append(c.URIs, mustURL(t, s))
		}
		return c
	}
	for _, tc := range []struct {
		name string
		uris []string
		want alpv1.Role
		err  string
	}{
		{"policy", []string{"spiffe://alpd/role/policy"}, alpv1.Role_ROLE_POLICY, ""},
		{"operator", []string{"spiffe://alpd/role/operator"}, alpv1.Role_ROLE_OPERATOR, ""},
		{"beside a foreign SPIFFE id", []string{"spiffe://example.org/ns/x/sa/y", "spiffe://alpd/role/ledger", "https://alpd/role/policy"}, alpv1.Role_ROLE_LEDGER, ""},
		{"case-insensitive scheme and host", []string{"SPIFFE://ALPD/role/ingress"}, alpv1.Role_ROLE_INGRESS, ""},
		{"none", nil, 0, "no spiffe://alpd/role/<role> URI SAN"},
		{"only foreign", []string{"spiffe://example.org/role/policy"}, 0, "no spiffe://alpd/role/<role> URI SAN"},
		{"two roles", []string{"spiffe://alpd/role/policy", "spiffe://alpd/role/ledger"}, 0, "more than one role"},
		{"same role twice", []string{"spiffe://alpd/role/policy", "spiffe://alpd/role/policy"}, 0, "more than one role"},
		{"unknown role", []string{"spiffe://alpd/role/mailer"}, 0, "not an alpd role URI"},
		{"unspecified", []string{"spiffe://alpd/role/unspecified"}, 0, "not an alpd role URI"},
		{"role case", []string{"spiffe://alpd/role/Policy"}, 0, "not an alpd role URI"},
		{"sub-path", []string{"spiffe://alpd/role/policy/x"}, 0, "not an alpd role URI"},
		{"other path in domain", []string{"spiffe://alpd/service/policy"}, 0, "not an alpd role URI"},
		{"query", []string{"spiffe://alpd/role/policy?x=1"}, 0, "not an alpd role URI"},
		{"port", []string{"spiffe://alpd:1/role/policy"}, 0, "not an alpd role URI"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RoleFromCert(cert(tc.uris...))
			if tc.err == "" {
				if err != nil || got != tc.want {
					t.Fatalf("got %v, %v; want %v", got, err, tc.want)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrNoRole) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("got %v, %v; want an ErrNoRole error containing %q", got, err, tc.err)
			}
		})
	}
	if _, err := RoleFromCert(nil); !errors.Is(err, ErrNoRole) {
		t.Errorf("nil certificate: %v", err)
	}
}

func TestIssuedCertificate(t *testing.T) {
	ca, err := NewCA("test", 2*365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(alpv1.Role_ROLE_FEDERATION, []string{"127.0.0.1", "alpd-federation.alpd.svc", "::1", " ", "Localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c := pair.Leaf
	if r, err := RoleFromCert(c); err != nil || r != alpv1.Role_ROLE_FEDERATION {
		t.Errorf("role %v, %v", r, err)
	}
	if len(c.ExtKeyUsage) != 2 || c.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || c.ExtKeyUsage[1] != x509.ExtKeyUsageClientAuth {
		t.Errorf("ext key usage %v, want serverAuth and clientAuth", c.ExtKeyUsage)
	}
	if c.IsCA {
		t.Error("leaf is a CA")
	}
	if strings.Join(c.DNSNames, ",") != "alpd-federation.alpd.svc,localhost" || len(c.IPAddresses) != 2 {
		t.Errorf("SANs: DNS %v IP %v", c.DNSNames, c.IPAddresses)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, name := range []string{"127.0.0.1", "::1", "localhost", "alpd-federation.alpd.svc"} {
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("verify as %s: %v", name, err)
		}
	}

	for _, bad := range [][]string{{"http://x"}, {"a b"}, {"host:443"}} {
		if _, _, err := ca.Issue(alpv1.Role_ROLE_POLICY, bad, time.Hour); err == nil {
			t.Errorf("hosts %q accepted", bad)
		}
	}
	if _, _, err := ca.Issue(alpv1.Role_ROLE_UNSPECIFIED, nil, time.Hour); err == nil {
		t.Error("unspecified role issued")
	}
	if _, _, err := ca.Issue(alpv1.Role_ROLE_POLICY, nil, 3*365*24*time.Hour); err == nil || !strings.Contains(err.Error(), "expires") {
		t.Errorf("certificate outliving its CA: %v", err)
	}
	if _, _, err := ca.Issue(alpv1.Role_ROLE_POLICY, nil, 0); err == nil {
		t.Error("zero validity accepted")
	}

	// Round trip of the CA through PEM.
	keyPEM, err = ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseCA(ca.CertPEM(), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Cert.Equal(ca.Cert) {
		t.Error("CA certificate changed in the round trip")
	}
	if _, err := ParseCA(certPEM, keyPEM); err == nil {
		t.Error("a leaf certificate was accepted as CA")
	}
	other, _ := NewCA("other", time.Hour)
	otherKey, _ := other.KeyPEM()
	if _, err := ParseCA(ca.CertPEM(), otherKey); err == nil {
		t.Error("a CA with another CA's key was accepted")
	}
}

func TestRoleFromContext(t *testing.T) {
	leaf := &x509.Certificate{URIs: []*url.URL{mustURL(t, "spiffe://alpd/role/approvals")}}
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want alpv1.Role
	}{
		{"no peer", context.Background(), 0},
		{"not TLS", peer.NewContext(context.Background(), &peer.Peer{Addr: addr}), 0},
		{"presented but unverified", peer.NewContext(context.Background(), &peer.Peer{Addr: addr,
			AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}}}), 0},
		{"verified", peer.NewContext(context.Background(), &peer.Peer{Addr: addr,
			AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf},
				VerifiedChains: [][]*x509.Certificate{{leaf}}}}}), alpv1.Role_ROLE_APPROVALS},
	} {
		got, err := RoleFromContext(tc.ctx)
		if tc.want == 0 {
			if !errors.Is(err, ErrNoRole) {
				t.Errorf("%s: got %v, %v; want ErrNoRole", tc.name, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}
