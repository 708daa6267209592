package keystore

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

// newFile makes a key file with a few keys and returns its path and KEK.
func newFile(t *testing.T) (string, []byte, *FileStore) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.alpd")
	kek := GenerateKEK()
	ks, err := OpenFile(path, kek)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mustGenerate(t, ks, "example.org", fed)
	mustGenerate(t, ks, "example.org", data)
	if _, err := ks.Rotate(ctx, "example.org", fed); err != nil {
		t.Fatal(err)
	}
	mustGenerate(t, ks, "other.example", ledger)
	return path, kek, ks
}

func TestFilePersistence(t *testing.T) {
	ctx := context.Background()
	path, kek, ks := newFile(t)
	act, _ := ks.Active(ctx, "example.org", fed)
	s, _ := ks.Signer(ctx, "example.org", fed, act.KeyID)
	wrapped, err := ks.Wrap(ctx, "example.org", data, []byte("person key"), []byte("aad"))
	if err != nil {
		t.Fatal(err)
	}
	dk, _ := ks.Active(ctx, "example.org", data)
	if err := ks.Revoke(ctx, "other.example", ledger, mustActive(t, ks, "other.example", ledger).KeyID, time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}

	re, err := OpenFile(path, kek)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tenant  string
		purpose alpv1.KeyPurpose
	}{{"example.org", fed}, {"example.org", data}, {"other.example", ledger}, {"other.example", fed}} {
		before, _ := ks.Keys(ctx, c.tenant, c.purpose)
		after, err := re.Keys(ctx, c.tenant, c.purpose)
		if err != nil {
			t.Fatal(err)
		}
		if len(before) != len(after) {
			t.Fatalf("%v: %d keys before, %d after reopen", c, len(before), len(after))
		}
		for i := range before {
			b, a := before[i], after[i]
			if b.KeyID != a.KeyID || b.State != a.State || !b.Created.Equal(a.Created) ||
				!b.CompromisedAt.Equal(a.CompromisedAt) || !bytes.Equal(b.PublicKey, a.PublicKey) || b.Algorithm != a.Algorithm {
				t.Errorf("key %d changed across reopen:\n%+v\n%+v", i, b, a)
			}
		}
	}
	// The reopened store signs with the same key and unwraps old values.
	s2, err := re.Signer(ctx, "example.org", fed, act.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("alp-test/v1\x00m")
	sig, _ := s2.Sign(nil, msg, crypto.Hash(0))
	if !ed25519.Verify(s.Public().(ed25519.PublicKey), msg, sig) {
		t.Fatal("reopened signer's signature does not verify with the original public key")
	}
	got, err := re.Unwrap(ctx, "example.org", data, wrapped, []byte("aad"))
	if err != nil || string(got) != "person key" {
		t.Fatalf("unwrap after reopen = %q, %v", got, err)
	}
	// Secrets survive byte for byte.
	if !bytes.Equal(privateOf(t, ks, "example.org", data, dk.KeyID), privateOf(t, re, "example.org", data, dk.KeyID)) {
		t.Fatal("data key changed across reopen")
	}
}

func mustActive(t *testing.T, ks KeyStore, tenant string, p alpv1.KeyPurpose) KeyInfo {
	t.Helper()
	k, err := ks.Active(context.Background(), tenant, p)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestFileSealed(t *testing.T) {
	path, kek, ks := newFile(t)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(raw, []byte(fileMagic)) {
		t.Fatal("no magic header")
	}
	ctx := context.Background()
	for _, p := range []alpv1.KeyPurpose{fed, data} {
		keys, _ := ks.Keys(ctx, "example.org", p)
		for _, k := range keys {
			sec := privateOf(t, ks, "example.org", p, k.KeyID)
			if bytes.Contains(raw, sec) || bytes.Contains(raw, []byte(k.KeyID)) || bytes.Contains(raw, []byte("example.org")) {
				t.Fatalf("key file holds plaintext for %s", k.KeyID)
			}
		}
	}
	// Decrypting with the internal function finds the secrets.
	keys, err := decodeFile(kek, raw)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(keys[slot{"example.org", fed}]); n != 2 {
		t.Fatalf("decoded %d federation keys, want 2", n)
	}
}

func TestFileMode(t *testing.T) {
	tests := []struct {
		mode os.FileMode
		ok   bool
	}{
		{0o600, true},
		{0o400, true},
		{0o644, false},
		{0o640, false},
		{0o604, false},
		{0o620, false},
		{0o666, false},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			path, kek, _ := newFile(t)
			if err := os.Chmod(path, tt.mode); err != nil {
				t.Fatal(err)
			}
			_, err := OpenFile(path, kek)
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("opened a file of mode %04o", tt.mode)
			}
			if msg, mode := err.Error(), fmt.Sprintf("%04o", tt.mode); !strings.Contains(msg, path) || !strings.Contains(msg, mode) {
				t.Fatalf("error does not name path and mode %s: %v", mode, err)
			}
		})
	}
}

func TestFileRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenFile(dir, GenerateKEK()); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("OpenFile(dir) = %v", err)
	}
	if _, err := OpenFile(filepath.Join(dir, "missing", "keys"), GenerateKEK()); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("OpenFile in a missing directory = %v", err)
	}
	if _, err := OpenFile(filepath.Join(dir, "k"), make([]byte, 16)); !errors.Is(err, ErrBadKEK) {
		t.Fatalf("short KEK: %v", err)
	}
	if _, err := OpenFile("", GenerateKEK()); err == nil {
		t.Fatal("empty path accepted")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("failed opens left files: %v", entries)
	}
}

func TestFileSymlink(t *testing.T) {
	path, kek, _ := newFile(t)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(path, link); err != nil {
		t.Skip(err)
	}
	ks, err := OpenFile(link, kek)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Rotate(context.Background(), "example.org", data); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("symlink replaced: %v %v", fi, err)
	}
	re, err := OpenFile(path, kek)
	if err != nil {
		t.Fatal(err)
	}
	if keys, _ := re.Keys(context.Background(), "example.org", data); len(keys) != 2 {
		t.Fatalf("change through the link not in the target: %d keys", len(keys))
	}
}

func TestFileWrongKEK(t *testing.T) {
	path, _, _ := newFile(t)
	before, _ := os.ReadFile(path)
	_, err := OpenFile(path, GenerateKEK())
	if !errors.Is(err, ErrBadKEK) {
		t.Fatalf("wrong KEK: %v", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error does not name the file: %v", err)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Fatal("file changed after a failed open")
	}
}

func TestFileCorrupt(t *testing.T) {
	tests := []struct {
		name   string
		damage func([]byte) []byte
		want   error
	}{
		{"empty", func(b []byte) []byte { return nil }, ErrCorrupt},
		{"magic only", func(b []byte) []byte { return b[:len(fileMagic)] }, ErrCorrupt},
		{"five bytes", func(b []byte) []byte { return b[:5] }, ErrCorrupt},
		{"header only", func(b []byte) []byte { return b[:headerLen] }, ErrCorrupt},
		{"truncated ciphertext", func(b []byte) []byte { return b[:len(b)-10] }, ErrCorrupt},
		{"flipped ciphertext", func(b []byte) []byte { b[len(b)/2+headerLen/2] ^= 0x40; return b }, ErrCorrupt},
		{"flipped tag", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, ErrCorrupt},
		{"flipped nonce", func(b []byte) []byte { b[headerLen-1] ^= 1; return b }, ErrCorrupt},
		{"bad magic", func(b []byte) []byte { b[0] = 'X'; return b }, ErrCorrupt},
		{"future version", func(b []byte) []byte { b[len(fileMagic)] = 9; return b }, ErrCorrupt},
		{"flipped salt", func(b []byte) []byte { b[len(fileMagic)+1] ^= 1; return b }, ErrBadKEK},
		{"appended", func(b []byte) []byte { return append(b, 0) }, ErrCorrupt},
		{"not a key file", func(b []byte) []byte { return []byte("{\"keys\":[]}") }, ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, kek, _ := newFile(t)
			raw, _ := os.ReadFile(path)
			bad := tt.damage(bytes.Clone(raw))
			if err := os.WriteFile(path, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := OpenFile(path, kek)
			if !errors.Is(err, tt.want) {
				t.Fatalf("OpenFile = %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error does not name the file: %v", err)
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(after, bad) {
				t.Fatal("damaged file was overwritten")
			}
		})
	}
}

func TestFileInvalidContent(t *testing.T) {
	// Well-sealed files whose content breaks the store's invariants.
	kek := GenerateKEK()
	good := NewMemory()
	mustGenerate(t, good, "example.org", fed)
	rec := good.cur.Load().keys[slot{"example.org", fed}][0]
	tests := []struct {
		name string
		keys map[slot][]*record
	}{
		{"two active", map[slot][]*record{{"example.org", fed}: {rec, withID(rec, "federation-b")}}},
		{"duplicate id", map[slot][]*record{{"example.org", fed}: {rec, withState(rec, retired)}}},
		{"short secret", map[slot][]*record{{"example.org", fed}: {withSecret(rec, rec.secret[:16])}}},
		{"public mismatch", map[slot][]*record{{"example.org", fed}: {withSecret(rec, GenerateKEK())}}},
		{"bad tenant", map[slot][]*record{{"Example.org", fed}: {withTenant(rec, "Example.org")}}},
		{"revoked without time", map[slot][]*record{{"example.org", fed}: {withState(rec, revoked)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := encodeFile(rand.Reader, kek, tt.keys)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := decodeFile(kek, raw); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeFile = %v, want ErrCorrupt", err)
			}
		})
	}
}

func withID(r *record, id string) *record { c := *r; c.id = id; return &c }
func withState(r *record, s alpv1.KeyState) *record {
	c := *r
	c.state = s
	return &c
}
func withSecret(r *record, s []byte) *record { c := *r; c.secret = s; return &c }
func withTenant(r *record, tn string) *record {
	c := *r
	c.tenant = tn
	return &c
}

func TestFileSaveFailureKeepsState(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "keys")
	kek := GenerateKEK()
	ks, err := OpenFile(path, kek)
	if err != nil {
		t.Fatal(err)
	}
	k := mustGenerate(t, ks, "example.org", fed)
	// Removing the directory makes every save fail (also for root, who
	// ignores permissions).
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Rotate(ctx, "example.org", fed); err == nil {
		t.Fatal("rotate succeeded without being able to save")
	}
	// The keys in memory are untouched...
	if keys := ks.cur.Load().keys[slot{"example.org", fed}]; len(keys) != 1 || keys[0].id != k.KeyID || keys[0].state != active {
		t.Fatalf("in-memory state changed by an unsaved rotate: %v", keys)
	}
	// ...but reads fail closed: the file that confirmed them is gone.
	if _, err := ks.Active(ctx, "example.org", fed); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Active with the key file gone = %v, want an error naming it", err)
	}
}

// TestFileWriteFailureKeepsState fails the save itself (after the lock and
// the re-read succeeded, the file staying as it was): nothing changes, in
// memory or on disk, and the store goes on working.
func TestFileWriteFailureKeepsState(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keys")
	kek := GenerateKEK()
	rnd := &budgetReader{left: -1}
	ks, err := OpenFile(path, kek, WithRandom(rnd))
	if err != nil {
		t.Fatal(err)
	}
	k := mustGenerate(t, ks, "example.org", fed)
	before, _ := os.ReadFile(path)
	// Enough random bytes for the new key (id and seed), none for sealing
	// the file.
	rnd.set(8 + 32)
	if _, err := ks.Rotate(ctx, "example.org", fed); err == nil || !strings.Contains(err.Error(), "random source") {
		t.Fatalf("rotate with a failing random source = %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("key file changed by a failed save")
	}
	if a := mustActive(t, ks, "example.org", fed); a.KeyID != k.KeyID {
		t.Fatalf("active key %s after a failed rotate, want %s", a.KeyID, k.KeyID)
	}
	if keys, _ := ks.Keys(ctx, "example.org", fed); len(keys) != 1 {
		t.Fatalf("%d keys after failed rotate", len(keys))
	}
	rnd.set(-1)
	if _, err := ks.Rotate(ctx, "example.org", fed); err != nil {
		t.Fatal(err)
	}
}
