package clientreg

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/alpd-project/alpd/internal/alp"
)

// Limits on client metadata.
const (
	// MaxRedirectURIs bounds a client's redirect URIs, and
	// MaxRedirectURIsBytes their total length: every replica keeps every
	// client in memory, and anyone may register one (real clients send one
	// or two short URIs).
	MaxRedirectURIs      = 16
	MaxRedirectURIsBytes = 4 << 10
	// maxURILen bounds a redirect URI or a client id URL.
	maxURILen = 2048
	// MaxClientNameBytes bounds a client name.
	MaxClientNameBytes = 200
)

// OAuth error codes of RFC 7591 §3.2.2 and RFC 6749.
const (
	CodeInvalidRedirectURI     = "invalid_redirect_uri"
	CodeInvalidClientMetadata  = "invalid_client_metadata"
	CodeInvalidRequest         = "invalid_request"
	CodeServerError            = "server_error"
	CodeTemporarilyUnavailable = "temporarily_unavailable"
)

const (
	grantAuthorizationCode = "authorization_code"
	grantRefreshToken      = "refresh_token"
	responseCode           = "code"
	authMethodNone         = "none"
)

// metadataError is a refused piece of client metadata: an RFC 7591 error
// code and a description naming the field.
type metadataError struct {
	code string
	desc string
}

func (e *metadataError) Error() string { return e.code + ": " + e.desc }

func badMetadata(format string, a ...any) *metadataError {
	return &metadataError{code: CodeInvalidClientMetadata, desc: fmt.Sprintf(format, a...)}
}

func badRedirect(format string, a ...any) *metadataError {
	return &metadataError{code: CodeInvalidRedirectURI, desc: fmt.Sprintf(format, a...)}
}

// printableASCII reports whether s holds only visible ASCII (no spaces or
// control characters): URIs must be percent-encoded.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// isLoopbackHost: the loopback hosts a native app may listen on (RFC 8252
// §7.3), exactly 127.0.0.1, ::1 or localhost.
func isLoopbackHost(host string) bool {
	return host == "127.0.0.1" || host == "::1" || strings.EqualFold(host, "localhost")
}

// validHost: a DNS name, or an IP literal without a zone. A DNS name
// follows the tenant rule (alp.ParseTenant: an all-numeric top label is a
// malformed IPv4 address), in any case and with an optional root dot.
func validHost(host string) bool {
	if host == "" || len(host) > alp.MaxTenantLen {
		return false
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Zone() == ""
	}
	_, err := alp.ParseTenant(strings.TrimSuffix(host, "."))
	return err == nil
}

// parseWebURL parses an absolute http(s) URL that must be written in
// canonical form: lowercase scheme, printable ASCII, no user information,
// no fragment, a valid host.
func parseWebURL(v string) (*url.URL, string, error) {
	switch {
	case v == "":
		return nil, "", fmt.Errorf("empty")
	case len(v) > maxURILen:
		return nil, "", fmt.Errorf("%d bytes, at most %d", len(v), maxURILen)
	case !printableASCII(v):
		return nil, "", fmt.Errorf("contains spaces, control or non-ASCII characters (percent-encode them)")
	case strings.Contains(v, "#"):
		return nil, "", fmt.Errorf("must not contain a fragment")
	case !strings.HasPrefix(v, "https://") && !strings.HasPrefix(v, "http://"):
		return nil, "", fmt.Errorf("must be an https URL (or loopback http), written with a lowercase scheme")
	}
	u, err := url.Parse(v)
	if err != nil {
		return nil, "", fmt.Errorf("not a URL")
	}
	switch {
	case u.Opaque != "" || u.Host == "":
		return nil, "", fmt.Errorf("has no host")
	case u.User != nil:
		return nil, "", fmt.Errorf("must not contain user information")
	case !validHost(u.Hostname()):
		return nil, "", fmt.Errorf("host %q is not a DNS name or IP address", u.Hostname())
	}
	return u, u.Hostname(), nil
}

// checkRedirectURI: https, or http on a loopback host (native apps), with
// no fragment or user information.
func checkRedirectURI(v string) error {
	u, host, err := parseWebURL(v)
	if err != nil {
		return err
	}
	if u.Scheme == "http" && !isLoopbackHost(host) {
		return fmt.Errorf("plain http is allowed only on a loopback host (127.0.0.1, [::1], localhost)")
	}
	return nil
}

// checkRedirectURIs checks a client's redirect URIs and returns them
// deduplicated, in their given order.
func checkRedirectURIs(uris []string) ([]string, *metadataError) {
	if len(uris) == 0 {
		return nil, badRedirect("redirect_uris: at least one is required")
	}
	if len(uris) > MaxRedirectURIs {
		return nil, badRedirect("redirect_uris: %d given, at most %d", len(uris), MaxRedirectURIs)
	}
	total := 0
	for _, v := range uris {
		total += len(v)
	}
	if total > MaxRedirectURIsBytes {
		return nil, badRedirect("redirect_uris: %d bytes in all, at most %d", total, MaxRedirectURIsBytes)
	}
	out := make([]string, 0, len(uris))
	for i, v := range uris {
		if err := checkRedirectURI(v); err != nil {
			return nil, badRedirect("redirect_uris[%d]: %v", i, err)
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out, nil
}

// checkClientName: optional; when present valid UTF-8 of at most
// MaxClientNameBytes without control or format characters (no bidi
// overrides on consent screens). Surrounding spaces are trimmed.
func checkClientName(field, v string) (string, *metadataError) {
	v = strings.TrimSpace(v)
	switch {
	case v == "":
		return "", nil
	case len(v) > MaxClientNameBytes:
		return "", badMetadata("%s: %d bytes, at most %d", field, len(v), MaxClientNameBytes)
	case !utf8.ValidString(v):
		return "", badMetadata("%s: not UTF-8", field)
	case strings.ContainsFunc(v, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }):
		return "", badMetadata("%s: contains control or formatting characters", field)
	}
	return v, nil
}

// publicMetadata is the metadata of a public client (RFC 7591 names), as
// both a registration request and a metadata document carry it.
type publicMetadata struct {
	RedirectURIs            []string `json:"redirect_uris"`
	TokenEndpointAuthMethod *string  `json:"token_endpoint_auth_method"`
	GrantTypes              []string `json:"grant_types"`
	ResponseTypes           []string `json:"response_types"`
	ClientName              string   `json:"client_name"`
}

// checked is validated public client metadata with defaults filled in.
type checked struct {
	RedirectURIs  []string
	GrantTypes    []string
	ResponseTypes []string
	ClientName    string
}

// check validates public client metadata.
func (m publicMetadata) check() (checked, *metadataError) {
	var out checked
	if m.TokenEndpointAuthMethod != nil && *m.TokenEndpointAuthMethod != authMethodNone {
		return out, badMetadata("token_endpoint_auth_method %q: only public clients (\"none\") register themselves; confidential clients are registered by an organization admin", *m.TokenEndpointAuthMethod)
	}
	uris, merr := checkRedirectURIs(m.RedirectURIs)
	if merr != nil {
		return out, merr
	}
	out.RedirectURIs = uris

	out.GrantTypes = []string{grantAuthorizationCode}
	if len(m.GrantTypes) > 0 {
		out.GrantTypes = nil
		for _, g := range m.GrantTypes {
			if g != grantAuthorizationCode && g != grantRefreshToken {
				return out, badMetadata("grant_types: %q is not supported (authorization_code, refresh_token)", g)
			}
			if !slices.Contains(out.GrantTypes, g) {
				out.GrantTypes = append(out.GrantTypes, g)
			}
		}
		if !slices.Contains(out.GrantTypes, grantAuthorizationCode) {
			return out, badMetadata("grant_types: authorization_code is required")
		}
	}
	out.ResponseTypes = []string{responseCode}
	for _, rt := range m.ResponseTypes {
		if rt != responseCode {
			return out, badMetadata("response_types: %q is not supported (code)", rt)
		}
	}
	name, merr := checkClientName("client_name", m.ClientName)
	if merr != nil {
		return out, merr
	}
	out.ClientName = name
	return out, nil
}

// sameSet reports whether a and b hold the same strings.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}
