package accesstoken

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Personal access tokens ("PATs") are for REST-only agents that cannot do
// the OAuth flow: "alppat_<id>_<secret>", where id is 16 random bytes in
// lowercase unpadded base32 (26 characters, the lookup key, not secret) and
// secret 32 random bytes in unpadded base64url (43 characters). The broker
// shows the token once and keeps only id and SHA-256(token).
//
// Why a plain SHA-256 and no password KDF (bcrypt, argon2): a KDF's cost
// exists to slow down guessing of low-entropy, human-chosen secrets. A PAT
// carries 256 random bits, so even a leaked hash table cannot be searched
// (2^256 tries), and a fast hash keeps checking a PAT on every request cheap.
// The hash covers the whole token, so it also binds the id to the secret.
const (
	PATPrefix = "alppat_"

	patIDLen     = 26 // base32 of 16 bytes, no padding
	patSecretLen = 43 // base64url of 32 bytes, no padding
	patLen       = len(PATPrefix) + patIDLen + 1 + patSecretLen
)

// ErrPATMalformed: the string is not a well-formed personal access token.
var ErrPATMalformed = errors.New("accesstoken: malformed personal access token")

var patIDEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewPAT makes a personal access token. Show token to its owner once and
// store id and sha256hex (lowercase hex of SHA-256 of token).
func NewPAT() (token, id, sha256hex string) {
	var idb [16]byte
	var secret [32]byte
	// crypto/rand.Read never returns an error (Go 1.24+): it crashes the
	// program rather than return predictable bytes.
	_, _ = rand.Read(idb[:])
	_, _ = rand.Read(secret[:])
	id = patIDEncoding.EncodeToString(idb[:])
	token = PATPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(secret[:])
	return token, id, patHash(token)
}

// LooksLikePAT reports whether token has the PAT prefix (to route a bearer
// token to PAT rather than JWT checking); it does not validate it.
func LooksLikePAT(token string) bool { return strings.HasPrefix(token, PATPrefix) }

// ParsePAT checks the format of a presented token and returns its id (to look
// the stored hash up by) and the hex SHA-256 to compare with the stored one
// using PATHashEqual. The error wraps ErrPATMalformed and never contains the
// token.
//
// It is constant-time friendly: the secret part is checked character by
// character without stopping early, and the caller compares hashes, not
// secrets, in constant time; the only branches on its content are on its
// length, on the public prefix and on the result of the whole check.
func ParsePAT(token string) (id, sha256hex string, err error) {
	if len(token) != patLen {
		return "", "", fmt.Errorf("%w: wrong length", ErrPATMalformed)
	}
	if token[:len(PATPrefix)] != PATPrefix {
		return "", "", fmt.Errorf("%w: wrong prefix", ErrPATMalformed)
	}
	id = token[len(PATPrefix) : len(PATPrefix)+patIDLen]
	secret := token[len(PATPrefix)+patIDLen+1:]
	bad := 0
	if token[len(PATPrefix)+patIDLen] != '_' {
		bad = 1
	}
	for i := 0; i < len(id); i++ {
		bad |= int(patIDBad[id[i]])
	}
	for i := 0; i < len(secret); i++ {
		bad |= int(patSecretBad[secret[i]])
	}
	// Canonical encodings only: the unused low bits of the last character
	// are zero (26 base32 chars carry 130 bits for 128; 43 base64 chars
	// carry 258 bits for 256).
	bad |= int(patIDValue[id[patIDLen-1]] & 0x3)
	bad |= int(patSecretValue[secret[patSecretLen-1]] & 0x3)
	if bad != 0 {
		return "", "", fmt.Errorf("%w: invalid characters", ErrPATMalformed)
	}
	return id, patHash(token), nil
}

// PATHashEqual compares two hex hashes in constant time.
func PATHashEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

func patHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Lookup tables: patXBad[c] is 1 if c is not in the alphabet, patXValue[c]
// the 5- or 6-bit value of c.
var patIDBad, patIDValue, patSecretBad, patSecretValue [256]byte

func init() {
	for i := range 256 {
		patIDBad[i], patSecretBad[i] = 1, 1
	}
	for i, c := range "abcdefghijklmnopqrstuvwxyz234567" {
		patIDBad[c], patIDValue[c] = 0, byte(i)
	}
	for i, c := range "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_" {
		patSecretBad[c], patSecretValue[c] = 0, byte(i)
	}
}
