package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

// Files names the PEM files a service's TLS is read from.
type Files struct {
	// CA is the bundle of CA certificates peers' certificates are verified
	// against (cert-manager: ca.crt).
	CA string
	// Cert is the service's certificate, optionally followed by
	// intermediates (cert-manager: tls.crt).
	Cert string
	// Key is the certificate's private key, unencrypted (cert-manager:
	// tls.key).
	Key string
	// Logger, if set, is told when the files are reloaded and when a
	// reload fails (the previous certificate then stays in use).
	Logger *slog.Logger
}

func (f Files) check() error {
	switch {
	case f.CA == "":
		return errors.New("mtls: no CA file given")
	case f.Cert == "":
		return errors.New("mtls: no certificate file given")
	case f.Key == "":
		return errors.New("mtls: no key file given")
	}
	return nil
}

// material is one consistent load of the three files.
type material struct {
	cert tls.Certificate
	leaf *x509.Certificate
	pool *x509.CertPool
}

// stamp identifies one version of a file: replacing a file by rename (the
// kubelet's ..data symlink swap) changes its identity, rewriting it in place
// its size or modification time.
type stamp struct {
	info os.FileInfo
}

func (s stamp) same(o stamp) bool {
	if s.info == nil && o.info == nil {
		return true // no file (a server certificate has no CA bundle)
	}
	return s.info != nil && o.info != nil && os.SameFile(s.info, o.info) &&
		s.info.Size() == o.info.Size() && s.info.ModTime().Equal(o.info.ModTime())
}

// reloader serves the current material, reloading the files when a stat
// shows one of them changed.
type reloader struct {
	files Files

	mu      sync.Mutex
	cur     *material
	stamps  [3]stamp
	lastErr string // the last reload failure logged, so each is logged once
}

func newReloader(files Files) (*reloader, error) {
	if err := files.check(); err != nil {
		return nil, err
	}
	r := &reloader{files: files}
	if _, err := r.current(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *reloader) paths() [3]string { return [3]string{r.files.CA, r.files.Cert, r.files.Key} }

// current returns the material, reloaded first if the files changed. When a
// reload fails after a successful one, the previous material is returned
// (and the failure logged): a rotation caught half-way must not take the
// service down.
func (r *reloader) current() (*material, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var stamps [3]stamp
	var statErr error
	for i, p := range r.paths() {
		if p == "" {
			continue // the CA of a server certificate (ServerCertificate)
		}
		fi, err := os.Stat(p)
		if err != nil {
			statErr = fmt.Errorf("mtls: %s file: %w", [3]string{"CA", "certificate", "key"}[i], err)
			break
		}
		stamps[i] = stamp{fi}
	}
	if statErr == nil && r.cur != nil && sameStamps(stamps, r.stamps) {
		return r.cur, nil
	}
	err := statErr
	var m *material
	if err == nil {
		m, err = load(r.files)
	}
	if err != nil {
		if r.cur == nil {
			return nil, err
		}
		if err.Error() != r.lastErr {
			r.lastErr = err.Error()
			r.log().Warn("mtls: keeping the previous certificate, reloading failed", "err", err)
		}
		return r.cur, nil
	}
	if r.cur != nil {
		r.log().Info("mtls: reloaded certificate", "cert", r.files.Cert, "subject", m.leaf.Subject.CommonName,
			"serial", m.leaf.SerialNumber.Text(16), "not_after", m.leaf.NotAfter.Format(time.RFC3339))
	}
	r.cur, r.stamps, r.lastErr = m, stamps, ""
	return m, nil
}

func sameStamps(a, b [3]stamp) bool {
	for i := range a {
		if !a[i].same(b[i]) {
			return false
		}
	}
	return true
}

func (r *reloader) log() *slog.Logger {
	if r.files.Logger != nil {
		return r.files.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// load reads and checks the three files, naming the file at fault.
func load(f Files) (*material, error) {
	var pool *x509.CertPool
	if f.CA != "" {
		caPEM, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("mtls: CA file: %w", err)
		}
		cas, err := parseCertsPEM(caPEM)
		if err != nil {
			return nil, fmt.Errorf("mtls: CA file %s: %w", f.CA, err)
		}
		pool = x509.NewCertPool()
		for _, c := range cas {
			pool.AddCert(c)
		}
	}
	certPEM, err := os.ReadFile(f.Cert)
	if err != nil {
		return nil, fmt.Errorf("mtls: certificate file: %w", err)
	}
	chain, err := parseCertsPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("mtls: certificate file %s: %w", f.Cert, err)
	}
	keyPEM, err := os.ReadFile(f.Key)
	if err != nil {
		return nil, fmt.Errorf("mtls: key file: %w", err)
	}
	if _, err := parseKeyPEM(keyPEM); err != nil {
		return nil, fmt.Errorf("mtls: key file %s: %w", f.Key, err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("mtls: key file %s does not go with certificate file %s: %w", f.Key, f.Cert, err)
	}
	return &material{cert: cert, leaf: chain[0], pool: pool}, nil
}

// ServerCertificate serves the certificate (chain) and key in certFile and
// keyFile to a TLS server that verifies no client certificates (the public
// HTTPS listener), as tls.Config.GetCertificate. Like [ServerTLS] it stats
// the files at each handshake and reloads them when they changed, keeping
// the previous certificate (and logging to log, if not nil) when a reload
// fails. Errors name the file that is missing or malformed.
func ServerCertificate(certFile, keyFile string, log *slog.Logger) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	switch {
	case certFile == "":
		return nil, errors.New("mtls: no certificate file given")
	case keyFile == "":
		return nil, errors.New("mtls: no key file given")
	}
	r := &reloader{files: Files{Cert: certFile, Key: keyFile, Logger: log}}
	if _, err := r.current(); err != nil {
		return nil, err
	}
	return func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		m, err := r.current()
		if err != nil {
			return nil, err
		}
		return &m.cert, nil
	}, nil
}

// ServerTLS is a server configuration that presents the certificate in files
// and requires a client certificate that verifies against the CA bundle in
// files (TLS 1.3 only). Each handshake checks whether the files changed and
// then reloads them, so renewed certificates and CA bundles apply to new
// connections without a restart. Session tickets are off: every connection
// verifies its client certificate against the current CA.
//
// The returned configuration works through GetConfigForClient: to offer
// ALPN protocols, set NextProtos on the returned value itself, as a clone's
// are not seen (grpc's credentials.NewTLS adds h2 by itself, so
// [ServerCredentials] needs nothing). Errors name the file that is missing
// or malformed.
func ServerTLS(files Files) (*tls.Config, error) {
	r, err := newReloader(files)
	if err != nil {
		return nil, err
	}
	return r.serverTLS(), nil
}

func (r *reloader) serverTLS() *tls.Config {
	outer := &tls.Config{
		MinVersion:             tls.VersionTLS13,
		ClientAuth:             tls.RequireAndVerifyClientCert,
		SessionTicketsDisabled: true,
	}
	outer.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		m, err := r.current()
		if err != nil {
			return nil, err
		}
		return &tls.Config{
			MinVersion:             tls.VersionTLS13,
			Certificates:           []tls.Certificate{m.cert},
			ClientCAs:              m.pool,
			ClientAuth:             tls.RequireAndVerifyClientCert,
			SessionTicketsDisabled: true,
			NextProtos:             outer.NextProtos,
		}, nil
	}
	return outer
}

// ClientTLS is a client configuration that presents the certificate in
// files and verifies the server's certificate chain against the CA bundle in
// files (TLS 1.3 only), reloading the files when they change as [ServerTLS]
// does. The server's certificate must name serverName (a DNS name or an IP
// address) or, when serverName is "", the name the connection was opened for
// (its SNI; an IP address sends none, so give serverName then).
//
// Because the CA can change under a running process, the chain is verified in
// VerifyConnection rather than by crypto/tls (InsecureSkipVerify is set for
// that reason; do not clear VerifyConnection).
func ClientTLS(files Files, serverName string) (*tls.Config, error) {
	r, err := newReloader(files)
	if err != nil {
		return nil, err
	}
	return r.clientTLS(serverName, alpv1.Role_ROLE_UNSPECIFIED), nil
}

// clientTLS verifies the server as name and, unless want is unspecified, as
// holding role want.
func (r *reloader) clientTLS(serverName string, want alpv1.Role) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		ServerName:         serverName,
		InsecureSkipVerify: true, // verified below, against the CA as it is now on disk
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			m, err := r.current()
			if err != nil {
				return nil, err
			}
			return &m.cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			return r.verifyServer(cs, serverName, want)
		},
	}
}

func (r *reloader) verifyServer(cs tls.ConnectionState, serverName string, want alpv1.Role) error {
	m, err := r.current()
	if err != nil {
		return err
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("mtls: the server presented no certificate")
	}
	name := serverName
	if name == "" {
		name = cs.ServerName
	}
	if name == "" {
		return errors.New("mtls: no server name to verify the server's certificate against (give one to ClientTLS)")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	leaf := cs.PeerCertificates[0]
	_, err = leaf.Verify(x509.VerifyOptions{
		DNSName:       name,
		Roots:         m.pool,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("mtls: server certificate %q: %w", leaf.Subject.CommonName, err)
	}
	if want != alpv1.Role_ROLE_UNSPECIFIED {
		got, err := RoleFromCert(leaf)
		if err != nil {
			return fmt.Errorf("mtls: server at %s: %w", name, err)
		}
		if got != want {
			return fmt.Errorf("mtls: server at %s is %s, expected %s", name, RoleName(got), RoleName(want))
		}
	}
	return nil
}
