package alp

import "fmt"

// MaxPersonIDLen bounds a person id; alpd's own are 34 characters.
const MaxPersonIDLen = 128

// ValidatePersonID checks that s is a person id (see the package doc). The
// error is an *[Error] wrapping [ErrInvalidPersonID].
func ValidatePersonID(s string) error {
	if r := personIDProblem(s); r != "" {
		return &Error{Kind: ErrInvalidPersonID, Input: s, Reason: r}
	}
	return nil
}

// ValidatePerson checks the two names of a person: their tenant
// ([ValidateTenant]) and their id ([ValidatePersonID]). Stores keyed by
// person ("<tenant>.<person>") take both on every call.
func ValidatePerson(tenant, personID string) error {
	if err := ValidateTenant(tenant); err != nil {
		return err
	}
	return ValidatePersonID(personID)
}

func personIDProblem(s string) string {
	if s == "" {
		return "is empty"
	}
	if len(s) > MaxPersonIDLen {
		return fmt.Sprintf("is longer than %d characters", MaxPersonIDLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		case c >= 0x80:
			return "has non-ASCII characters (use A-Z, a-z, 0-9, _ and -)"
		default:
			return fmt.Sprintf("has %q (use A-Z, a-z, 0-9, _ and -)", rune(c))
		}
	}
	return ""
}
