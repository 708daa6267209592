package alp

// OAuth scopes an agent's credential may carry (docs/identity.md).
const (
	// ScopeSend lets an agent send messages for its person.
	ScopeSend = "alp.send"
	// ScopeRead lets an agent read what belongs to its person (the ledger).
	ScopeRead = "alp.read"
)

// Scopes are every scope an access token or personal access token may
// carry, sorted.
func Scopes() []string { return []string{ScopeRead, ScopeSend} }

// IsScopeToken reports whether s is one RFC 6749 §3.3 scope-token: one or
// more printable ASCII characters other than space, '"' and '\'. Callers
// add their own length bound (what fits their protocol).
func IsScopeToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// AdminRole is the app role (from the organization's IdP, carried in a
// person's web session) of an organization's admin: who registers company
// clients (identity) and writes the organization's policy sets, message
// types and pre-approved relationships (policy).
const AdminRole = "alp.admin"
