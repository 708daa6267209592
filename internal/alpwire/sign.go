package alpwire

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/sigstore/sigstore/pkg/signature"
)

// Version names the format; every object carries it as "wire".
const Version = "alp-wire/v1"

// Signing contexts: the first line of what a signature covers, one per kind
// of object, so a signature made for one kind never verifies as another.
const (
	CtxEnvelope   = Version + " envelope"
	CtxRequest    = Version + " request"
	CtxBrokerKeys = Version + " broker-keys"
	CtxAccepted   = Version + " accepted"
	CtxReceipt    = Version + " receipt"
	CtxCosign     = Version + " cosign"
)

// MaxEnvelopeBytes bounds an envelope, and any signed object VerifySigned
// reads.
const MaxEnvelopeBytes = 256 << 10

// KeyAlgorithm prefixes every key id.
const KeyAlgorithm = "ed25519"

// MaxKeyIDLen bounds a key id, prefix included.
const MaxKeyIDLen = 72

// Signatures is the Matrix-style map broker name → key id → signature
// (unpadded base64url Ed25519).
type Signatures map[string]map[string]string

// KeyResolver returns the public key of broker's keyID for something made
// at at, or an error (an *Error with CodeUnknownKey, CodeKeyExpired or
// CodeKeyRevoked keeps its code through verification). BrokerKeys.Key is
// the rule; discovery builds a resolver from fetched BrokerKeys.
type KeyResolver func(broker, keyID string, at time.Time) (ed25519.PublicKey, error)

// keyIDEncoding spells key ids in the [A-Za-z0-9_] alphabet.
var keyIDEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// KeyID returns the wire key id of an Ed25519 public key, "ed25519:" and
// the lowercase base32 of the first 10 bytes of its SHA-256. The KeyStore's
// own ids ("federation-<base32>") hold a '-', which the key id grammar
// ([A-Za-z0-9_]+, as Matrix's) does not allow, and deriving the id from the
// key means signer and publisher agree on it without sharing a table.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return KeyAlgorithm + ":" + strings.ToLower(keyIDEncoding.EncodeToString(sum[:10]))
}

// ValidateKeyID checks that id is "ed25519:<id>" with id [A-Za-z0-9_]+.
func ValidateKeyID(id string) error {
	if e := keyIDProblem(id, ""); e != nil {
		return e
	}
	return nil
}

func keyIDProblem(id, ptr string) *Error {
	if len(id) > MaxKeyIDLen {
		return newErr(CodeBadKeyID, ptr, "key id longer than "+strconv.Itoa(MaxKeyIDLen)+" bytes")
	}
	alg, rest, ok := strings.Cut(id, ":")
	if !ok {
		return newErr(CodeBadKeyID, ptr, strconv.Quote(id)+` is not "<algorithm>:<id>"`)
	}
	if alg != KeyAlgorithm {
		return newErr(CodeUnknownAlgorithm, ptr, "key algorithm "+strconv.Quote(alg)+" is not "+KeyAlgorithm)
	}
	if rest == "" || strings.ContainsFunc(rest, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_')
	}) {
		return newErr(CodeBadKeyID, ptr, strconv.Quote(id)+" has an id outside [A-Za-z0-9_]+")
	}
	return nil
}

// NewSigner adapts a crypto.Signer holding an Ed25519 key (the KeyStore's
// opaque signer, or an ed25519.PrivateKey) to a sigstore signature.Signer.
func NewSigner(s crypto.Signer) (signature.Signer, error) {
	switch k := s.(type) {
	case ed25519.PrivateKey:
		return signature.LoadED25519Signer(k)
	case *ed25519.PrivateKey:
		return signature.LoadED25519Signer(*k)
	}
	pub, ok := s.Public().(ed25519.PublicKey)
	if !ok || len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("alpwire: signer holds a %T, not an Ed25519 key", s.Public())
	}
	return opaqueSigner{s: s, pub: pub}, nil
}

// opaqueSigner signs through crypto.Signer, so the private key never leaves
// the KeyStore.
type opaqueSigner struct {
	s   crypto.Signer
	pub ed25519.PublicKey
}

func (o opaqueSigner) PublicKey(...signature.PublicKeyOption) (crypto.PublicKey, error) {
	return o.pub, nil
}

func (o opaqueSigner) SignMessage(message io.Reader, _ ...signature.SignOption) ([]byte, error) {
	msg, err := io.ReadAll(message)
	if err != nil {
		return nil, fmt.Errorf("alpwire: read message: %w", err)
	}
	// Ed25519 signs the message itself: crypto.Hash(0), never a digest.
	return o.s.Sign(rand.Reader, msg, crypto.Hash(0))
}

// NewVerifier returns a sigstore signature.Verifier for an Ed25519 key.
func NewVerifier(pub ed25519.PublicKey) (signature.Verifier, error) {
	if len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("alpwire: Ed25519 public key of %d bytes", len(pub))
	}
	return signature.LoadED25519Verifier(pub)
}

// signingInput is context + "\n" + JCS(obj minus "signatures"), cut from the
// bytes obj was parsed from: its members other than "signatures", each
// exactly as received, between fresh braces, then canonicalised.
func signingInput(raw []byte, obj *node, context string) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(obj.end - obj.start)
	b.WriteByte('{')
	first := true
	for _, m := range obj.members {
		if m.key == "signatures" {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.Write(raw[m.start:m.val.end])
	}
	b.WriteByte('}')
	canon, err := jcs.Transform(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("alpwire: canonicalise: %w", err)
	}
	out := make([]byte, 0, len(context)+1+len(canon))
	out = append(out, context...)
	out = append(out, '\n')
	return append(out, canon...), nil
}

// readSignatures decodes the "signatures" member of obj (absent: empty).
func readSignatures(obj *node) (Signatures, *Error) {
	v := obj.get("signatures")
	if v == nil {
		return Signatures{}, nil
	}
	const ptr = "/signatures"
	if v.kind != kindObject {
		return nil, newErr(CodeWrongType, ptr, "is "+v.kind.String()+", want an object")
	}
	if len(v.members) == 0 {
		// An empty map signs nothing, and would not survive re-encoding.
		return nil, newErr(CodeInvalidValue, ptr, "holds no signature")
	}
	out := make(Signatures, len(v.members))
	for _, bm := range v.members {
		bp := child(ptr, bm.key)
		if err := dnsProblem(bm.key, bp); err != nil {
			return nil, err
		}
		if bm.val.kind != kindObject {
			return nil, newErr(CodeWrongType, bp, "is "+bm.val.kind.String()+", want an object")
		}
		if len(bm.val.members) == 0 {
			return nil, newErr(CodeInvalidValue, bp, "holds no signature")
		}
		sigs := make(map[string]string, len(bm.val.members))
		for _, km := range bm.val.members {
			kp := child(bp, km.key)
			if err := keyIDProblem(km.key, kp); err != nil {
				return nil, err
			}
			if km.val.kind != kindString {
				return nil, newErr(CodeWrongType, kp, "is "+km.val.kind.String()+", want a string")
			}
			if _, problem := decodeB64(km.val.str, ed25519.SignatureSize); problem != "" {
				return nil, newErr(CodeBadBase64, kp, problem)
			}
			sigs[km.key] = km.val.str
		}
		out[bm.key] = sigs
	}
	return out, nil
}

func dnsProblem(name, ptr string) *Error {
	f := &fields{}
	f.dnsName(name, ptr)
	return f.err
}

// AddSignature signs the object in raw under context as broker's keyID and
// returns the object with the signature added to its "signatures" map
// (signatures already there are kept), in RFC 8785 form. raw is parsed
// under the wire rules first; it is not checked against any one kind of
// object (the Sign* functions do that).
func AddSignature(raw []byte, context, broker, keyID string, s crypto.Signer) ([]byte, error) {
	if err := dnsProblem(broker, ""); err != nil {
		return nil, fmt.Errorf("alpwire: signing broker: %w", err)
	}
	if err := keyIDProblem(keyID, ""); err != nil {
		return nil, fmt.Errorf("alpwire: signing key: %w", err)
	}
	obj, perr := parseObject(raw, MaxEnvelopeBytes)
	if perr != nil {
		return nil, perr
	}
	sigs, perr := readSignatures(obj)
	if perr != nil {
		return nil, perr
	}
	input, err := signingInput(raw, obj, context)
	if err != nil {
		return nil, err
	}
	signer, err := NewSigner(s)
	if err != nil {
		return nil, err
	}
	sig, err := signer.SignMessage(bytes.NewReader(input))
	if err != nil {
		return nil, fmt.Errorf("alpwire: sign as %s %s: %w", broker, keyID, err)
	}
	if sigs[broker] == nil {
		sigs[broker] = map[string]string{}
	}
	sigs[broker][keyID] = b64url.EncodeToString(sig)
	sj, err := json.Marshal(sigs)
	if err != nil {
		return nil, fmt.Errorf("alpwire: encode signatures: %w", err)
	}
	// input minus the context line is the canonical object without
	// signatures; put the map in and canonicalise once more (RFC 8785 sorts
	// "signatures" into its place).
	body := input[len(context)+1:]
	var b bytes.Buffer
	b.Write(body[:len(body)-1])
	if len(body) > 2 {
		b.WriteByte(',')
	}
	b.WriteString(`"signatures":`)
	b.Write(sj)
	b.WriteByte('}')
	out, err := jcs.Transform(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("alpwire: canonicalise: %w", err)
	}
	return out, nil
}

// VerifySigned checks that raw, an object signed under context, carries a
// valid signature by broker: over the exact received bytes (the parsed raw
// object without "signatures", canonicalised), by a key keys returns for
// the time at. At least one of broker's signatures must verify, and one
// that names a key keys knows must not fail. raw must already have passed
// its Parse function; only the wire rules are re-checked here.
func VerifySigned(raw []byte, context, broker string, keys KeyResolver, at time.Time) error {
	obj, perr := parseObject(raw, MaxEnvelopeBytes)
	if perr != nil {
		return perr
	}
	sigs, perr := readSignatures(obj)
	if perr != nil {
		return perr
	}
	return verifyParsed(raw, obj, sigs, context, broker, keys, at)
}

func verifyParsed(raw []byte, obj *node, sigs Signatures, context, broker string, keys KeyResolver, at time.Time) error {
	bySigner := sigs[broker]
	bp := child("/signatures", broker)
	if len(bySigner) == 0 {
		return newErr(CodeNoSignature, "/signatures", "no signature by "+broker)
	}
	input, err := signingInput(raw, obj, context)
	if err != nil {
		return err
	}
	ids := make([]string, 0, len(bySigner))
	for id := range bySigner {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var first error
	verified := false
	for _, id := range ids {
		kp := child(bp, id)
		pub, err := keys(broker, id, at)
		if err != nil {
			if first == nil {
				var we *Error
				if errors.As(err, &we) {
					first = newErr(we.Code, kp, we.Message)
				} else {
					first = newErr(CodeUnknownKey, kp, "key "+id+" of "+broker+": "+err.Error())
				}
			}
			continue
		}
		v, err := NewVerifier(pub)
		if err != nil {
			return newErr(CodeUnknownKey, kp, err.Error())
		}
		sig, _ := decodeB64(bySigner[id], ed25519.SignatureSize) // checked by readSignatures
		if err := v.VerifySignature(bytes.NewReader(sig), bytes.NewReader(input)); err != nil {
			return newErr(CodeBadSignature, kp, "the signature by "+id+" of "+broker+" does not verify under "+strconv.Quote(context))
		}
		verified = true
	}
	if verified {
		return nil
	}
	return first
}

// Digest is the unpadded base64url SHA-256 of b, as envelope_sha256 and
// content_sha256 spell it.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return b64url.EncodeToString(sum[:])
}

// Millis is t as wire time, integer milliseconds since the epoch.
func Millis(t time.Time) int64 { return t.UnixMilli() }

// Time is the instant of a wire timestamp.
func Time(ms int64) time.Time { return time.UnixMilli(ms) }

// marshalUnsigned encodes v (a struct whose Signatures member is nil) with
// encoding/json for signing; the result is parsed again under the wire rules
// by the caller, so a struct holding a float-valued body cannot be signed.
func marshalUnsigned(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("alpwire: encode: %w", err)
	}
	return b, nil
}
