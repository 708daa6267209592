package ledgerlog

import (
	"fmt"
	"sync"

	"golang.org/x/mod/sumdb/tlog"
)

// MemoryTree is an RFC 6962 tree held in memory as tlog's stored hashes:
// every complete subtree's hash, about 2n hashes of 32 bytes for n leaves.
// It is what Verify rebuilds from an export, what tests use as a ledger, and
// a HashReader for the proof helpers. It is safe for concurrent use.
type MemoryTree struct {
	mu     sync.RWMutex
	n      uint64
	hashes []tlog.Hash
}

// NewMemoryTree returns an empty tree with room for about n leaves.
func NewMemoryTree(n int) *MemoryTree {
	if n < 0 {
		n = 0
	}
	return &MemoryTree{hashes: make([]tlog.Hash, 0, 2*n)}
}

// Size is the number of leaves.
func (t *MemoryTree) Size() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.n
}

// Append adds a leaf and returns its index.
func (t *MemoryTree) Append(leaf []byte) (uint64, error) {
	return t.AppendHash(LeafHash(leaf))
}

// AppendHash adds a leaf by its leaf hash and returns its index.
func (t *MemoryTree) AppendHash(h tlog.Hash) (uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n >= MaxIndex {
		return 0, fmt.Errorf("ledgerlog: tree is full")
	}
	add, err := tlog.StoredHashesForRecordHash(int64(t.n), h, unlocked{t})
	if err != nil {
		return 0, fmt.Errorf("ledgerlog: appending leaf %d: %w", t.n, err)
	}
	t.hashes = append(t.hashes, add...)
	t.n++
	return t.n - 1, nil
}

// LeafHashAt returns the hash of leaf i.
func (t *MemoryTree) LeafHashAt(i uint64) (tlog.Hash, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if i >= t.n {
		return tlog.Hash{}, fmt.Errorf("ledgerlog: leaf %d of a tree of %d", i, t.n)
	}
	return t.hashes[tlog.StoredHashIndex(0, int64(i))], nil
}

// ReadHashes implements tlog.HashReader.
func (t *MemoryTree) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return unlocked{t}.ReadHashes(indexes)
}

// unlocked reads a tree whose lock the caller holds.
type unlocked struct{ t *MemoryTree }

func (u unlocked) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(u.t.hashes)) {
			return nil, fmt.Errorf("ledgerlog: stored hash %d of %d", x, len(u.t.hashes))
		}
		out[i] = u.t.hashes[x]
	}
	return out, nil
}

// Root is the root of the first size leaves (RFC 6962: SHA-256 of nothing
// for the empty tree).
func (t *MemoryTree) Root(size uint64) (tlog.Hash, error) {
	if size > t.Size() {
		return tlog.Hash{}, fmt.Errorf("ledgerlog: root of %d leaves in a tree of %d", size, t.Size())
	}
	return TreeHash(t, size)
}

// Checkpoint returns the unsigned checkpoint of the first size leaves.
func (t *MemoryTree) Checkpoint(origin string, size uint64) (Checkpoint, error) {
	root, err := t.Root(size)
	if err != nil {
		return Checkpoint{}, err
	}
	return Checkpoint{Origin: origin, Size: size, Root: root}, nil
}

// InclusionProof proves leaf index in the tree of the first size leaves.
func (t *MemoryTree) InclusionProof(index, size uint64) (tlog.RecordProof, error) {
	if size > t.Size() {
		return nil, fmt.Errorf("ledgerlog: inclusion proof in %d leaves of a tree of %d", size, t.Size())
	}
	return ProveInclusion(t, index, size)
}

// ConsistencyProof proves that the first oldSize leaves are a prefix of the
// first newSize.
func (t *MemoryTree) ConsistencyProof(oldSize, newSize uint64) (tlog.TreeProof, error) {
	if newSize > t.Size() {
		return nil, fmt.Errorf("ledgerlog: consistency proof to %d leaves in a tree of %d", newSize, t.Size())
	}
	return ProveConsistency(t, oldSize, newSize)
}
