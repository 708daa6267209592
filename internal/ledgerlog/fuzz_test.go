package ledgerlog

import (
	"bytes"
	"strings"
	"testing"
)

// Fuzz targets: hostile input must give an error, never a panic, and what
// is accepted must be canonical. The seed corpus runs with the normal
// tests; run longer with e.g. go test -fuzz FuzzParseEntry ./internal/ledgerlog/.

func FuzzParseEntry(f *testing.F) {
	p := buildPair(f, 1, nil)
	for _, e := range p.a.entries {
		f.Add(e.Leaf)
	}
	if leaf, err := sampleDelivery().Canonical(); err == nil {
		f.Add(leaf)
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"v":1,"i":1e400}`))
	f.Fuzz(func(t *testing.T, leaf []byte) {
		e, err := ParseEntry(leaf)
		if err != nil {
			return
		}
		again, err := e.Canonical()
		if err != nil || !bytes.Equal(again, leaf) {
			t.Fatalf("accepted a leaf that does not round-trip: %q", leaf)
		}
	})
}

func FuzzReadExport(f *testing.F) {
	p := buildPair(f, 1, nil)
	var buf bytes.Buffer
	if err := WriteExport(&buf, p.a.export()); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.String())
	f.Add(`{"type":"alp-ledger-export/v1","log":"a.example/alp/ledger/x","keys":[{}],"checkpoint":"x","entries":99999999}`)
	f.Fuzz(func(t *testing.T, text string) {
		x, err := ReadExportLimits(strings.NewReader(text), ReadLimits{MaxLineBytes: 1 << 20, MaxEntries: 1000})
		if err != nil {
			return
		}
		_, _ = Verify(x, nil)
		_ = Match(x, x)
	})
}

func FuzzCheckpoint(f *testing.F) {
	p := buildPair(f, 1, nil)
	f.Add(string(p.a.checkpoint()))
	f.Fuzz(func(t *testing.T, text string) {
		_, _ = OpenCheckpoint([]byte(text), p.a.origin, p.a.verifiers())
		_, _ = CheckpointText([]byte(text))
	})
}
