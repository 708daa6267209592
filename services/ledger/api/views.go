package api

import (
	"encoding/base64"
	"encoding/hex"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/services/ledger/storage"
)

// The JSON answers. Hashes, roots, salts and raw keys are standard base64
// (as in checkpoints and exports); envelope digests are lowercase hex (as
// in exports); leaves are the exact canonical JSON as a string, so a
// client hashes exactly those bytes.

// CheckpointHeader carries the latest signed checkpoint (standard base64
// of the note) on every successful read, whatever the body.
const CheckpointHeader = "Alp-Ledger-Checkpoint"

type checkpointJSON struct {
	// Note is the signed note, exact text: what a reader keeps.
	Note   string `json:"note"`
	Origin string `json:"origin"`
	Size   uint64 `json:"size"`
	Root   string `json:"root"`
}

func checkpointView(c checkpoint) checkpointJSON {
	return checkpointJSON{Note: string(c.Note), Origin: c.Origin, Size: c.Size, Root: b64(c.Root[:])}
}

// bodyJSON is a checkpoint body without a signature (one the reader sent).
type bodyJSON struct {
	Origin string `json:"origin"`
	Size   uint64 `json:"size"`
	Root   string `json:"root"`
}

type keyJSON struct {
	KeyID         string     `json:"key_id"`
	Name          string     `json:"name"`
	VerifierKey   string     `json:"vkey"`
	PublicKey     string     `json:"public_key"`
	State         string     `json:"state"`
	Created       *time.Time `json:"created,omitempty"`
	CompromisedAt *time.Time `json:"compromised_at,omitempty"`
}

func keyView(k storage.PublicKey) keyJSON {
	return keyJSON{KeyID: k.KeyID, Name: k.Name, VerifierKey: k.VerifierKey, PublicKey: b64(k.PublicKey),
		State: keyState(k.State), Created: timePtr(k.Created), CompromisedAt: timePtr(k.CompromisedAt)}
}

// keyState is "active", "retired", "revoked" (or "unspecified").
func keyState(s alpv1.KeyState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "KEY_STATE_"))
}

type headJSON struct {
	Origin     string         `json:"origin"`
	Size       uint64         `json:"size"`
	Root       string         `json:"root"`
	Checkpoint checkpointJSON `json:"checkpoint"`
	PublicKeys []keyJSON      `json:"public_keys"`
}

type openingJSON struct {
	Salt   string `json:"salt"`
	Digest string `json:"digest"`
}

type entryJSON struct {
	Index    uint64       `json:"index"`
	Leaf     string       `json:"leaf"`
	LeafHash string       `json:"leaf_hash"`
	Time     *time.Time   `json:"time,omitempty"`
	Opening  *openingJSON `json:"opening,omitempty"`
	Erased   bool         `json:"erased,omitempty"`
}

func entryView(e storage.StoredEntry) entryJSON {
	h := ledgerlog.LeafHash(e.Leaf)
	v := entryJSON{Index: e.Index, Leaf: string(e.Leaf), LeafHash: b64(h[:]), Time: timePtr(e.Time), Erased: e.Erased}
	if e.Opening != nil {
		v.Opening = &openingJSON{Salt: b64(e.Opening.Salt), Digest: hex.EncodeToString(e.Opening.Digest)}
	}
	return v
}

type entriesJSON struct {
	Entries []entryJSON `json:"entries"`
	// Next is the from of the next page; absent at the end of the log.
	Next       *uint64        `json:"next,omitempty"`
	Size       uint64         `json:"size"`
	Checkpoint checkpointJSON `json:"checkpoint"`
}

type inclusionJSON struct {
	Index      uint64         `json:"index"`
	Size       uint64         `json:"size"`
	LeafHash   string         `json:"leaf_hash"`
	Proof      []string       `json:"proof"`
	Root       string         `json:"root"`
	Checkpoint checkpointJSON `json:"checkpoint"`
}

type consistencyJSON struct {
	From     uint64   `json:"from"`
	To       uint64   `json:"to"`
	FromRoot string   `json:"from_root"`
	ToRoot   string   `json:"to_root"`
	Proof    []string `json:"proof"`
	// Held is the checkpoint the reader sent, as verified.
	Held       *bodyJSON      `json:"held,omitempty"`
	Checkpoint checkpointJSON `json:"checkpoint"`
}

func hashes(hs []tlog.Hash) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = b64(h[:])
	}
	return out
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
