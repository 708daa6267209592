package ledgerlog

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gowebpki/jcs"
)

// Type strings that start every hashed or signed structure of the ledger,
// so that no byte string means two things (domain separation).
const (
	EnvelopeDigestType = "alp-envelope-digest/v1"
	commitmentPrefix   = "alp-ledger-commitment/v1\n"
	// CommitmentScheme prefixes every commitment string.
	CommitmentScheme = "sha256:"
	// SaltSize is the length of a commitment salt.
	SaltSize = 32
)

// EnvelopeFields are the parts of an envelope the digest covers: what both
// sides of an exchange saw, so the two brokers compute the same digest.
type EnvelopeFields struct {
	ID, From, To, Type string
	// Body is the body as RFC 8785 canonical JSON; it must already be
	// canonical (numbers that RFC 8785 cannot represent exactly, such as
	// integers beyond 2^53, are thereby refused).
	Body             []byte
	Created, Expires time.Time
	InReplyTo        string
}

// envelopeDigestDoc is the object hashed by EnvelopeDigest. Times are
// strings (RFC 3339, UTC, nanoseconds, trailing zeros dropped) and there
// are no floats, so every implementation produces the same bytes.
type envelopeDigestDoc struct {
	T         string          `json:"t"`
	ID        string          `json:"id"`
	From      string          `json:"from"`
	To        string          `json:"to"`
	Type      string          `json:"type"`
	Body      json.RawMessage `json:"body"`
	Created   string          `json:"created"`
	Expires   string          `json:"expires,omitempty"`
	InReplyTo string          `json:"in_reply_to,omitempty"`
}

// EnvelopeDigest is SHA-256 of the RFC 8785 form of
// {"t":"alp-envelope-digest/v1","id","from","to","type","body","created",
// "expires"?,"in_reply_to"?}. The digest never goes into a leaf bare (see
// Commit): it is only compared between the two sides of an exchange.
func EnvelopeDigest(f EnvelopeFields) ([32]byte, error) {
	for _, p := range [][2]string{{"id", f.ID}, {"from", f.From}, {"to", f.To}, {"type", f.Type}} {
		if p[1] == "" {
			return [32]byte{}, fmt.Errorf("ledgerlog: envelope digest: %s is empty", p[0])
		}
	}
	if f.Created.IsZero() {
		return [32]byte{}, fmt.Errorf("ledgerlog: envelope digest of %s: created is zero", quote(f.ID))
	}
	if len(f.Body) == 0 {
		return [32]byte{}, fmt.Errorf("ledgerlog: envelope digest of %s: empty body (use {} for none)", quote(f.ID))
	}
	canon, err := jcs.Transform(f.Body)
	if err != nil {
		return [32]byte{}, fmt.Errorf("ledgerlog: envelope digest of %s: body: %w", quote(f.ID), err)
	}
	if !bytes.Equal(canon, f.Body) {
		return [32]byte{}, fmt.Errorf("ledgerlog: envelope digest of %s: body is not RFC 8785 canonical JSON", quote(f.ID))
	}
	doc := envelopeDigestDoc{
		T: EnvelopeDigestType, ID: f.ID, From: f.From, To: f.To, Type: f.Type,
		Body: canon, Created: f.Created.UTC().Format(time.RFC3339Nano), InReplyTo: f.InReplyTo,
	}
	if !f.Expires.IsZero() {
		doc.Expires = f.Expires.UTC().Format(time.RFC3339Nano)
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return [32]byte{}, fmt.Errorf("ledgerlog: envelope digest of %s: %w", quote(f.ID), err)
	}
	out, err := jcs.Transform(raw)
	if err != nil {
		return [32]byte{}, fmt.Errorf("ledgerlog: envelope digest of %s: %w", quote(f.ID), err)
	}
	return sha256.Sum256(out), nil
}

// NewSalt returns SaltSize random bytes for one commitment. Each leaf gets
// its own salt, so equal envelopes give unrelated commitments.
func NewSalt() ([]byte, error) {
	salt := make([]byte, SaltSize)
	if _, err := rand.Read(salt); err != nil {
		return nil, fmt.Errorf("ledgerlog: salt: %w", err)
	}
	return salt, nil
}

// Commit returns "sha256:" + hex(SHA-256("alp-ledger-commitment/v1\n" ||
// salt || digest)). Without the salt the commitment reveals nothing about
// the digest, even for guessable bodies; deleting the salt erases the link.
func Commit(salt []byte, digest [32]byte) string {
	h := sha256.New()
	h.Write([]byte(commitmentPrefix))
	h.Write(salt)
	h.Write(digest[:])
	return CommitmentScheme + hex.EncodeToString(h.Sum(nil))
}

// CheckOpening reports whether (salt, digest) opens commitment.
func CheckOpening(commitment string, salt []byte, digest [32]byte) error {
	if len(salt) != SaltSize {
		return fmt.Errorf("salt of %d bytes, want %d", len(salt), SaltSize)
	}
	if subtle.ConstantTimeCompare([]byte(Commit(salt, digest)), []byte(commitment)) != 1 {
		return fmt.Errorf("salt and digest do not open the commitment")
	}
	return nil
}

// CheckCommitment checks the syntax of a commitment string (one carried
// between brokers, say).
func CheckCommitment(c string) error { return checkCommitment(c) }

// checkCommitment checks the syntax of a commitment string.
func checkCommitment(c string) error {
	h, ok := bytes.CutPrefix([]byte(c), []byte(CommitmentScheme))
	if !ok || len(h) != 64 {
		return fmt.Errorf("commitment %s is not sha256:<64 hex>", quote(c))
	}
	for _, b := range h {
		if !(b >= '0' && b <= '9' || b >= 'a' && b <= 'f') {
			return fmt.Errorf("commitment %s is not lowercase hex", quote(c))
		}
	}
	return nil
}
