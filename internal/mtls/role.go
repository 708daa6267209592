package mtls

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/envelope"
)

const (
	// TrustDomain is the SPIFFE trust domain of alpd's role URIs.
	TrustDomain = "alpd"
	rolePrefix  = "/role/"
)

// ErrNoRole is returned (wrapped) when a certificate or connection carries no
// usable alpd role: no role URI, more than one, or one naming no role.
var ErrNoRole = errors.New("no alpd role")

// Roles lists every role that can hold a certificate: the six services, in
// the order of [envelope.Roles], then the operator.
func Roles() []alpv1.Role {
	return append(envelope.Roles(), alpv1.Role_ROLE_OPERATOR)
}

// RoleName is the name of a role in certificates, file names and on the
// command line ("policy", "operator"); "" for a role that has none.
func RoleName(r alpv1.Role) string {
	if !validRole(r) {
		return ""
	}
	return envelope.ServiceName(r)
}

// RoleByName is the inverse of [RoleName]: the six service names and
// "operator".
func RoleByName(name string) (alpv1.Role, bool) {
	if name == envelope.ServiceName(alpv1.Role_ROLE_OPERATOR) {
		return alpv1.Role_ROLE_OPERATOR, true
	}
	return envelope.RoleByName(name)
}

// RoleURI is the URI SAN that names role r: spiffe://alpd/role/<name>.
func RoleURI(r alpv1.Role) (*url.URL, error) {
	name := RoleName(r)
	if name == "" {
		return nil, fmt.Errorf("mtls: %v is not a role a certificate can carry", r)
	}
	return &url.URL{Scheme: "spiffe", Host: TrustDomain, Path: rolePrefix + name}, nil
}

func validRole(r alpv1.Role) bool {
	for _, v := range Roles() {
		if v == r {
			return true
		}
	}
	return false
}

// isAlpdURI reports whether u is in alpd's trust domain (compared without
// regard to case, as URI schemes and hosts are).
func isAlpdURI(u *url.URL) bool {
	return strings.EqualFold(u.Scheme, "spiffe") && strings.EqualFold(u.Hostname(), TrustDomain)
}

// RoleFromCert returns the role named by the certificate's alpd role URI
// SAN. It is an error (wrapping [ErrNoRole]) when there is none, more than
// one, or when a URI in alpd's trust domain is not exactly a known role URI.
// RoleFromCert does not verify the certificate: use it on verified chains.
func RoleFromCert(cert *x509.Certificate) (alpv1.Role, error) {
	if cert == nil {
		return alpv1.Role_ROLE_UNSPECIFIED, fmt.Errorf("mtls: %w: no certificate", ErrNoRole)
	}
	found := alpv1.Role_ROLE_UNSPECIFIED
	for _, u := range cert.URIs {
		if !isAlpdURI(u) {
			continue
		}
		name, ok := strings.CutPrefix(u.Path, rolePrefix)
		role, known := RoleByName(name)
		if !ok || !known || u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
			return alpv1.Role_ROLE_UNSPECIFIED, fmt.Errorf("mtls: %w: certificate %q has URI %q, which is not an alpd role URI (spiffe://alpd/role/<role>)",
				ErrNoRole, cert.Subject.CommonName, u)
		}
		if found != alpv1.Role_ROLE_UNSPECIFIED {
			return alpv1.Role_ROLE_UNSPECIFIED, fmt.Errorf("mtls: %w: certificate %q names more than one role (%s and %s)",
				ErrNoRole, cert.Subject.CommonName, RoleName(found), name)
		}
		found = role
	}
	if found == alpv1.Role_ROLE_UNSPECIFIED {
		return found, fmt.Errorf("mtls: %w: certificate %q has no spiffe://alpd/role/<role> URI SAN", ErrNoRole, cert.Subject.CommonName)
	}
	return found, nil
}

// RoleFromContext returns the role of the peer of a gRPC server call, read
// from the leaf of the certificate chain the TLS handshake verified. It is an
// error (wrapping [ErrNoRole]) when the connection is not TLS, the peer
// presented no verified certificate, or the certificate names no single role.
func RoleFromContext(ctx context.Context) (alpv1.Role, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return alpv1.Role_ROLE_UNSPECIFIED, fmt.Errorf("mtls: %w: no peer in context", ErrNoRole)
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return alpv1.Role_ROLE_UNSPECIFIED, fmt.Errorf("mtls: %w: connection from %v is not TLS", ErrNoRole, p.Addr)
	}
	if len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return alpv1.Role_ROLE_UNSPECIFIED, fmt.Errorf("mtls: %w: %v presented no verified client certificate", ErrNoRole, p.Addr)
	}
	return RoleFromCert(info.State.VerifiedChains[0][0])
}
