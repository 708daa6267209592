package mtls

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

// File names in a development certificate directory (see [WriteDevCerts]).
const (
	CACertFile = "ca.pem"
	CAKeyFile  = "ca-key.pem"
)

// DevFiles are the files of role in a directory written by [WriteDevCerts]:
// dir/ca.pem, dir/<role>.pem and dir/<role>-key.pem.
func DevFiles(dir string, role alpv1.Role) Files {
	name := RoleName(role)
	return Files{
		CA:   filepath.Join(dir, CACertFile),
		Cert: filepath.Join(dir, name+".pem"),
		Key:  filepath.Join(dir, name+"-key.pem"),
	}
}

// DevOptions says what [WriteDevCerts] writes.
type DevOptions struct {
	// Roles to issue certificates for; nil means all of [Roles].
	Roles []alpv1.Role
	// Hosts are the DNS names and IP addresses every certificate names.
	Hosts []string
	// Validity of the role certificates.
	Validity time.Duration
	// CAValidity is the validity of a new CA; 0 means ten years.
	CAValidity time.Duration
	// CACommonName of a new CA; "" means "alpd development CA".
	CACommonName string
	// Force replaces existing role certificates and keys.
	Force bool
	// NATSServer also issues nats-server.pem / nats-server-key.pem: a
	// server-only certificate without a role, for nats-server's TLS.
	NATSServer bool
}

// NATSServerFiles are the paths of the development nats-server certificate.
func NATSServerFiles(dir string) Files {
	return Files{
		CA:   filepath.Join(dir, CACertFile),
		Cert: filepath.Join(dir, "nats-server.pem"),
		Key:  filepath.Join(dir, "nats-server-key.pem"),
	}
}

// DevResult reports what [WriteDevCerts] did.
type DevResult struct {
	CAFile   string
	CAReused bool     // an existing CA in the directory issued the certificates
	Written  []string // files written, in order
}

// WriteDevCerts writes a development CA and role certificates into dir (made
// 0700 if missing): ca.pem and ca-key.pem, and <role>.pem and <role>-key.pem
// per role; keys are mode 0600. A CA already in dir is reused, so roles can
// be added later. Existing role files are not replaced unless o.Force: the
// error then wraps [fs.ErrExist] and names them. Everything is checked and
// issued before the first file is written.
func WriteDevCerts(dir string, o DevOptions) (*DevResult, error) {
	if dir == "" {
		return nil, errors.New("mtls: no directory given")
	}
	if o.Validity <= 0 {
		return nil, fmt.Errorf("mtls: certificate validity must be positive, not %v", o.Validity)
	}
	roles := o.Roles
	if roles == nil {
		roles = Roles()
	}
	var uniq []alpv1.Role
	for _, r := range roles {
		if RoleName(r) == "" {
			return nil, fmt.Errorf("mtls: %v is not a role a certificate can carry", r)
		}
		if !slices.Contains(uniq, r) {
			uniq = append(uniq, r)
		}
	}
	if len(uniq) == 0 {
		return nil, errors.New("mtls: no roles to issue certificates for")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("mtls: %w", err)
	}
	res := &DevResult{CAFile: filepath.Join(dir, CACertFile)}
	caCert, caKey := res.CAFile, filepath.Join(dir, CAKeyFile)

	// Existing role files first: refusing must not leave a new CA behind.
	if !o.Force {
		var present []string
		targets := make([]Files, 0, len(uniq)+1)
		for _, r := range uniq {
			targets = append(targets, DevFiles(dir, r))
		}
		if o.NATSServer {
			targets = append(targets, NATSServerFiles(dir))
		}
		for _, f := range targets {
			for _, p := range []string{f.Cert, f.Key} {
				if _, err := os.Lstat(p); err == nil {
					present = append(present, p)
				} else if !errors.Is(err, fs.ErrNotExist) {
					return nil, fmt.Errorf("mtls: %w", err)
				}
			}
		}
		if len(present) > 0 {
			return nil, existError(present)
		}
	}

	certExists, err := exists(caCert)
	if err != nil {
		return nil, err
	}
	keyExists, err := exists(caKey)
	if err != nil {
		return nil, err
	}
	var ca *CA
	switch {
	case certExists && keyExists:
		if ca, err = LoadCA(caCert, caKey); err != nil {
			return nil, err
		}
		res.CAReused = true
	case certExists:
		return nil, fmt.Errorf("mtls: %s exists but %s does not: restore the CA key, or remove %s to start a new CA (and reissue every certificate)",
			caCert, caKey, caCert)
	case keyExists:
		return nil, fmt.Errorf("mtls: %s exists but %s does not: restore the CA certificate, or remove %s to start a new CA (and reissue every certificate)",
			caKey, caCert, caKey)
	default:
		v := o.CAValidity
		if v == 0 {
			v = 10 * 365 * 24 * time.Hour
		}
		if o.Validity > v {
			return nil, fmt.Errorf("mtls: certificates (valid %v) would outlive the new CA (valid %v)", o.Validity, v)
		}
		if ca, err = NewCA(o.CACommonName, v); err != nil {
			return nil, err
		}
	}

	type pair struct {
		files     Files
		cert, key []byte
	}
	var pairs []pair
	for _, r := range uniq {
		c, k, err := ca.Issue(r, o.Hosts, o.Validity)
		if err != nil {
			if res.CAReused {
				return nil, fmt.Errorf("%w (CA %s)", err, caCert)
			}
			return nil, err
		}
		pairs = append(pairs, pair{DevFiles(dir, r), c, k})
	}
	if o.NATSServer {
		c, k, err := ca.IssueServer("nats-server", o.Hosts, o.Validity)
		if err != nil {
			return nil, err
		}
		pairs = append(pairs, pair{NATSServerFiles(dir), c, k})
	}
	if !res.CAReused {
		if err := ca.Write(caCert, caKey); err != nil {
			return nil, err
		}
		res.Written = append(res.Written, caCert, caKey)
	}
	for _, p := range pairs {
		if err := WriteCertAndKey(p.files.Cert, p.files.Key, p.cert, p.key); err != nil {
			return res, err
		}
		res.Written = append(res.Written, p.files.Cert, p.files.Key)
	}
	return res, nil
}

// existError lists role files that would be replaced; it is an fs.ErrExist.
type existError []string

func (e existError) Error() string {
	return "mtls: certificate files already exist: " + strings.Join(e, ", ")
}

func (e existError) Unwrap() error { return fs.ErrExist }

func exists(p string) (bool, error) {
	_, err := os.Stat(p)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("mtls: %w", err)
}
