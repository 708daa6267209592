package signin

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/alpd-project/alpd/internal/alp"
	"github.com/zitadel/oidc/v3/pkg/oidc"

	"github.com/alpd-project/alpd/internal/httpjson"
)

// resolveAddress finds the person's address, in this order:
//
//  1. the Directory entry "sub:<subject>";
//  2. the AddressClaim: a value with '@' is the address and must be in
//     VerifiedDomains; any other value is looked up as
//     "<AddressClaim>:<value>" in the Directory;
//  3. the email claim, only if email_verified is true and the domain is in
//     EmailDomains.
//
// The first rule that yields an address wins. When none does, the error
// names the most specific reason (a claim that was present but refused
// beats a claim that was absent).
func (tc *tenantConfig) resolveAddress(claims *oidc.IDTokenClaims) (string, error) {
	if a, ok := tc.directory["sub:"+claims.Subject]; ok {
		return a, nil
	}
	var refusals []*httpjson.Error
	refuse := func(code, format string, a ...any) {
		refusals = append(refusals, newError(http.StatusForbidden, code, fmt.Sprintf(format, a...)))
	}

	if tc.AddressClaim != "" {
		switch v := claims.Claims[tc.AddressClaim].(type) {
		case nil:
			refuse(CodeAddressUnresolved, "the ID token has no %q claim", tc.AddressClaim)
		case string:
			if strings.Contains(v, "@") {
				addr, err := alp.ParseAddress(v)
				switch {
				case err != nil:
					refuse(CodeAddressClaimFormat, "the %q claim is not a well-formed address", tc.AddressClaim)
				case !tc.verified[addr.Domain()]:
					refuse(CodeAddressDomain, "the %q claim's domain %q is not a verified domain of tenant %s", tc.AddressClaim, addr.Domain(), tc.Tenant)
				default:
					return addr.String(), nil
				}
			} else if a, ok := tc.directory[tc.AddressClaim+":"+v]; ok {
				return a, nil
			} else {
				refuse(CodeAddressUnresolved, "the %q claim is not provisioned in tenant %s's directory", tc.AddressClaim, tc.Tenant)
			}
		default:
			refuse(CodeAddressClaimFormat, "the %q claim is not a string", tc.AddressClaim)
		}
	}

	if len(tc.emailOK) > 0 {
		switch {
		case claims.Email == "":
			refuse(CodeAddressUnresolved, "the ID token has no email claim")
		case !bool(claims.EmailVerified):
			refuse(CodeEmailNotVerified, "the IdP has not verified the email address (email_verified is not true)")
		default:
			addr, err := alp.ParseAddress(claims.Email)
			switch {
			case err != nil:
				refuse(CodeAddressClaimFormat, "the email claim is not a well-formed address")
			case !tc.emailOK[addr.Domain()]:
				refuse(CodeEmailDomain, "email domain %q is not allowed for tenant %s", addr.Domain(), tc.Tenant)
			default:
				return addr.String(), nil
			}
		}
	}

	// Pick the most specific refusal; report the others in the message.
	if len(refusals) == 0 {
		return "", newError(http.StatusForbidden, CodeAddressUnresolved,
			fmt.Sprintf("no address is provisioned for this person in tenant %s (no directory entry, and neither an address claim nor the email claim is configured)", tc.Tenant))
	}
	best := refusals[0]
	for _, r := range refusals[1:] {
		if best.Code == CodeAddressUnresolved && r.Code != CodeAddressUnresolved {
			best = r
		}
	}
	msgs := make([]string, 0, len(refusals))
	msgs = append(msgs, best.Message)
	for _, r := range refusals {
		if r != best {
			msgs = append(msgs, r.Message)
		}
	}
	return "", newError(http.StatusForbidden, best.Code,
		"no address for this person in tenant "+tc.Tenant+": "+strings.Join(msgs, "; "))
}

// roles reads the roles claim: a string or an array of strings (other
// members are ignored). Duplicates and empty strings are dropped.
func (tc *tenantConfig) roles(claims *oidc.IDTokenClaims) []string {
	var out []string
	add := func(s string) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	switch v := claims.Claims[tc.RolesClaim].(type) {
	case string:
		add(v)
	case []any:
		for _, r := range v {
			if s, ok := r.(string); ok {
				add(s)
			}
		}
	case []string:
		for _, s := range v {
			add(s)
		}
	}
	return out
}
