package ledgerlog

import (
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

// checkTree rebuilds the tree and compares it with the checkpoint. When the
// leaves do not reproduce the root but the export's recorded leaf hashes
// do, those hashes are authenticated by the signed root, and every leaf
// whose bytes do not hash to its recorded hash is named.
func (v *verified) checkTree() []Problem {
	r := v.report
	var ps []Problem
	n := uint64(len(v.x.Entries))
	computed := NewMemoryTree(len(v.x.Entries))
	for i := range v.entries {
		if _, err := computed.AppendHash(v.entries[i].computed); err != nil {
			r.ledgerProblem("rebuilding the tree: %v", err)
			return ps
		}
	}
	if !r.CheckpointOK {
		return ps
	}
	cp := r.Checkpoint
	if cp.Size > n {
		r.ledgerProblem("the checkpoint covers %d entries but the export holds only %d: entries %d..%d are missing", cp.Size, n, n, cp.Size-1)
		return ps
	}
	r.Unsigned = n - cp.Size
	root, err := computed.Root(cp.Size)
	if err != nil {
		r.ledgerProblem("%v", err)
		return ps
	}
	if root == cp.Root {
		r.RootOK = true
		v.tree = computed
		for i := uint64(0); i < n; i++ {
			if v.recordedHash(i) != v.entries[i].computed {
				// The leaf is fine; the export line's hash is not.
				ps = append(ps, Problem{Index: int64(i), EnvelopeID: v.entries[i].envelopeID,
					Msg: "the export's leaf_hash is not the leaf's hash (the leaf itself is in the signed tree)"})
			}
		}
		return ps
	}
	recorded := NewMemoryTree(int(cp.Size))
	for i := uint64(0); i < cp.Size; i++ {
		if _, err := recorded.AppendHash(v.recordedHash(i)); err != nil {
			r.ledgerProblem("rebuilding the tree: %v", err)
			return ps
		}
	}
	if rr, err := recorded.Root(cp.Size); err != nil || rr != cp.Root {
		r.ledgerProblem("the entries do not reproduce the checkpoint's root at size %d, nor do the export's leaf hashes: "+
			"entries were changed, added or removed, and which ones cannot be told from this export alone", cp.Size)
		return ps
	}
	v.tree = recorded
	for i := uint64(0); i < cp.Size; i++ {
		if v.recordedHash(i) != v.entries[i].computed {
			ps = append(ps, Problem{Index: int64(i), EnvelopeID: v.entries[i].envelopeID,
				Msg: "leaf hash does not match the checkpoint's tree: the leaf was changed after it was signed"})
		}
	}
	return ps
}

// recordedHash is the leaf hash the export records for entry i; an
// in-memory export may leave it zero, meaning "not recorded".
func (v *verified) recordedHash(i uint64) tlog.Hash {
	if h := v.x.Entries[i].LeafHash; h != (tlog.Hash{}) {
		return h
	}
	return v.entries[i].computed
}

// checkSince demands that the export's checkpoint extends one the reader
// held before: the reader's evidence against a rewritten history.
func (v *verified) checkSince(since Checkpoint) {
	r := v.report
	if since.Origin != v.x.Log {
		r.ledgerProblem("the earlier checkpoint is of %s, not of this log", quote(since.Origin))
		return
	}
	if !r.CheckpointOK {
		return
	}
	cp := r.Checkpoint
	if since.Size > cp.Size {
		r.ledgerProblem("the checkpoint (size %d) is smaller than the one held before (size %d): the log was rolled back or forked", cp.Size, since.Size)
		return
	}
	if v.tree == nil {
		r.ledgerProblem("consistency with the earlier checkpoint (size %d) not checked: the tree does not verify", since.Size)
		return
	}
	proof, err := ProveConsistency(v.tree, since.Size, cp.Size)
	if err == nil {
		err = VerifyConsistency(proof, since, cp)
	}
	if err != nil {
		r.ledgerProblem("not consistent with the checkpoint held before (size %d, root %s): the first %d entries are not the ones signed then — "+
			"the log was rewritten (%v)", since.Size, encodeHash(since.Root), since.Size, err)
		return
	}
	r.Consistent = true
}

// ConsistentWith checks only that the export's leaves extend a checkpoint
// held earlier: the leaf hashes of the first held.Size entries give
// held.Root. It parses nothing and checks no signature — use it beside
// Verify, e.g. to decide whether a reader may replace the checkpoint it
// remembers.
func ConsistentWith(x *Export, held Checkpoint) error {
	if held.Origin != x.Log {
		return fmt.Errorf("ledgerlog: checkpoint of %s, export of %s", quote(held.Origin), x.Log)
	}
	if held.Size > uint64(len(x.Entries)) {
		return fmt.Errorf("ledgerlog: the export holds %d entries, fewer than the %d of checkpoint %s", len(x.Entries), held.Size, held)
	}
	t := NewMemoryTree(int(held.Size))
	for i := uint64(0); i < held.Size; i++ {
		if _, err := t.Append(x.Entries[i].Leaf); err != nil {
			return err
		}
	}
	root, err := t.Root(held.Size)
	if err != nil {
		return err
	}
	if root != held.Root {
		return fmt.Errorf("ledgerlog: the export's first %d entries are not those of checkpoint %s", held.Size, held)
	}
	return nil
}
