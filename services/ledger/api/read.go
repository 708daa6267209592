package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/services/ledger/storage"
)

// The reads below are shared by both transports. Each starts from one Head
// and checks every index and size against it: logs only grow, so what the
// Head says exists still exists when the proof is built (storage.Reader's
// consistency rule), and nothing is ever shown beyond it.
//
// Every proof is checked here before it is served. A proof that does not
// verify against the log's own signed checkpoint is a storage bug or
// tampering, and answering it would only shift the alarm to the reader.

// checkpoint is a signed checkpoint and what its body says.
type checkpoint struct {
	Note []byte
	ledgerlog.Checkpoint
}

// head is where a reader's log stands, with its latest signed checkpoint.
type head struct {
	st         storage.Reader
	rd         reader
	Origin     string
	Size       uint64
	Root       tlog.Hash
	Checkpoint checkpoint
}

// readHead reads the reader's log head. A log with entries but no signed
// checkpoint yet (they are signed in batches, within a fraction of a
// second) answers 503 checkpoint_pending: every read carries a checkpoint.
func (a *API) readHead(ctx context.Context, rd reader) (*head, *httpjson.Error) {
	st, e := a.store()
	if e != nil {
		return nil, e
	}
	origin := ledgerlog.Origin(rd.Tenant, rd.PersonID)
	if origin == "" {
		return nil, internal(fmt.Errorf("tenant %q, person %q make no log origin", rd.Tenant, rd.PersonID), "your ledger cannot be named")
	}
	h, err := st.Head(ctx, rd.Tenant, rd.PersonID)
	if err != nil {
		return nil, storageError(err, "reading your ledger")
	}
	if h.Origin != origin {
		// Never show a person a log that is not theirs.
		return nil, internal(fmt.Errorf("head of %s names origin %q", origin, h.Origin), "reading your ledger failed")
	}
	if len(h.SignedCheckpoint) == 0 {
		e := httpjson.Errorf(http.StatusServiceUnavailable, CodeCheckpointPending, "your newest entries are being signed; try again in a moment")
		e.RetryAfter = 1
		return nil, e
	}
	cp, err := ledgerlog.CheckpointText(h.SignedCheckpoint)
	switch {
	case err != nil:
		return nil, internal(fmt.Errorf("checkpoint of %s: %w", origin, err), "reading your ledger's checkpoint failed")
	case cp.Origin != origin || cp.Size != h.CheckpointSize || cp.Size > h.Size || cp.Size == 0:
		return nil, internal(fmt.Errorf("checkpoint %s disagrees with head %s size %d (checkpoint size %d)", cp, origin, h.Size, h.CheckpointSize),
			"reading your ledger's checkpoint failed")
	}
	return &head{st: st, rd: rd, Origin: origin, Size: h.Size, Root: h.Root,
		Checkpoint: checkpoint{Note: h.SignedCheckpoint, Checkpoint: cp}}, nil
}

// keys lists the tenant's ledger keys.
func (h *head) keys(ctx context.Context) ([]storage.PublicKey, *httpjson.Error) {
	ks, err := h.st.PublicKeys(ctx, h.rd.Tenant)
	if err != nil {
		return nil, storageError(err, "reading the ledger keys")
	}
	return ks, nil
}

// page is a run of entries.
type page struct {
	*head
	Entries []storage.StoredEntry
	// Next is the index to ask for next; 0 when the page reached Size.
	Next uint64
}

// entries reads up to limit entries from index from. from == Size is an
// empty page (a reader polling for news); beyond it is out of range.
func (a *API) entries(ctx context.Context, rd reader, from uint64, limit int) (*page, *httpjson.Error) {
	h, e := a.readHead(ctx, rd)
	if e != nil {
		return nil, e
	}
	if from > h.Size {
		return nil, httpjson.Errorf(http.StatusBadRequest, CodeOutOfRange, "from %d is beyond the end of your ledger (%d entries)", from, h.Size)
	}
	p := &page{head: h}
	n := min(uint64(limit), h.Size-from)
	if n == 0 {
		return p, nil
	}
	es, err := h.st.Entries(ctx, rd.Tenant, rd.PersonID, from, int(n))
	if err != nil {
		return nil, storageError(err, "reading your ledger's entries")
	}
	if uint64(len(es)) > n {
		es = es[:n]
	}
	for i, x := range es {
		if x.Index != from+uint64(i) {
			return nil, internal(fmt.Errorf("entries of %s from %d: entry %d has index %d", h.Origin, from, i, x.Index), "reading your ledger's entries failed")
		}
	}
	if len(es) == 0 {
		return nil, internal(fmt.Errorf("entries of %s from %d: none, but the log has %d", h.Origin, from, h.Size), "reading your ledger's entries failed")
	}
	p.Entries = es
	if end := from + uint64(len(es)); end < h.Size {
		p.Next = end
	}
	return p, nil
}

// inclusion is an inclusion proof with what it proves.
type inclusion struct {
	*head
	Index, TreeSize uint64
	LeafHash, Root  tlog.Hash
	Proof           tlog.RecordProof
}

// inclusionProof proves entry index in the tree of treeSize entries (0:
// the latest checkpoint's size).
func (a *API) inclusionProof(ctx context.Context, rd reader, index, treeSize uint64) (*inclusion, *httpjson.Error) {
	h, e := a.readHead(ctx, rd)
	if e != nil {
		return nil, e
	}
	if treeSize == 0 {
		treeSize = h.Checkpoint.Size
		if index >= treeSize && index < h.Size {
			// Proving in the signed tree is the useful default; an entry
			// just appended is in it within moments.
			e := httpjson.Errorf(http.StatusServiceUnavailable, CodeCheckpointPending,
				"entry %d is newer than the latest checkpoint (%d entries) and is being signed; try again in a moment", index, treeSize)
			e.RetryAfter = 1
			return nil, e
		}
	}
	switch {
	case treeSize > h.Size:
		return nil, httpjson.Errorf(http.StatusBadRequest, CodeOutOfRange, "size %d is beyond the end of your ledger (%d entries)", treeSize, h.Size)
	case index >= treeSize:
		return nil, httpjson.Errorf(http.StatusBadRequest, CodeOutOfRange, "entry %d is not in a tree of %d entries", index, treeSize)
	}
	hr, err := h.st.HashReader(ctx, rd.Tenant, rd.PersonID)
	if err != nil {
		return nil, storageError(err, "reading your ledger's tree")
	}
	root, e := h.root(hr, treeSize)
	if e != nil {
		return nil, e
	}
	leaf, err := hr.ReadHashes([]int64{tlog.StoredHashIndex(0, int64(index))})
	if err != nil || len(leaf) != 1 {
		return nil, internal(fmt.Errorf("leaf hash %d of %s: %v", index, h.Origin, err), "reading your ledger's tree failed")
	}
	proof, err := h.st.InclusionProof(ctx, rd.Tenant, rd.PersonID, index, treeSize)
	if err != nil {
		return nil, storageError(err, "proving the entry")
	}
	if err := tlog.CheckRecord(proof, int64(treeSize), root, int64(index), leaf[0]); err != nil {
		return nil, internal(fmt.Errorf("inclusion proof of %d in %d of %s does not verify: %w", index, treeSize, h.Origin, err), "proving the entry failed")
	}
	return &inclusion{head: h, Index: index, TreeSize: treeSize, LeafHash: leaf[0], Root: root, Proof: proof}, nil
}

// consistency is a consistency proof with what it proves.
type consistency struct {
	*head
	From, To         uint64
	FromRoot, ToRoot tlog.Hash
	Proof            tlog.TreeProof
	// Held is the reader's own checkpoint, when they sent one.
	Held *ledgerlog.Checkpoint
}

// consistencyProof proves that the tree of from entries is a prefix of the
// tree of to (0: the latest checkpoint's size).
func (a *API) consistencyProof(ctx context.Context, rd reader, from, to uint64) (*consistency, *httpjson.Error) {
	h, e := a.readHead(ctx, rd)
	if e != nil {
		return nil, e
	}
	if to == 0 {
		to = h.Checkpoint.Size
	}
	switch {
	case from == 0:
		return nil, badParam("from must be at least 1: an empty tree is a prefix of every tree")
	case to > h.Size:
		return nil, httpjson.Errorf(http.StatusBadRequest, CodeOutOfRange, "to %d is beyond the end of your ledger (%d entries)", to, h.Size)
	case from > to:
		return nil, httpjson.Errorf(http.StatusBadRequest, CodeOutOfRange, "from %d is larger than to %d", from, to)
	}
	return h.prove(ctx, from, to)
}

// prove builds and checks the proof from one size to another, both within
// the head.
func (h *head) prove(ctx context.Context, from, to uint64) (*consistency, *httpjson.Error) {
	hr, err := h.st.HashReader(ctx, h.rd.Tenant, h.rd.PersonID)
	if err != nil {
		return nil, storageError(err, "reading your ledger's tree")
	}
	fromRoot, e := h.root(hr, from)
	if e != nil {
		return nil, e
	}
	toRoot, e := h.root(hr, to)
	if e != nil {
		return nil, e
	}
	c := &consistency{head: h, From: from, To: to, FromRoot: fromRoot, ToRoot: toRoot, Proof: tlog.TreeProof{}}
	if from == 0 {
		return c, nil
	}
	c.Proof, err = h.st.ConsistencyProof(ctx, h.rd.Tenant, h.rd.PersonID, from, to)
	if err != nil {
		return nil, storageError(err, "proving consistency")
	}
	if err := tlog.CheckTree(c.Proof, int64(to), toRoot, int64(from), fromRoot); err != nil {
		return nil, internal(fmt.Errorf("consistency proof %d→%d of %s does not verify: %w", from, to, h.Origin, err), "proving consistency failed")
	}
	return c, nil
}

// root is the root of the first size entries; at the checkpoint's size it
// must be the checkpoint's root.
func (h *head) root(hr tlog.HashReader, size uint64) (tlog.Hash, *httpjson.Error) {
	root, err := ledgerlog.TreeHash(hr, size)
	if err != nil {
		return tlog.Hash{}, internal(fmt.Errorf("root of %d entries of %s: %w", size, h.Origin, err), "reading your ledger's tree failed")
	}
	if size == h.Checkpoint.Size && root != h.Checkpoint.Root {
		return tlog.Hash{}, internal(fmt.Errorf("the tree of %s disagrees with its own checkpoint %s", h.Origin, h.Checkpoint.Checkpoint), "your ledger's tree disagrees with its checkpoint")
	}
	return root, nil
}

// consistencyFromHeld proves consistency from a checkpoint the reader
// holds to the latest one. The reader's checkpoint must be one of this
// log's, signed by one of the tenant's ledger keys, and agree with the log
// at its size: a checkpoint we signed that the log now contradicts is
// evidence of a rewritten history, answered as a conflict (and logged),
// never papered over.
func (a *API) consistencyFromHeld(ctx context.Context, rd reader, signed []byte) (*consistency, *httpjson.Error) {
	h, e := a.readHead(ctx, rd)
	if e != nil {
		return nil, e
	}
	keys, e := h.keys(ctx)
	if e != nil {
		return nil, e
	}
	held, e := h.openHeld(signed, keys)
	if e != nil {
		return nil, e
	}
	if held.Size > h.Size {
		a.log.Warn("ledger: a reader holds a checkpoint larger than the log", "origin", h.Origin, "held", held.String(), "size", h.Size)
		return nil, httpjson.Errorf(http.StatusConflict, CodeCheckpointAhead,
			"the checkpoint you hold covers %d entries but your ledger has %d: it was rolled back, or this broker has not caught up yet", held.Size, h.Size)
	}
	hr, err := h.st.HashReader(ctx, rd.Tenant, rd.PersonID)
	if err != nil {
		return nil, storageError(err, "reading your ledger's tree")
	}
	root, e := h.root(hr, held.Size)
	if e != nil {
		return nil, e
	}
	if root != held.Root {
		a.log.Error("ledger: a reader's signed checkpoint contradicts the log", "origin", h.Origin, "held", held.String())
		return nil, httpjson.Errorf(http.StatusConflict, CodeCheckpointInconsistent,
			"your ledger's first %d entries are not the ones the checkpoint you hold vouches for: keep that checkpoint, it is evidence", held.Size)
	}
	c, e := h.prove(ctx, held.Size, max(h.Checkpoint.Size, held.Size))
	if e != nil {
		return nil, e
	}
	c.Held = &held
	return c, nil
}

// openHeld verifies a reader's checkpoint under the tenant's keys that
// are not revoked. One signed only by a revoked key is refused with its
// own code: the key may have signed it after it leaked.
func (h *head) openHeld(signed []byte, keys []storage.PublicKey) (ledgerlog.Checkpoint, *httpjson.Error) {
	if len(signed) == 0 {
		return ledgerlog.Checkpoint{}, httpjson.Errorf(http.StatusBadRequest, CodeInvalidCheckpoint, "send the signed checkpoint you hold")
	}
	good, revoked, err := verifiers(keys)
	if err != nil {
		return ledgerlog.Checkpoint{}, internal(err, "reading the ledger keys failed")
	}
	cp, err := ledgerlog.OpenCheckpoint(signed, h.Origin, good)
	if err == nil {
		return cp, nil
	}
	if revoked != nil {
		if _, rerr := ledgerlog.OpenCheckpoint(signed, h.Origin, revoked); rerr == nil {
			return ledgerlog.Checkpoint{}, httpjson.Errorf(http.StatusBadRequest, CodeCheckpointKeyRevoked,
				"the checkpoint you hold is signed only by a key that was revoked as compromised")
		}
	}
	return ledgerlog.Checkpoint{}, httpjson.Errorf(http.StatusBadRequest, CodeInvalidCheckpoint, "%s", trimPrefix(err))
}

// trimPrefix drops ledgerlog's "ledgerlog: " from an error shown to people.
func trimPrefix(err error) string {
	const p = "ledgerlog: "
	s := err.Error()
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

var errNoKeys = errors.New("the tenant has no ledger keys")
