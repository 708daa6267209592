package alpwire

import (
	"crypto"
	"fmt"
	"strconv"

	"github.com/gowebpki/jcs"

	"github.com/alpd-project/alpd/internal/ledgerlog"
)

// Cosigning, witness style (C2SP tlog-witness add-checkpoint, in alp-wire
// form): the broker of a log asks the home broker of a counterparty's
// domain to witness one of its checkpoints. The request says which size of
// the log it believes the witness holds (old_size) and proves the
// checkpoint consistent with it; the witness answers the cosignature line
// (Cosigned), or 409 CodeWitnessSizeMismatch with the size it holds in the
// HeaderWitnessSize header, and the log's broker asks again with the proof
// from there.

// CodeWitnessSizeMismatch: old_size is not the size the witness holds of
// the log; HeaderWitnessSize says which it is.
const CodeWitnessSizeMismatch = "witness_size_mismatch"

// CodeSplitView: the checkpoint contradicts one the witness cosigned of the
// log (another root at its size, or a proof that does not join them): two
// histories.
const CodeSplitView = "split_view"

// HeaderWitnessSize carries the size a witness holds on a 409
// CodeWitnessSizeMismatch answer.
const HeaderWitnessSize = "Alp-Witness-Size"

// MaxProofHashes bounds a consistency proof (a tree of at most 2^53 leaves
// needs far fewer).
const MaxProofHashes = ledgerlog.MaxProofHashes

// CosignRequest is the body of POST <federation_url>/cosign, signed under
// CtxCosign by Origin, the log's broker.
type CosignRequest struct {
	Wire string `json:"wire"`
	// Origin is the log's broker name, the signer: the home broker of the
	// log's domain.
	Origin string `json:"origin"`
	// Witness is the domain, hosted by the receiving broker, whose witness
	// key (ledgerlog.WitnessName) is to cosign.
	Witness string `json:"witness"`
	// Log is the checkpoint's origin ("<domain>/alp/ledger/<person>").
	Log string `json:"log"`
	// OldSize is the size of Log the witness is believed to hold (0: none);
	// ConsistencyProof proves it a prefix of the checkpoint (unpadded
	// base64url SHA-256 hashes; empty when OldSize is 0 or the checkpoint's
	// size).
	OldSize          int64    `json:"old_size"`
	ConsistencyProof []string `json:"consistency_proof,omitempty"`
	// Checkpoint is the log's signed checkpoint (C2SP signed note), exact.
	Checkpoint  string     `json:"checkpoint"`
	RequestedTS int64      `json:"requested_ts"`
	Signatures  Signatures `json:"signatures,omitempty"`
}

// ProofHashes returns the consistency proof's hashes.
func (r *CosignRequest) ProofHashes() [][]byte {
	out := make([][]byte, 0, len(r.ConsistencyProof))
	for _, s := range r.ConsistencyProof {
		b, _ := b64url.DecodeString(s) // checked when parsed
		out = append(out, b)
	}
	return out
}

// EncodeProof spells proof hashes as CosignRequest.ConsistencyProof does.
func EncodeProof(hashes [][]byte) []string {
	out := make([]string, 0, len(hashes))
	for _, h := range hashes {
		out = append(out, b64url.EncodeToString(h))
	}
	return out
}

// SignCosignRequest checks r, sets r.Wire and returns it signed under
// CtxCosign by r.Origin with keyID.
func SignCosignRequest(r *CosignRequest, keyID string, s crypto.Signer) ([]byte, error) {
	c := *r
	c.Wire = Version
	c.Signatures = nil
	raw, err := marshalUnsigned(&c)
	if err != nil {
		return nil, err
	}
	if _, err := parseCosignRequest(raw, false); err != nil {
		return nil, fmt.Errorf("alpwire: sign cosign request: %w", err)
	}
	out, err := AddSignature(raw, CtxCosign, c.Origin, keyID, s)
	if err != nil {
		return nil, err
	}
	r.Wire = Version
	return out, nil
}

// ParseCosignRequest reads a CosignRequest under the wire rules: the
// checkpoint's body must be a checkpoint of Log, at least OldSize large, and
// the proof present exactly when the sizes differ and OldSize is not 0.
// Its signatures (verify with VerifySigned(raw, CtxCosign, r.Origin, …))
// and the checkpoint's are the receiver's to check.
func ParseCosignRequest(raw []byte) (*CosignRequest, error) {
	r, err := parseCosignRequest(raw, true)
	if err != nil {
		return nil, err
	}
	return r, nil
}

func parseCosignRequest(raw []byte, signed bool) (*CosignRequest, *Error) {
	obj, err := parseObject(raw, MaxAnswerBytes)
	if err != nil {
		return nil, err
	}
	f := readFields(obj, "")
	f.version()
	r := &CosignRequest{Wire: Version}
	var p string
	r.Origin, p = f.str("origin", true, 253)
	f.dnsName(r.Origin, p)
	r.Witness, p = f.str("witness", true, 253)
	f.dnsName(r.Witness, p)
	r.Log, p = f.str("log", true, 0)
	f.ledgerOrigin(r.Log, p)
	r.OldSize = f.size("old_size")
	r.ConsistencyProof = f.strings("consistency_proof", 64)
	proofPtr := child(f.ptr, "consistency_proof")
	if f.err == nil && len(r.ConsistencyProof) > MaxProofHashes {
		f.fail(CodeTooLarge, proofPtr, "holds more than "+strconv.Itoa(MaxProofHashes)+" hashes")
	}
	for i, h := range r.ConsistencyProof {
		f.b64(h, index(proofPtr, i), 32)
	}
	r.Checkpoint, p = f.str("checkpoint", true, ledgerlog.MaxCheckpointBytes)
	if f.err == nil {
		cp, cerr := ledgerlog.CheckpointText([]byte(r.Checkpoint))
		switch {
		case cerr != nil:
			f.fail(CodeInvalidValue, p, cerr.Error())
		case cp.Origin != r.Log:
			f.fail(CodeInvalidValue, p, "is a checkpoint of "+strconv.Quote(cp.Origin)+", not of the log "+strconv.Quote(r.Log))
		case uint64(r.OldSize) > cp.Size:
			f.fail(CodeOutOfRange, child(f.ptr, "old_size"), "is larger than the checkpoint's size "+strconv.FormatUint(cp.Size, 10))
		case (r.OldSize == 0 || uint64(r.OldSize) == cp.Size) && len(r.ConsistencyProof) > 0:
			f.fail(CodeInvalidValue, proofPtr, "must be empty when old_size is 0 or the checkpoint's size")
		case r.OldSize > 0 && uint64(r.OldSize) < cp.Size && len(r.ConsistencyProof) == 0:
			f.fail(CodeMissingField, proofPtr, "is required from old_size "+strconv.FormatInt(r.OldSize, 10)+" to the checkpoint's size "+strconv.FormatUint(cp.Size, 10))
		}
	}
	r.RequestedTS = f.ts("requested_ts")
	if r.Signatures, err = f.signatures(obj, signed); err != nil {
		return nil, err
	}
	return r, nil
}

// Cosigned is the witness's 200 answer to a CosignRequest: its
// cosignature/v1 line of the checkpoint, by "<Witness>/alp/witness". It
// carries no signature of the broker's: the line is itself signed by the
// witness domain's ledger key, which its broker publishes (BrokerKeys
// ledger_keys; ledgerlog.CosignerKeyOf derives the cosigner key), and that
// is what the log's broker verifies and records.
type Cosigned struct {
	Wire    string `json:"wire"`
	Witness string `json:"witness"`
	Log     string `json:"log"`
	// Size is the size of the checkpoint cosigned.
	Size int64 `json:"size"`
	// Cosignature is one signed-note signature line, with its final newline.
	Cosignature string `json:"cosignature"`
}

// MarshalCosigned checks c, sets c.Wire and returns it in RFC 8785 form.
func MarshalCosigned(c *Cosigned) ([]byte, error) {
	x := *c
	x.Wire = Version
	raw, err := marshalUnsigned(&x)
	if err != nil {
		return nil, err
	}
	if raw, err = jcs.Transform(raw); err != nil {
		return nil, fmt.Errorf("alpwire: canonicalise: %w", err)
	}
	if _, err := ParseCosigned(raw); err != nil {
		return nil, fmt.Errorf("alpwire: cosigned: %w", err)
	}
	c.Wire = Version
	return raw, nil
}

// ParseCosigned reads a Cosigned under the wire rules; the cosignature must
// be one cosignature/v1 line by Witness's witness key name (verify it with
// ledgerlog.VerifyCosignature and the witness domain's published keys).
func ParseCosigned(raw []byte) (*Cosigned, error) {
	obj, err := parseObject(raw, MaxAnswerBytes)
	if err != nil {
		return nil, err
	}
	f := readFields(obj, "")
	f.version()
	c := &Cosigned{Wire: Version}
	var p string
	c.Witness, p = f.str("witness", true, 253)
	f.dnsName(c.Witness, p)
	c.Log, p = f.str("log", true, 0)
	f.ledgerOrigin(c.Log, p)
	c.Size = f.size("size")
	c.Cosignature, p = f.str("cosignature", true, 0)
	if f.err == nil {
		cs, cerr := ledgerlog.ParseCosignature(c.Cosignature)
		switch {
		case cerr != nil:
			f.fail(CodeInvalidValue, p, cerr.Error())
		case cs.Name != ledgerlog.WitnessName(c.Witness):
			f.fail(CodeInvalidValue, p, "is signed as "+strconv.Quote(cs.Name)+", not as the witness "+strconv.Quote(ledgerlog.WitnessName(c.Witness)))
		case c.Cosignature[len(c.Cosignature)-1] != '\n':
			f.fail(CodeInvalidValue, p, "is a signature line without its final newline")
		}
	}
	if err := f.done(); err != nil {
		return nil, err
	}
	return c, nil
}
