package alp

import (
	"fmt"
	"slices"
	"strings"
)

// Limits of a DNS name (RFC 1035 §2.3.4, without the trailing root label).
const (
	MaxTenantLen = 253
	MaxLabelLen  = 63
)

// Tenant is a tenant domain in canonical form (see the package doc).
type Tenant string

func (t Tenant) String() string { return string(t) }

// ParseTenant folds ASCII upper case in s and checks the result with
// [ValidateTenant].
func ParseTenant(s string) (Tenant, error) {
	t := lowerASCII(s)
	if r := tenantProblem(t); r != "" {
		return "", &Error{Kind: ErrInvalidTenant, Input: s, Reason: r}
	}
	return Tenant(t), nil
}

// ValidateTenant checks that s is a tenant domain in canonical form. The
// error is an *[Error] wrapping [ErrInvalidTenant].
func ValidateTenant(s string) error {
	if r := tenantProblem(s); r != "" {
		return &Error{Kind: ErrInvalidTenant, Input: s, Reason: r}
	}
	return nil
}

// tenantProblem returns what is wrong with s as a canonical tenant, or "".
// The checks run in this order so the reason names the most useful fix
// first (lowercase it before counting its length).
func tenantProblem(s string) string {
	if s == "" {
		return "is empty"
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r >= 'A' && r <= 'Z' }) {
		return "must be lowercase"
	}
	if len(s) > MaxTenantLen {
		return fmt.Sprintf("is longer than %d characters", MaxTenantLen)
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if l == "" {
			return "is not a DNS name (empty label; no leading, trailing or double dots)"
		}
		if len(l) > MaxLabelLen {
			return fmt.Sprintf("is not a DNS name (a label is longer than %d characters)", MaxLabelLen)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' {
				continue
			}
			if c >= 0x80 {
				return "is not a DNS name (write an internationalized name in its xn-- form)"
			}
			return fmt.Sprintf("is not a DNS name (%q is not allowed; use a-z, 0-9 and -)", rune(c))
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "is not a DNS name (a label starts or ends with -)"
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "is an IP address, not a DNS name"
	}
	return ""
}

// Tenants are the tenants one broker hosts, each in canonical form.
type Tenants []string

// Hosts reports whether t is one of ts. It compares exactly: a
// non-canonical spelling of a hosted tenant is not hosted (callers parse
// what they were given first).
func (ts Tenants) Hosts(t string) bool { return slices.Contains(ts, t) }

// ValidateTenants checks a list of hosted tenants: each valid and canonical
// (ValidateTenant), none listed twice.
func ValidateTenants(ts []string) error {
	for i, t := range ts {
		if err := ValidateTenant(t); err != nil {
			return err
		}
		if slices.Contains(ts[:i], t) {
			return fmt.Errorf("%q listed twice", t)
		}
	}
	return nil
}

// lowerASCII folds A-Z to a-z and leaves every other byte alone.
func lowerASCII(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r >= 'A' && r <= 'Z' }) {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
