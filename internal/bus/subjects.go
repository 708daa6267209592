package bus

import (
	"fmt"
	"strings"
)

// SubjectPrefix starts every ALP subject: alp.<kind>.<tenant token>.…
const SubjectPrefix = "alp"

// TenantToken turns a tenant domain into a subject token. Domains consist of
// [a-z0-9-] labels joined by dots, so replacing dots with underscores is
// injective and the token never contains the subject separator.
func TenantToken(domain string) string {
	return strings.ReplaceAll(strings.ToLower(domain), ".", "_")
}

// Subject builds alp.<kind>.<tenant token>.<rest…>. Every part must be a
// valid subject token (no dots, wildcards or whitespace); person ids are
// opaque random ids, never addresses.
func Subject(kind, tenant string, rest ...string) (string, error) {
	parts := append([]string{SubjectPrefix, kind, TenantToken(tenant)}, rest...)
	for i, p := range parts {
		if err := checkToken(p); err != nil {
			return "", fmt.Errorf("bus: subject part %d %q: %w", i, p, err)
		}
	}
	return strings.Join(parts, "."), nil
}

func checkToken(p string) error {
	if p == "" {
		return fmt.Errorf("empty token")
	}
	if strings.ContainsAny(p, ".*> \t\r\n") {
		return fmt.Errorf("token contains '.', '*', '>' or whitespace")
	}
	return nil
}

// StreamName returns the name of a stream of the broker namespace ns, e.g.
// StreamName("alpd", "send") = "ALPD_SEND".
func StreamName(ns, name string) string {
	return strings.ToUpper(ns + "_" + name)
}
