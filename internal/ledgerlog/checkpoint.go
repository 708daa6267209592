package ledgerlog

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// MaxCheckpointBytes bounds a signed checkpoint (body plus signature lines,
// room for many cosignatures).
const MaxCheckpointBytes = 16 << 10

// Checkpoint is a log's size and root hash: what a signature on a
// checkpoint vouches for.
type Checkpoint struct {
	Origin string
	Size   uint64
	Root   tlog.Hash
}

// Body is the C2SP tlog-checkpoint text, "<origin>\n<size>\n<base64 root>\n".
// It is written here rather than with tlog.FormatTree, whose first line is
// the Go checksum database's fixed origin.
func (c Checkpoint) Body() []byte {
	return fmt.Appendf(nil, "%s\n%d\n%s\n", c.Origin, c.Size, base64.StdEncoding.EncodeToString(c.Root[:]))
}

// String is a short human form, "<origin>@<size>:<root prefix>".
func (c Checkpoint) String() string {
	return fmt.Sprintf("%s@%d:%s", c.Origin, c.Size, base64.StdEncoding.EncodeToString(c.Root[:])[:12])
}

func (c Checkpoint) validate() error {
	if _, _, err := ParseOrigin(c.Origin); err != nil {
		return err
	}
	if c.Size > MaxIndex {
		return fmt.Errorf("ledgerlog: checkpoint size %d above %d", c.Size, uint64(MaxIndex))
	}
	return nil
}

// SignCheckpoint returns the signed note of the checkpoint. The signer's
// key name must be the origin's (KeyName of its tenant), so a tenant key
// cannot sign for another tenant's logs.
func SignCheckpoint(c Checkpoint, s note.Signer) ([]byte, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	want, _ := OriginKeyName(c.Origin)
	if s.Name() != want {
		return nil, fmt.Errorf("ledgerlog: checkpoint of %s signed by key %s, want %s", c.Origin, quote(s.Name()), want)
	}
	signed, err := note.Sign(&note.Note{Text: string(c.Body())}, s)
	if err != nil {
		return nil, fmt.Errorf("ledgerlog: signing checkpoint %s: %w", c, err)
	}
	return signed, nil
}

// ParseCheckpointBody parses a checkpoint body strictly: exactly the three
// C2SP lines, decimal size without leading zeros, a 32-byte root in
// standard padded base64. Extension lines are refused: alpd never signs
// them, and C2SP advises against them.
func ParseCheckpointBody(text string) (Checkpoint, error) {
	lines := strings.SplitAfter(text, "\n")
	if len(lines) != 4 || lines[3] != "" {
		return Checkpoint{}, fmt.Errorf("ledgerlog: checkpoint body is not three lines (origin, size, root)")
	}
	origin := strings.TrimSuffix(lines[0], "\n")
	sizeText := strings.TrimSuffix(lines[1], "\n")
	rootText := strings.TrimSuffix(lines[2], "\n")
	size, err := strconv.ParseUint(sizeText, 10, 64)
	if err != nil || strconv.FormatUint(size, 10) != sizeText {
		return Checkpoint{}, fmt.Errorf("ledgerlog: checkpoint size %s is not a decimal number", quote(sizeText))
	}
	root, err := base64.StdEncoding.Strict().DecodeString(rootText)
	if err != nil || len(root) != len(tlog.Hash{}) {
		return Checkpoint{}, fmt.Errorf("ledgerlog: checkpoint root %s is not a base64 SHA-256 hash", quote(rootText))
	}
	c := Checkpoint{Origin: origin, Size: size, Root: tlog.Hash(root)}
	if err := c.validate(); err != nil {
		return Checkpoint{}, err
	}
	return c, nil
}

// OpenCheckpoint verifies a signed checkpoint of the given origin: the note
// must carry a valid signature by the origin's key name from verifiers, and
// its body must be a well-formed checkpoint of that origin. Signatures by
// keys not in verifiers (cosigners, rotated keys) are ignored, as C2SP
// requires; a known key with a bad signature is an error.
func OpenCheckpoint(signed []byte, origin string, verifiers note.Verifiers) (Checkpoint, error) {
	if len(signed) > MaxCheckpointBytes {
		return Checkpoint{}, fmt.Errorf("ledgerlog: checkpoint of %d bytes, at most %d", len(signed), MaxCheckpointBytes)
	}
	keyName, err := OriginKeyName(origin)
	if err != nil {
		return Checkpoint{}, err
	}
	n, err := note.Open(signed, verifiers)
	if err != nil {
		var unverified *note.UnverifiedNoteError
		var invalid *note.InvalidSignatureError
		switch {
		case errors.As(err, &unverified):
			return Checkpoint{}, fmt.Errorf("ledgerlog: checkpoint of %s: no signature by a known key of %s", origin, keyName)
		case errors.As(err, &invalid):
			return Checkpoint{}, fmt.Errorf("ledgerlog: checkpoint of %s: signature by %s+%08x does not verify", origin, invalid.Name, invalid.Hash)
		}
		return Checkpoint{}, fmt.Errorf("ledgerlog: checkpoint of %s: %w", origin, err)
	}
	signedByLog := false
	for _, s := range n.Sigs {
		if s.Name == keyName {
			signedByLog = true
		}
	}
	if !signedByLog {
		return Checkpoint{}, fmt.Errorf("ledgerlog: checkpoint of %s: not signed by the log's key %s (only by %s)", origin, keyName, n.Sigs[0].Name)
	}
	c, err := ParseCheckpointBody(n.Text)
	if err != nil {
		return Checkpoint{}, err
	}
	if c.Origin != origin {
		return Checkpoint{}, fmt.Errorf("ledgerlog: checkpoint is for %s, want %s", quote(c.Origin), origin)
	}
	return c, nil
}

// CheckpointText returns the body of a signed checkpoint without verifying
// any signature, for parsing a checkpoint a reader holds as its own
// trusted reference.
func CheckpointText(signed []byte) (Checkpoint, error) {
	text := signed
	if i := bytes.Index(signed, []byte("\n\n")); i >= 0 {
		text = signed[:i+1]
	}
	return ParseCheckpointBody(string(text))
}
