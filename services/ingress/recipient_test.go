package ingress

import (
	"errors"
	"strings"
	"testing"
)

// TestParseRecipient: an address, optionally as an acct: URI, lower-cased;
// anything else is ErrInvalid.
func TestParseRecipient(t *testing.T) {
	for in, want := range map[string]string{
		"bob@example.com":            "bob@example.com",
		"acct:bob@example.com":       "bob@example.com",
		"  Bob@Example.COM ":         "bob@example.com",
		"acct:Ana.B@sub.example.org": "ana.b@sub.example.org",
		// A single-label tenant is a tenant (internal/alp's rule).
		"bob@localhost": "bob@localhost",
	} {
		if got, err := ParseRecipient(in); err != nil || got != want {
			t.Errorf("ParseRecipient(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{
		"", "bob", "bob@127.0.0.1", "@example.com", "Bob <bob@example.com>", "bob@example.com>",
		"\"bob\"@example.com", "mailto:bob@example.com", "acct:", strings.Repeat("a", 310) + "@example.com",
	} {
		if _, err := ParseRecipient(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseRecipient(%q): %v; want ErrInvalid", bad, err)
		}
	}
}
