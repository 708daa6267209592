package keystore

import (
	"bytes"
	"cmp"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
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
type FileStore struct {
	*core
	path string
	kek  []byte
}

// OpenFile opens the key file at path, sealed with kek (32 bytes), or
// creates an empty one (mode 0600) if path does not exist; its directory
// must exist. It refuses a file that group or others may access, a file
// sealed with another KEK (ErrBadKEK) and a damaged file (ErrCorrupt), and
// then writes nothing. Every change rewrites the file atomically (temporary
// file in the same directory, fsync, rename, fsync of the directory), so a
// crash leaves either the old or the new content. A symbolic link at path is
// followed, and the file it points to is the one rewritten.
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
	st := &FileStore{kek: bytes.Clone(kek)}
	o := buildOptions(opts)
	if _, err := os.Lstat(abs); errors.Is(err, fs.ErrNotExist) {
		if fi, err := os.Stat(filepath.Dir(abs)); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("keystore: key file %s: directory %s does not exist", abs, filepath.Dir(abs))
		}
		st.path = abs
		st.core = newCore(nil, o, st.save)
		if err := st.save(st.core.keys); err != nil {
			return nil, err
		}
		return st, nil
	} else if err != nil {
		return nil, fmt.Errorf("keystore: key file %s: %w", abs, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("keystore: key file %s: %w", abs, err)
	}
	keys, err := loadFile(real, st.kek)
	if err != nil {
		return nil, err
	}
	st.path = real
	st.core = newCore(keys, o, st.save)
	return st, nil
}

// Path returns the absolute path of the key file.
func (f *FileStore) Path() string { return f.path }

func loadFile(path string, kek []byte) (map[slot][]*record, error) {
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
	return keys, nil
}

func (f *FileStore) save(keys map[slot][]*record) error {
	data, err := encodeFile(f.kek, keys)
	if err != nil {
		return err
	}
	if err := writeAtomic(f.path, data); err != nil {
		return fmt.Errorf("keystore: save key file %s: %w", f.path, err)
	}
	return nil
}

// writeAtomic replaces path with data: a 0600 temporary file in the same
// directory, synced, renamed over path, then the directory synced.
func writeAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(0o600); err != nil {
		return err
	}
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && runtime.GOOS != "windows" {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
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

func encodeFile(kek []byte, keys map[slot][]*record) ([]byte, error) {
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
	rand.Read(salt)
	fk, ck := deriveFileKeys(kek, salt)
	copy(out[len(fileMagic)+1+saltLen:], ck)
	nonce := out[headerLen-12 : headerLen]
	rand.Read(nonce)
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
	if err := ValidateTenant(k.Tenant); err != nil {
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
