package msgtypes

import (
	"fmt"
	"strings"

	"github.com/alpd-project/alpd/internal/alp"
)

// MaxNameLen bounds a type name: a tenant (253) plus a short name and
// version.
const MaxNameLen = 320

// ValidateName checks a type name's grammar (see splitName) without asking
// whether any registry holds it: other brokers' envelopes name types by it
// (internal/alpwire).
func ValidateName(name string) error {
	if _, p := splitName(name); p != "" {
		return fmt.Errorf("type name %q %s", name, p)
	}
	return nil
}

// splitName reads "<name>/v<N>" (a built-in) or "<tenant>/<name>/v<N>" (an
// organization's type) and returns the tenant ("" for a bare name), or
// what is wrong with it.
//
// <name> is one or more dot-separated words of a-z, 0-9 and '_', each
// starting with a letter ("meeting.request", "expense.approval"); <N> is a
// decimal without leading zero. The grammar is this strict because the
// name is compared byte for byte everywhere (events, ledger entries, other
// brokers).
func splitName(name string) (tenant string, problem string) {
	if name == "" {
		return "", "is empty"
	}
	if len(name) > MaxNameLen {
		return "", fmt.Sprintf("is longer than %d bytes", MaxNameLen)
	}
	parts := strings.Split(name, "/")
	switch len(parts) {
	case 2:
	case 3:
		tenant = parts[0]
		if err := alp.ValidateTenant(tenant); err != nil {
			return "", "has an invalid tenant: " + err.Error()
		}
		parts = parts[1:]
	default:
		return "", `must be "<name>/v<N>" or "<tenant>/<name>/v<N>"`
	}
	if p := shortNameProblem(parts[0]); p != "" {
		return "", p
	}
	if p := versionProblem(parts[1]); p != "" {
		return "", p
	}
	return tenant, ""
}

func shortNameProblem(s string) string {
	if s == "" {
		return "has an empty name before the version"
	}
	for _, w := range strings.Split(s, ".") {
		if w == "" || w[0] < 'a' || w[0] > 'z' {
			return "has a name word that does not start with a-z (words are dot-separated a-z, 0-9, _)"
		}
		for i := 0; i < len(w); i++ {
			c := w[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
				return fmt.Sprintf("has %q in its name (use a-z, 0-9, _ and dots)", rune(c))
			}
		}
	}
	return ""
}

func versionProblem(s string) string {
	if len(s) < 2 || s[0] != 'v' || s[1] == '0' || len(s) > 10 {
		return `must end in a version "/v<N>" (N ≥ 1, no leading zero)`
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return `must end in a version "/v<N>" (N ≥ 1, no leading zero)`
		}
	}
	return ""
}
