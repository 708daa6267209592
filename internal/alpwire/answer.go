package alpwire

import (
	"bytes"
	"crypto"
	"encoding/json"
	"fmt"

	"github.com/alpd-project/alpd/internal/ledgerlog"
)

// MaxAnswerBytes bounds an Accepted or a ReceiptNotice.
const MaxAnswerBytes = 64 << 10

// Accepted is the receiver's signed 202 answer to a send: it has the
// envelope (by id and the SHA-256 of the exact bytes received) and will
// decide it; Duplicate says it had it already.
type Accepted struct {
	Wire           string     `json:"wire"`
	ID             string     `json:"id"`              // envelope id
	EnvelopeSHA256 string     `json:"envelope_sha256"` // Digest of the envelope bytes
	Receiver       string     `json:"receiver"`        // receiving broker name, the signer
	AcceptedTS     int64      `json:"accepted_ts"`
	Duplicate      bool       `json:"duplicate"`
	Signatures     Signatures `json:"signatures,omitempty"`
}

// Outcomes of a ReceiptNotice.
const (
	OutcomeDelivered = "delivered"
	OutcomePartial   = "partial"
	OutcomeHeld      = "held"
	OutcomeRefused   = "refused"
)

// MaxPointers bounds the withheld and held lists of a ReceiptNotice.
const MaxPointers = 256

// ReceiptNotice is what the receiver POSTs back once it decided an
// envelope: the outcome, which body members (JSON pointers) it withheld or
// held, and its ledger's signed receipt (ledgerlog's alp-receipt/v1; absent
// when nothing was recorded).
type ReceiptNotice struct {
	Wire       string          `json:"wire"`
	ID         string          `json:"id"` // envelope id
	Outcome    string          `json:"outcome"`
	Withheld   []string        `json:"withheld,omitempty"`
	Held       []string        `json:"held,omitempty"`
	Receipt    json.RawMessage `json:"receipt,omitempty"` // as received
	Receiver   string          `json:"receiver"`
	Signatures Signatures      `json:"signatures,omitempty"`
}

// LedgerReceipt decodes n.Receipt (nil if absent); verify it with
// ledgerlog.VerifyReceipt and the receiver's ledger_keys.
func (n *ReceiptNotice) LedgerReceipt() (*ledgerlog.Receipt, error) {
	if len(n.Receipt) == 0 {
		return nil, nil
	}
	return decodeReceipt(n.Receipt)
}

func decodeReceipt(b []byte) (*ledgerlog.Receipt, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var r ledgerlog.Receipt
	if err := d.Decode(&r); err != nil {
		return nil, fmt.Errorf("alpwire: receipt: %w", err)
	}
	if r.Type != ledgerlog.ReceiptType {
		return nil, fmt.Errorf("alpwire: receipt of type %q, want %s", r.Type, ledgerlog.ReceiptType)
	}
	return &r, nil
}

// SignAccepted checks a, sets a.Wire and returns it signed under
// CtxAccepted by a.Receiver with keyID.
func SignAccepted(a *Accepted, keyID string, s crypto.Signer) ([]byte, error) {
	c := *a
	c.Wire = Version
	c.Signatures = nil
	raw, err := marshalUnsigned(&c)
	if err != nil {
		return nil, err
	}
	if _, err := parseAccepted(raw, false); err != nil {
		return nil, fmt.Errorf("alpwire: sign accepted: %w", err)
	}
	out, err := AddSignature(raw, CtxAccepted, c.Receiver, keyID, s)
	if err != nil {
		return nil, err
	}
	a.Wire = Version
	return out, nil
}

// ParseAccepted reads an Accepted under the wire rules; verify it with
// VerifySigned(raw, CtxAccepted, a.Receiver, …).
func ParseAccepted(raw []byte) (*Accepted, error) {
	a, err := parseAccepted(raw, true)
	if err != nil {
		return nil, err
	}
	return a, nil
}

func parseAccepted(raw []byte, signed bool) (*Accepted, *Error) {
	obj, err := parseObject(raw, MaxAnswerBytes)
	if err != nil {
		return nil, err
	}
	f := readFields(obj, "")
	f.version()
	a := &Accepted{Wire: Version}
	var p string
	a.ID, p = f.str("id", true, 36)
	f.uuid(a.ID, p)
	a.EnvelopeSHA256, p = f.str("envelope_sha256", true, 0)
	f.b64(a.EnvelopeSHA256, p, 32)
	a.Receiver, p = f.str("receiver", true, 253)
	f.dnsName(a.Receiver, p)
	a.AcceptedTS = f.ts("accepted_ts")
	a.Duplicate = f.boolean("duplicate")
	if a.Signatures, err = f.signatures(obj, signed); err != nil {
		return nil, err
	}
	return a, nil
}

// SignReceiptNotice checks n, sets n.Wire and returns it signed under
// CtxReceipt by n.Receiver with keyID.
func SignReceiptNotice(n *ReceiptNotice, keyID string, s crypto.Signer) ([]byte, error) {
	c := *n
	c.Wire = Version
	c.Signatures = nil
	raw, err := marshalUnsigned(&c)
	if err != nil {
		return nil, err
	}
	if _, err := parseReceiptNotice(raw, false); err != nil {
		return nil, fmt.Errorf("alpwire: sign receipt notice: %w", err)
	}
	out, err := AddSignature(raw, CtxReceipt, c.Receiver, keyID, s)
	if err != nil {
		return nil, err
	}
	n.Wire = Version
	return out, nil
}

// ParseReceiptNotice reads a ReceiptNotice under the wire rules (its
// receipt must decode as a ledgerlog.Receipt); verify it with
// VerifySigned(raw, CtxReceipt, n.Receiver, …).
func ParseReceiptNotice(raw []byte) (*ReceiptNotice, error) {
	n, err := parseReceiptNotice(raw, true)
	if err != nil {
		return nil, err
	}
	return n, nil
}

func parseReceiptNotice(raw []byte, signed bool) (*ReceiptNotice, *Error) {
	obj, err := parseObject(raw, MaxAnswerBytes)
	if err != nil {
		return nil, err
	}
	f := readFields(obj, "")
	f.version()
	n := &ReceiptNotice{Wire: Version}
	var p string
	n.ID, p = f.str("id", true, 36)
	f.uuid(n.ID, p)
	n.Outcome, p = f.str("outcome", true, 0)
	f.oneOf(n.Outcome, p, OutcomeDelivered, OutcomePartial, OutcomeHeld, OutcomeRefused)
	n.Withheld = f.pointers("withheld")
	n.Held = f.pointers("held")
	if r := f.object("receipt", false); r != nil {
		n.Receipt = json.RawMessage(append([]byte(nil), raw[r.start:r.end]...))
		if f.err == nil {
			if _, err := decodeReceipt(n.Receipt); err != nil {
				f.fail(CodeInvalidValue, "/receipt", err.Error())
			}
		}
	}
	n.Receiver, p = f.str("receiver", true, 253)
	f.dnsName(n.Receiver, p)
	if n.Signatures, err = f.signatures(obj, signed); err != nil {
		return nil, err
	}
	return n, nil
}

// pointers reads an optional list of JSON pointers into an envelope body.
func (f *fields) pointers(key string) []string {
	ps := f.strings(key, MaxStringLen)
	p := child(f.ptr, key)
	if f.err == nil && len(ps) > MaxPointers {
		f.fail(CodeTooLarge, p, "lists more than 256 pointers")
	}
	for i, s := range ps {
		if f.err == nil && (s == "" || s[0] != '/') {
			f.fail(CodeInvalidValue, index(p, i), "is not a JSON pointer")
		}
	}
	return ps
}

// signatures finishes a reader of a signed object: the members are all
// known, and "signatures" is present (signed) or absent (about to be
// signed).
func (f *fields) signatures(obj *node, signed bool) (Signatures, *Error) {
	f.used["signatures"] = true
	if err := f.done(); err != nil {
		return nil, err
	}
	sigs, err := readSignatures(obj)
	if err != nil {
		return nil, err
	}
	switch present := obj.get("signatures") != nil; {
	case signed && !present:
		return nil, newErr(CodeMissingField, "/signatures", `the member "signatures" is required`)
	case !signed && present:
		return nil, newErr(CodeUnknownField, "/signatures", "an object to sign has no signatures yet")
	}
	if !signed {
		return nil, nil
	}
	return sigs, nil
}
