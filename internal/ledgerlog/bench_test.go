package ledgerlog

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"
)

// Benchmarks. Run them explicitly; they build trees of up to 10^6 leaves
// (the 10^6-entry export takes about 10 s to build and 2.7 GB of memory),
// so the largest sizes are skipped under -short:
//
//	go test -run '^$' -bench Proofs -benchtime 20000x ./internal/ledgerlog/
//	go test -run '^$' -bench VerifyExport -benchtime 1x -timeout 30m ./internal/ledgerlog/

var benchSizes = []uint64{1_000, 100_000, 1_000_000}

// hashTree builds a tree of n synthetic leaves; only hashes are needed for
// proofs.
func hashTree(n uint64) *MemoryTree {
	t := NewMemoryTree(int(n))
	var b [8]byte
	for i := uint64(0); i < n; i++ {
		binary.BigEndian.PutUint64(b[:], i)
		_, _ = t.AppendHash(sha256.Sum256(b[:]))
	}
	return t
}

func BenchmarkProofs(b *testing.B) {
	for _, n := range benchSizes {
		if n > 100_000 && testing.Short() {
			b.Logf("skipping n=%d under -short", n)
			continue
		}
		tree := hashTree(n)
		root, _ := tree.Root(n)
		cp := Checkpoint{Size: n, Root: root}
		old := n/2 + 1 // not a power of two: the general case
		oldRoot, _ := tree.Root(old)
		oldCP := Checkpoint{Size: old, Root: oldRoot}
		index := func(i int) uint64 { return uint64(i) * 7919 % n }

		b.Run(fmt.Sprintf("n=%d/inclusion/prove", n), func(b *testing.B) {
			var size int
			for i := 0; b.Loop(); i++ {
				p, err := tree.InclusionProof(index(i), n)
				if err != nil {
					b.Fatal(err)
				}
				size = len(p)
			}
			b.ReportMetric(float64(size), "hashes/proof")
		})
		proofs := make([]tlog.RecordProof, 64)
		leaves := make([]tlog.Hash, 64)
		for i := range proofs {
			proofs[i], _ = tree.InclusionProof(index(i), n)
			leaves[i], _ = tree.LeafHashAt(index(i))
		}
		b.Run(fmt.Sprintf("n=%d/inclusion/verify", n), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				k := i % len(proofs)
				if err := VerifyInclusion(proofs[k], cp, index(k), leaves[k]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(proofs[0])), "hashes/proof")
		})
		b.Run(fmt.Sprintf("n=%d/consistency/prove", n), func(b *testing.B) {
			var size int
			for b.Loop() {
				p, err := tree.ConsistencyProof(old, n)
				if err != nil {
					b.Fatal(err)
				}
				size = len(p)
			}
			b.ReportMetric(float64(size), "hashes/proof")
		})
		cproof, _ := tree.ConsistencyProof(old, n)
		b.Run(fmt.Sprintf("n=%d/consistency/verify", n), func(b *testing.B) {
			for b.Loop() {
				if err := VerifyConsistency(cproof, oldCP, cp); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(cproof)), "hashes/proof")
		})
	}
}

// benchExport builds an n-entry export of envelope entries with openings,
// each leaf as the ledger service would write it.
func benchExport(b *testing.B, n uint64) *Export {
	l := newTestLog(b, newKeyStore(3), "a.example", "alice")
	l.entries = make([]ExportEntry, 0, n)
	l.tree = NewMemoryTree(int(n))
	counterparty := Origin("b.example", "bob")
	for k := uint64(0); k < n; k++ {
		// Every envelope entry is followed by its decision, as the writer
		// records them.
		if k%2 == 1 {
			l.add(decidedEntry(int(k-1), "b.example"), nil)
			continue
		}
		var d [32]byte
		binary.BigEndian.PutUint64(d[:], k)
		d = sha256.Sum256(d[:])
		l.add(Entry{Kind: KindSendRequested, EnvelopeID: fmt.Sprintf("0192f0c4-7b1e-7a00-8000-%012d", k),
			Counterparty: counterparty}, &d)
	}
	return l.export()
}

func BenchmarkVerifyExport(b *testing.B) {
	for _, n := range []uint64{100_000, 1_000_000} {
		if n > 100_000 && testing.Short() {
			b.Logf("skipping n=%d under -short", n)
			continue
		}
		start := time.Now()
		x := benchExport(b, n)
		b.Logf("built a %d-entry export in %v", n, time.Since(start).Round(time.Millisecond))
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for b.Loop() {
				if r, err := Verify(x, nil); err != nil {
					b.Fatalf("%v\n%s", err, problems(r))
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}
