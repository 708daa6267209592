package alp

import (
	"fmt"
	"strings"
)

// Limits of an address (RFC 5321 §4.5.3.1: a path is at most 256 octets
// with its angle brackets).
const (
	MaxAddressLen = 254
	MaxLocalLen   = 64
)

// acctScheme starts the URI form of an address (RFC 7565).
const acctScheme = "acct:"

// atextSymbols are the non-alphanumeric characters of an RFC 5322 atext.
const atextSymbols = "!#$%&'*+/=?^_`{|}~-"

// Address is a person's address in canonical (lowercase) form. The zero
// Address is no address.
type Address struct {
	local, domain string
}

// ParseAddress reads "local@domain" or "acct:local@domain" (the scheme in
// any case), folds ASCII upper case and checks the result. Surrounding
// space is not trimmed: it makes s invalid. The error is an *[Error]
// wrapping [ErrInvalidAddress].
func ParseAddress(s string) (Address, error) {
	plain := s
	if len(s) >= len(acctScheme) && strings.EqualFold(s[:len(acctScheme)], acctScheme) {
		plain = s[len(acctScheme):]
	}
	local, domain, r := addressProblem(lowerASCII(plain))
	if r != "" {
		return Address{}, &Error{Kind: ErrInvalidAddress, Input: s, Reason: r}
	}
	return Address{local: local, domain: domain}, nil
}

// ValidateAddress checks a stored address in its plain form: the domain must
// be canonical, the local part may keep its case (addresses compare by
// [NormalizeAddress]).
func ValidateAddress(s string) error {
	if _, _, r := addressProblem(s); r != "" {
		return &Error{Kind: ErrInvalidAddress, Input: s, Reason: r}
	}
	return nil
}

// NormalizeAddress returns the form in which addresses compare: ASCII upper
// case folded. For a valid plain address it is what [ParseAddress] gives;
// it never fails, so state stored under an address can always be found
// again, even if the address predates a rule.
func NormalizeAddress(s string) string { return lowerASCII(s) }

// String is "local@domain", or "" for the zero Address.
func (a Address) String() string {
	if a.IsZero() {
		return ""
	}
	return a.local + "@" + a.domain
}

// Local is the part before '@'.
func (a Address) Local() string { return a.local }

// Domain is the part after '@', a domain in canonical form (it follows the
// tenant rule; whether this broker hosts it is [Tenants.Hosts]'s question).
func (a Address) Domain() string { return a.domain }

// IsZero reports whether a is the zero Address.
func (a Address) IsZero() bool { return a.local == "" }

// addressProblem splits s into its parts, or returns what is wrong with it.
func addressProblem(s string) (local, domain, reason string) {
	if len(s) > MaxAddressLen {
		return "", "", fmt.Sprintf("is longer than %d characters", MaxAddressLen)
	}
	local, domain, ok := strings.Cut(s, "@")
	if !ok || strings.Contains(domain, "@") {
		return "", "", "must have exactly one '@'"
	}
	if r := localProblem(local); r != "" {
		return "", "", r
	}
	if r := tenantProblem(domain); r != "" {
		return "", "", "has an invalid domain: " + quote(domain) + " " + r
	}
	return local, domain, ""
}

// localProblem checks an RFC 5322 dot-atom of at most MaxLocalLen bytes.
func localProblem(l string) string {
	switch {
	case l == "":
		return "has no local part before '@'"
	case len(l) > MaxLocalLen:
		return fmt.Sprintf("has a local part longer than %d characters", MaxLocalLen)
	case l[0] == '.' || l[len(l)-1] == '.' || strings.Contains(l, ".."):
		return "has a local part with a leading, trailing or double dot"
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', strings.IndexByte(atextSymbols, c) >= 0:
		case c >= 0x80:
			return "has non-ASCII characters in its local part"
		default:
			return fmt.Sprintf("has %q in its local part (no quoting, comments or spaces)", rune(c))
		}
	}
	return ""
}
