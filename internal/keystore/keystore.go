package keystore

import (
	"context"
	"crypto"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

// Algorithms of the keys the store makes.
const (
	AlgEd25519   = "ed25519"
	AlgAES256GCM = "aes-256-gcm"
)

// Sentinel errors; every error the store returns wraps at most one of them
// (and ObserverError wraps the observer's own error), so callers can test
// with errors.Is.
var (
	// ErrNotFound: no key with that id for that tenant and purpose.
	ErrNotFound = errors.New("key not found")
	// ErrNoActiveKey: the tenant has no ACTIVE key for the purpose.
	ErrNoActiveKey = errors.New("no active key")
	// ErrActiveKeyExists: Generate was called while a key is ACTIVE (use Rotate).
	ErrActiveKeyExists = errors.New("an active key already exists")
	// ErrKeyRevoked: the key was revoked as compromised and may not be used.
	ErrKeyRevoked = errors.New("key is revoked")
	// ErrKeyNotUsable: the key's state does not allow the operation (e.g.
	// signing with a RETIRED key).
	ErrKeyNotUsable = errors.New("key is not usable for this operation")
	// ErrWrongPurpose: the operation does not fit the purpose (Signer on a
	// symmetric purpose, Wrap on an asymmetric one) or the purpose is unknown.
	ErrWrongPurpose = errors.New("wrong key purpose")
	// ErrBadKEK: the key-encryption key is malformed or is not the one the
	// key file was sealed with.
	ErrBadKEK = errors.New("bad key-encryption key")
	// ErrCorrupt: the key file is truncated, damaged or not a key file.
	ErrCorrupt = errors.New("key file is corrupt")
	// ErrInvalidWrapped: a wrapped value is malformed or fails authentication
	// (tampered, or wrong additional data).
	ErrInvalidWrapped = errors.New("invalid wrapped value")
)

// KeyStore holds keys per tenant and purpose. Implementations are safe for
// concurrent use. Every method validates the tenant (alp.ValidateTenant; the
// error wraps alp.ErrInvalidTenant) and the purpose first.
type KeyStore interface {
	// Generate creates a key and makes it ACTIVE. It fails with
	// ErrActiveKeyExists if the tenant already has an ACTIVE key for the
	// purpose: use Rotate for that.
	Generate(ctx context.Context, tenant string, purpose alpv1.KeyPurpose) (KeyInfo, error)
	// Rotate creates a new ACTIVE key and RETIRES the previously active one,
	// if any (so it also works after the active key was revoked or retired).
	Rotate(ctx context.Context, tenant string, purpose alpv1.KeyPurpose) (KeyInfo, error)
	// Retire moves a key to RETIRED; it is a no-op for a RETIRED key and
	// fails with ErrKeyRevoked for a REVOKED one.
	Retire(ctx context.Context, tenant string, purpose alpv1.KeyPurpose, keyID string) error
	// Revoke marks a key as compromised since compromisedAt (the zero time
	// means since its creation, the cautious choice when the instant is
	// unknown; a time in the future is refused). Revoking a revoked key
	// again only moves compromisedAt earlier.
	Revoke(ctx context.Context, tenant string, purpose alpv1.KeyPurpose, keyID string, compromisedAt time.Time) error
	// Active returns the ACTIVE key, or ErrNoActiveKey.
	Active(ctx context.Context, tenant string, purpose alpv1.KeyPurpose) (KeyInfo, error)
	// Keys returns every key of the tenant and purpose, in every state,
	// oldest first; an empty list if there is none.
	Keys(ctx context.Context, tenant string, purpose alpv1.KeyPurpose) ([]KeyInfo, error)
	// Signer returns a signer for an asymmetric key. The key must be ACTIVE
	// when the signer is made and again at every Sign call: once the key is
	// rotated, retired or revoked the signer refuses (ErrKeyNotUsable or
	// ErrKeyRevoked) and the caller must fetch the new active key.
	Signer(ctx context.Context, tenant string, purpose alpv1.KeyPurpose, keyID string) (crypto.Signer, error)
	// Wrap encrypts plaintext with the ACTIVE key of a symmetric purpose
	// (AES-256-GCM, random nonce), bound to tenant, purpose, key id and aad.
	// The result names the key id, so Unwrap finds the key after rotation.
	Wrap(ctx context.Context, tenant string, purpose alpv1.KeyPurpose, plaintext, aad []byte) ([]byte, error)
	// Unwrap decrypts what Wrap returned, with whichever key the value
	// names as long as it is not REVOKED, and the same aad.
	Unwrap(ctx context.Context, tenant string, purpose alpv1.KeyPurpose, wrapped, aad []byte) ([]byte, error)
}

// KeyInfo is the public description of a key. It never holds private or
// secret key material.
type KeyInfo struct {
	// KeyID is random, "<purpose>-<base32 of 8 random bytes>", e.g.
	// "federation-mfrggzdfmztwq2l".
	KeyID   string
	Tenant  string
	Purpose alpv1.KeyPurpose
	// Algorithm is AlgEd25519 or AlgAES256GCM.
	Algorithm string
	// PublicKey is the raw public key (32 bytes for Ed25519, usable as
	// ed25519.PublicKey); nil for symmetric keys.
	PublicKey []byte
	State     alpv1.KeyState
	Created   time.Time
	// CompromisedAt is set for REVOKED keys: anything made with the key at
	// or after this instant is void.
	CompromisedAt time.Time
}

// Lifecycle returns the KeyLifecycle event body for the key's current state.
// It holds public data only.
func (k KeyInfo) Lifecycle() *alpv1.KeyLifecycle {
	ev := &alpv1.KeyLifecycle{
		Tenant:    k.Tenant,
		Purpose:   k.Purpose,
		KeyId:     k.KeyID,
		Algorithm: k.Algorithm,
		PublicKey: append([]byte(nil), k.PublicKey...),
		State:     k.State,
	}
	if !k.Created.IsZero() {
		ev.Created = timestamppb.New(k.Created)
	}
	if !k.CompromisedAt.IsZero() {
		ev.CompromisedAt = timestamppb.New(k.CompromisedAt)
	}
	return ev
}

// Observer is told about every change of a key's state after the change has
// been saved durably. It must not call the store's mutating methods (it may
// read). See ObserverError.
type Observer func(ctx context.Context, ev *alpv1.KeyLifecycle) error

// ObserverError is returned when a change was saved but the observer failed.
// The change is NOT undone: the key file is the source of truth, and undoing
// a saved change after a failed publish could itself fail and leave the two
// disagreeing in a worse way (e.g. a revocation silently lost). Instead the
// caller re-publishes: Pending holds the events the observer did not
// acknowledge (the failed one and the ones after it, in order), and
// KeyInfo.Lifecycle of Keys gives the current state of every key at any time,
// so re-publishing is idempotent. Methods that return a KeyInfo return the
// new key's info together with an ObserverError.
type ObserverError struct {
	Pending []*alpv1.KeyLifecycle
	Err     error
}

func (e *ObserverError) Error() string {
	return fmt.Sprintf("keystore: key change saved, but the observer failed (%d event(s) not delivered): %v", len(e.Pending), e.Err)
}

func (e *ObserverError) Unwrap() error { return e.Err }

// Option configures a store.
type Option func(*options)

type options struct {
	observer Observer
	now      func() time.Time
	rand     io.Reader
}

// WithObserver sets the function told about every saved change of state
// made through this store. Changes made by another store or process sharing
// the same key file are not reported to it.
func WithObserver(fn Observer) Option { return func(o *options) { o.observer = fn } }

// WithClock sets the clock used for creation and revocation times (tests).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithRandom sets the source of every random byte the store generates: key
// material (Ed25519 seeds, AES keys), key ids, the nonces of Wrap and the
// salt and nonce with which FileStore seals its file. The default, and the
// only choice for production, is crypto/rand.Reader.
//
// It exists so that tests can know every byte the store generated (wrap
// crypto/rand.Reader in a recorder), and so that test environments can
// provision reproducible keys from a seeded deterministic generator. NEVER
// use it with a non-cryptographic or predictable reader in production: keys
// would be guessable, and a reader that repeats itself reuses AES-GCM nonces
// under one key, which breaks the encryption of wrapped values and of the
// key file outright. A read error (or short read) fails the operation that
// needed the bytes, leaving the store unchanged. The store serializes its
// reads from r, so r need not be safe for concurrent use. A nil r keeps
// crypto/rand.Reader.
func WithRandom(r io.Reader) Option { return func(o *options) { o.rand = r } }

// lockedReader serializes reads from a reader given to WithRandom; each
// Read fills b completely (or fails), so the bytes of one key, id or nonce
// are consecutive bytes of r even when goroutines draw concurrently.
type lockedReader struct {
	mu sync.Mutex
	r  io.Reader
}

func (l *lockedReader) Read(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return io.ReadFull(l.r, b)
}

func buildOptions(opts []Option) options {
	o := options{now: time.Now}
	for _, fn := range opts {
		if fn != nil {
			fn(&o)
		}
	}
	if o.now == nil {
		o.now = time.Now
	}
	switch o.rand {
	case nil, rand.Reader:
		o.rand = rand.Reader // safe for concurrent use as it is
	default:
		o.rand = &lockedReader{r: o.rand}
	}
	return o
}

// IsAsymmetric reports whether keys of the purpose are signing key pairs.
func IsAsymmetric(p alpv1.KeyPurpose) bool {
	switch p {
	case alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER, alpv1.KeyPurpose_KEY_PURPOSE_TOKEN:
		return true
	}
	return false
}

// IsSymmetric reports whether keys of the purpose are secret AES keys.
func IsSymmetric(p alpv1.KeyPurpose) bool {
	switch p {
	case alpv1.KeyPurpose_KEY_PURPOSE_COOKIE, alpv1.KeyPurpose_KEY_PURPOSE_DATA:
		return true
	}
	return false
}

func validPurpose(p alpv1.KeyPurpose) error {
	if IsAsymmetric(p) || IsSymmetric(p) {
		return nil
	}
	return fmt.Errorf("keystore: %w: unknown purpose %v", ErrWrongPurpose, p)
}

// purposeName is the short lowercase name used in key ids ("federation").
func purposeName(p alpv1.KeyPurpose) string {
	return strings.ToLower(strings.TrimPrefix(p.String(), "KEY_PURPOSE_"))
}

func algorithmFor(p alpv1.KeyPurpose) string {
	if IsAsymmetric(p) {
		return AlgEd25519
	}
	return AlgAES256GCM
}
