package keystore

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
)

// Key file layout (all of it written at once, atomically):
//
//	magic "ALPDKEYS" (8) | format version (1) | salt (16) | KEK check (16) |
//	nonce (12) | AES-256-GCM ciphertext of the JSON state, with tag
//
// A fresh random salt on every write derives (HKDF-SHA256) a fresh file key
// and a KEK check value from the KEK, so nonces are never reused under one
// key and a wrong KEK (check mismatch, ErrBadKEK) is told apart from a
// damaged file (check matches but authentication fails, ErrCorrupt). The
// header up to the nonce is the GCM additional data.
const (
	fileMagic   = "ALPDKEYS"
	fileVersion = 1
	saltLen     = 16
	checkLen    = 16
	headerLen   = len(fileMagic) + 1 + saltLen + checkLen + 12
)

// FileStore is a KeyStore kept in one encrypted file (see OpenFile).
//
// Several FileStores, in one process or in several, may share one key file;
// this is how alpd's split mode works, where every service process opens the
// same file and one of them (identity) generates and rotates the keys:
//
//   - Every change takes an exclusive advisory lock (flock(2), LOCK_EX) on
//     the sidecar file "<path>.lock" (mode 0600, created when needed and
//     never removed: removing a lock file others may hold would break the
//     lock), re-reads the key file under it, applies the change to what it
//     read and writes the result atomically before releasing the lock. So
//     concurrent writers never lose each other's changes, and Generate sees
//     an ACTIVE key another process made a moment ago.
//   - Every read (Active, Keys, Signer, Wrap, Unwrap and each Sign of a
//     Signer) first compares os.Stat of the file (inode and device, size,
//     modification time, mode) with the version it last loaded or saved, and
//     reloads the file if it differs; when it is unchanged nothing is read.
//     Reads take no lock: every writer replaces the file by an atomic rename
//     of a complete, synced file, so a reader opens either the old or the new
//     version, never a half-written one, and readers never wait for a
//     writer's fsyncs (a read-only mount works as well). Writers also make
//     each version's modification time later than the previous one's, so a
//     reused inode number cannot make a new version look like an old one.
//   - A reload that fails, because the file was damaged (ErrCorrupt), sealed
//     with another KEK (ErrBadKEK), made accessible to group or others, or
//     removed, makes the read fail closed with that error: the store does not
//     answer from keys the file no longer confirms. The keys in memory are
//     kept as they were, every later read tries again, and a change fails the
//     same way, without overwriting the file.
//
// Limits: flock is advisory, so only alpd's own stores respect it; it needs
// a local file system, or a network one that implements flock between hosts
// (NFSv4 usually does, older NFS and many FUSE and SMB mounts do not, and
// attribute caching on network file systems can delay when readers notice a
// change). Locking is implemented for Linux, macOS, the BSDs and illumos;
// elsewhere (Windows) the lock is a no-op and only one process may use a
// file. The observer of a store is told only about the changes made through
// that store. For brokers spread over several hosts (e.g. on Kubernetes) the
// production answer is an enterprise backend (cloud KMS, Vault Transit)
// rather than a file on a shared volume.
type FileStore struct {
	*core
	file *keyFile
}

// keyFile is the storage of a FileStore.
type keyFile struct {
	path string // absolute, symbolic links resolved
	kek  []byte
	rand io.Reader
}

// OpenFile opens the key file at path, sealed with kek (32 bytes), or
// creates an empty one (mode 0600) if path does not exist; its directory
// must exist. Creation happens under the file's lock and only if the file is
// still missing once the lock is held, so stores opening a missing path
// concurrently never overwrite each other's file or keys. OpenFile refuses a
// file that group or others may access, a file sealed with another KEK
// (ErrBadKEK) and a damaged file (ErrCorrupt), and then writes nothing. Every
// change rewrites the file atomically (temporary file in the same directory,
// fsync, rename, fsync of the directory), so a crash leaves either the old
// or the new content. A symbolic link at path is followed, and the file it
// points to is the one rewritten (and locked). See FileStore for how several
// stores and processes share one file.
func OpenFile(path string, kek []byte, opts ...Option) (*FileStore, error) {
	if len(kek) != 32 {
		return nil, fmt.Errorf("keystore: %w: must be 32 bytes, got %d", ErrBadKEK, len(kek))
	}
	if path == "" {
		return nil, errors.New("keystore: empty key file path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("keystore: key file %s: %w", path, err)
	}
	o := buildOptions(opts)
	kf := &keyFile{kek: bytes.Clone(kek), rand: o.rand}
	if _, err := os.Lstat(abs); errors.Is(err, fs.ErrNotExist) {
		dir := filepath.Dir(abs)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("keystore: key file %s: directory %s does not exist", abs, dir)
		}
		// Resolve the directory, so that every store names the file, and
		// its lock, alike.
		realDir, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return nil, fmt.Errorf("keystore: key file %s: %w", abs, err)
		}
		kf.path = filepath.Join(realDir, filepath.Base(abs))
		if err := kf.create(); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("keystore: key file %s: %w", abs, err)
	} else {
		kf.path = abs
	}
	if kf.path, err = filepath.EvalSymlinks(kf.path); err != nil {
		return nil, fmt.Errorf("keystore: key file %s: %w", abs, err)
	}
	st, err := kf.load()
	if err != nil {
		return nil, err
	}
	f := &FileStore{core: newCore(o, kf), file: kf}
	f.cur.Store(st)
	return f, nil
}

// Path returns the absolute path of the key file.
func (f *FileStore) Path() string { return f.file.path }

// create writes an empty key file at k.path unless, once the lock is held,
// a file is there.
func (k *keyFile) create() error {
	release, err := k.lock(context.Background())
	if err != nil {
		return err
	}
	defer release()
	if _, err := os.Lstat(k.path); err == nil {
		return nil // another store made it first
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("keystore: key file %s: %w", k.path, err)
	}
	_, err = k.save(map[slot][]*record{}, nil)
	return err
}

func (k *keyFile) lockPath() string { return k.path + ".lock" }

func (k *keyFile) lock(ctx context.Context) (func(), error) {
	release, err := lockExclusive(ctx, k.lockPath())
	if err != nil {
		return nil, fmt.Errorf("keystore: lock key file %s: %w", k.lockPath(), err)
	}
	return release, nil
}

func (k *keyFile) stale(cur *state) (bool, error) {
	fi, err := os.Stat(k.path)
	if err != nil {
		return false, fmt.Errorf("keystore: key file %s: %w", k.path, err)
	}
	return cur.file == nil || !sameVersion(cur.file, fi), nil
}

// sameVersion reports whether two infos of the key file describe the same
// version of it. Writers replace the file (new inode) and make each
// version's modification time later than the previous one's (see
// writeAtomic), so versions written by stores always differ here; size and
// mode catch most edits made in place by anyone else.
func sameVersion(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime()) && a.Mode() == b.Mode()
}

func (k *keyFile) load() (*state, error) { return loadFile(k.path, k.kek) }

func loadFile(path string, kek []byte) (*state, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("keystore: open key file: %w", err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("keystore: key file %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("keystore: key file %s is not a regular file (%v)", path, fi.Mode().Type())
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("keystore: key file %s has mode %04o, which lets group or others access it; refusing to use it (chmod 600 %s)", path, fi.Mode().Perm(), path)
	}
	data, err := io.ReadAll(fh)
	if err != nil {
		return nil, fmt.Errorf("keystore: read key file %s: %w", path, err)
	}
	keys, err := decodeFile(kek, data)
	if err != nil {
		return nil, fmt.Errorf("keystore: key file %s: %w", path, err)
	}
	return &state{keys: keys, file: fi}, nil
}

func (k *keyFile) save(keys map[slot][]*record, prev *state) (*state, error) {
	data, err := encodeFile(k.rand, k.kek, keys)
	if err != nil {
		return nil, err
	}
	var after time.Time
	if prev != nil && prev.file != nil {
		after = prev.file.ModTime()
	}
	fi, err := writeAtomic(k.path, data, after)
	if err != nil {
		return nil, fmt.Errorf("keystore: save key file %s: %w", k.path, err)
	}
	return &state{keys: keys, file: fi}, nil
}

// writeAtomic replaces path with data: a 0600 temporary file in the same
// directory, synced, renamed over path, then the directory synced. The new
// file's modification time is made later than after (unless after is zero),
// and its info is returned.
func writeAtomic(path string, data []byte, after time.Time) (fi os.FileInfo, err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(0o600); err != nil {
		return nil, err
	}
	if _, err = tmp.Write(data); err != nil {
		return nil, err
	}
	if !after.IsZero() {
		if err = modifiedAfter(tmp, after); err != nil {
			return nil, err
		}
	}
	if err = tmp.Sync(); err != nil {
		return nil, err
	}
	if fi, err = tmp.Stat(); err != nil {
		return nil, err
	}
	if err = tmp.Close(); err != nil {
		return nil, err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return nil, err
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && runtime.GOOS != "windows" {
		return nil, fmt.Errorf("sync directory: %w", err)
	}
	return fi, nil
}

// modifiedAfter makes f's modification time later than t, the previous
// version's. It usually is already; within one tick of the file system's
// timestamp clock it is not, and the file system may also have reused the
// previous-but-one version's inode number, which would make the new version
// indistinguishable by stat from one a reader loaded earlier. Steps grow
// until the file system's timestamp resolution registers one; past 10s it
// gives up (readers may then miss this change until the next one; changes
// themselves always re-read the file, so none is lost).
func modifiedAfter(f *os.File, t time.Time) error {
	for step := time.Microsecond; ; step *= 10 {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if fi.ModTime().After(t) || step > 10*time.Second {
			return nil
		}
		if err := os.Chtimes(f.Name(), time.Time{}, t.Add(step)); err != nil {
			return err
		}
	}
}

// fileState is the plaintext inside the key file.
type fileState struct {
	Format int       `json:"format"`
	Keys   []fileKey `json:"keys"`
}

type fileKey struct {
	Tenant        string    `json:"tenant"`
	Purpose       string    `json:"purpose"`
	ID            string    `json:"id"`
	State         string    `json:"state"`
	Created       time.Time `json:"created"`
	CompromisedAt time.Time `json:"compromised_at,omitzero"`
	Public        []byte    `json:"public,omitempty"`
	Secret        []byte    `json:"secret"`
}

func deriveFileKeys(kek, salt []byte) (fileKey, check []byte) {
	fk, err := hkdf.Key(sha256.New, kek, salt, "alpd keystore file v1: encryption key", 32)
	if err != nil {
		panic("keystore: " + err.Error())
	}
	ck, err := hkdf.Key(sha256.New, kek, salt, "alpd keystore file v1: KEK check", checkLen)
	if err != nil {
		panic("keystore: " + err.Error())
	}
	return fk, ck
}

func encodeFile(rnd io.Reader, kek []byte, keys map[slot][]*record) ([]byte, error) {
	slots := make([]slot, 0, len(keys))
	for s := range keys {
		slots = append(slots, s)
	}
	slices.SortFunc(slots, func(a, b slot) int {
		return cmp.Or(cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.purpose, b.purpose))
	})
	st := fileState{Format: fileVersion, Keys: []fileKey{}}
	for _, s := range slots {
		for _, r := range keys[s] {
			st.Keys = append(st.Keys, fileKey{
				Tenant: r.tenant, Purpose: r.purpose.String(), ID: r.id, State: r.state.String(),
				Created: r.created, CompromisedAt: r.compromisedAt, Public: r.public, Secret: r.secret,
			})
		}
	}
	plain, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("keystore: encode key file: %w", err)
	}
	defer clear(plain)
	out := make([]byte, headerLen, headerLen+len(plain)+16)
	copy(out, fileMagic)
	out[len(fileMagic)] = fileVersion
	salt := out[len(fileMagic)+1 : len(fileMagic)+1+saltLen]
	if err := readRandom(rnd, salt); err != nil {
		return nil, err
	}
	fk, ck := deriveFileKeys(kek, salt)
	copy(out[len(fileMagic)+1+saltLen:], ck)
	nonce := out[headerLen-12 : headerLen]
	if err := readRandom(rnd, nonce); err != nil {
		return nil, err
	}
	return gcm(fk).Seal(out, nonce, plain, out[:headerLen-12]), nil
}

// decodeFile opens and validates a key file's content.
func decodeFile(kek, data []byte) (map[slot][]*record, error) {
	if len(data) <= len(fileMagic) || string(data[:len(fileMagic)]) != fileMagic {
		return nil, fmt.Errorf("%w: not an alpd key file (bad magic)", ErrCorrupt)
	}
	if data[len(fileMagic)] != fileVersion {
		return nil, fmt.Errorf("%w: unsupported format version %d", ErrCorrupt, data[len(fileMagic)])
	}
	if len(data) < headerLen+16 {
		return nil, fmt.Errorf("%w: truncated (%d bytes)", ErrCorrupt, len(data))
	}
	salt := data[len(fileMagic)+1 : len(fileMagic)+1+saltLen]
	check := data[len(fileMagic)+1+saltLen : len(fileMagic)+1+saltLen+checkLen]
	fk, ck := deriveFileKeys(kek, salt)
	if subtle.ConstantTimeCompare(ck, check) != 1 {
		return nil, fmt.Errorf("%w: the file was sealed with a different key-encryption key (or its header is damaged)", ErrBadKEK)
	}
	plain, err := gcm(fk).Open(nil, data[headerLen-12:headerLen], data[headerLen:], data[:headerLen-12])
	if err != nil {
		return nil, fmt.Errorf("%w: authentication failed (truncated or modified)", ErrCorrupt)
	}
	defer clear(plain)
	var st fileState
	if err := json.Unmarshal(plain, &st); err != nil {
		return nil, fmt.Errorf("%w: bad content: %v", ErrCorrupt, err)
	}
	if st.Format != fileVersion {
		return nil, fmt.Errorf("%w: unsupported content format %d", ErrCorrupt, st.Format)
	}
	keys := map[slot][]*record{}
	for i, k := range st.Keys {
		r, err := k.record()
		if err != nil {
			return nil, fmt.Errorf("%w: key %d (%q): %v", ErrCorrupt, i, k.ID, err)
		}
		s := slot{r.tenant, r.purpose}
		if findID(keys[s], r.id) >= 0 {
			return nil, fmt.Errorf("%w: duplicate key id %q", ErrCorrupt, r.id)
		}
		if r.state == alpv1.KeyState_KEY_STATE_ACTIVE && findActive(keys[s]) >= 0 {
			return nil, fmt.Errorf("%w: two active %s keys for %s", ErrCorrupt, purposeName(r.purpose), r.tenant)
		}
		keys[s] = append(keys[s], r)
	}
	return keys, nil
}

func (k fileKey) record() (*record, error) {
	if err := alp.ValidateTenant(k.Tenant); err != nil {
		return nil, err
	}
	p := alpv1.KeyPurpose(alpv1.KeyPurpose_value[k.Purpose])
	if validPurpose(p) != nil {
		return nil, fmt.Errorf("unknown purpose %q", k.Purpose)
	}
	st := alpv1.KeyState(alpv1.KeyState_value[k.State])
	if st == alpv1.KeyState_KEY_STATE_UNSPECIFIED {
		return nil, fmt.Errorf("unknown state %q", k.State)
	}
	if k.ID == "" || len(k.ID) > 255 {
		return nil, errors.New("bad key id")
	}
	if len(k.Secret) != 32 {
		return nil, fmt.Errorf("secret is %d bytes, want 32", len(k.Secret))
	}
	r := &record{tenant: k.Tenant, purpose: p, id: k.ID, state: st, created: k.Created.UTC(),
		compromisedAt: k.CompromisedAt.UTC(), secret: bytes.Clone(k.Secret)}
	if IsAsymmetric(p) {
		r.public = ed25519.NewKeyFromSeed(r.secret).Public().(ed25519.PublicKey)
		if !bytes.Equal(r.public, k.Public) {
			return nil, errors.New("public key does not match the private key")
		}
	} else if len(k.Public) != 0 {
		return nil, errors.New("symmetric key with a public key")
	}
	if st == alpv1.KeyState_KEY_STATE_REVOKED && r.compromisedAt.IsZero() {
		return nil, errors.New("revoked key without compromise time")
	}
	return r, nil
}
