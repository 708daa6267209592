package ingress

import (
	"errors"
	"strings"
	"testing"
)

// TestParseEnvelopeID (issue 10 finding 1): only the 36-character UUID
// form is an envelope id; the canonical form is lower case, and a refusal
// is ErrInvalidEnvelopeID (an ErrInvalid) without the input in it.
func TestParseEnvelopeID(t *testing.T) {
	for in, want := range map[string]string{
		"0192f0c4-7b1e-7a00-8000-000000000001": "0192f0c4-7b1e-7a00-8000-000000000001",
		"0192F0C4-7B1E-7A00-8000-00000000000A": "0192f0c4-7b1e-7a00-8000-00000000000a",
		envelopeIDOf([]byte("digest")):         envelopeIDOf([]byte("digest")),
	} {
		if got, err := ParseEnvelopeID(in); err != nil || got != want {
			t.Errorf("ParseEnvelopeID(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{
		"", strings.Repeat("a", 4000), strings.Repeat("0192f0c4-7b1e-7a00-8000-000000000001", 100),
		"0192f0c4-7b1e-7a00-8000-00000000000.", "0192f0c4-7b1e-7a00-8000-00000000000*", "0192f0c4-7b1e-7a00-8000-00000000000>",
		"0192f0c4 7b1e 7a00 8000 000000000001", "{0192f0c4-7b1e-7a00-8000-000000000001}",
		"urn:uuid:0192f0c4-7b1e-7a00-8000-000000000001", "0192f0c47b1e7a008000000000000001",
		"0192f0c4-7b1e-7a00-8000-00000000000g", "0192f0c4-7b1e-7a00-8000-00000000000\n",
	} {
		_, err := ParseEnvelopeID(bad)
		if !errors.Is(err, ErrInvalidEnvelopeID) || !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseEnvelopeID(%.60q): %v; want ErrInvalidEnvelopeID", bad, err)
			continue
		}
		if len(bad) > 8 && strings.Contains(err.Error(), bad) {
			t.Errorf("the refusal repeats the input: %v", err)
		}
	}
}
