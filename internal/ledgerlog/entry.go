package ledgerlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/tlog"
)

// EntryVersion is the version of the leaf format ("v").
const EntryVersion = 1

// Entry kinds. A verifier refuses kinds it does not know rather than
// guessing what an unknown statement means; adding a kind is a change to
// this list (KnownKind) and to docs/ledger.md.
const (
	// KindSendRequested: the person's agent asked to send an envelope, and
	// the broker's per-field decisions.
	KindSendRequested = "envelope.send_requested"
	// KindReceived: an envelope from a counterparty was received for the
	// person, with the receiving side's per-field decisions.
	KindReceived = "envelope.received"
	// KindReceiptIssued: this broker issued a receipt to the counterparty
	// for an envelope (the receipt may be embedded).
	KindReceiptIssued = "receipt.issued"
	// KindReceiptReceived: the counterparty's receipt for an envelope,
	// embedded, so the ledger holds a pointer into the other ledger.
	KindReceiptReceived = "receipt.received"
)

// KnownKind reports whether kind is an entry kind this version understands.
func KnownKind(kind string) bool {
	switch kind {
	case KindSendRequested, KindReceived, KindReceiptIssued, KindReceiptReceived:
		return true
	}
	return false
}

// IsReceiptKind reports whether kind records a receipt rather than the
// envelope itself.
func IsReceiptKind(kind string) bool {
	return kind == KindReceiptIssued || kind == KindReceiptReceived
}

// Limits on a leaf. They keep a hostile export from making a verifier
// allocate without bound, and they are far above what a real entry needs.
const (
	// MaxLeafBytes bounds one canonical leaf.
	MaxLeafBytes = 64 << 10
	// MaxIndex is the largest leaf index: JSON numbers are IEEE doubles
	// under RFC 8785, exact only up to 2^53-1.
	MaxIndex     = 1<<53 - 1
	maxFields    = 1024
	maxStringLen = 512
)

// TimeLayout is the one accepted form of "ts": RFC 3339, UTC, milliseconds.
// A single form keeps the leaf canonical beyond what RFC 8785 covers.
const TimeLayout = "2006-01-02T15:04:05.000Z"

// FormatTime renders t in TimeLayout (UTC, truncated to milliseconds).
func FormatTime(t time.Time) string { return t.UTC().Truncate(time.Millisecond).Format(TimeLayout) }

// FieldVerdict is the decision about one field of an envelope: which layer
// of policy decided and by which rule. It names the field, never its value.
type FieldVerdict struct {
	Path    string `json:"path"`
	Class   string `json:"class,omitempty"`
	Verdict string `json:"verdict"`
	Layer   string `json:"layer,omitempty"`
	Rule    string `json:"rule,omitempty"`
}

// Entry is one ledger leaf. Its canonical JSON (Canonical) is what is
// hashed into the tree; the Go value is only a convenient view of it.
type Entry struct {
	V int `json:"v"`
	// Log is the origin of the log holding the entry; binding it into the
	// leaf stops a leaf from being replayed into another person's log.
	Log string `json:"log"`
	// Index is the leaf's position; binding it makes reordering evident
	// even to someone who only reads leaves.
	Index uint64 `json:"i"`
	Kind  string `json:"kind"`
	// SourceEvent is the id of the bus event the entry was derived from, so
	// an operator can trace a leaf to its cause.
	SourceEvent string `json:"source_event"`
	EnvelopeID  string `json:"envelope_id"`
	// Commitment is Commit(salt, EnvelopeDigest(...)), or empty if the
	// envelope was erased before it was recorded.
	Commitment string `json:"commitment,omitempty"`
	// Counterparty is the other side's ledger origin when known, else its
	// domain — never an address: a leaf can never be erased, and an address
	// is personal data. Match uses it (with receipts) to decide which
	// envelopes must appear in the other ledger.
	Counterparty string         `json:"counterparty,omitempty"`
	Fields       []FieldVerdict `json:"fields,omitempty"`
	// Time is when the broker recorded the entry, in TimeLayout.
	Time string `json:"ts"`
	// Receipt is the counterparty's receipt (KindReceiptReceived, required)
	// or the one this broker issued (KindReceiptIssued, optional).
	Receipt *Receipt `json:"receipt,omitempty"`
}

// Validate checks the entry's own rules (not its place in a log).
func (e Entry) Validate() error {
	if e.V != EntryVersion {
		return fmt.Errorf("version %d, want %d", e.V, EntryVersion)
	}
	if _, _, err := ParseOrigin(e.Log); err != nil {
		return fmt.Errorf("log: %w", err)
	}
	if e.Index > MaxIndex {
		return fmt.Errorf("index %d above %d", e.Index, uint64(MaxIndex))
	}
	if !KnownKind(e.Kind) {
		return fmt.Errorf("unknown kind %s", quote(e.Kind))
	}
	if err := checkText("source_event", e.SourceEvent, true); err != nil {
		return err
	}
	if err := checkText("envelope_id", e.EnvelopeID, true); err != nil {
		return err
	}
	if err := checkText("counterparty", e.Counterparty, false); err != nil {
		return err
	}
	if e.Commitment != "" {
		if err := checkCommitment(e.Commitment); err != nil {
			return err
		}
	}
	if len(e.Fields) > maxFields {
		return fmt.Errorf("%d fields, at most %d", len(e.Fields), maxFields)
	}
	for i, f := range e.Fields {
		if err := checkText("fields path", f.Path, true); err != nil {
			return fmt.Errorf("field %d: %w", i, err)
		}
		if err := checkText("fields verdict", f.Verdict, true); err != nil {
			return fmt.Errorf("field %d: %w", i, err)
		}
		for _, v := range []string{f.Class, f.Layer, f.Rule} {
			if err := checkText("field attribute", v, false); err != nil {
				return fmt.Errorf("field %d: %w", i, err)
			}
		}
	}
	if t, err := time.Parse(TimeLayout, e.Time); err != nil || t.Format(TimeLayout) != e.Time {
		return fmt.Errorf("ts %s is not %s (UTC, milliseconds)", quote(e.Time), TimeLayout)
	}
	switch {
	case e.Kind == KindReceiptReceived && e.Receipt == nil:
		return fmt.Errorf("%s without a receipt", e.Kind)
	case !IsReceiptKind(e.Kind) && e.Receipt != nil:
		return fmt.Errorf("%s carries a receipt", e.Kind)
	}
	if e.Receipt != nil {
		if err := e.Receipt.validate(); err != nil {
			return fmt.Errorf("receipt: %w", err)
		}
		if e.Receipt.EnvelopeID != e.EnvelopeID {
			return fmt.Errorf("receipt is for envelope %s, entry for %s", quote(e.Receipt.EnvelopeID), quote(e.EnvelopeID))
		}
	}
	return nil
}

// checkText bounds a string field and keeps control characters out of it
// (they would reach terminals through reports).
func checkText(name, v string, required bool) error {
	if v == "" {
		if required {
			return fmt.Errorf("%s is empty", name)
		}
		return nil
	}
	if len(v) > maxStringLen {
		return fmt.Errorf("%s of %d bytes, at most %d", name, len(v), maxStringLen)
	}
	if !utf8.ValidString(v) || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("%s %s has invalid or control characters", name, quote(v))
	}
	return nil
}

// checkString refuses strings the canonical encoder must not see: invalid
// UTF-8 (encoders disagree on how to repair it).
func checkString(name, v string) error {
	if !utf8.ValidString(v) {
		return fmt.Errorf("%s is not valid UTF-8", name)
	}
	return nil
}

// Canonical validates the entry and returns its RFC 8785 bytes: the leaf.
func (e Entry) Canonical() ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("ledgerlog: entry %d: %w", e.Index, err)
	}
	leaf := e.appendCanonical(make([]byte, 0, 512))
	if len(leaf) > MaxLeafBytes {
		return nil, fmt.Errorf("ledgerlog: entry %d: %d bytes, at most %d", e.Index, len(leaf), MaxLeafBytes)
	}
	return leaf, nil
}

// ParseEntry parses a leaf strictly: known fields only, valid, and exactly
// canonical — the leaf must equal the canonical form of what it parses to.
// Anything else would let two byte strings (two leaf hashes) stand for the
// same statement.
func ParseEntry(leaf []byte) (Entry, error) {
	if len(leaf) > MaxLeafBytes {
		return Entry{}, fmt.Errorf("ledgerlog: leaf of %d bytes, at most %d", len(leaf), MaxLeafBytes)
	}
	var e Entry
	if err := decodeStrict(leaf, &e); err != nil {
		return Entry{}, fmt.Errorf("ledgerlog: leaf: %w", err)
	}
	canon, err := e.Canonical()
	if err != nil {
		return Entry{}, err
	}
	if !bytes.Equal(canon, leaf) {
		return Entry{}, fmt.Errorf("ledgerlog: entry %d: leaf is not in canonical (RFC 8785) form", e.Index)
	}
	return e, nil
}

// decodeStrict decodes exactly one JSON value with no unknown fields.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("data after the JSON value")
	}
	return nil
}

// LeafHash is the RFC 6962 leaf hash, SHA-256(0x00 || leaf).
func LeafHash(leaf []byte) tlog.Hash { return tlog.RecordHash(leaf) }
