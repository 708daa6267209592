package ledgerlog

import (
	"bufio"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// ExportType is the first field of an export's header line.
const ExportType = "alp-ledger-export/v1"

// An export is JSON Lines: one header line, then one line per entry in
// index order. It is everything a person or auditor needs to verify the
// ledger offline: the keys, the latest signed checkpoint, the exact leaf
// bytes, and — while the person's data is not erased — the commitment
// openings.

// ExportKey is one of the broker's ledger public keys (every state: a
// retired key still verifies old checkpoints and receipts).
type ExportKey struct {
	// Verifier is the signed-note verifier key (VerifierKey).
	Verifier string `json:"vkey"`
	// PublicKey is the raw Ed25519 public key (base64 in JSON), for tools
	// that do not speak signed notes.
	PublicKey []byte `json:"public_key"`
	// KeyID is the signed-note key id, 8 hex digits.
	KeyID string `json:"key_id"`
}

// NewExportKey describes a tenant's ledger public key.
func NewExportKey(tenant string, pub ed25519.PublicKey) (ExportKey, error) {
	vkey, err := VerifierKey(tenant, pub)
	if err != nil {
		return ExportKey{}, err
	}
	return ExportKey{Verifier: vkey, PublicKey: append([]byte(nil), pub...), KeyID: FormatKeyID(KeyID(KeyName(tenant), pub))}, nil
}

// ExportEntry is one leaf with its opening.
type ExportEntry struct {
	// Leaf is the exact leaf bytes.
	Leaf []byte
	// LeafHash is the hash the exporter's tree holds for the leaf; the
	// writer computes it from Leaf when it is zero (and Verify treats zero
	// as "not recorded"). Taking it from the tree, not from Leaf, lets a
	// verifier point at a leaf changed after it was hashed: the recorded
	// hashes are authenticated by the signed root (see Verify).
	LeafHash tlog.Hash
	// Salt and Digest open the entry's commitment; both nil once erased.
	Salt   []byte
	Digest []byte
}

// HasOpening reports whether the entry carries its commitment's opening.
func (e ExportEntry) HasOpening() bool { return e.Salt != nil || e.Digest != nil }

// Export is a whole export in memory.
type Export struct {
	Log        string
	Keys       []ExportKey
	Checkpoint []byte
	Entries    []ExportEntry
}

// Verifiers returns the export's keys as note.Verifiers, after checking
// that each verifier key, raw key and key id agree and that each key is
// named for the log's tenant.
func (x *Export) Verifiers() (note.Verifiers, error) {
	keyName, err := OriginKeyName(x.Log)
	if err != nil {
		return nil, err
	}
	if len(x.Keys) == 0 {
		return nil, fmt.Errorf("ledgerlog: export of %s lists no keys", x.Log)
	}
	list := make([]note.Verifier, 0, len(x.Keys))
	for i, k := range x.Keys {
		v, err := note.NewVerifier(k.Verifier)
		if err != nil {
			return nil, fmt.Errorf("ledgerlog: export key %d: %w", i, err)
		}
		if v.Name() != keyName {
			return nil, fmt.Errorf("ledgerlog: export key %d is named %s, want %s", i, quote(v.Name()), keyName)
		}
		if len(k.PublicKey) != ed25519.PublicKeySize || KeyID(keyName, k.PublicKey) != v.KeyHash() ||
			k.KeyID != FormatKeyID(v.KeyHash()) {
			return nil, fmt.Errorf("ledgerlog: export key %d: vkey, public_key and key_id disagree", i)
		}
		want, _ := note.NewEd25519VerifierKey(keyName, k.PublicKey)
		if want != k.Verifier {
			return nil, fmt.Errorf("ledgerlog: export key %d: vkey is not the public key's", i)
		}
		list = append(list, v)
	}
	return note.VerifierList(list...), nil
}

type exportHeader struct {
	Type       string      `json:"type"`
	Log        string      `json:"log"`
	Keys       []ExportKey `json:"keys"`
	Checkpoint string      `json:"checkpoint"`
	Entries    uint64      `json:"entries"`
}

type exportLine struct {
	I        uint64 `json:"i"`
	LeafHash string `json:"leaf_hash"`
	Leaf     string `json:"leaf"`
	Salt     string `json:"salt,omitempty"`
	Digest   string `json:"digest,omitempty"`
}

// maxExportKeys bounds the key list of a header.
const maxExportKeys = 64

// ExportWriter writes an export line by line, so a large ledger never has
// to be in memory at once.
type ExportWriter struct {
	w     *bufio.Writer
	enc   *json.Encoder
	want  uint64
	wrote uint64
}

// NewExportWriter writes the header. entries is the number of entries that
// will follow; Close checks it.
func NewExportWriter(w io.Writer, log string, keys []ExportKey, checkpoint []byte, entries uint64) (*ExportWriter, error) {
	if _, _, err := ParseOrigin(log); err != nil {
		return nil, err
	}
	if len(keys) == 0 || len(keys) > maxExportKeys {
		return nil, fmt.Errorf("ledgerlog: export of %s with %d keys (1..%d)", log, len(keys), maxExportKeys)
	}
	if len(checkpoint) == 0 || len(checkpoint) > MaxCheckpointBytes || !utf8.Valid(checkpoint) {
		return nil, fmt.Errorf("ledgerlog: export of %s: checkpoint missing, too large or not UTF-8", log)
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	ew := &ExportWriter{w: bw, enc: json.NewEncoder(bw), want: entries}
	ew.enc.SetEscapeHTML(false)
	h := exportHeader{Type: ExportType, Log: log, Keys: keys, Checkpoint: string(checkpoint), Entries: entries}
	if err := ew.enc.Encode(h); err != nil {
		return nil, fmt.Errorf("ledgerlog: writing export header: %w", err)
	}
	return ew, nil
}

// Write writes the next entry.
func (w *ExportWriter) Write(e ExportEntry) error {
	if w.wrote >= w.want {
		return fmt.Errorf("ledgerlog: export: more than the %d entries announced", w.want)
	}
	if len(e.Leaf) == 0 || len(e.Leaf) > MaxLeafBytes || !utf8.Valid(e.Leaf) {
		return fmt.Errorf("ledgerlog: export entry %d: leaf empty, too large or not UTF-8", w.wrote)
	}
	if (e.Salt == nil) != (e.Digest == nil) || e.Salt != nil && (len(e.Salt) != SaltSize || len(e.Digest) != 32) {
		return fmt.Errorf("ledgerlog: export entry %d: opening needs a %d-byte salt and a 32-byte digest", w.wrote, SaltSize)
	}
	lh := e.LeafHash
	if lh == (tlog.Hash{}) {
		lh = LeafHash(e.Leaf)
	}
	line := exportLine{I: w.wrote, LeafHash: encodeHash(lh), Leaf: string(e.Leaf)}
	if e.Salt != nil {
		line.Salt = base64.StdEncoding.EncodeToString(e.Salt)
		line.Digest = hex.EncodeToString(e.Digest)
	}
	if err := w.enc.Encode(line); err != nil {
		return fmt.Errorf("ledgerlog: writing export entry %d: %w", w.wrote, err)
	}
	w.wrote++
	return nil
}

// Close flushes the export and checks the announced count was written.
func (w *ExportWriter) Close() error {
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("ledgerlog: writing export: %w", err)
	}
	if w.wrote != w.want {
		return fmt.Errorf("ledgerlog: export: wrote %d entries, announced %d", w.wrote, w.want)
	}
	return nil
}

// WriteExport writes a whole export.
func WriteExport(w io.Writer, x *Export) error {
	ew, err := NewExportWriter(w, x.Log, x.Keys, x.Checkpoint, uint64(len(x.Entries)))
	if err != nil {
		return err
	}
	for _, e := range x.Entries {
		if err := ew.Write(e); err != nil {
			return err
		}
	}
	return ew.Close()
}

// ReadLimits bound what ReadExportLimits accepts; zero fields take the
// defaults.
type ReadLimits struct {
	// MaxLineBytes bounds one line (a leaf of MaxLeafBytes, JSON-escaped,
	// fits the default).
	MaxLineBytes int
	// MaxEntries bounds the number of entries.
	MaxEntries uint64
}

// Default read limits, used by ReadExport and for zero fields of a
// ReadLimits.
const (
	DefaultMaxLineBytes = 4*MaxLeafBytes + 4096
	DefaultMaxEntries   = 10_000_000
)

// ReadExport reads an export with the default limits.
func ReadExport(r io.Reader) (*Export, error) { return ReadExportLimits(r, ReadLimits{}) }

// ReadExportLimits reads an export strictly: a header of the right type,
// known fields only, entries numbered from 0 in order, well-formed hashes
// and openings, exactly the announced number of entries, nothing after.
// It checks form, not truth: Verify checks the contents.
func ReadExportLimits(r io.Reader, lim ReadLimits) (*Export, error) {
	if lim.MaxLineBytes <= 0 {
		lim.MaxLineBytes = DefaultMaxLineBytes
	}
	if lim.MaxEntries == 0 {
		lim.MaxEntries = DefaultMaxEntries
	}
	sc := bufio.NewScanner(r)
	// The buffer's initial capacity also caps a line, so keep it below the
	// limit.
	sc.Buffer(make([]byte, 0, min(64<<10, lim.MaxLineBytes)), lim.MaxLineBytes)
	line := 0
	next := func() ([]byte, bool, error) {
		if !sc.Scan() {
			if err := sc.Err(); err != nil {
				if errors.Is(err, bufio.ErrTooLong) {
					return nil, false, fmt.Errorf("ledgerlog: export line %d longer than %d bytes", line+1, lim.MaxLineBytes)
				}
				return nil, false, fmt.Errorf("ledgerlog: reading export line %d: %w", line+1, err)
			}
			return nil, false, nil
		}
		line++
		return sc.Bytes(), true, nil
	}
	b, ok, err := next()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("ledgerlog: export is empty")
	}
	var h exportHeader
	if err := decodeStrict(b, &h); err != nil {
		return nil, fmt.Errorf("ledgerlog: export header: %w", err)
	}
	if h.Type != ExportType {
		return nil, fmt.Errorf("ledgerlog: export header type %s, want %s", quote(h.Type), ExportType)
	}
	if _, _, err := ParseOrigin(h.Log); err != nil {
		return nil, fmt.Errorf("ledgerlog: export header: %w", err)
	}
	if len(h.Keys) == 0 || len(h.Keys) > maxExportKeys {
		return nil, fmt.Errorf("ledgerlog: export header lists %d keys (1..%d)", len(h.Keys), maxExportKeys)
	}
	if h.Checkpoint == "" || len(h.Checkpoint) > MaxCheckpointBytes {
		return nil, fmt.Errorf("ledgerlog: export header: checkpoint missing or over %d bytes", MaxCheckpointBytes)
	}
	if h.Entries > lim.MaxEntries {
		return nil, fmt.Errorf("ledgerlog: export announces %d entries, the limit is %d", h.Entries, lim.MaxEntries)
	}
	x := &Export{Log: h.Log, Keys: h.Keys, Checkpoint: []byte(h.Checkpoint), Entries: make([]ExportEntry, 0, min(h.Entries, 1<<16))}
	for {
		b, ok, err := next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		pos := uint64(len(x.Entries))
		if pos >= h.Entries {
			return nil, fmt.Errorf("ledgerlog: export has more entries than the %d its header announces (line %d)", h.Entries, line)
		}
		e, err := parseExportLine(b, pos)
		if err != nil {
			return nil, err
		}
		x.Entries = append(x.Entries, e)
	}
	if uint64(len(x.Entries)) != h.Entries {
		return nil, fmt.Errorf("ledgerlog: export has %d entries, its header announces %d", len(x.Entries), h.Entries)
	}
	return x, nil
}

func parseExportLine(b []byte, pos uint64) (ExportEntry, error) {
	var l exportLine
	if err := decodeStrict(b, &l); err != nil {
		return ExportEntry{}, fmt.Errorf("ledgerlog: export line of entry %d: %w", pos, err)
	}
	if l.I != pos {
		return ExportEntry{}, fmt.Errorf("ledgerlog: export line %d is numbered %d: entries must be in index order without gaps", pos, l.I)
	}
	lh, err := decodeHash(l.LeafHash)
	if err != nil {
		return ExportEntry{}, fmt.Errorf("ledgerlog: export entry %d: leaf_hash: %w", pos, err)
	}
	if l.Leaf == "" || len(l.Leaf) > MaxLeafBytes {
		return ExportEntry{}, fmt.Errorf("ledgerlog: export entry %d: leaf empty or over %d bytes", pos, MaxLeafBytes)
	}
	e := ExportEntry{Leaf: []byte(l.Leaf), LeafHash: lh}
	if (l.Salt == "") != (l.Digest == "") {
		return ExportEntry{}, fmt.Errorf("ledgerlog: export entry %d: salt and digest go together", pos)
	}
	if l.Salt != "" {
		salt, err := base64.StdEncoding.Strict().DecodeString(l.Salt)
		if err != nil || len(salt) != SaltSize {
			return ExportEntry{}, fmt.Errorf("ledgerlog: export entry %d: salt is not %d bytes of base64", pos, SaltSize)
		}
		digest, err := hex.DecodeString(l.Digest)
		if err != nil || len(digest) != 32 || hex.EncodeToString(digest) != l.Digest {
			return ExportEntry{}, fmt.Errorf("ledgerlog: export entry %d: digest is not 64 lowercase hex digits", pos)
		}
		e.Salt, e.Digest = salt, digest
	}
	return e, nil
}
