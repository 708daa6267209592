package ledgerlog

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The examples in docs/ledger.md are generated here, from fixed keys,
// salts and times, so they are real and stay accurate:
//
//	go test ./internal/ledgerlog/ -run TestDocExamples -update
//
// rewrites testdata/examples/; the test fails when docs/ledger.md no longer
// contains an example verbatim.

var update = flag.Bool("update", false, "rewrite testdata/examples")

const examplesDir = "testdata/examples"

// examplePair is one exchange between alice@a.example and bob@b.example,
// each envelope entry followed by policy's decision.
func examplePair(t *testing.T) *pair {
	return buildPair(t, 1, &pairHooks{decisions: true})
}

func pretty(t *testing.T, b []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		t.Fatal(err)
	}
	return out.String() + "\n"
}

func exampleFiles(t *testing.T) map[string]string {
	p := examplePair(t)
	a := p.a
	x := a.export()
	files := map[string]string{}
	files["entry.json"] = string(a.entries[0].Leaf) + "\n"
	files["entry-pretty.json"] = pretty(t, a.entries[0].Leaf)
	files["decided-pretty.json"] = pretty(t, a.entries[1].Leaf)
	files["deliverable-pretty.json"] = pretty(t, p.b.entries[1].Leaf)
	// Bob's company agent acknowledging the envelope's item.
	delivered := Entry{V: EntryVersion, Log: p.b.origin, Index: p.b.tree.Size(), Kind: KindInboxDelivered,
		SourceEvent: "evt-b.example-ack-0", EnvelopeID: envID(0), Agent: "agt_7f3a9c", TrustClass: TrustClassCompany,
		HeldIDs: []string{p.b.entry(1).Held[0].ID}, Time: FormatTime(p.b.clock)}
	leaf, err := delivered.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	files["delivered-pretty.json"] = pretty(t, leaf)
	// A delivery between two people of one broker: the recipient's entry
	// carries the sender's commitment.
	local := localPair(t, 1, nil, nil)
	files["received-local-pretty.json"] = pretty(t, local.b.entries[0].Leaf)
	files["checkpoint.txt"] = string(x.Checkpoint)
	files["vkey.txt"] = a.key.Verifier + "\n"
	rc := a.entry(3).Receipt
	raw, _ := json.Marshal(rc)
	files["receipt.json"] = pretty(t, raw)
	var buf bytes.Buffer
	if err := WriteExport(&buf, x); err != nil {
		t.Fatal(err)
	}
	files["alice.jsonl"] = buf.String()
	buf.Reset()
	if err := WriteExport(&buf, p.b.export()); err != nil {
		t.Fatal(err)
	}
	files["bob.jsonl"] = buf.String()

	// The worked tree: four leaves.
	var tree strings.Builder
	var h [4][32]byte
	for i := range 4 {
		h[i] = LeafHash(a.entries[i].Leaf)
		fmt.Fprintf(&tree, "h%d   = SHA-256(00 || leaf %d)    = %s\n", i, i, hex.EncodeToString(h[i][:]))
	}
	h01, h23 := refNode(h[0], h[1]), refNode(h[2], h[3])
	root := refNode(h01, h23)
	fmt.Fprintf(&tree, "h01  = SHA-256(01 || h0 || h1)  = %s\n", hex.EncodeToString(h01[:]))
	fmt.Fprintf(&tree, "h23  = SHA-256(01 || h2 || h3)  = %s\n", hex.EncodeToString(h23[:]))
	fmt.Fprintf(&tree, "root = SHA-256(01 || h01 || h23) = %s\n", hex.EncodeToString(root[:]))
	fmt.Fprintf(&tree, "root, base64 (checkpoint line 3)   = %s\n", base64.StdEncoding.EncodeToString(root[:]))
	if r, _ := a.tree.Root(4); r != root {
		t.Fatal("worked example disagrees with the tree")
	}
	files["tree.txt"] = tree.String()

	var op strings.Builder
	fmt.Fprintf(&op, "salt       %s\n", base64.StdEncoding.EncodeToString(a.entries[0].Salt))
	fmt.Fprintf(&op, "digest     %s\n", hex.EncodeToString(a.entries[0].Digest))
	fmt.Fprintf(&op, "commitment %s\n", a.entry(0).Commitment)
	files["opening.txt"] = op.String()
	return files
}

func TestDocExamples(t *testing.T) {
	files := exampleFiles(t)
	if *update {
		if err := os.MkdirAll(examplesDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(examplesDir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, content := range files {
		got, err := os.ReadFile(filepath.Join(examplesDir, name))
		if err != nil || string(got) != content {
			t.Errorf("%s is stale (run with -update): %v", name, err)
		}
	}
	// The stored exports verify and match.
	a, err := ReadExport(strings.NewReader(files["alice.jsonl"]))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ReadExport(strings.NewReader(files["bob.jsonl"]))
	if err != nil {
		t.Fatal(err)
	}
	if m := Match(a, b); !m.OK() {
		t.Fatalf("examples do not match: %s\n%s", m.Verdict(), matchRows(m))
	}
	doc, err := os.ReadFile("../../docs/ledger.md")
	if err != nil {
		t.Fatalf("docs/ledger.md: %v", err)
	}
	for _, name := range []string{"entry-pretty.json", "decided-pretty.json", "deliverable-pretty.json", "delivered-pretty.json", "received-local-pretty.json", "checkpoint.txt", "receipt.json", "tree.txt", "opening.txt", "vkey.txt"} {
		if !bytes.Contains(doc, []byte(files[name])) {
			t.Errorf("docs/ledger.md does not contain testdata/examples/%s verbatim", name)
		}
	}
}

// TestVerifyByHand runs the shell recipe of docs/ledger.md (in
// testdata/verify-by-hand.sh) on the example export, where the tools it
// needs are installed.
func TestVerifyByHand(t *testing.T) {
	for _, tool := range []string{"bash", "jq", "xxd", "openssl", "sha256sum", "base64"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	cmd := exec.Command("bash", "testdata/verify-by-hand.sh", filepath.Join(examplesDir, "alice.jsonl"))
	cmd.Dir = "."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	tree, _ := os.ReadFile(filepath.Join(examplesDir, "tree.txt"))
	want := strings.Fields(strings.Split(string(tree), "\n")[6])
	if !strings.Contains(string(out), "root "+want[len(want)-1]) || !strings.Contains(string(out), "Signature Verified Successfully") ||
		!strings.Contains(string(out), "commitment of entry 0 opens") {
		t.Fatalf("unexpected output:\n%s", out)
	}
}
