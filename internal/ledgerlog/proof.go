package ledgerlog

import (
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

// MaxProofHashes bounds a proof read from outside: a proof for a tree of
// up to 2^53 leaves has at most about 2×53 hashes.
const MaxProofHashes = 128

// Proof helpers over any tlog.HashReader (a MemoryTree, or the ledger
// service's stored hashes). They take uint64 sizes, as checkpoints do, and
// refuse sizes that do not fit the tree math instead of panicking.

// TreeHash is the root of the first size leaves; SHA-256("") when size is 0.
func TreeHash(r tlog.HashReader, size uint64) (tlog.Hash, error) {
	if size > MaxIndex {
		return tlog.Hash{}, fmt.Errorf("ledgerlog: tree size %d too large", size)
	}
	h, err := tlog.TreeHash(int64(size), r)
	if err != nil {
		return tlog.Hash{}, fmt.Errorf("ledgerlog: root of %d leaves: %w", size, err)
	}
	return h, nil
}

// ProveInclusion proves leaf index in the tree of size leaves.
func ProveInclusion(r tlog.HashReader, index, size uint64) (tlog.RecordProof, error) {
	if index >= size || size > MaxIndex {
		return nil, fmt.Errorf("ledgerlog: inclusion proof of leaf %d in a tree of %d", index, size)
	}
	p, err := tlog.ProveRecord(int64(size), int64(index), r)
	if err != nil {
		return nil, fmt.Errorf("ledgerlog: inclusion proof of leaf %d in %d: %w", index, size, err)
	}
	return p, nil
}

// VerifyInclusion checks that leafHash is leaf index of the tree c.
func VerifyInclusion(p tlog.RecordProof, c Checkpoint, index uint64, leafHash tlog.Hash) error {
	if index >= c.Size || c.Size > MaxIndex {
		return fmt.Errorf("ledgerlog: leaf %d is outside the checkpoint's %d leaves", index, c.Size)
	}
	if len(p) > MaxProofHashes {
		return fmt.Errorf("ledgerlog: inclusion proof of %d hashes", len(p))
	}
	if err := tlog.CheckRecord(p, int64(c.Size), c.Root, int64(index), leafHash); err != nil {
		return fmt.Errorf("ledgerlog: leaf %d is not in %s: %w", index, c, err)
	}
	return nil
}

// ProveConsistency proves that the tree of oldSize leaves is a prefix of
// the tree of newSize leaves. An empty old tree needs no proof.
func ProveConsistency(r tlog.HashReader, oldSize, newSize uint64) (tlog.TreeProof, error) {
	if oldSize > newSize || newSize > MaxIndex {
		return nil, fmt.Errorf("ledgerlog: consistency proof from %d to %d leaves", oldSize, newSize)
	}
	if oldSize == 0 {
		return tlog.TreeProof{}, nil
	}
	p, err := tlog.ProveTree(int64(newSize), int64(oldSize), r)
	if err != nil {
		return nil, fmt.Errorf("ledgerlog: consistency proof from %d to %d: %w", oldSize, newSize, err)
	}
	return p, nil
}

// VerifyConsistency checks that checkpoint older is a prefix of newer: same
// origin, not larger, and the proof joins the two roots. Equal sizes need
// equal roots.
func VerifyConsistency(p tlog.TreeProof, older, newer Checkpoint) error {
	if older.Origin != newer.Origin {
		return fmt.Errorf("ledgerlog: checkpoints of different logs, %s and %s", quote(older.Origin), quote(newer.Origin))
	}
	if older.Size > newer.Size {
		return fmt.Errorf("ledgerlog: checkpoint of %d leaves is older than the one of %d held before (rollback)", newer.Size, older.Size)
	}
	if newer.Size > MaxIndex {
		return fmt.Errorf("ledgerlog: checkpoint size %d too large", newer.Size)
	}
	if len(p) > MaxProofHashes {
		return fmt.Errorf("ledgerlog: consistency proof of %d hashes", len(p))
	}
	if older.Size == 0 {
		if older.Root != emptyRoot() {
			return fmt.Errorf("ledgerlog: empty checkpoint with a non-empty root")
		}
		return nil
	}
	if err := tlog.CheckTree(p, int64(newer.Size), newer.Root, int64(older.Size), older.Root); err != nil {
		return fmt.Errorf("ledgerlog: %s is not a prefix of %s: %w", older, newer, err)
	}
	return nil
}

// emptyRoot is the RFC 6962 root of the empty tree.
func emptyRoot() tlog.Hash {
	h, _ := tlog.TreeHash(0, nil)
	return h
}
