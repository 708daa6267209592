package ledgerlog

import (
	"crypto/sha256"
	"fmt"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

// An independent RFC 6962 / RFC 9162 implementation, written from the RFC
// text, to check that MemoryTree and its proofs are the standard ones (and
// so that docs/ledger.md's "verify by hand" holds).

func refLeaf(b []byte) tlog.Hash { return sha256.Sum256(append([]byte{0}, b...)) }

func refNode(l, r tlog.Hash) tlog.Hash {
	return sha256.Sum256(append(append([]byte{1}, l[:]...), r[:]...))
}

// refRoot is MTH(D[n]) of RFC 6962 §2.1.
func refRoot(leaves []tlog.Hash) tlog.Hash {
	switch n := len(leaves); n {
	case 0:
		return sha256.Sum256(nil)
	case 1:
		return leaves[0]
	default:
		k := 1
		for k*2 < n {
			k *= 2
		}
		return refNode(refRoot(leaves[:k]), refRoot(leaves[k:]))
	}
}

// refVerifyInclusion is RFC 9162 §2.1.3.2.
func refVerifyInclusion(index, size uint64, leaf tlog.Hash, path []tlog.Hash, root tlog.Hash) bool {
	if index >= size {
		return false
	}
	fn, sn, r := index, size-1, leaf
	for _, p := range path {
		if sn == 0 {
			return false
		}
		if fn&1 == 1 || fn == sn {
			r = refNode(p, r)
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			r = refNode(r, p)
		}
		fn >>= 1
		sn >>= 1
	}
	return sn == 0 && r == root
}

// refVerifyConsistency is RFC 9162 §2.1.4.2 (first < second).
func refVerifyConsistency(first, second uint64, firstHash, secondHash tlog.Hash, path []tlog.Hash) bool {
	if first == 0 || first >= second {
		return false
	}
	if first&(first-1) == 0 {
		path = append([]tlog.Hash{firstHash}, path...)
	}
	if len(path) == 0 {
		return false
	}
	fn, sn := first-1, second-1
	for fn&1 == 1 {
		fn >>= 1
		sn >>= 1
	}
	fr, sr := path[0], path[0]
	for _, c := range path[1:] {
		if sn == 0 {
			return false
		}
		if fn&1 == 1 || fn == sn {
			fr = refNode(c, fr)
			sr = refNode(c, sr)
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			sr = refNode(sr, c)
		}
		fn >>= 1
		sn >>= 1
	}
	return fr == firstHash && sr == secondHash && sn == 0
}

func TestMemoryTreeAgainstRFC(t *testing.T) {
	const max = 40
	tree := NewMemoryTree(0)
	var leaves []tlog.Hash
	for n := uint64(0); n <= max; n++ {
		root, err := tree.Root(n)
		if err != nil {
			t.Fatal(err)
		}
		if want := refRoot(leaves); root != want {
			t.Fatalf("root of %d: %x, RFC %x", n, root, want)
		}
		for i := uint64(0); i < n; i++ {
			p, err := tree.InclusionProof(i, n)
			if err != nil {
				t.Fatal(err)
			}
			if !refVerifyInclusion(i, n, leaves[i], p, root) {
				t.Fatalf("inclusion %d in %d: RFC 9162 rejects tlog's proof", i, n)
			}
			if err := VerifyInclusion(p, Checkpoint{Size: n, Root: root}, i, leaves[i]); err != nil {
				t.Fatal(err)
			}
			if err := VerifyInclusion(p, Checkpoint{Size: n, Root: root}, i, refLeaf([]byte("other"))); err == nil {
				t.Fatalf("inclusion %d in %d: wrong leaf accepted", i, n)
			}
			if n > 1 {
				if err := VerifyInclusion(p, Checkpoint{Size: n, Root: root}, (i+1)%n, leaves[i]); err == nil {
					t.Fatalf("inclusion %d in %d: wrong index accepted", i, n)
				}
			}
		}
		for m := uint64(1); m < n; m++ {
			p, err := tree.ConsistencyProof(m, n)
			if err != nil {
				t.Fatal(err)
			}
			old := refRoot(leaves[:m])
			if !refVerifyConsistency(m, n, old, root, p) {
				t.Fatalf("consistency %d→%d: RFC 9162 rejects tlog's proof", m, n)
			}
			if err := VerifyConsistency(p, Checkpoint{Size: m, Root: old}, Checkpoint{Size: n, Root: root}); err != nil {
				t.Fatal(err)
			}
			bad := old
			bad[0] ^= 1
			if err := VerifyConsistency(p, Checkpoint{Size: m, Root: bad}, Checkpoint{Size: n, Root: root}); err == nil {
				t.Fatalf("consistency %d→%d: wrong old root accepted", m, n)
			}
		}
		leaf := []byte(fmt.Sprintf("leaf %d", n))
		if _, err := tree.Append(leaf); err != nil {
			t.Fatal(err)
		}
		leaves = append(leaves, refLeaf(leaf))
		if h, _ := tree.LeafHashAt(n); h != leaves[n] {
			t.Fatalf("leaf hash %d", n)
		}
	}
}

func TestProofInputsRefused(t *testing.T) {
	tree := NewMemoryTree(4)
	for i := range 4 {
		if _, err := tree.Append([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	root, _ := tree.Root(4)
	for _, c := range []struct{ i, n uint64 }{{4, 4}, {0, 5}, {0, 0}, {1 << 60, 1 << 61}} {
		if _, err := tree.InclusionProof(c.i, c.n); err == nil {
			t.Errorf("inclusion %d in %d accepted", c.i, c.n)
		}
	}
	for _, c := range []struct{ m, n uint64 }{{3, 2}, {1, 5}} {
		if _, err := tree.ConsistencyProof(c.m, c.n); err == nil {
			t.Errorf("consistency %d→%d accepted", c.m, c.n)
		}
	}
	if err := VerifyInclusion(nil, Checkpoint{Size: 4, Root: root}, 9, root); err == nil {
		t.Error("index beyond size accepted")
	}
	if err := VerifyInclusion(make(tlog.RecordProof, 200), Checkpoint{Size: 4, Root: root}, 1, root); err == nil {
		t.Error("huge proof accepted")
	}
	if err := VerifyConsistency(nil, Checkpoint{Size: 4, Root: root}, Checkpoint{Size: 3, Root: root}); err == nil {
		t.Error("rollback accepted")
	}
	if err := VerifyConsistency(nil, Checkpoint{Size: 4, Root: root}, Checkpoint{Size: 4, Root: root}); err != nil {
		t.Errorf("equal checkpoints: %v", err)
	}
	other := root
	other[0] ^= 1
	if err := VerifyConsistency(nil, Checkpoint{Size: 4, Root: root}, Checkpoint{Size: 4, Root: other}); err == nil {
		t.Error("same size, different roots accepted")
	}
	if err := VerifyConsistency(nil, Checkpoint{Origin: "x"}, Checkpoint{Origin: "y"}); err == nil {
		t.Error("different logs accepted")
	}
	if h, _ := tree.Root(0); h != sha256.Sum256(nil) {
		t.Error("empty root is not SHA-256 of nothing")
	}
}
