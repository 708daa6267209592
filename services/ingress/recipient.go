package ingress

import (
	"fmt"
	"net/mail"
	"strings"
)

// ParseRecipient reads a recipient as an agent names it, in any binding: an
// address person@domain, optionally as an acct: URI (RFC 7565), with
// surrounding space ignored. It returns the address lower-cased; anything
// else is ErrInvalid.
func ParseRecipient(s string) (string, error) {
	addr := strings.TrimPrefix(strings.TrimSpace(s), "acct:")
	if !validAddress(addr) {
		return "", fmt.Errorf("%w: the recipient must be an address person@domain (optionally as an acct: URI)", ErrInvalid)
	}
	return strings.ToLower(addr), nil
}

func validAddress(s string) bool {
	if len(s) > 320 {
		return false
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Name != "" || a.Address != s {
		return false
	}
	local, domain, ok := strings.Cut(s, "@")
	return ok && local != "" && strings.Contains(domain, ".") && !strings.ContainsAny(s, "<>\" ")
}
