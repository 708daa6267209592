package mtls

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

// clockSkew backdates NotBefore so a certificate is usable at once on a peer
// whose clock is slightly behind.
const clockSkew = 5 * time.Minute

// CA is a certificate authority that issues role certificates: a throw-away
// development CA from [NewCA], or one read back with [LoadCA].
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewCA creates a self-signed CA (ECDSA P-256) valid for validity from now.
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	if validity <= 0 {
		return nil, fmt.Errorf("mtls: CA validity must be positive, not %v", validity)
	}
	if commonName == "" {
		commonName = "alpd development CA"
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("mtls: CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"alpd"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("mtls: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("mtls: CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// ParseCA reads a CA from its PEM certificate and PEM private key (PKCS #8,
// SEC 1 or PKCS #1), checking that the certificate is a CA's and that the key
// is its key.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	certs, err := parseCertsPEM(certPEM)
	if err != nil {
		return nil, err
	}
	cert := certs[0]
	if !cert.IsCA || !cert.BasicConstraintsValid {
		return nil, fmt.Errorf("certificate %q is not a CA certificate", cert.Subject.CommonName)
	}
	if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("CA certificate %q may not sign certificates (no certSign key usage)", cert.Subject.CommonName)
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, err
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("the private key does not belong to the CA certificate")
	}
	return &CA{Cert: cert, Key: key}, nil
}

// LoadCA reads a CA written by [CA.Write]; errors name the file at fault.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("mtls: CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("mtls: CA key: %w", err)
	}
	if _, err := parseCertsPEM(certPEM); err != nil {
		return nil, fmt.Errorf("mtls: CA certificate %s: %w", certFile, err)
	}
	if _, err := parseKeyPEM(keyPEM); err != nil {
		return nil, fmt.Errorf("mtls: CA key %s: %w", keyFile, err)
	}
	ca, err := ParseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("mtls: CA %s (key %s): %w", certFile, keyFile, err)
	}
	return ca, nil
}

// CertPEM is the CA certificate in PEM: the trust bundle peers verify with.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// KeyPEM is the CA's private key, PKCS #8 in PEM.
func (ca *CA) KeyPEM() ([]byte, error) {
	return marshalKeyPEM(ca.Key)
}

// Write stores the CA certificate (mode 0644) and key (mode 0600).
func (ca *CA) Write(certFile, keyFile string) error {
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	return WriteCertAndKey(certFile, keyFile, ca.CertPEM(), keyPEM)
}

// Issue creates a key (ECDSA P-256) and a certificate for role, valid for
// validity from now, usable as both server and client certificate (serverAuth
// and clientAuth), with the role's URI SAN and hosts as DNS-name and IP SANs.
// It returns both in PEM; the key is PKCS #8.
func (ca *CA) Issue(role alpv1.Role, hosts []string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if validity <= 0 {
		return nil, nil, fmt.Errorf("mtls: certificate validity must be positive, not %v", validity)
	}
	u, err := RoleURI(role)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	return ca.issue(leafSpec{
		commonName: "alpd-" + RoleName(role),
		uris:       []*url.URL{u},
		hosts:      hosts,
		notBefore:  now.Add(-clockSkew),
		notAfter:   now.Add(validity),
	})
}

// IssueServer creates a server-only certificate without an alpd role, for
// infrastructure such as nats-server that clients verify by host name only.
func (ca *CA) IssueServer(commonName string, hosts []string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if validity <= 0 {
		return nil, nil, fmt.Errorf("mtls: certificate validity must be positive, not %v", validity)
	}
	if len(hosts) == 0 {
		return nil, nil, errors.New("mtls: a server certificate needs at least one host")
	}
	now := time.Now()
	return ca.issue(leafSpec{
		commonName:  commonName,
		hosts:       hosts,
		notBefore:   now.Add(-clockSkew),
		notAfter:    now.Add(validity),
		extKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// leafSpec is what issue needs; tests use it to make certificates Issue will
// not (expired, without a role).
type leafSpec struct {
	commonName          string
	uris                []*url.URL
	hosts               []string
	notBefore, notAfter time.Time
	extKeyUsage         []x509.ExtKeyUsage // nil: serverAuth and clientAuth
}

func (ca *CA) issue(s leafSpec) (certPEM, keyPEM []byte, err error) {
	if ca == nil || ca.Cert == nil || ca.Key == nil {
		return nil, nil, errors.New("mtls: CA has no certificate or key")
	}
	if now := time.Now(); now.After(ca.Cert.NotAfter) {
		return nil, nil, fmt.Errorf("mtls: CA %q expired on %s", ca.Cert.Subject.CommonName, ca.Cert.NotAfter.Format(time.RFC3339))
	}
	if s.notAfter.After(ca.Cert.NotAfter) {
		return nil, nil, fmt.Errorf("mtls: CA %q expires on %s, before the certificate would (%s): ask for a shorter validity or create a new CA",
			ca.Cert.Subject.CommonName, ca.Cert.NotAfter.Format(time.RFC3339), s.notAfter.Format(time.RFC3339))
	}
	dns, ips, err := splitHosts(s.hosts)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("mtls: key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	eku := s.extKeyUsage
	if eku == nil {
		eku = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: s.commonName, Organization: []string{"alpd"}},
		NotBefore:             s.notBefore,
		NotAfter:              s.notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           eku,
		BasicConstraintsValid: true,
		URIs:                  s.uris,
		DNSNames:              dns,
		IPAddresses:           ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("mtls: certificate %q: %w", s.commonName, err)
	}
	keyPEM, err = marshalKeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// splitHosts sorts host names into DNS names and IP addresses.
func splitHosts(hosts []string) (dns []string, ips []net.IP, err error) {
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if ip := net.ParseIP(strings.Trim(h, "[]")); ip != nil {
			ips = append(ips, ip)
			continue
		}
		if strings.ContainsAny(h, " /:@\t") || strings.HasPrefix(h, ".") || strings.Contains(h, "..") {
			return nil, nil, fmt.Errorf("mtls: %q is neither a DNS name nor an IP address", h)
		}
		dns = append(dns, strings.ToLower(h))
	}
	return dns, ips, nil
}

func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("mtls: serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

func marshalKeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("mtls: private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parseCertsPEM reads every CERTIFICATE block; there must be at least one,
// and no other kind of block.
func parseCertsPEM(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("holds a PEM %q block where only CERTIFICATE blocks belong", b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		if len(strings.TrimSpace(string(data))) == 0 {
			return nil, errors.New("is empty")
		}
		return nil, errors.New("holds no PEM CERTIFICATE block")
	}
	return certs, nil
}

// parseKeyPEM reads the first private key block: PKCS #8, SEC 1 (EC) or
// PKCS #1 (RSA).
func parseKeyPEM(data []byte) (crypto.Signer, error) {
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			if len(strings.TrimSpace(string(data))) == 0 {
				return nil, errors.New("is empty")
			}
			return nil, errors.New("holds no PEM private key block")
		}
		var (
			k   any
			err error
		)
		switch b.Type {
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(b.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(b.Bytes)
		case "ENCRYPTED PRIVATE KEY":
			return nil, errors.New("holds an encrypted private key; alpd needs it unencrypted (protect it with file permissions)")
		default:
			continue // e.g. EC PARAMETERS before the key
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", strings.ToLower(b.Type), err)
		}
		switch k := k.(type) {
		case *ecdsa.PrivateKey, *rsa.PrivateKey:
			return k.(crypto.Signer), nil
		case crypto.Signer:
			return k, nil
		}
		return nil, fmt.Errorf("unsupported private key type %T", k)
	}
}

// WriteCertAndKey writes a certificate (mode 0644) and its key (mode 0600),
// each through a temporary file renamed into place, so a reader never sees a
// half-written file and an existing key file never has wider permissions.
func WriteCertAndKey(certFile, keyFile string, certPEM, keyPEM []byte) error {
	// The key first: a reader that reloads on a changed certificate then
	// finds the matching key already in place.
	if err := writeAtomic(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	return writeAtomic(certFile, certPEM, 0o644)
}

func writeAtomic(path string, data []byte, mode os.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("mtls: writing %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = f.Chmod(mode); err != nil {
		return fmt.Errorf("mtls: writing %s: %w", path, err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("mtls: writing %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("mtls: writing %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("mtls: writing %s: %w", path, err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("mtls: writing %s: %w", path, err)
	}
	return nil
}
