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
