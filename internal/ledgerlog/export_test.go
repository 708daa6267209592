package ledgerlog

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
)

func exportText(t *testing.T, x *Export) string {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteExport(&buf, x); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestExportRoundTripExact(t *testing.T) {
	p := buildPair(t, 2, nil)
	x := p.a.export()
	text := exportText(t, x)
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) != 1+len(x.Entries) || !strings.HasPrefix(lines[0], `{"type":"alp-ledger-export/v1",`) {
		t.Fatalf("%d lines: %s", len(lines), lines[0])
	}
	y, err := ReadExport(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	for i := range x.Entries {
		if !bytes.Equal(x.Entries[i].Leaf, y.Entries[i].Leaf) || x.Entries[i].LeafHash != y.Entries[i].LeafHash ||
			!bytes.Equal(x.Entries[i].Salt, y.Entries[i].Salt) || !bytes.Equal(x.Entries[i].Digest, y.Entries[i].Digest) {
			t.Fatalf("entry %d changed in the round trip", i)
		}
	}
	if string(y.Checkpoint) != string(x.Checkpoint) || y.Log != x.Log || len(y.Keys) != 1 {
		t.Fatal("header changed")
	}
	if exportText(t, y) != text {
		t.Fatal("re-export differs")
	}
}

func TestReadExportStrict(t *testing.T) {
	p := buildPair(t, 2, nil)
	text := exportText(t, p.a.export())
	lines := strings.SplitAfter(text, "\n")
	header := lines[0]
	for name, bad := range map[string]string{
		"empty":             "",
		"wrong type":        strings.Replace(text, ExportType, "alp-ledger-export/v2", 1),
		"unknown field":     strings.Replace(text, `{"type"`, `{"x":1,"type"`, 1),
		"count too high":    strings.Replace(text, `"entries":6`, `"entries":7`, 1),
		"count too low":     strings.Replace(text, `"entries":6`, `"entries":5`, 1),
		"renumbered":        header + strings.Replace(lines[1], `{"i":0,`, `{"i":1,`, 1) + strings.Join(lines[2:], ""),
		"bad leaf hash":     header + strings.Replace(lines[1], `"leaf_hash":"`, `"leaf_hash":"AA`, 1) + strings.Join(lines[2:], ""),
		"salt w/o digest":   header + strings.Replace(lines[1], `,"digest":"`, `,"x":"`, 1) + strings.Join(lines[2:], ""),
		"trailing garbage":  text + "{}\n",
		"blank line":        header + "\n" + strings.Join(lines[1:], ""),
		"no keys":           strings.Replace(text, `"keys":[`, `"keys":[],"k":[`, 1),
		"uppercase digest":  header + strings.Replace(lines[1], hex.EncodeToString(p.a.entries[0].Digest), strings.ToUpper(hex.EncodeToString(p.a.entries[0].Digest)), 1) + strings.Join(lines[2:], ""),
		"salt not base64":   header + strings.Replace(lines[1], base64.StdEncoding.EncodeToString(p.a.entries[0].Salt), "!!", 1) + strings.Join(lines[2:], ""),
		"header not object": "[]\n",
	} {
		if _, err := ReadExport(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := ReadExportLimits(strings.NewReader(text), ReadLimits{MaxLineBytes: 200, MaxEntries: 100}); err == nil || !strings.Contains(err.Error(), "longer than 200 bytes") {
		t.Errorf("line limit: %v", err)
	}
	if _, err := ReadExportLimits(strings.NewReader(text), ReadLimits{MaxLineBytes: 1 << 20, MaxEntries: 5}); err == nil || !strings.Contains(err.Error(), "limit is 5") {
		t.Errorf("entry limit: %v", err)
	}
}

func TestExportWriterChecks(t *testing.T) {
	p := buildPair(t, 1, nil)
	x := p.a.export()
	var buf bytes.Buffer
	w, err := NewExportWriter(&buf, x.Log, x.Keys, x.Checkpoint, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ExportEntry{Leaf: x.Entries[0].Leaf, Salt: []byte{1}, Digest: []byte{2}}); err == nil {
		t.Error("short opening written")
	}
	if err := w.Write(ExportEntry{Leaf: []byte{0xff}}); err == nil {
		t.Error("invalid UTF-8 leaf written")
	}
	if err := w.Close(); err == nil {
		t.Error("short export closed without error")
	}
	if _, err := NewExportWriter(&buf, "nope", x.Keys, x.Checkpoint, 1); err == nil {
		t.Error("bad origin")
	}
	if _, err := NewExportWriter(&buf, x.Log, nil, x.Checkpoint, 1); err == nil {
		t.Error("no keys")
	}
}

// An export after erasure: the openings are gone, the ledger still
// verifies, and nothing derived from an envelope's content remains but
// the salted commitments.
func TestErasedExport(t *testing.T) {
	p := buildPair(t, 3, nil)
	x := p.a.export()
	var secrets [][]byte
	for i := range x.Entries {
		if x.Entries[i].HasOpening() {
			secrets = append(secrets, x.Entries[i].Salt, x.Entries[i].Digest)
		}
		x.Entries[i].Salt, x.Entries[i].Digest = nil, nil
	}
	if len(secrets) != 6 {
		t.Fatalf("%d secrets", len(secrets))
	}
	text := exportText(t, x)
	y, err := ReadExport(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Verify(y, nil, WithCounterpartyExport(p.b.export()))
	if err != nil {
		t.Fatalf("%v\n%s", err, problems(r))
	}
	if r.Openings != 0 || r.Erased != 3 {
		t.Fatalf("openings %d erased %d", r.Openings, r.Erased)
	}
	for k := range 3 {
		d := testDigest(t, k, addrA, addrB)
		secrets = append(secrets, d[:])
	}
	for _, s := range secrets {
		for _, enc := range []string{hex.EncodeToString(s), base64.StdEncoding.EncodeToString(s), base64.RawURLEncoding.EncodeToString(s)} {
			if strings.Contains(text, enc) {
				t.Fatalf("erased export still holds %s", enc)
			}
		}
	}
	for _, body := range []string{"sync 0", "2026-12-01T10:00:00Z", "duration_min\":30"} {
		if strings.Contains(text, body) {
			t.Fatalf("erased export holds body content %q", body)
		}
	}
	// Match still works on the erased side (digests are just not compared).
	if m := Match(y, p.b.export()); !m.OK() {
		t.Fatalf("%s\n%s", m.Verdict(), matchRows(m))
	}
}
