package ledgerlog

import (
	"crypto"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/alpd-project/alpd/internal/alp"
)

// Cosignatures (C2SP tlog-cosignature, type cosignature/v1): a witness's
// statement "I verified that this checkpoint is consistent with every
// checkpoint of its origin I cosigned before". Brokers cosign each other's
// checkpoints (the ones in receipts), so that showing two histories to two
// readers (a split view) leaves two conflicting signed statements.
//
// A tenant's witness key is its ledger key (KeyStore purpose LEDGER), under
// the key name WitnessName(tenant) and the cosignature key id (algorithm
// byte 0x04): one key to keep, rotate and publish (BrokerKeys ledger_keys
// lists it), and a cosigner key anyone can derive from the tenant's ledger
// verifier key (CosignerKeyOf). Reusing the key is safe because the three
// messages it signs cannot be mistaken for each other: a checkpoint's first
// line is an origin, which always contains "/alp/ledger/", a cosignature's is
// "cosignature/v1", a receipt's "alp-receipt/v1".

// CosignatureType is the first line of the message a cosignature signs.
const CosignatureType = "cosignature/v1"

// algCosignatureV1 is the signed-note key id algorithm byte of
// cosignature/v1 (C2SP signed-note).
const algCosignatureV1 = 0x04

// witnessInfix joins a tenant to its witness key name.
const witnessInfix = "/alp/witness"

// WitnessName is the key name a tenant cosigns under, "<tenant>/alp/witness".
func WitnessName(tenant string) string { return tenant + witnessInfix }

// WitnessTenant is the tenant of a witness key name, "" if name is not one.
func WitnessTenant(name string) string {
	t, ok := strings.CutSuffix(name, witnessInfix)
	if !ok || alp.ValidateTenant(t) != nil {
		return ""
	}
	return t
}

// CosignerKeyID is the cosignature/v1 key id:
// SHA-256(name || 0x0A || 0x04 || public key)[:4].
func CosignerKeyID(name string, pub ed25519.PublicKey) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{'\n', algCosignatureV1})
	h.Write(pub)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

// CosignerKey is the verifier key of a tenant's witness key,
// "<tenant>/alp/witness+<hex key id>+base64(0x04 || public key)".
func CosignerKey(tenant string, pub ed25519.PublicKey) (string, error) {
	if err := alp.ValidateTenant(tenant); err != nil {
		return "", fmt.Errorf("ledgerlog: cosigner key: %w", err)
	}
	if len(pub) != ed25519.PublicKeySize {
		return "", fmt.Errorf("ledgerlog: cosigner key for %s: public key of %d bytes", tenant, len(pub))
	}
	name := WitnessName(tenant)
	return fmt.Sprintf("%s+%08x+%s", name, CosignerKeyID(name, pub),
		base64.StdEncoding.EncodeToString(append([]byte{algCosignatureV1}, pub...))), nil
}

// CosignerKeyOf derives the cosigner key of a tenant from one of its ledger
// verifier keys (VerifierKey): same public key, the witness name.
func CosignerKeyOf(ledgerVKey string) (string, error) {
	name, pub, err := parseVKey(ledgerVKey, algEd25519)
	if err != nil {
		return "", err
	}
	tenant, ok := strings.CutSuffix(name, originInfix)
	if !ok {
		return "", fmt.Errorf("ledgerlog: %s is not a ledger key name (<tenant>%s)", quote(name), originInfix)
	}
	return CosignerKey(tenant, pub)
}

// parseVKey parses "<name>+<hex id>+base64(alg || key)" and checks the id.
func parseVKey(vkey string, alg byte) (string, ed25519.PublicKey, error) {
	name, rest, ok1 := strings.Cut(vkey, "+")
	idText, b64, ok2 := strings.Cut(rest, "+")
	raw, err := base64.StdEncoding.Strict().DecodeString(b64)
	id, err2 := strconv.ParseUint(idText, 16, 32)
	if !ok1 || !ok2 || err != nil || err2 != nil || len(idText) != 8 || len(raw) != 1+ed25519.PublicKeySize || name == "" {
		return "", nil, fmt.Errorf("ledgerlog: verifier key %s is not <name>+<key id>+<base64 key>", quote(vkey))
	}
	if raw[0] != alg {
		return "", nil, fmt.Errorf("ledgerlog: verifier key %s has key type %#02x, want %#02x", quote(vkey), raw[0], alg)
	}
	pub := ed25519.PublicKey(raw[1:])
	want := KeyID(name, pub)
	if alg == algCosignatureV1 {
		want = CosignerKeyID(name, pub)
	}
	if uint32(id) != want {
		return "", nil, fmt.Errorf("ledgerlog: verifier key %s: key id does not match the key", quote(vkey))
	}
	return name, pub, nil
}

// CosignedMessage is what a cosignature/v1 signature covers:
// "cosignature/v1\ntime <seconds>\n" followed by the checkpoint body.
func CosignedMessage(c Checkpoint, timestamp uint64) []byte {
	return append(fmt.Appendf(nil, "%s\ntime %d\n", CosignatureType, timestamp), c.Body()...)
}

// Cosignature is one parsed cosignature line.
type Cosignature struct {
	// Name is the cosigner's key name, KeyID its cosignature key id.
	Name  string
	KeyID uint32
	// Time is the timestamp it states, seconds since the epoch.
	Time      uint64
	Signature []byte
}

// Cosign signs c as tenant's witness at t and returns the signature line
// ("— <name> base64(key id || timestamp || signature)\n").
func Cosign(key crypto.Signer, tenant string, c Checkpoint, t time.Time) (string, error) {
	if err := c.validate(); err != nil {
		return "", err
	}
	pub, err := ed25519Public(key)
	if err != nil {
		return "", fmt.Errorf("ledgerlog: cosigning as %s: %w", tenant, err)
	}
	if err := alp.ValidateTenant(tenant); err != nil {
		return "", fmt.Errorf("ledgerlog: cosigning: %w", err)
	}
	ts := uint64(max(t.Unix(), 0))
	sig, err := key.Sign(nil, CosignedMessage(c, ts), crypto.Hash(0))
	if err != nil {
		return "", fmt.Errorf("ledgerlog: cosigning as %s: %w", tenant, err)
	}
	name := WitnessName(tenant)
	b := binary.BigEndian.AppendUint32(nil, CosignerKeyID(name, pub))
	b = binary.BigEndian.AppendUint64(b, ts)
	return "— " + name + " " + base64.StdEncoding.EncodeToString(append(b, sig...)) + "\n", nil
}

// ParseCosignature parses one signature line (with or without its final
// newline) as a cosignature/v1 signature: 4-byte key id, 8-byte timestamp,
// 64-byte Ed25519 signature.
func ParseCosignature(line string) (Cosignature, error) {
	line = strings.TrimSuffix(line, "\n")
	rest, ok := strings.CutPrefix(line, "— ")
	name, b64, ok2 := strings.Cut(rest, " ")
	if !ok || !ok2 || name == "" || strings.ContainsAny(name, "+ \n") || strings.ContainsAny(b64, " \n") {
		return Cosignature{}, fmt.Errorf("ledgerlog: cosignature %s is not one signature line \"— <name> <base64>\"", quote(line))
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil || len(raw) != 4+8+ed25519.SignatureSize {
		return Cosignature{}, fmt.Errorf("ledgerlog: cosignature by %s is not base64 of key id, timestamp and an Ed25519 signature", quote(name))
	}
	return Cosignature{Name: name, KeyID: binary.BigEndian.Uint32(raw), Time: binary.BigEndian.Uint64(raw[4:]),
		Signature: raw[12:]}, nil
}

// VerifyCosignature checks a cosignature line of c with the given cosigner
// keys (CosignerKey form): a *NoKeyError when none has the line's name and
// key id, an error when that key's signature does not verify.
func VerifyCosignature(line string, c Checkpoint, cosignerKeys ...string) (Cosignature, error) {
	cs, err := ParseCosignature(line)
	if err != nil {
		return Cosignature{}, err
	}
	for _, k := range cosignerKeys {
		name, pub, err := parseVKey(k, algCosignatureV1)
		if err != nil {
			return Cosignature{}, err
		}
		if name != cs.Name || CosignerKeyID(name, pub) != cs.KeyID {
			continue
		}
		if !ed25519.Verify(pub, CosignedMessage(c, cs.Time), cs.Signature) {
			return Cosignature{}, fmt.Errorf("ledgerlog: cosignature by %s+%08x of %s does not verify", cs.Name, cs.KeyID, c)
		}
		return cs, nil
	}
	return Cosignature{}, &NoKeyError{Origin: cs.Name}
}

// TrimSignatureLine is a signature line without its final newline, as a
// checkpoint.cosigned entry holds it.
func TrimSignatureLine(line string) string { return strings.TrimSuffix(line, "\n") }

// PublicKey is the Ed25519 public key of signer, nil if it is not one.
func PublicKey(signer crypto.Signer) ed25519.PublicKey {
	pub, _ := ed25519Public(signer)
	return pub
}

// ParseCosignerKey parses a cosigner verifier key (CosignerKey form) and
// checks its key id: the name and public key.
func ParseCosignerKey(vkey string) (string, ed25519.PublicKey, error) {
	return parseVKey(vkey, algCosignatureV1)
}
