// Package secrets keeps one random secret per person's ledger, in an
// erasable KV bucket, and derives from it what makes the person's ledger
// commitments openable: the salt of each entry and the key that seals each
// entry's opening.
//
// Why: a ledger leaf is kept forever (the ledger stream denies deletes and
// purges, and a Merkle log cannot drop a leaf without breaking every later
// root). So a leaf holds only a salted commitment to the envelope's digest.
// Whoever knows the salt and the digest can open it; nobody else can test a
// guess against it. Both come from this secret: the salt is derived from it,
// and the digest is stored on the stream sealed under a key derived from it.
// Erasing a person purges the secret, and from then on no opening of theirs
// can be computed or decrypted, while their log still verifies.
//
// Storage is internal/personkeys, as for internal/seal's data keys: the bucket (<NS>_LEDGERSECRETS, one value
// per key, no history) holds under "<tenant>.<person>" the secret wrapped by
// the tenant's DATA key from the KeyStore (never plain), bound to tenant,
// person and version by the wrap's additional data. The first writer wins
// (KV Create); a replica that loses the race uses the winner's secret.
// Erase purges the key and writes a tombstone in its place, so no replica
// can create a new secret afterwards. Cached secrets expire after a TTL
// (default 30 s), which bounds how late another replica sees an erasure;
// the same limits on disk remnants as internal/seal apply (the remnants are
// wrapped by the tenant's DATA key, which never reaches NATS).
package secrets

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/personkeys"
)

var (
	// ErrErased: the person's ledger secret was erased; their openings are
	// unreadable and no new one can be made.
	ErrErased = errors.New("ledger secret erased")
	// ErrNoSecret: the person has no ledger secret (nothing committed yet).
	ErrNoSecret = errors.New("no ledger secret")
	// ErrOpening: a sealed opening does not authenticate (modified, or
	// bound to another entry).
	ErrOpening = errors.New("sealed opening does not authenticate")
)

// nonceSize is the AES-GCM nonce of a sealed opening.
const nonceSize = 12

// BucketConfig is the configuration of the secrets bucket named name: one
// value per key, no history (a purge leaves nothing readable), no TTL.
func BucketConfig(name string) jetstream.KeyValueConfig {
	return personkeys.BucketConfig(name, "alpd per-person ledger secrets (salts and openings), wrapped by the tenant's DATA key; purged on erasure")
}

// Options tune the cache.
type Options struct {
	// CacheTTL bounds how long a secret is used without reading the bucket
	// again (default 30 s; negative disables the cache).
	CacheTTL time.Duration
	// CacheSize bounds the number of cached persons (default 4096).
	CacheSize int
	// Now is the clock (tests).
	Now func() time.Time
}

// Store gets, creates and erases ledger secrets. Safe for concurrent use;
// several Stores (replicas) may share one bucket.
type Store struct {
	keys *personkeys.Store[*Secret]
}

// New returns a Store on kv (configured with BucketConfig) wrapping secrets
// with the tenants' DATA keys in ks.
func New(kv jetstream.KeyValue, ks keystore.KeyStore, o Options) *Store {
	if o.CacheTTL == 0 {
		o.CacheTTL = 30 * time.Second
	}
	if o.CacheSize == 0 {
		o.CacheSize = 4096
	}
	return &Store{keys: personkeys.New(kv, ks, personkeys.Options[*Secret]{
		Domain: "alp-ledger/secret/v1", Derive: derive,
		Erased: ErrErased, None: ErrNoSecret,
		CacheTTL: o.CacheTTL, CacheSize: o.CacheSize, Now: o.Now,
	})}
}

// Secret is one person's ledger secret with its derived keys.
type Secret struct {
	tenant, person string
	saltKey        []byte
	opening        cipher.AEAD
}

func validate(tenant, person string) error {
	if err := alp.ValidatePerson(tenant, person); err != nil {
		return fmt.Errorf("ledger secrets: %w", err)
	}
	return nil
}

func lp(b []byte, parts ...[]byte) []byte {
	for _, p := range parts {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

// Get returns the person's secret, creating it when create is set and the
// person has none. ErrErased after erasure; ErrNoSecret when there is none
// and create is not set.
func (s *Store) Get(ctx context.Context, tenant, person string, create bool) (*Secret, error) {
	if err := validate(tenant, person); err != nil {
		return nil, err
	}
	k, err := s.keys.Get(ctx, tenant, person, create)
	if err != nil {
		return nil, fmt.Errorf("ledger secrets: %w", err)
	}
	return k.Value, nil
}

// Erase purges the person's secret and leaves a tombstone, so no replica
// creates a new one. Idempotent; also works for a person without a secret.
func (s *Store) Erase(ctx context.Context, tenant, person string) error {
	if err := validate(tenant, person); err != nil {
		return err
	}
	if err := s.keys.Erase(ctx, tenant, person); err != nil {
		return fmt.Errorf("ledger secrets: %w", err)
	}
	return nil
}

func mac(k []byte, parts ...[]byte) []byte {
	h := hmac.New(sha256.New, k)
	h.Write(lp(nil, parts...))
	return h.Sum(nil)
}

// derive splits the secret into independent keys (domain-separated HMACs),
// so the salt key and the opening key never meet.
func derive(tenant, person string, raw []byte) *Secret {
	ok := mac(raw, []byte("alp-ledger/opening-key/v1"))
	block, _ := aes.NewCipher(ok) // 32 bytes: AES-256
	aead, _ := cipher.NewGCM(block)
	return &Secret{tenant: tenant, person: person, saltKey: mac(raw, []byte("alp-ledger/salt-key/v1")), opening: aead}
}

func be64(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

// Salt is the salt of the person's entry at index about envelopeID:
// HMAC(secret, "salt" || envelope id || index), 32 bytes. It is
// deterministic, so a retried append builds the very same leaf.
func (s *Secret) Salt(envelopeID string, index uint64) []byte {
	return mac(s.saltKey, []byte("salt"), []byte(envelopeID), be64(index))
}

func (s *Secret) openingAAD(envelopeID string, index uint64) []byte {
	return lp(nil, []byte("alp-ledger/opening/v1"), []byte(s.tenant), []byte(s.person), []byte(envelopeID), be64(index))
}

// SealOpening encrypts digest (the committed envelope digest) for the
// entry at index: AES-256-GCM, random nonce, bound to tenant, person,
// envelope and index. The result is nonce || ciphertext.
func (s *Secret) SealOpening(envelopeID string, index uint64, digest []byte) []byte {
	nonce := make([]byte, nonceSize, nonceSize+len(digest)+s.opening.Overhead())
	rand.Read(nonce)
	return s.opening.Seal(nonce, nonce, digest, s.openingAAD(envelopeID, index))
}

// OpenOpening decrypts what SealOpening returned for the same entry.
func (s *Secret) OpenOpening(envelopeID string, index uint64, sealed []byte) ([]byte, error) {
	if len(sealed) < nonceSize+s.opening.Overhead() {
		return nil, ErrOpening
	}
	d, err := s.opening.Open(nil, sealed[:nonceSize], sealed[nonceSize:], s.openingAAD(envelopeID, index))
	if err != nil {
		return nil, ErrOpening
	}
	return d, nil
}
