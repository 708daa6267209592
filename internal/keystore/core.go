package keystore

import (
	"bytes"
	"context"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ed25519"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
)

// record is one key, private part included. Records are immutable once
// published in a state: a change makes a new record (copy-on-write), so
// readers holding a record never see it change and a failed save leaves the
// in-memory state untouched.
type record struct {
	tenant        string
	purpose       alpv1.KeyPurpose
	id            string
	state         alpv1.KeyState
	created       time.Time
	compromisedAt time.Time
	public        []byte // Ed25519 public key; nil for symmetric keys
	secret        []byte // Ed25519 seed or AES-256 key, 32 bytes
}

func (r *record) info() KeyInfo {
	return KeyInfo{
		KeyID:         r.id,
		Tenant:        r.tenant,
		Purpose:       r.purpose,
		Algorithm:     algorithmFor(r.purpose),
		PublicKey:     bytes.Clone(r.public),
		State:         r.state,
		Created:       r.created,
		CompromisedAt: r.compromisedAt,
	}
}

type slot struct {
	tenant  string
	purpose alpv1.KeyPurpose
}

// state is one complete, immutable view of the keys. A change builds a new
// state and publishes it whole, so a reader holding a state never sees it
// change. file describes the key file the state was read from or written to
// (nil for the memory store); see storage.
type state struct {
	keys map[slot][]*record
	file os.FileInfo
}

// storage is the persistence behind a core; nil for the memory store.
type storage interface {
	// stale reports whether the stored keys may differ from cur, the state
	// last loaded or saved. It must be cheap (a stat, no read).
	stale(cur *state) (bool, error)
	// load reads the stored state.
	load() (*state, error)
	// lock takes the inter-process lock that every change holds while it
	// reads, modifies and writes the stored state; it returns the release.
	lock(ctx context.Context) (release func(), err error)
	// save stores keys in place of prev (the state read under the lock) and
	// returns the state saved. It is called with the lock held.
	save(keys map[slot][]*record, prev *state) (*state, error)
}

// core implements KeyStore over an in-memory state, kept in step with its
// storage (if any): reads reload the state when the storage changed under
// them, and changes are applied to the stored state under the storage's
// lock, so several stores (processes) may share one storage.
type core struct {
	cur      atomic.Pointer[state]
	writeMu  sync.Mutex // serializes changes within the process
	loadMu   sync.Mutex // orders the publication of states loaded or saved
	notifyMu sync.Mutex // keeps observer calls in the order of the changes
	opts     options
	store    storage
}

func newCore(opts options, store storage) *core {
	c := &core{opts: opts, store: store}
	c.cur.Store(&state{keys: map[slot][]*record{}})
	return c
}

func (c *core) now() time.Time { return c.opts.now().UTC() }

func check(ctx context.Context, tenant string, purpose alpv1.KeyPurpose) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	if err := alp.ValidateTenant(tenant); err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	return validPurpose(purpose)
}

// fresh returns the current state, reloaded first if the storage changed
// since it was last loaded or saved (by another store or process). A failed
// reload (or a key file that can no longer be found) leaves the state in
// memory as it was and returns the error: reads fail closed rather than
// answer from keys the storage no longer confirms, and the next read tries
// again.
func (c *core) fresh() (*state, error) {
	cur := c.cur.Load()
	if c.store == nil {
		return cur, nil
	}
	if stale, err := c.store.stale(cur); err != nil || !stale {
		return cur, err
	}
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	// Another goroutine may have reloaded meanwhile.
	cur = c.cur.Load()
	if stale, err := c.store.stale(cur); err != nil || !stale {
		return cur, err
	}
	next, err := c.store.load()
	if err != nil {
		return nil, err
	}
	c.cur.Store(next)
	return next, nil
}

// find returns the record pick selects in slot s of the fresh state, or nil.
func (c *core) find(s slot, pick func([]*record) int) (*record, error) {
	st, err := c.fresh()
	if err != nil {
		return nil, err
	}
	keys := st.keys[s]
	if i := pick(keys); i >= 0 {
		return keys[i], nil
	}
	return nil, nil
}

// change applies fn to a copy of one slot's keys. If fn reports events, the
// new state is persisted, published in memory and then the events go to the
// observer, in order, outside every lock but notifyMu.
func (c *core) change(ctx context.Context, s slot, fn func(cur []*record) ([]*record, []*alpv1.KeyLifecycle, error)) error {
	c.writeMu.Lock()
	events, err := c.apply(ctx, s, fn)
	if err != nil || len(events) == 0 {
		c.writeMu.Unlock()
		return err
	}
	c.notifyMu.Lock()
	c.writeMu.Unlock()
	defer c.notifyMu.Unlock()
	if c.opts.observer == nil {
		return nil
	}
	for i, ev := range events {
		if err := c.opts.observer(ctx, ev); err != nil {
			return &ObserverError{Pending: events[i:], Err: err}
		}
	}
	return nil
}

// apply runs fn on the latest state and saves and publishes the result; the
// caller holds writeMu. With a storage it holds the storage's lock
// throughout and always re-reads the stored state under it (not only when
// stale says so): the read is cheap next to the save's fsyncs, and it makes
// "no update is lost" independent of file timestamps.
func (c *core) apply(ctx context.Context, s slot, fn func(cur []*record) ([]*record, []*alpv1.KeyLifecycle, error)) ([]*alpv1.KeyLifecycle, error) {
	cur := c.cur.Load()
	if c.store != nil {
		release, err := c.store.lock(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
		c.loadMu.Lock()
		defer c.loadMu.Unlock()
		if cur, err = c.store.load(); err != nil {
			return nil, err
		}
		c.cur.Store(cur)
	}
	next, events, err := fn(slices.Clone(cur.keys[s]))
	if err != nil || len(events) == 0 {
		return nil, err
	}
	all := maps.Clone(cur.keys)
	all[s] = next
	saved := &state{keys: all}
	if c.store != nil {
		if saved, err = c.store.save(all, cur); err != nil {
			return nil, err
		}
	}
	c.cur.Store(saved)
	return events, nil
}

var keyIDEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// random fills b from the store's random source (see WithRandom).
func (c *core) random(b []byte) error { return readRandom(c.opts.rand, b) }

func readRandom(r io.Reader, b []byte) error {
	if _, err := io.ReadFull(r, b); err != nil {
		return fmt.Errorf("keystore: random source: %w", err)
	}
	return nil
}

func (c *core) newRecord(s slot, existing []*record) (*record, error) {
	r := &record{tenant: s.tenant, purpose: s.purpose, state: alpv1.KeyState_KEY_STATE_ACTIVE, created: c.now()}
	for try := 0; ; try++ {
		if try == 8 { // 2^-64 each with a real random source
			return nil, errors.New("keystore: random source: it keeps repeating key ids")
		}
		var b [8]byte
		if err := c.random(b[:]); err != nil {
			return nil, err
		}
		r.id = purposeName(s.purpose) + "-" + strings.ToLower(keyIDEncoding.EncodeToString(b[:]))
		if findID(existing, r.id) < 0 {
			break
		}
	}
	r.secret = make([]byte, 32)
	if err := c.random(r.secret); err != nil {
		return nil, err
	}
	if IsAsymmetric(s.purpose) {
		r.public = ed25519.NewKeyFromSeed(r.secret).Public().(ed25519.PublicKey)
	}
	return r, nil
}

func findID(keys []*record, id string) int {
	return slices.IndexFunc(keys, func(r *record) bool { return r.id == id })
}

func findActive(keys []*record) int {
	return slices.IndexFunc(keys, func(r *record) bool { return r.state == alpv1.KeyState_KEY_STATE_ACTIVE })
}

func (c *core) Generate(ctx context.Context, tenant string, purpose alpv1.KeyPurpose) (KeyInfo, error) {
	if err := check(ctx, tenant, purpose); err != nil {
		return KeyInfo{}, err
	}
	s := slot{tenant, purpose}
	var made *record
	err := c.change(ctx, s, func(cur []*record) ([]*record, []*alpv1.KeyLifecycle, error) {
		if i := findActive(cur); i >= 0 {
			return nil, nil, fmt.Errorf("keystore: generate %s key for %s: %w (%s); use Rotate", purposeName(purpose), tenant, ErrActiveKeyExists, cur[i].id)
		}
		var err error
		if made, err = c.newRecord(s, cur); err != nil {
			return nil, nil, err
		}
		return append(cur, made), []*alpv1.KeyLifecycle{made.info().Lifecycle()}, nil
	})
	return madeInfo(made, err)
}

func (c *core) Rotate(ctx context.Context, tenant string, purpose alpv1.KeyPurpose) (KeyInfo, error) {
	if err := check(ctx, tenant, purpose); err != nil {
		return KeyInfo{}, err
	}
	s := slot{tenant, purpose}
	var made *record
	err := c.change(ctx, s, func(cur []*record) ([]*record, []*alpv1.KeyLifecycle, error) {
		var err error
		if made, err = c.newRecord(s, cur); err != nil {
			return nil, nil, err
		}
		// The new key's event goes first, so a reader of the events never
		// sees a moment without an active key.
		events := []*alpv1.KeyLifecycle{made.info().Lifecycle()}
		if i := findActive(cur); i >= 0 {
			old := *cur[i]
			old.state = alpv1.KeyState_KEY_STATE_RETIRED
			cur[i] = &old
			events = append(events, old.info().Lifecycle())
		}
		return append(cur, made), events, nil
	})
	return madeInfo(made, err)
}

// madeInfo returns the new key's info if it was saved: with a nil error or
// with an ObserverError (saved, not published); otherwise only the error.
func madeInfo(made *record, err error) (KeyInfo, error) {
	var oe *ObserverError
	if made == nil || err != nil && !errors.As(err, &oe) {
		return KeyInfo{}, err
	}
	return made.info(), err
}

func (c *core) Retire(ctx context.Context, tenant string, purpose alpv1.KeyPurpose, keyID string) error {
	if err := check(ctx, tenant, purpose); err != nil {
		return err
	}
	return c.change(ctx, slot{tenant, purpose}, func(cur []*record) ([]*record, []*alpv1.KeyLifecycle, error) {
		i := findID(cur, keyID)
		if i < 0 {
			return nil, nil, fmt.Errorf("keystore: retire %q of %s: %w", keyID, tenant, ErrNotFound)
		}
		switch cur[i].state {
		case alpv1.KeyState_KEY_STATE_RETIRED:
			return nil, nil, nil
		case alpv1.KeyState_KEY_STATE_REVOKED:
			return nil, nil, fmt.Errorf("keystore: retire %q of %s: %w", keyID, tenant, ErrKeyRevoked)
		}
		r := *cur[i]
		r.state = alpv1.KeyState_KEY_STATE_RETIRED
		cur[i] = &r
		return cur, []*alpv1.KeyLifecycle{r.info().Lifecycle()}, nil
	})
}

func (c *core) Revoke(ctx context.Context, tenant string, purpose alpv1.KeyPurpose, keyID string, compromisedAt time.Time) error {
	if err := check(ctx, tenant, purpose); err != nil {
		return err
	}
	if compromisedAt.After(c.now()) {
		return fmt.Errorf("keystore: revoke %q of %s: compromise time %s is in the future", keyID, tenant, compromisedAt.UTC().Format(time.RFC3339))
	}
	return c.change(ctx, slot{tenant, purpose}, func(cur []*record) ([]*record, []*alpv1.KeyLifecycle, error) {
		i := findID(cur, keyID)
		if i < 0 {
			return nil, nil, fmt.Errorf("keystore: revoke %q of %s: %w", keyID, tenant, ErrNotFound)
		}
		r := *cur[i]
		at := compromisedAt.UTC()
		if at.IsZero() || at.Before(r.created) {
			at = r.created
		}
		if r.state == alpv1.KeyState_KEY_STATE_REVOKED && !at.Before(r.compromisedAt) {
			return nil, nil, nil // already revoked since that time or earlier
		}
		r.state = alpv1.KeyState_KEY_STATE_REVOKED
		r.compromisedAt = at
		cur[i] = &r
		return cur, []*alpv1.KeyLifecycle{r.info().Lifecycle()}, nil
	})
}

func (c *core) Active(ctx context.Context, tenant string, purpose alpv1.KeyPurpose) (KeyInfo, error) {
	if err := check(ctx, tenant, purpose); err != nil {
		return KeyInfo{}, err
	}
	r, err := c.find(slot{tenant, purpose}, findActive)
	if err != nil {
		return KeyInfo{}, err
	}
	if r == nil {
		return KeyInfo{}, fmt.Errorf("keystore: %s key of %s: %w", purposeName(purpose), tenant, ErrNoActiveKey)
	}
	return r.info(), nil
}

func (c *core) Keys(ctx context.Context, tenant string, purpose alpv1.KeyPurpose) ([]KeyInfo, error) {
	if err := check(ctx, tenant, purpose); err != nil {
		return nil, err
	}
	st, err := c.fresh()
	if err != nil {
		return nil, err
	}
	keys := st.keys[slot{tenant, purpose}]
	out := make([]KeyInfo, 0, len(keys))
	for _, r := range keys {
		out = append(out, r.info())
	}
	return out, nil
}

func usable(r *record, what string) error {
	switch r.state {
	case alpv1.KeyState_KEY_STATE_ACTIVE:
		return nil
	case alpv1.KeyState_KEY_STATE_REVOKED:
		return fmt.Errorf("keystore: %s with %q of %s: %w", what, r.id, r.tenant, ErrKeyRevoked)
	default:
		return fmt.Errorf("keystore: %s with %q of %s: %w (state %v)", what, r.id, r.tenant, ErrKeyNotUsable, r.state)
	}
}

func (c *core) Signer(ctx context.Context, tenant string, purpose alpv1.KeyPurpose, keyID string) (crypto.Signer, error) {
	if err := check(ctx, tenant, purpose); err != nil {
		return nil, err
	}
	if !IsAsymmetric(purpose) {
		return nil, fmt.Errorf("keystore: signer for %s key: %w (symmetric purpose)", purposeName(purpose), ErrWrongPurpose)
	}
	s := slot{tenant, purpose}
	r, err := c.find(s, func(k []*record) int { return findID(k, keyID) })
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("keystore: signer for %q of %s: %w", keyID, tenant, ErrNotFound)
	}
	if err := usable(r, "sign"); err != nil {
		return nil, err
	}
	return &signer{c: c, s: s, id: keyID, public: ed25519.PublicKey(bytes.Clone(r.public))}, nil
}

// signer signs with a stored Ed25519 key without exposing it, and only while
// the key is still ACTIVE.
type signer struct {
	c      *core
	s      slot
	id     string
	public ed25519.PublicKey
}

func (g *signer) Public() crypto.PublicKey { return g.public }

// Sign signs message with Ed25519 (opts.HashFunc() must be 0; Ed25519ph and
// Ed25519ctx via *ed25519.Options as in crypto/ed25519).
func (g *signer) Sign(rnd io.Reader, message []byte, opts crypto.SignerOpts) ([]byte, error) {
	r, err := g.c.find(g.s, func(k []*record) int { return findID(k, g.id) })
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("keystore: sign with %q of %s: %w", g.id, g.s.tenant, ErrNotFound)
	}
	if err := usable(r, "sign"); err != nil {
		return nil, err
	}
	sig, err := ed25519.NewKeyFromSeed(r.secret).Sign(rnd, message, opts)
	if err != nil {
		return nil, fmt.Errorf("keystore: sign with %q: %w", g.id, err)
	}
	return sig, nil
}

// Wrapped value layout: version (1 byte) | len(key id) (1 byte) | key id |
// nonce (12 bytes) | AES-GCM ciphertext and tag.
const (
	wrapVersion  = 1
	wrapOverhead = 2 + 12 + 16
)

// wrapAAD binds a wrapped value to its tenant, purpose and key, besides the
// caller's aad; every part is length-prefixed, so no two inputs collide.
func wrapAAD(s slot, keyID string, aad []byte) []byte {
	b := []byte("alpd/keystore/wrap/v1")
	for _, part := range [][]byte{[]byte(s.tenant), []byte(purposeName(s.purpose)), []byte(keyID), aad} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(part)))
		b = append(b, part...)
	}
	return b
}

func gcm(key []byte) cipher.AEAD {
	block, err := aes.NewCipher(key)
	if err != nil {
		panic("keystore: " + err.Error()) // keys are always 32 bytes
	}
	a, err := cipher.NewGCM(block)
	if err != nil {
		panic("keystore: " + err.Error())
	}
	return a
}

func (c *core) Wrap(ctx context.Context, tenant string, purpose alpv1.KeyPurpose, plaintext, aad []byte) ([]byte, error) {
	if err := check(ctx, tenant, purpose); err != nil {
		return nil, err
	}
	if !IsSymmetric(purpose) {
		return nil, fmt.Errorf("keystore: wrap with %s key: %w (asymmetric purpose)", purposeName(purpose), ErrWrongPurpose)
	}
	s := slot{tenant, purpose}
	r, err := c.find(s, findActive)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("keystore: wrap with %s key of %s: %w", purposeName(purpose), tenant, ErrNoActiveKey)
	}
	out := make([]byte, 0, wrapOverhead+len(r.id)+len(plaintext))
	out = append(out, wrapVersion, byte(len(r.id)))
	out = append(out, r.id...)
	nonce := make([]byte, 12)
	if err := c.random(nonce); err != nil {
		return nil, err
	}
	out = append(out, nonce...)
	return gcm(r.secret).Seal(out, nonce, plaintext, wrapAAD(s, r.id, aad)), nil
}

// WrappedKeyID returns the id of the key that made a wrapped value.
func WrappedKeyID(wrapped []byte) (string, error) {
	if len(wrapped) < 2 || wrapped[0] != wrapVersion {
		return "", fmt.Errorf("keystore: %w: unknown format", ErrInvalidWrapped)
	}
	n := int(wrapped[1])
	if n == 0 || len(wrapped) < wrapOverhead+n {
		return "", fmt.Errorf("keystore: %w: truncated", ErrInvalidWrapped)
	}
	return string(wrapped[2 : 2+n]), nil
}

func (c *core) Unwrap(ctx context.Context, tenant string, purpose alpv1.KeyPurpose, wrapped, aad []byte) ([]byte, error) {
	if err := check(ctx, tenant, purpose); err != nil {
		return nil, err
	}
	if !IsSymmetric(purpose) {
		return nil, fmt.Errorf("keystore: unwrap with %s key: %w (asymmetric purpose)", purposeName(purpose), ErrWrongPurpose)
	}
	id, err := WrappedKeyID(wrapped)
	if err != nil {
		return nil, err
	}
	s := slot{tenant, purpose}
	r, err := c.find(s, func(k []*record) int { return findID(k, id) })
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("keystore: unwrap with %q of %s: %w", id, tenant, ErrNotFound)
	}
	if r.state == alpv1.KeyState_KEY_STATE_REVOKED {
		return nil, fmt.Errorf("keystore: unwrap with %q of %s: %w", id, tenant, ErrKeyRevoked)
	}
	rest := wrapped[2+len(id):]
	pt, err := gcm(r.secret).Open(nil, rest[:12], rest[12:], wrapAAD(s, id, aad))
	if err != nil {
		return nil, fmt.Errorf("keystore: unwrap with %q of %s: %w: authentication failed (tampered, or different additional data)", id, tenant, ErrInvalidWrapped)
	}
	return pt, nil
}

// MemoryStore is a KeyStore that keeps keys in memory only: for tests and
// brokers whose keys may die with the process.
type MemoryStore struct{ *core }

var (
	_ KeyStore = (*MemoryStore)(nil)
	_ KeyStore = (*FileStore)(nil)
)

// NewMemory returns an empty in-memory store.
func NewMemory(opts ...Option) *MemoryStore {
	return &MemoryStore{newCore(buildOptions(opts), nil)}
}
