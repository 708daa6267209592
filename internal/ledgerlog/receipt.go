package ledgerlog

import (
	"crypto"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// ReceiptType starts every receipt and the bytes its signature covers.
const ReceiptType = "alp-receipt/v1"

// Receipt is the issuing broker's signed statement "envelope EnvelopeID,
// which I committed to as Commitment, is leaf Index of my log Log, whose
// tree as of Checkpoint contains it (Proof)".
//
// It carries the leaf hash, not the leaf: the issuer's leaf holds its own
// per-field decisions (paths, rules of its organisation's policy), which
// the counterparty has no claim to. The statement binds envelope id and
// commitment to the leaf by the issuer's signature; an auditor holding the
// issuer's export checks the leaf itself (CheckReceiptLeaf, Match).
type Receipt struct {
	Type       string `json:"t"`
	EnvelopeID string `json:"envelope_id"`
	Commitment string `json:"commitment"`
	Log        string `json:"log"`
	Index      uint64 `json:"i"`
	// LeafHash is base64 of the RFC 6962 leaf hash of the issuer's leaf.
	LeafHash string `json:"leaf_hash"`
	// Checkpoint is the issuer's signed checkpoint (signed-note text).
	Checkpoint string `json:"checkpoint"`
	// Proof is the inclusion proof of the leaf in Checkpoint, base64 hashes.
	Proof []string `json:"proof,omitempty"`
	// Counterparty is who the receipt was issued to (their ledger origin).
	Counterparty string `json:"counterparty,omitempty"`
	// KeyID is the signed-note key id (8 hex digits) of the issuer's key,
	// whose name is the key name of Log's tenant.
	KeyID string `json:"key_id"`
	// Signature is base64 Ed25519 over SignedBytes.
	Signature string `json:"sig,omitempty"`
}

// NoKeyError says a receipt or checkpoint could not be checked because no
// key of its log was supplied; it is "unverified", not "invalid".
type NoKeyError struct{ Origin string }

func (e *NoKeyError) Error() string { return "unverified: no key for " + e.Origin }

// SignedBytes are the bytes the signature covers:
// "alp-receipt/v1\n" || RFC 8785 of the receipt without "sig".
func (r *Receipt) SignedBytes() ([]byte, error) {
	if err := checkString("receipt", r.Checkpoint); err != nil {
		return nil, err
	}
	return r.appendCanonical([]byte(ReceiptType+"\n"), false), nil
}

func (r *Receipt) validate() error {
	if r.Type != ReceiptType {
		return fmt.Errorf("type %s, want %s", quote(r.Type), ReceiptType)
	}
	if err := checkText("envelope_id", r.EnvelopeID, true); err != nil {
		return err
	}
	if err := checkCommitment(r.Commitment); err != nil {
		return err
	}
	if _, _, err := ParseOrigin(r.Log); err != nil {
		return err
	}
	if err := checkText("counterparty", r.Counterparty, false); err != nil {
		return err
	}
	if r.Index > MaxIndex {
		return fmt.Errorf("index %d too large", r.Index)
	}
	if _, err := decodeHash(r.LeafHash); err != nil {
		return fmt.Errorf("leaf_hash: %w", err)
	}
	if len(r.Checkpoint) > MaxCheckpointBytes {
		return fmt.Errorf("checkpoint of %d bytes", len(r.Checkpoint))
	}
	if err := checkString("checkpoint", r.Checkpoint); err != nil {
		return err
	}
	if _, err := r.proof(); err != nil {
		return err
	}
	if _, err := r.keyID(); err != nil {
		return err
	}
	if sig, err := base64.StdEncoding.Strict().DecodeString(r.Signature); err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("sig is not a base64 Ed25519 signature")
	}
	return nil
}

func (r *Receipt) keyID() (uint32, error) {
	id, err := strconv.ParseUint(r.KeyID, 16, 32)
	if err != nil || FormatKeyID(uint32(id)) != r.KeyID {
		return 0, fmt.Errorf("key_id %s is not 8 lowercase hex digits", quote(r.KeyID))
	}
	return uint32(id), nil
}

func (r *Receipt) proof() (tlog.RecordProof, error) {
	if len(r.Proof) > MaxProofHashes {
		return nil, fmt.Errorf("proof of %d hashes", len(r.Proof))
	}
	p := make(tlog.RecordProof, len(r.Proof))
	for i, s := range r.Proof {
		h, err := decodeHash(s)
		if err != nil {
			return nil, fmt.Errorf("proof hash %d: %w", i, err)
		}
		p[i] = h
	}
	return p, nil
}

func decodeHash(s string) (tlog.Hash, error) {
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != len(tlog.Hash{}) {
		return tlog.Hash{}, fmt.Errorf("%s is not a base64 SHA-256 hash", quote(s))
	}
	return tlog.Hash(b), nil
}

func encodeHash(h tlog.Hash) string { return base64.StdEncoding.EncodeToString(h[:]) }

// IssueReceipt makes a receipt for leaf (at index of the tenant's log,
// included in the signed checkpoint by proof) and signs it with the
// tenant's ledger key. It checks everything it is about to vouch for —
// the leaf's form, its index, the checkpoint's signature by the same key,
// the proof — so a broker never signs a receipt its own auditors reject.
func IssueReceipt(signer crypto.Signer, tenant string, leaf []byte, index uint64, checkpoint []byte, proof tlog.RecordProof, counterparty string) (*Receipt, error) {
	ns, err := NoteSigner(tenant, signer)
	if err != nil {
		return nil, err
	}
	e, err := ParseEntry(leaf)
	if err != nil {
		return nil, fmt.Errorf("ledgerlog: receipt: %w", err)
	}
	if e.Index != index {
		return nil, fmt.Errorf("ledgerlog: receipt: leaf says index %d, not %d", e.Index, index)
	}
	if !IsEnvelopeKind(e.Kind) {
		return nil, fmt.Errorf("ledgerlog: receipt: entry %d is a %s, not an envelope entry", index, e.Kind)
	}
	if e.Commitment == "" {
		return nil, fmt.Errorf("ledgerlog: receipt: entry %d (envelope %s) has no commitment", index, quote(e.EnvelopeID))
	}
	if t, _, _ := ParseOrigin(e.Log); t != tenant {
		return nil, fmt.Errorf("ledgerlog: receipt: entry %d is in %s, not a log of %s", index, e.Log, tenant)
	}
	pub, _ := ed25519Public(signer)
	vkey, err := VerifierKey(tenant, pub)
	if err != nil {
		return nil, err
	}
	self, err := Verifiers(vkey)
	if err != nil {
		return nil, err
	}
	cp, err := OpenCheckpoint(checkpoint, e.Log, self)
	if err != nil {
		return nil, fmt.Errorf("ledgerlog: receipt: %w", err)
	}
	lh := LeafHash(leaf)
	if err := VerifyInclusion(proof, cp, index, lh); err != nil {
		return nil, fmt.Errorf("ledgerlog: receipt: %w", err)
	}
	r := &Receipt{
		Type: ReceiptType, EnvelopeID: e.EnvelopeID, Commitment: e.Commitment, Log: e.Log, Index: index,
		LeafHash: encodeHash(lh), Checkpoint: string(checkpoint), Counterparty: counterparty,
		KeyID: FormatKeyID(ns.KeyHash()),
	}
	for _, h := range proof {
		r.Proof = append(r.Proof, encodeHash(h))
	}
	if err := checkText("counterparty", counterparty, false); err != nil {
		return nil, fmt.Errorf("ledgerlog: receipt: %w", err)
	}
	msg, err := r.SignedBytes()
	if err != nil {
		return nil, fmt.Errorf("ledgerlog: receipt: %w", err)
	}
	sig, err := ns.Sign(msg)
	if err != nil {
		return nil, err
	}
	r.Signature = base64.StdEncoding.EncodeToString(sig)
	return r, nil
}

// VerifyReceipt checks a receipt with the issuer's keys: its own
// signature, the embedded checkpoint's signature (both by the key name of
// the receipt's log), and the inclusion proof of its leaf hash in that
// checkpoint. It returns the checkpoint, against which a caller holding the
// issuer's ledger checks consistency. A missing key yields a *NoKeyError.
func VerifyReceipt(r *Receipt, verifiers note.Verifiers) (Checkpoint, error) {
	if r == nil {
		return Checkpoint{}, fmt.Errorf("ledgerlog: no receipt")
	}
	if err := r.validate(); err != nil {
		return Checkpoint{}, fmt.Errorf("ledgerlog: receipt: %w", err)
	}
	if verifiers == nil {
		return Checkpoint{}, &NoKeyError{Origin: r.Log}
	}
	keyName, _ := OriginKeyName(r.Log)
	id, _ := r.keyID()
	v, err := verifiers.Verifier(keyName, id)
	if err != nil {
		var unknown *note.UnknownVerifierError
		if errors.As(err, &unknown) {
			return Checkpoint{}, &NoKeyError{Origin: r.Log}
		}
		return Checkpoint{}, fmt.Errorf("ledgerlog: receipt from %s: %w", r.Log, err)
	}
	msg, err := r.SignedBytes()
	if err != nil {
		return Checkpoint{}, fmt.Errorf("ledgerlog: receipt: %w", err)
	}
	sig, _ := base64.StdEncoding.DecodeString(r.Signature)
	if !v.Verify(msg, sig) {
		return Checkpoint{}, fmt.Errorf("ledgerlog: receipt from %s: signature does not verify with key %s+%s", r.Log, keyName, r.KeyID)
	}
	cp, err := OpenCheckpoint([]byte(r.Checkpoint), r.Log, verifiers)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("ledgerlog: receipt from %s: %w", r.Log, err)
	}
	proof, _ := r.proof()
	lh, _ := decodeHash(r.LeafHash)
	if err := VerifyInclusion(proof, cp, r.Index, lh); err != nil {
		return Checkpoint{}, fmt.Errorf("ledgerlog: receipt from %s: %w", r.Log, err)
	}
	return cp, nil
}

// CheckReceiptLeaf checks that leaf is the leaf the receipt speaks of: same
// hash, and an envelope entry of the receipt's log, index, envelope and
// commitment. Together with VerifyReceipt it proves the issuer's ledger
// recorded that envelope at that place.
func CheckReceiptLeaf(r *Receipt, leaf []byte) error {
	if LeafHash(leaf) != mustHash(r.LeafHash) {
		return fmt.Errorf("the issuer's leaf %d is not the leaf the receipt names (different hash)", r.Index)
	}
	e, err := ParseEntry(leaf)
	if err != nil {
		return err
	}
	switch {
	case e.Log != r.Log || e.Index != r.Index:
		return fmt.Errorf("the leaf is %s #%d, the receipt names %s #%d", e.Log, e.Index, r.Log, r.Index)
	case !IsEnvelopeKind(e.Kind):
		return fmt.Errorf("leaf %d is a %s entry, not the envelope's", e.Index, e.Kind)
	case e.EnvelopeID != r.EnvelopeID:
		return fmt.Errorf("leaf %d is envelope %s, the receipt names %s", e.Index, quote(e.EnvelopeID), quote(r.EnvelopeID))
	case e.Commitment != r.Commitment:
		return fmt.Errorf("leaf %d commits to %s, the receipt to %s", e.Index, short(e.Commitment), short(r.Commitment))
	}
	return nil
}

func mustHash(s string) tlog.Hash {
	h, _ := decodeHash(s)
	return h
}

// short abbreviates a commitment or hash for messages.
func short(s string) string {
	if len(s) > 19 {
		return s[:19] + "…"
	}
	if s == "" {
		return "(none)"
	}
	return s
}

// MaxReceiptBytes bounds a receipt document: a checkpoint and a proof of
// at most MaxProofHashes hashes, with room to spare.
const MaxReceiptBytes = 32 << 10

// JSON returns the receipt as it travels (the ReceiptNotice's "receipt",
// IssueReceipt's answer): its RFC 8785 form, signature included.
func (r *Receipt) JSON() ([]byte, error) {
	if err := r.validate(); err != nil {
		return nil, fmt.Errorf("ledgerlog: receipt: %w", err)
	}
	return r.appendCanonical(nil, true), nil
}

// ParseReceipt reads a receipt document strictly (known members only, one
// JSON value, the receipt's own rules). It checks the form, not the
// signature: VerifyReceipt does, with the issuer's keys.
func ParseReceipt(b []byte) (*Receipt, error) {
	if len(b) > MaxReceiptBytes {
		return nil, fmt.Errorf("ledgerlog: receipt of %d bytes, at most %d", len(b), MaxReceiptBytes)
	}
	var r Receipt
	if err := decodeStrict(b, &r); err != nil {
		return nil, fmt.Errorf("ledgerlog: receipt: %w", err)
	}
	if err := r.validate(); err != nil {
		return nil, fmt.Errorf("ledgerlog: receipt: %w", err)
	}
	return &r, nil
}
