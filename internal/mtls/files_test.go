package mtls

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/testkit"
)

func TestFileErrors(t *testing.T) {
	p := newPKI(t)
	good := p.role(alpv1.Role_ROLE_POLICY)
	other := p.role(alpv1.Role_ROLE_LEDGER)
	dir := t.TempDir()
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	keyPEM, _ := os.ReadFile(good.Key)
	certPEM, _ := os.ReadFile(good.Cert)
	missing := filepath.Join(dir, "missing.pem")
	garbage := file("garbage.pem", "not PEM at all\n")
	empty := file("empty.pem", "")
	keyAsCert := file("key-as-cert.pem", string(keyPEM))
	certAsKey := file("cert-as-key.pem", string(certPEM))
	badDER := file("bad-der.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")})))
	encrypted := file("encrypted.pem", string(pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte("x")})))

	with := func(f func(*Files)) Files { c := good; f(&c); return c }
	for _, tc := range []struct {
		name  string
		files Files
		want  []string
	}{
		{"no CA", with(func(f *Files) { f.CA = "" }), []string{"no CA file"}},
		{"no cert", with(func(f *Files) { f.Cert = "" }), []string{"no certificate file"}},
		{"no key", with(func(f *Files) { f.Key = "" }), []string{"no key file"}},
		{"CA missing", with(func(f *Files) { f.CA = missing }), []string{"CA file", missing, "no such file"}},
		{"CA garbage", with(func(f *Files) { f.CA = garbage }), []string{"CA file " + garbage, "no PEM CERTIFICATE block"}},
		{"CA empty", with(func(f *Files) { f.CA = empty }), []string{"CA file " + empty, "is empty"}},
		{"CA bad DER", with(func(f *Files) { f.CA = badDER }), []string{"CA file " + badDER, "certificate 1"}},
		{"cert missing", with(func(f *Files) { f.Cert = missing }), []string{"certificate file", missing}},
		{"cert is a key", with(func(f *Files) { f.Cert = keyAsCert }), []string{"certificate file " + keyAsCert, `"PRIVATE KEY"`}},
		{"key missing", with(func(f *Files) { f.Key = missing }), []string{"key file", missing}},
		{"key is a cert", with(func(f *Files) { f.Key = certAsKey }), []string{"key file " + certAsKey, "no PEM private key"}},
		{"key encrypted", with(func(f *Files) { f.Key = encrypted }), []string{"key file " + encrypted, "encrypted"}},
		{"key of another cert", with(func(f *Files) { f.Key = other.Key }), []string{"key file " + other.Key, "does not go with certificate file " + good.Cert}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, e1 := ServerTLS(tc.files)
			_, e2 := ClientTLS(tc.files, "x")
			_, e3 := ServerCredentials(tc.files)
			_, e4 := DialOption(tc.files)
			_, e5 := DialOptionFor(tc.files, alpv1.Role_ROLE_POLICY)
			for i, err := range []error{e1, e2, e3, e4, e5} {
				if err == nil {
					t.Fatalf("constructor %d accepted the files", i+1)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("constructor %d: error %q does not contain %q", i+1, err, w)
					}
				}
			}
		})
	}
	if _, err := ServerTLS(good); err != nil {
		t.Errorf("good files: %v", err)
	}
	// A certificate file may carry intermediates after the leaf, a CA file several CAs.
	bundle := file("bundle.pem", string(certPEM)+string(p.ca.CertPEM()))
	if _, err := ServerTLS(Files{CA: bundle, Cert: bundle, Key: good.Key}); err != nil {
		t.Errorf("bundles: %v", err)
	}
}

func issueTo(t *testing.T, ca *CA, r alpv1.Role, f Files) *big.Int {
	t.Helper()
	c, k, err := ca.Issue(r, localHosts, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// In place, as a rotation that rewrites the files does.
	if err := os.WriteFile(f.Key, k, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Cert, c, 0o644); err != nil {
		t.Fatal(err)
	}
	return serialOf(t, f.Cert)
}

func TestRotationInPlace(t *testing.T) {
	p := newPKI(t)
	srv := p.role(alpv1.Role_ROLE_POLICY)
	addr := startServer(t, srv, DefaultPolicy())
	client := dialOpt(t, p.role(alpv1.Role_ROLE_INGRESS))

	first := serialOf(t, srv.Cert)
	old := conn(t, addr, client)
	if _, got, err := pingOn(t, old); err != nil || got.Cmp(first) != 0 {
		t.Fatalf("before rotation: serial %v, %v; want %v", got, err, first)
	}
	for i := range 3 {
		want := issueTo(t, p.ca, alpv1.Role_ROLE_POLICY, srv)
		if want.Cmp(first) == 0 {
			t.Fatal("the new certificate has the old serial")
		}
		if _, got, err := pingPolicy(t, addr, client); err != nil || got.Cmp(want) != 0 {
			t.Fatalf("rotation %d: new connection saw serial %v, %v; want %v", i, got, err, want)
		}
	}
	// The connection opened before keeps its certificate and still works.
	if _, got, err := pingOn(t, old); err != nil || got.Cmp(first) != 0 {
		t.Errorf("old connection: serial %v, %v; want %v", got, err, first)
	}
}

// TestRotationKubernetes swaps the files the way the kubelet updates a
// mounted secret: files are symlinks through ..data, which is atomically
// repointed at a new directory.
func TestRotationKubernetes(t *testing.T) {
	p := newPKI(t)
	mount := t.TempDir()
	version := 0
	publish := func(role alpv1.Role) *big.Int {
		t.Helper()
		version++
		c, k, err := p.ca.Issue(role, localHosts, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		ts := fmt.Sprintf("..2026_01_01_00_00_0%d", version)
		if err := os.Mkdir(filepath.Join(mount, ts), 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string][]byte{"tls.crt": c, "tls.key": k, "ca.crt": p.ca.CertPEM()} {
			if err := os.WriteFile(filepath.Join(mount, ts, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(ts, filepath.Join(mount, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(mount, "..data_tmp"), filepath.Join(mount, "..data")); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"tls.crt", "tls.key", "ca.crt"} {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(mount, name)); err != nil && !os.IsExist(err) {
				t.Fatal(err)
			}
		}
		return serialOf(t, filepath.Join(mount, "tls.crt"))
	}
	first := publish(alpv1.Role_ROLE_POLICY)
	addr := startServer(t, Files{CA: filepath.Join(mount, "ca.crt"), Cert: filepath.Join(mount, "tls.crt"), Key: filepath.Join(mount, "tls.key")}, DefaultPolicy())
	client := dialOpt(t, p.role(alpv1.Role_ROLE_INGRESS))
	if _, got, err := pingPolicy(t, addr, client); err != nil || got.Cmp(first) != 0 {
		t.Fatalf("before: %v, %v; want %v", got, err, first)
	}
	second := publish(alpv1.Role_ROLE_POLICY)
	if _, got, err := pingPolicy(t, addr, client); err != nil || got.Cmp(second) != 0 {
		t.Fatalf("after the swap: %v, %v; want %v", got, err, second)
	}
}

func TestHalfRotationKeepsThePreviousCertificate(t *testing.T) {
	p := newPKI(t)
	srv := p.role(alpv1.Role_ROLE_POLICY)
	var logs testkit.LockedBuffer
	srv.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	addr := startServer(t, srv, DefaultPolicy())
	client := dialOpt(t, p.role(alpv1.Role_ROLE_INGRESS))
	first := serialOf(t, srv.Cert)

	// A new certificate next to the old key.
	c, k, err := p.ca.Issue(alpv1.Role_ROLE_POLICY, localHosts, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(srv.Cert, c, 0o644); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, got, err := pingPolicy(t, addr, client); err != nil || got.Cmp(first) != 0 {
			t.Fatalf("half rotated: serial %v, %v; want the previous %v", got, err, first)
		}
	}
	if n := strings.Count(logs.String(), "reloading failed"); n != 1 {
		t.Errorf("the failed reload was logged %d times, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), srv.Key) {
		t.Errorf("the log should name the key file:\n%s", logs.String())
	}
	// Even a file gone missing mid-rotation leaves the service up.
	if err := os.Rename(srv.Key, srv.Key+".away"); err != nil {
		t.Fatal(err)
	}
	if _, got, err := pingPolicy(t, addr, client); err != nil || got.Cmp(first) != 0 {
		t.Fatalf("key missing: serial %v, %v; want the previous %v", got, err, first)
	}
	// The key arrives: the new certificate is served.
	if err := os.WriteFile(srv.Key, k, 0o600); err != nil {
		t.Fatal(err)
	}
	want := serialOf(t, srv.Cert)
	if _, got, err := pingPolicy(t, addr, client); err != nil || got.Cmp(want) != 0 {
		t.Fatalf("completed: serial %v, %v; want %v", got, err, want)
	}
	if !strings.Contains(logs.String(), "reloaded certificate") {
		t.Errorf("the reload was not logged:\n%s", logs.String())
	}
}

// TestCARotation moves server and client from one CA to another, with a
// bundle of both in between; both sides pick the CA file up without restart.
func TestCARotation(t *testing.T) {
	oldCA, newCA := newPKI(t), newPKI(t)
	dir := t.TempDir()
	srv := Files{CA: filepath.Join(dir, "srv-ca.pem"), Cert: filepath.Join(dir, "srv.pem"), Key: filepath.Join(dir, "srv-key.pem")}
	cli := Files{CA: filepath.Join(dir, "cli-ca.pem"), Cert: filepath.Join(dir, "cli.pem"), Key: filepath.Join(dir, "cli-key.pem")}
	writeCA := func(path string, cas ...*CA) {
		t.Helper()
		var b []byte
		for _, ca := range cas {
			b = append(b, ca.CertPEM()...)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeCA(srv.CA, oldCA.ca)
	writeCA(cli.CA, oldCA.ca)
	issueTo(t, oldCA.ca, alpv1.Role_ROLE_POLICY, srv)
	issueTo(t, oldCA.ca, alpv1.Role_ROLE_INGRESS, cli)
	addr := startServer(t, srv, DefaultPolicy())
	client := dialOpt(t, cli)
	if _, _, err := pingPolicy(t, addr, client); err != nil {
		t.Fatalf("old CA: %v", err)
	}

	// The server trusts both, then presents a certificate of the new CA:
	// the client, trusting only the old one, refuses it.
	writeCA(srv.CA, oldCA.ca, newCA.ca)
	if _, _, err := pingPolicy(t, addr, client); err != nil {
		t.Fatalf("server trusting both: %v", err)
	}
	newSerial := issueTo(t, newCA.ca, alpv1.Role_ROLE_POLICY, srv)
	_, _, err := pingPolicy(t, addr, client)
	wantCode(t, err, codes.Unavailable)

	// The client's CA file gains the new CA: accepted, without a new DialOption.
	writeCA(cli.CA, oldCA.ca, newCA.ca)
	if _, got, err := pingPolicy(t, addr, client); err != nil || got.Cmp(newSerial) != 0 {
		t.Fatalf("client trusting both: serial %v, %v; want %v", got, err, newSerial)
	}

	// The client moves to the new CA, the server drops the old one: a client
	// still on the old CA is refused, the moved one accepted.
	stale := oldCA.role(alpv1.Role_ROLE_INGRESS)
	stale.CA = cli.CA
	issueTo(t, newCA.ca, alpv1.Role_ROLE_INGRESS, cli)
	writeCA(srv.CA, newCA.ca)
	if _, _, err := pingPolicy(t, addr, client); err != nil {
		t.Fatalf("new CA only: %v", err)
	}
	_, _, err = pingPolicy(t, addr, dialOpt(t, stale))
	wantCode(t, err, codes.Unavailable, codes.Unauthenticated)
}

// TestConcurrentRotation dials continuously while both certificates are
// reissued: every call must succeed (run with -race).
func TestConcurrentRotation(t *testing.T) {
	p := newPKI(t)
	srv := p.role(alpv1.Role_ROLE_POLICY)
	cli := p.role(alpv1.Role_ROLE_INGRESS)
	addr := startServer(t, srv, DefaultPolicy())
	client := dialOpt(t, cli)

	stop := make(chan struct{})
	rotated := make(chan int)
	go func() {
		n := 0
		defer func() { rotated <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, x := range []struct {
				r alpv1.Role
				f Files
			}{{alpv1.Role_ROLE_POLICY, srv}, {alpv1.Role_ROLE_INGRESS, cli}} {
				c, k, err := p.ca.Issue(x.r, localHosts, time.Hour)
				if err != nil {
					t.Error(err)
					return
				}
				if err := WriteCertAndKey(x.f.Cert, x.f.Key, c, k); err != nil {
					t.Error(err)
					return
				}
			}
			n++
			time.Sleep(time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	serials := sync.Map{}
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 15 {
				caller, serial, err := pingPolicy(t, addr, client)
				if err != nil || caller != "ingress" {
					t.Errorf("goroutine %d call %d: %q, %v", g, i, caller, err)
					return
				}
				serials.Store(serial.String(), true)
			}
		}()
	}
	wg.Wait()
	close(stop)
	n := <-rotated
	distinct := 0
	serials.Range(func(any, any) bool { distinct++; return true })
	t.Logf("%d rotations, %d distinct server certificates seen", n, distinct)
	if n > 2 && distinct < 2 {
		t.Errorf("%d rotations but only %d server certificate seen", n, distinct)
	}
}

// TestCertManagerKeyEncodings loads keys as cert-manager writes them by
// default: PKCS #1 for RSA, SEC 1 for ECDSA (here after an EC PARAMETERS
// block, as openssl writes it).
func TestCertManagerKeyEncodings(t *testing.T) {
	p := newPKI(t)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalECPrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		key    crypto.Signer
		keyPEM []byte
	}{
		"rsa-pkcs1": {rsaKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)})},
		"ec-sec1": {ecKey, append(pem.EncodeToMemory(&pem.Block{Type: "EC PARAMETERS", Bytes: []byte{6, 8, 42, 134, 72, 206, 61, 3, 1, 7}}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecDER})...)},
	} {
		u, _ := RoleURI(alpv1.Role_ROLE_POLICY)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()),
			NotBefore:    time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
			KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			URIs:        []*url.URL{u}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca.Cert, tc.key.Public(), p.ca.Key)
		if err != nil {
			t.Fatal(err)
		}
		f := p.write(name, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), tc.keyPEM)
		addr := startServer(t, f, DefaultPolicy())
		if _, _, err := pingPolicy(t, addr, dialOpt(t, p.role(alpv1.Role_ROLE_INGRESS))); err != nil {
			t.Errorf("%s server: %v", name, err)
		}
		// And as a client.
		client := f
		if caller, _, err := pingPolicy(t, addr, dialOpt(t, client)); err != nil || caller != "policy" {
			t.Errorf("%s client: %q, %v", name, caller, err)
		}
	}
}

func TestClientCredentialsOverride(t *testing.T) {
	p := newPKI(t)
	s := leafSpec{uris: roleURIs(t, alpv1.Role_ROLE_POLICY), hosts: []string{"alpd-policy.alpd.svc"}}
	addr := startServer(t, p.custom("svc", s), DefaultPolicy())
	creds, err := ClientCredentials(p.role(alpv1.Role_ROLE_INGRESS))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = pingPolicy(t, addr, grpc.WithTransportCredentials(creds))
	wantCode(t, err, codes.Unavailable)
	c := creds.Clone()
	if err := c.(*clientCreds).OverrideServerName("alpd-policy.alpd.svc"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pingPolicy(t, addr, grpc.WithTransportCredentials(c)); err != nil {
		t.Errorf("with the server name overridden: %v", err)
	}
	// The way grpc recommends: the channel's authority.
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), grpc.WithAuthority("alpd-policy.alpd.svc"))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, _, err := pingOn(t, cc); err != nil {
		t.Errorf("with grpc.WithAuthority: %v", err)
	}
	if _, _, err := c.ServerHandshake(nil); err == nil {
		t.Error("client credentials did a server handshake")
	}
}
