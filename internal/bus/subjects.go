package bus

import (
	"errors"
	"fmt"
	"strings"
)

// SubjectPrefix starts every ALP subject: alp.<kind>.<tenant token>.…
const SubjectPrefix = "alp"

// Bounds of subjects the bus builds or is handed. nats-server refuses a
// protocol line longer than its max_control_line (4096 bytes by default)
// and the Go client then closes the connection for good, taking every
// service of the process with it. A direct get puts the subject into a
// request subject ($JS.API.DIRECT.GET.<stream>.<subject>), and headers and
// a reply inbox go on the same line, so the bounds stay far below 4096.
// Every subject ALP makes is much shorter: a tenant token is at most 253
// bytes (a DNS name), an id 36 (a UUID) to 128 (a person id).
const (
	MaxTokenBytes   = 256
	MaxSubjectBytes = 1024
)

// ErrInvalidSubject is wrapped by every refusal of a subject or one of its
// tokens, so callers can tell bad input from a NATS failure.
var ErrInvalidSubject = errors.New("bus: invalid subject")

// TenantToken turns a tenant domain into a subject token. Tenants are
// [a-z0-9-] labels joined by dots (alp.ValidateTenant), so replacing dots
// with underscores is injective and the token never contains the subject
// separator.
func TenantToken(domain string) string {
	return strings.ReplaceAll(strings.ToLower(domain), ".", "_")
}

// Subject builds alp.<kind>.<tenant token>.<rest…>. Every part must be a
// valid token (CheckToken) and the whole at most MaxSubjectBytes; person
// ids are opaque random ids, never addresses.
func Subject(kind, tenant string, rest ...string) (string, error) {
	parts := append([]string{SubjectPrefix, kind, TenantToken(tenant)}, rest...)
	for i, p := range parts {
		if err := CheckToken(p); err != nil {
			return "", fmt.Errorf("bus: subject part %d: %w", i, err)
		}
	}
	s := strings.Join(parts, ".")
	if len(s) > MaxSubjectBytes {
		return "", fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidSubject, len(s), MaxSubjectBytes)
	}
	return s, nil
}

// CheckToken accepts one subject token: 1 to MaxTokenBytes printable ASCII
// characters other than the separator '.' and the wildcards '*' and '>'.
// Control characters and spaces would end or split the protocol line;
// wildcards would make a publish or a direct get mean many subjects.
func CheckToken(p string) error {
	if p == "" {
		return fmt.Errorf("%w: empty token", ErrInvalidSubject)
	}
	if len(p) > MaxTokenBytes {
		return fmt.Errorf("%w: token %s is %d bytes, at most %d", ErrInvalidSubject, clip(p), len(p), MaxTokenBytes)
	}
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '.' || c == '*' || c == '>':
			return fmt.Errorf("%w: token %s contains %q (separator or wildcard)", ErrInvalidSubject, clip(p), c)
		case c <= ' ' || c >= 0x7f:
			return fmt.Errorf("%w: token %s contains byte 0x%02x (only printable ASCII without spaces)", ErrInvalidSubject, clip(p), c)
		}
	}
	return nil
}

// CheckSubject accepts a whole subject to publish on or read from: at most
// MaxSubjectBytes, every token valid (so no wildcards). The bus checks
// each subject it is handed, so a builder that forgot a check cannot reach
// NATS with a line it refuses.
func CheckSubject(s string) error {
	if len(s) > MaxSubjectBytes {
		return fmt.Errorf("%w: %s is %d bytes, at most %d", ErrInvalidSubject, clip(s), len(s), MaxSubjectBytes)
	}
	for i, p := range strings.Split(s, ".") {
		if err := CheckToken(p); err != nil {
			return fmt.Errorf("bus: subject %s, token %d: %w", clip(s), i, err)
		}
	}
	return nil
}

// clip quotes s for an error message, cut to its first 64 bytes: refused
// input can be kilobytes long and ends up in logs and HTTP answers.
func clip(s string) string {
	const keep = 64
	if len(s) <= keep {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:keep], len(s))
}

// StreamName returns the name of a stream of the broker namespace ns, e.g.
// StreamName("alpd", "send") = "ALPD_SEND".
func StreamName(ns, name string) string {
	return strings.ToUpper(ns + "_" + name)
}
