package ledgerlog

import (
	"crypto"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/alpd-project/alpd/internal/alp"
	"golang.org/x/mod/sumdb/note"
)

// algEd25519 is the C2SP signed-note signature type of Ed25519.
const algEd25519 = 0x01

// KeyID is the C2SP signed-note key id of an Ed25519 key:
// the first 4 bytes of SHA-256(name || 0x0A || 0x01 || public key).
func KeyID(name string, pub ed25519.PublicKey) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{'\n', algEd25519})
	h.Write(pub)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

// FormatKeyID renders a key id as 8 lowercase hex digits, as in verifier keys.
func FormatKeyID(id uint32) string { return fmt.Sprintf("%08x", id) }

// noteSigner adapts a crypto.Signer (a KeyStore key, never exported) to
// note.Signer.
type noteSigner struct {
	name string
	hash uint32
	key  crypto.Signer
}

func (s *noteSigner) Name() string    { return s.name }
func (s *noteSigner) KeyHash() uint32 { return s.hash }
func (s *noteSigner) Sign(msg []byte) ([]byte, error) {
	sig, err := s.key.Sign(nil, msg, crypto.Hash(0))
	if err != nil {
		return nil, fmt.Errorf("ledgerlog: signing as %s: %w", s.name, err)
	}
	return sig, nil
}

// NoteSigner returns a signed-note signer named KeyName(tenant) that signs
// with key, which must be an Ed25519 key (its Public() an
// ed25519.PublicKey). The private key stays wherever key keeps it.
func NoteSigner(tenant string, key crypto.Signer) (note.Signer, error) {
	if err := alp.ValidateTenant(tenant); err != nil {
		return nil, fmt.Errorf("ledgerlog: note signer: %w", err)
	}
	if key == nil {
		return nil, fmt.Errorf("ledgerlog: note signer for %s: nil key", tenant)
	}
	pub, err := ed25519Public(key)
	if err != nil {
		return nil, fmt.Errorf("ledgerlog: note signer for %s: %w", tenant, err)
	}
	name := KeyName(tenant)
	return &noteSigner{name: name, hash: KeyID(name, pub), key: key}, nil
}

func ed25519Public(key crypto.Signer) (ed25519.PublicKey, error) {
	pub, ok := key.Public().(ed25519.PublicKey)
	if !ok || len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("key is %T, not an Ed25519 public key", key.Public())
	}
	return pub, nil
}

// VerifierKey returns the signed-note verifier key of a tenant's ledger key,
// "<tenant>/alp/ledger+<hex key id>+<base64(0x01 || public key)>". It is
// what a person or auditor pins; note.NewVerifier parses it.
func VerifierKey(tenant string, pub ed25519.PublicKey) (string, error) {
	if err := alp.ValidateTenant(tenant); err != nil {
		return "", fmt.Errorf("ledgerlog: verifier key: %w", err)
	}
	if len(pub) != ed25519.PublicKeySize {
		return "", fmt.Errorf("ledgerlog: verifier key for %s: public key of %d bytes", tenant, len(pub))
	}
	vkey, err := note.NewEd25519VerifierKey(KeyName(tenant), pub)
	if err != nil {
		return "", fmt.Errorf("ledgerlog: verifier key for %s: %w", tenant, err)
	}
	return vkey, nil
}

// Verifiers parses verifier keys into a note.Verifiers.
func Verifiers(vkeys ...string) (note.Verifiers, error) {
	list := make([]note.Verifier, 0, len(vkeys))
	for _, k := range vkeys {
		v, err := note.NewVerifier(k)
		if err != nil {
			return nil, fmt.Errorf("ledgerlog: verifier key %s: %w", quote(k), err)
		}
		list = append(list, v)
	}
	return note.VerifierList(list...), nil
}
