package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/config"
	"github.com/alpd-project/alpd/internal/mtls"
	"github.com/alpd-project/alpd/internal/testkit"
)

// TestHTTPS: with http.tls the public listener serves HTTPS only, with the
// certificate from the files, verified by its CA at the broker's name; a
// renewed certificate written over the files is served to the next
// connection without a restart.
func TestHTTPS(t *testing.T) {
	ca, err := mtls.NewCA("alpd test CA", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	issue := func() {
		certPEM, keyPEM, err := ca.IssueServer("broker.a.example", []string{"broker.a.example", "a.example"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := mtls.WriteCertAndKey(certFile, keyFile, certPEM, keyPEM); err != nil {
			t.Fatal(err)
		}
	}
	issue()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	_, port, _ := net.SplitHostPort(addr)
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.HTTP.Addr = addr
	cfg.HTTP.PublicURL = "https://broker.a.example:" + port
	cfg.HTTP.TLS = config.HTTPTLS{CertFile: certFile, KeyFile: keyFile}
	cfg.Broker.Tenants = []config.Tenant{{Domain: "a.example"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d, err := Complete(ctx, cfg, "", func(string) string { return "" }, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	// The client dials the listener for the broker's name, as peers do
	// through federation.resolve.
	client := func(roots *x509.CertPool) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			},
			DisableKeepAlives: true,
		}}
	}
	get := func(c *http.Client, path string) (*http.Response, error) {
		resp, err := c.Get(cfg.PublicURL() + path)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	c := client(roots)
	testkit.Eventually(t, 60*time.Second, func() error {
		resp, err := get(c, "/readyz")
		if err == nil && resp.StatusCode != http.StatusOK {
			return &statusError{resp.StatusCode}
		}
		return err
	}, "alpd ready over HTTPS")
	resp, err := get(c, "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK || resp.TLS == nil {
		t.Fatalf("GET /healthz over HTTPS: %v %v", resp, err)
	}
	first := resp.TLS.PeerCertificates[0].SerialNumber

	// Plain http on the same port gets no answer from the broker.
	plain, err := http.Get("http://" + addr + "/healthz")
	if err == nil {
		body, _ := io.ReadAll(plain.Body)
		plain.Body.Close()
		if plain.StatusCode == http.StatusOK {
			t.Fatalf("plain http answered %d %s", plain.StatusCode, body)
		}
	}
	// A client that does not trust the CA refuses the certificate.
	if _, err := get(client(x509.NewCertPool()), "/healthz"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("untrusting client: %v, want a certificate error", err)
	}

	// Renewal: the next connection gets the new certificate. The files'
	// modification time must differ for a same-size rewrite to be seen.
	time.Sleep(10 * time.Millisecond)
	issue()
	testkit.Eventually(t, 5*time.Second, func() error {
		resp, err := get(c, "/healthz")
		if err != nil {
			return err
		}
		if resp.TLS.PeerCertificates[0].SerialNumber.Cmp(first) == 0 {
			return os.ErrExist
		}
		return nil
	}, "the renewed certificate served")
}

type statusError struct{ code int }

func (e *statusError) Error() string { return http.StatusText(e.code) }

// TestHTTPSBadFiles: a key that does not go with the certificate stops
// alpd at start, naming http.tls.
func TestHTTPSBadFiles(t *testing.T) {
	ca, _ := mtls.NewCA("alpd test CA", 24*time.Hour)
	dir := t.TempDir()
	certPEM, _, _ := ca.IssueServer("broker.a.example", []string{"broker.a.example"}, time.Hour)
	_, otherKey, _ := ca.IssueServer("broker.a.example", []string{"broker.a.example"}, time.Hour)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := mtls.WriteCertAndKey(certFile, keyFile, certPEM, otherKey); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.HTTP.TLS = config.HTTPTLS{CertFile: certFile, KeyFile: keyFile}
	cfg.Federation.BrokerName = "broker.a.example"
	cfg.Broker.Tenants = []config.Tenant{{Domain: "a.example"}}
	d, err := Complete(context.Background(), cfg, "", func(string) string { return "" }, slog.New(slog.DiscardHandler))
	if err == nil {
		d.close()
		t.Fatal("alpd started with a key that does not go with its certificate")
	}
	if !strings.Contains(err.Error(), "http.tls") || !strings.Contains(err.Error(), "does not go with") {
		t.Fatalf("error %q does not name http.tls and the mismatch", err)
	}
}
