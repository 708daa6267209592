package keystore

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

// Tests of several FileStores sharing one key file. Two stores opened on the
// same path in one process behave like two processes: each operation opens
// the lock file anew, and flock locks belong to the open file description,
// so they exclude each other exactly as between processes (and
// TestFileTwoProcesses checks real processes too).

// budgetReader serves crypto/rand bytes, at most left of them (unlimited if
// left < 0), then fails.
type budgetReader struct {
	mu   sync.Mutex
	left int
}

func (b *budgetReader) set(n int) { b.mu.Lock(); b.left = n; b.mu.Unlock() }

func (b *budgetReader) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.left >= 0 {
		if b.left == 0 {
			return 0, errors.New("random budget exhausted")
		}
		p = p[:min(len(p), b.left)]
		b.left -= len(p)
	}
	return rand.Read(p)
}

// recordingReader serves crypto/rand bytes and keeps a copy of them.
type recordingReader struct {
	mu  sync.Mutex
	got []byte
}

func (r *recordingReader) Read(p []byte) (int, error) {
	n, err := rand.Read(p)
	r.mu.Lock()
	r.got = append(r.got, p[:n]...)
	r.mu.Unlock()
	return n, err
}

func (r *recordingReader) recorded() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.got)
}

func openShared(t *testing.T, n int, opts ...Option) (string, []byte, []*FileStore) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys")
	kek := GenerateKEK()
	var stores []*FileStore
	for range n {
		ks, err := OpenFile(path, kek, opts...)
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, ks)
	}
	return path, kek, stores
}

func TestFileSharedSeesChanges(t *testing.T) {
	ctx := context.Background()
	const tn = "example.org"
	_, _, s := openShared(t, 2)
	a, b := s[0], s[1]

	// B sees a key A generated after B opened, without reopening.
	ka := mustGenerate(t, a, tn, fed)
	if got := mustActive(t, b, tn, fed); got.KeyID != ka.KeyID || !bytes.Equal(got.PublicKey, ka.PublicKey) {
		t.Fatalf("B's active key %s, want A's %s", got.KeyID, ka.KeyID)
	}
	// An unchanged file is not reloaded: the state stays the same object.
	st := b.cur.Load()
	for range 3 {
		mustActive(t, b, tn, fed)
		if _, err := b.Keys(ctx, tn, fed); err != nil {
			t.Fatal(err)
		}
	}
	if b.cur.Load() != st {
		t.Fatal("B reloaded an unchanged file")
	}

	// B signs with A's key; A's public key verifies it.
	sb, err := b.Signer(ctx, tn, fed, ka.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("alp-test/v1\x00shared")
	sig, err := sb.Sign(nil, msg, crypto.Hash(0))
	if err != nil || !ed25519.Verify(ka.PublicKey, msg, sig) {
		t.Fatalf("B's signature with A's key: %v", err)
	}

	// B has not read anything since; its Generate still sees A's key, as
	// changes re-read the file under the lock.
	kd := mustGenerate(t, a, tn, data)
	if _, err := b.Generate(ctx, tn, data); !errors.Is(err, ErrActiveKeyExists) {
		t.Fatalf("B generated over A's fresh key: %v", err)
	}
	if _, err := b.Generate(ctx, tn, fed); !errors.Is(err, ErrActiveKeyExists) {
		t.Fatalf("B generated over A's key: %v", err)
	}

	// Values wrapped by one store unwrap in the other, across a rotation
	// made by the other.
	w, err := b.Wrap(ctx, tn, data, []byte("person key"), []byte("aad"))
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := WrappedKeyID(w); id != kd.KeyID {
		t.Fatalf("B wrapped with %s, want A's %s", id, kd.KeyID)
	}
	kd2, err := a.Rotate(ctx, tn, data)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := b.Wrap(ctx, tn, data, []byte("person key 2"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := WrappedKeyID(w2); id != kd2.KeyID {
		t.Fatalf("B wraps with %s after A rotated, want %s", id, kd2.KeyID)
	}
	for _, ks := range []*FileStore{a, b} {
		if got, err := ks.Unwrap(ctx, tn, data, w, []byte("aad")); err != nil || string(got) != "person key" {
			t.Fatalf("unwrap = %q, %v", got, err)
		}
	}

	// A rotates the signing key: B's signer, made before, refuses at once.
	ka2, err := a.Rotate(ctx, tn, fed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Sign(nil, msg, crypto.Hash(0)); !errors.Is(err, ErrKeyNotUsable) {
		t.Fatalf("B's signer after A rotated: %v, want ErrKeyNotUsable", err)
	}
	// B revokes; A's signer for the new key refuses, and A lists the
	// revocation.
	sa, err := a.Signer(ctx, tn, fed, ka2.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Revoke(ctx, tn, fed, ka2.KeyID, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sa.Sign(nil, msg, crypto.Hash(0)); !errors.Is(err, ErrKeyRevoked) {
		t.Fatalf("A's signer after B revoked: %v, want ErrKeyRevoked", err)
	}
	want := map[string]alpv1.KeyState{ka.KeyID: retired, ka2.KeyID: revoked}
	for _, ks := range []*FileStore{a, b} {
		if got := states(t, ks, tn, fed); !equalStates(got, want) {
			t.Fatalf("states %v, want %v", got, want)
		}
	}
}

// TestFileSharedConcurrentWriters has two stores change keys from many
// goroutines at once, on separate and on shared slots: no change is lost.
func TestFileSharedConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	path, kek, s := openShared(t, 2)
	const (
		workers = 4 // per store
		rounds  = 6
		shared  = "shared.example"
	)
	var (
		mu   sync.Mutex
		made = map[slot][]string{} // key ids each slot must hold
		wg   sync.WaitGroup
	)
	record := func(sl slot, id string) {
		mu.Lock()
		made[sl] = append(made[sl], id)
		mu.Unlock()
	}
	errs := make(chan error, 1000)
	purposes := []alpv1.KeyPurpose{fed, data}
	for si, ks := range s {
		for w := range workers {
			wg.Go(func() {
				// Its own slots: Generate, then Rotate.
				tn := fmt.Sprintf("s%d-w%d.example", si, w)
				for _, p := range purposes {
					k, err := ks.Generate(ctx, tn, p)
					if err != nil {
						errs <- err
						return
					}
					record(slot{tn, p}, k.KeyID)
				}
				for r := range rounds {
					p := purposes[r%2]
					k, err := ks.Rotate(ctx, tn, p)
					if err != nil {
						errs <- err
						return
					}
					record(slot{tn, p}, k.KeyID)
					// A slot every worker of both stores rotates.
					if k, err = ks.Rotate(ctx, shared, ledger); err != nil {
						errs <- err
						return
					}
					record(slot{shared, ledger}, k.KeyID)
					// And reads in between.
					if _, err := ks.Wrap(ctx, tn, data, []byte("x"), nil); err != nil {
						errs <- err
					}
					if _, err := ks.Active(ctx, shared, ledger); err != nil {
						errs <- err
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	third, err := OpenFile(path, kek)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(made[slot{shared, ledger}]); got != 2*workers*rounds {
		t.Fatalf("%d shared rotations recorded", got)
	}
	for _, ks := range []*FileStore{s[0], s[1], third} {
		for sl, ids := range made {
			keys, err := ks.Keys(ctx, sl.tenant, sl.purpose)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			nActive := 0
			for _, k := range keys {
				got = append(got, k.KeyID)
				if k.State == active {
					nActive++
				}
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(ids))
			if !slices.Equal(got, want) || nActive != 1 {
				t.Fatalf("%v: %d keys (%d active), want the %d made (1 active)\n got %v\nwant %v", sl, len(got), nActive, len(want), got, want)
			}
		}
	}
}

// TestFileConcurrentCreate opens a missing path from several goroutines at
// once; each generates a key right after opening. Creation happens under the
// lock and only if the file is still missing, so no key is lost to another
// opener's empty file.
func TestFileConcurrentCreate(t *testing.T) {
	ctx := context.Background()
	const openers = 8
	for round := range 10 {
		path := filepath.Join(t.TempDir(), "keys")
		kek := GenerateKEK()
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, openers)
		for i := range openers {
			wg.Go(func() {
				<-start
				ks, err := OpenFile(path, kek)
				if err != nil {
					errs <- err
					return
				}
				if _, err := ks.Generate(ctx, fmt.Sprintf("t%d.example", i), data); err != nil {
					errs <- err
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		re, err := OpenFile(path, kek)
		if err != nil {
			t.Fatal(err)
		}
		for i := range openers {
			if _, err := re.Active(ctx, fmt.Sprintf("t%d.example", i), data); err != nil {
				t.Fatalf("round %d: key of opener %d lost: %v", round, i, err)
			}
		}
	}
}

// TestFileSharedCorrupted: when a third party damages the file, every read
// of a store that had loaded it fails closed with ErrCorrupt (ErrBadKEK for a
// file sealed with another KEK) naming the file; changes fail too and leave
// the file alone; the keys in memory stay as they were, and once the file is
// repaired the store works again.
func TestFileSharedCorrupted(t *testing.T) {
	ctx := context.Background()
	const tn = "example.org"
	path, _, s := openShared(t, 1)
	ks := s[0]
	k := mustGenerate(t, ks, tn, fed)
	mustGenerate(t, ks, tn, data)
	w, err := ks.Wrap(ctx, tn, data, []byte("v"), nil)
	if err != nil {
		t.Fatal(err)
	}
	sg, err := ks.Signer(ctx, tn, fed, k.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(path)
	other := filepath.Join(t.TempDir(), "other")
	if _, err := OpenFile(other, GenerateKEK()); err != nil {
		t.Fatal(err)
	}
	otherKEK, _ := os.ReadFile(other)

	later := time.Now().Add(time.Hour) // a third party's edit, whatever the clock tick
	tests := []struct {
		name   string
		damage func(t *testing.T)
		want   error
	}{
		{"truncated in place", func(t *testing.T) {
			if err := os.WriteFile(path, good[:len(good)-7], 0o600); err != nil {
				t.Fatal(err)
			}
		}, ErrCorrupt},
		{"flipped byte in place, same size", func(t *testing.T) {
			bad := bytes.Clone(good)
			bad[len(bad)-3] ^= 1
			if err := os.WriteFile(path, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(path, later, later); err != nil {
				t.Fatal(err)
			}
		}, ErrCorrupt},
		{"replaced by another KEK's file", func(t *testing.T) {
			tmp := path + ".new"
			if err := os.WriteFile(tmp, otherKEK, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}, ErrBadKEK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := ks.cur.Load()
			tt.damage(t)
			damaged, _ := os.ReadFile(path)
			fail := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), path) {
					t.Errorf("%s on a damaged file = %v, want %v naming the file", what, err, tt.want)
				}
			}
			_, err := ks.Active(ctx, tn, fed)
			fail("Active", err)
			_, err = ks.Keys(ctx, tn, fed)
			fail("Keys", err)
			_, err = ks.Signer(ctx, tn, fed, k.KeyID)
			fail("Signer", err)
			_, err = sg.Sign(nil, []byte("m"), crypto.Hash(0))
			fail("Sign", err)
			_, err = ks.Wrap(ctx, tn, data, []byte("v"), nil)
			fail("Wrap", err)
			_, err = ks.Unwrap(ctx, tn, data, w, nil)
			fail("Unwrap", err)
			_, err = ks.Rotate(ctx, tn, fed)
			fail("Rotate", err)
			if ks.cur.Load() != before {
				t.Error("a failed reload replaced the keys in memory")
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, damaged) {
				t.Error("the damaged file was overwritten")
			}
			// Repaired (by rename, as an operator restoring a backup).
			tmp := path + ".new"
			if err := os.WriteFile(tmp, good, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
			if a := mustActive(t, ks, tn, fed); a.KeyID != k.KeyID {
				t.Fatalf("after repair the active key is %s, want %s", a.KeyID, k.KeyID)
			}
			if _, err := sg.Sign(nil, []byte("m"), crypto.Hash(0)); err != nil {
				t.Fatalf("Sign after repair: %v", err)
			}
		})
	}
}

// TestFileLockWait: a change waits for the lock, bounded by its context;
// reads take no lock and go on meanwhile.
func TestFileLockWait(t *testing.T) {
	if !lockSupported {
		t.Skip("no flock on this platform")
	}
	const tn = "example.org"
	path, _, s := openShared(t, 1)
	ks := s[0]
	k := mustGenerate(t, ks, tn, fed)
	release, err := lockExclusive(context.Background(), path+".lock")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := ks.Rotate(ctx, tn, fed); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), path+".lock") {
		t.Fatalf("Rotate while the lock is held elsewhere = %v, want the deadline", err)
	}
	if a := mustActive(t, ks, tn, fed); a.KeyID != k.KeyID {
		t.Fatal("read blocked or changed while the lock was held")
	}
	// Without a deadline it waits until the holder lets go.
	done := make(chan error, 1)
	go func() {
		_, err := ks.Rotate(context.Background(), tn, fed)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Rotate did not wait for the lock: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if a := mustActive(t, ks, tn, fed); a.KeyID == k.KeyID {
		t.Fatal("rotation after the lock was released not visible")
	}
}

// TestFileVersionsDiffer: each version written gets a later modification
// time than the one it replaced, even when writes follow each other within
// one tick of the file system's clock, so stat always tells them apart.
func TestFileVersionsDiffer(t *testing.T) {
	ctx := context.Background()
	_, _, s := openShared(t, 1)
	ks := s[0]
	prev := ks.cur.Load().file
	for i := range 20 {
		if _, err := ks.Rotate(ctx, "example.org", cookie); err != nil {
			t.Fatal(err)
		}
		cur := ks.cur.Load().file
		if !cur.ModTime().After(prev.ModTime()) {
			t.Fatalf("write %d: modification time %v not after %v", i, cur.ModTime(), prev.ModTime())
		}
		prev = cur
	}
	// The case that matters, forced: the clock has not moved past the
	// current version's time (here it lies an hour ahead).
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(ks.Path(), time.Time{}, future); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := ks.Rotate(ctx, "example.org", cookie); err != nil {
			t.Fatal(err)
		}
		cur := ks.cur.Load().file
		if !cur.ModTime().After(future) {
			t.Fatalf("write %d after a future version: modification time %v not after %v", i, cur.ModTime(), future)
		}
		future = cur.ModTime()
	}
}

func TestWithRandom(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func(t *testing.T, opts ...Option) KeyStore) {
		ctx := context.Background()
		const tn = "example.org"
		rec := &recordingReader{}
		ks := open(t, WithRandom(rec))
		k := mustGenerate(t, ks, tn, fed)
		seed := privateOf(t, ks, tn, fed, k.KeyID)
		got := rec.recorded()
		if !bytes.Contains(got, seed) {
			t.Fatal("the Ed25519 seed is not made of bytes the reader produced")
		}
		if !bytes.Equal(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey), k.PublicKey) {
			t.Fatal("public key does not match the seed")
		}
		idBytes, err := keyIDEncoding.DecodeString(strings.ToUpper(strings.TrimPrefix(k.KeyID, "federation-")))
		if err != nil || !bytes.Contains(got, idBytes) {
			t.Fatalf("key id %s not made of bytes the reader produced (%v)", k.KeyID, err)
		}
		kd := mustGenerate(t, ks, tn, data)
		if !bytes.Contains(rec.recorded(), privateOf(t, ks, tn, data, kd.KeyID)) {
			t.Fatal("the AES key is not made of bytes the reader produced")
		}
		w, err := ks.Wrap(ctx, tn, data, []byte("v"), nil)
		if err != nil {
			t.Fatal(err)
		}
		nonce := w[2+len(kd.KeyID) : 2+len(kd.KeyID)+12]
		if !bytes.Contains(rec.recorded(), nonce) {
			t.Fatal("the wrap nonce is not made of bytes the reader produced")
		}
		if fs, ok := ks.(*FileStore); ok {
			raw, err := os.ReadFile(fs.Path())
			if err != nil {
				t.Fatal(err)
			}
			salt := raw[len(fileMagic)+1 : len(fileMagic)+1+saltLen]
			if !bytes.Contains(rec.recorded(), salt) || !bytes.Contains(rec.recorded(), raw[headerLen-12:headerLen]) {
				t.Fatal("the key file's salt and nonce are not made of bytes the reader produced")
			}
		}

		// A failing reader fails the operation and changes nothing.
		br := &budgetReader{left: -1} // a file store seals its file at creation
		bad := open(t, WithRandom(br))
		br.set(0)
		if _, err := bad.Generate(ctx, tn, fed); err == nil || !strings.Contains(err.Error(), "random source") {
			t.Fatalf("Generate with a failing reader = %v", err)
		}
		if keys, err := bad.Keys(ctx, tn, fed); err != nil || len(keys) != 0 {
			t.Fatalf("keys after a failed Generate: %v %v", keys, err)
		}
		// A reader that repeats itself cannot loop forever on key ids.
		rep := NewMemory(WithRandom(zeroReader{}))
		mustGenerate(t, rep, tn, fed)
		if _, err := rep.Rotate(ctx, tn, fed); err == nil || !strings.Contains(err.Error(), "repeating") {
			t.Fatalf("Rotate with a constant reader = %v", err)
		}
	})
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestWithRandomDeterministic: the same seeded generator provisions the same
// keys (for test environments only, see WithRandom).
func TestWithRandomDeterministic(t *testing.T) {
	var ids []string
	var pubs [][]byte
	for range 2 {
		ks := NewMemory(WithRandom(mrand.NewChaCha8([32]byte{1, 2, 3})))
		k := mustGenerate(t, ks, "example.org", ledger)
		ids = append(ids, k.KeyID)
		pubs = append(pubs, k.PublicKey)
	}
	if ids[0] != ids[1] || !bytes.Equal(pubs[0], pubs[1]) {
		t.Fatalf("same seed, different keys: %v", ids)
	}
}

// Environment of TestHelperProcess.
const (
	envHelper  = "ALPD_KEYSTORE_TEST_HELPER"
	envPath    = "ALPD_KEYSTORE_TEST_PATH"
	envKEK     = "ALPD_KEYSTORE_TEST_KEK"
	envTenant  = "ALPD_KEYSTORE_TEST_TENANT"
	envRotates = "ALPD_KEYSTORE_TEST_ROTATES"
)

// TestHelperProcess is not a test: TestFileTwoProcesses runs the test binary
// again to execute it in a child process. It opens the key file, generates a
// federation key for the tenant, rotates the shared slot (example.org,
// DATA) a number of times and prints "key=<id>" for every key it made.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(envHelper) != "1" {
		t.Skip("helper process of TestFileTwoProcesses")
	}
	ctx := context.Background()
	kek, err := ParseKEK(os.Getenv(envKEK))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(os.Getenv(envRotates))
	if err != nil {
		t.Fatal(err)
	}
	ks, err := OpenFile(os.Getenv(envPath), kek)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ks.Generate(ctx, os.Getenv(envTenant), fed)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("key=%s\n", k.KeyID)
	for range n {
		k, err := ks.Rotate(ctx, "example.org", data)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("key=%s\n", k.KeyID)
	}
}

// TestFileTwoProcesses shares a key file between this process and child
// processes: the children generate and rotate keys while this process, whose
// store was opened before, rotates and reads; it then sees all their keys
// without reopening, and nobody's change is lost.
func TestFileTwoProcesses(t *testing.T) {
	if !lockSupported {
		t.Skip("no flock on this platform")
	}
	if testing.Short() {
		t.Skip("starts child processes")
	}
	ctx := context.Background()
	const rotates = 10
	path, kek, s := openShared(t, 1)
	ks := s[0]
	k0 := mustGenerate(t, ks, "example.org", data)
	w, err := ks.Wrap(ctx, "example.org", data, []byte("before"), nil)
	if err != nil {
		t.Fatal(err)
	}

	type child struct {
		tenant string
		cmd    *exec.Cmd
		out    bytes.Buffer
	}
	var children []*child
	for i := range 2 {
		c := &child{tenant: fmt.Sprintf("child%d.example", i)}
		c.cmd = exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
		c.cmd.Env = append(os.Environ(), envHelper+"=1", envPath+"="+path, envKEK+"="+EncodeKEK(kek),
			envTenant+"="+c.tenant, envRotates+"="+strconv.Itoa(rotates))
		c.cmd.Stdout = &c.out
		c.cmd.Stderr = &c.out
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children = append(children, c)
	}
	// Meanwhile: rotate the same slot from here, and read.
	mine := []string{k0.KeyID}
	for range rotates {
		k, err := ks.Rotate(ctx, "example.org", data)
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, k.KeyID)
		if _, err := ks.Wrap(ctx, "example.org", data, []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	var theirs []string
	for _, c := range children {
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("child %s: %v\n%s", c.tenant, err, c.out.String())
		}
		var ids []string
		sc := bufio.NewScanner(&c.out)
		for sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), "key="); ok {
				ids = append(ids, id)
			}
		}
		if len(ids) != 1+rotates {
			t.Fatalf("child %s made %d keys, want %d:\n%s", c.tenant, len(ids), 1+rotates, c.out.String())
		}
		// The child's federation key, made after this store opened.
		if a := mustActive(t, ks, c.tenant, fed); a.KeyID != ids[0] {
			t.Fatalf("child's key %s, this store's active %s", ids[0], a.KeyID)
		}
		theirs = append(theirs, ids[1:]...)
	}
	keys, err := ks.Keys(ctx, "example.org", data)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range keys {
		got = append(got, k.KeyID)
	}
	want := append(mine, theirs...)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("shared slot holds %d keys, want the %d made by all processes", len(got), len(want))
	}
	if v, err := ks.Unwrap(ctx, "example.org", data, w, nil); err != nil || string(v) != "before" {
		t.Fatalf("unwrap after the children's rotations = %q, %v", v, err)
	}
}
