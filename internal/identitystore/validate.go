package identitystore

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/alpd-project/alpd/internal/alp"
)

// Limits on command input.
const (
	maxText = 256  // names, reasons, subjects, attestations
	maxURL  = 2048 // issuers, client ids that are URLs, redirect URIs
	maxID   = 128  // ids chosen by callers (agent, PAT)
	maxList = 64   // roles, scopes, redirect URIs
	maxJWKS = 64 << 10
)

// randomHex is 128 random bits in hex: person, grant and PAT ids.
func randomHex() string {
	var b [16]byte
	// crypto/rand.Read never fails (Go 1.24+).
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// shortHash is the first 128 bits of SHA-256 in hex, for subject tokens
// derived from values that may contain dots or be long (client ids, IdP
// accounts).
func shortHash(parts ...string) string {
	h := sha256.New()
	for i, p := range parts {
		if i > 0 {
			h.Write([]byte{0})
		}
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

func accountToken(issuer, subject string) string { return shortHash(issuer, subject) }
func clientToken(clientID string) string         { return shortHash(clientID) }

// checkText: non-empty, at most max bytes of valid UTF-8 without control
// characters.
func checkText(field, v string, max int) error {
	switch {
	case v == "":
		return invalid(field, "empty")
	case len(v) > max:
		return invalid(field, "%d bytes, at most %d", len(v), max)
	case !utf8.ValidString(v):
		return invalid(field, "not UTF-8")
	case strings.ContainsFunc(v, unicode.IsControl):
		return invalid(field, "contains control characters")
	}
	return nil
}

// checkID: a caller-chosen id that becomes a subject token:
// [A-Za-z0-9_-], at most maxID characters.
func checkID(field, v string) error {
	if v == "" {
		return invalid(field, "empty")
	}
	if len(v) > maxID {
		return invalid(field, "%d characters, at most %d", len(v), maxID)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return invalid(field, "character %q not allowed (want [A-Za-z0-9_-])", rune(c))
		}
	}
	return nil
}

// checkURL: an absolute http(s) URL without user info or fragment; https
// unless allowHTTP.
func checkURL(field, v string, allowHTTP bool) (*url.URL, error) {
	if err := checkText(field, v, maxURL); err != nil {
		return nil, err
	}
	u, err := url.Parse(v)
	if err != nil {
		return nil, invalid(field, "not a URL")
	}
	switch {
	case u.Scheme != "https" && !(allowHTTP && u.Scheme == "http"):
		if allowHTTP {
			return nil, invalid(field, "want an http or https URL")
		}
		return nil, invalid(field, "want an https URL")
	case u.Host == "":
		return nil, invalid(field, "no host")
	case u.User != nil:
		return nil, invalid(field, "must not contain user information")
	case u.Fragment != "" || strings.Contains(v, "#"):
		return nil, invalid(field, "must not contain a fragment")
	}
	return u, nil
}

// checkIssuer: an OpenID issuer, http(s) (plain http is for local test
// providers; the sign-in layer decides which issuers it trusts), without
// query or fragment.
func checkIssuer(v string) error {
	u, err := checkURL("issuer", v, true)
	if err != nil {
		return err
	}
	if u.RawQuery != "" || u.ForceQuery {
		return invalid("issuer", "must not contain a query")
	}
	return nil
}

// checkAddress: a plain address with a canonical domain
// (alp.ValidateAddress); the person map compares addresses without case.
func checkAddress(v string) error {
	if err := alp.ValidateAddress(v); err != nil {
		return invalid("address", "%v", err)
	}
	return nil
}

// normalizeList checks each item with check and returns the sorted set.
func normalizeList(field string, items []string, check func(field, v string) error) ([]string, error) {
	if len(items) > maxList {
		return nil, invalid(field, "%d items, at most %d", len(items), maxList)
	}
	out := make([]string, 0, len(items))
	for _, v := range items {
		if err := check(field, v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func checkRole(field, v string) error { return checkText(field, v, maxText) }

// checkScope: an RFC 6749 scope token (%x21 / %x23-5B / %x5D-7E).
func checkScope(field, v string) error {
	if v == "" || len(v) > maxText {
		return invalid(field, "want 1 to %d characters", maxText)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return invalid(field, "%q is not a scope token", v)
		}
	}
	return nil
}

func checkRedirect(field, v string) error {
	// Native apps use loopback http redirects (RFC 8252); https otherwise.
	// Which redirect is acceptable for which client is the authorization
	// server's decision; the store keeps well-formed absolute URLs.
	_, err := checkURL(field, v, true)
	return err
}

// privateJWKMembers are the members that only private or symmetric JWKs
// have (RFC 7518 §6): a client's JWK Set must hold public keys only, since
// events are never allowed to carry secrets.
var privateJWKMembers = []string{"d", "p", "q", "dp", "dq", "qi", "oth", "k"}

func checkJWKS(b []byte) error {
	if len(b) > maxJWKS {
		return invalid("jwks", "%d bytes, at most %d", len(b), maxJWKS)
	}
	var set struct {
		Keys []map[string]json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return invalid("jwks", "not a JWK Set: %v", err)
	}
	if len(set.Keys) == 0 {
		return invalid("jwks", "no keys")
	}
	for i, k := range set.Keys {
		if _, ok := k["kty"]; !ok {
			return invalid("jwks", "key %d has no kty", i)
		}
		for _, m := range privateJWKMembers {
			if _, ok := k[m]; ok {
				return invalid("jwks", "key %d holds private key material (%q): only public keys may be registered", i, m)
			}
		}
	}
	return nil
}
