// Package proto_test checks that the committed generated code is exactly what
// the pinned generators produce from proto/.
package proto_test

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedCodeIsFresh regenerates the protobuf code into a temporary
// directory with the pinned buf and plugins and fails on any difference
// from the committed gen/ tree. `make test` passes a prebuilt buf in
// ALPD_BUF; without it the test builds buf from tools/buf/go.mod.
func TestGeneratedCodeIsFresh(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: not regenerating protobuf code")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	buf := os.Getenv("ALPD_BUF")
	if buf == "" {
		buf = filepath.Join(t.TempDir(), "buf")
		build := exec.Command("go", "build", "-o", buf, "github.com/bufbuild/buf/cmd/buf")
		build.Dir = filepath.Join(root, "tools", "buf")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building buf: %v\n%s", err, out)
		}
	}
	out := t.TempDir()
	cmd := exec.Command(buf, "generate", "--output", out)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("buf generate: %v\n%s", err, msg)
	}
	fresh := files(t, filepath.Join(out, "gen"))
	committed := files(t, filepath.Join(root, "gen"))
	for name, data := range fresh {
		have, ok := committed[name]
		switch {
		case !ok:
			t.Errorf("gen/%s is generated but not committed: run make proto", name)
		case !bytes.Equal(have, data):
			t.Errorf("gen/%s differs from a fresh generation: run make proto", name)
		}
	}
	for name := range committed {
		if _, ok := fresh[name]; !ok {
			t.Errorf("gen/%s is committed but no longer generated: run make proto", name)
		}
	}
}

// files reads every generated Go file under dir.
func files(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".go" {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		data, err := os.ReadFile(path)
		out[rel] = data
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
