package keystore

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
)

// GenerateKEK returns a new random 32-byte key-encryption key.
func GenerateKEK() []byte {
	k := make([]byte, 32)
	rand.Read(k) // never fails (crypto/rand, Go ≥ 1.24)
	return k
}

// EncodeKEK returns the standard base64 form of a KEK, which ParseKEK reads.
func EncodeKEK(kek []byte) string { return base64.StdEncoding.EncodeToString(kek) }

// ParseKEK decodes a key-encryption key given as base64: standard (padded or
// not) or URL-safe (padded or not), surrounding white space ignored (a KEK
// read from a file often ends with a newline). It must decode to exactly 32
// bytes. Errors wrap ErrBadKEK and never echo the input.
func ParseKEK(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("keystore: %w: empty", ErrBadKEK)
	}
	var b []byte
	var err error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err = enc.DecodeString(s); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("keystore: %w: not valid base64 (standard or URL-safe)", ErrBadKEK)
	}
	if len(b) != 32 {
		return nil, fmt.Errorf("keystore: %w: decodes to %d bytes, want 32 (generate one with 32 random bytes, e.g. openssl rand -base64 32)", ErrBadKEK, len(b))
	}
	return b, nil
}
