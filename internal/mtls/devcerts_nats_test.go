package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"
)

func TestNATSServerCertificate(t *testing.T) {
	dir := t.TempDir()
	if _, err := WriteDevCerts(dir, DevOptions{Roles: nil, Hosts: []string{"127.0.0.1"}, Validity: time.Hour, NATSServer: true}); err != nil {
		t.Fatal(err)
	}
	f := NATSServerFiles(dir)
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(leaf.URIs) != 0 || len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Fatalf("nats-server cert: uris %v eku %v", leaf.URIs, leaf.ExtKeyUsage)
	}
	caPEM, _ := os.ReadFile(f.CA)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := RoleFromCert(leaf); err == nil {
		t.Fatal("nats-server certificate carries a role")
	}
	// Without Force, a second run refuses to replace it.
	if _, err := WriteDevCerts(dir, DevOptions{Roles: nil, Hosts: []string{"127.0.0.1"}, Validity: time.Hour, NATSServer: true}); err == nil {
		t.Fatal("overwrote existing certificates")
	}
}
