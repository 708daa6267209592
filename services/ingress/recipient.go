package ingress

import (
	"fmt"
	"strings"

	"github.com/alpd-project/alpd/internal/alp"
)

// ParseRecipient reads a recipient as an agent names it, in any binding: an
// address person@domain, optionally as an acct: URI (RFC 7565), with
// surrounding space ignored. It returns the address lower-cased; anything
// else is ErrInvalid.
func ParseRecipient(s string) (string, error) {
	addr, err := alp.ParseAddress(strings.TrimSpace(s))
	if err != nil {
		return "", fmt.Errorf("%w: the recipient must be an address person@domain (optionally as an acct: URI)", ErrInvalid)
	}
	return addr.String(), nil
}
