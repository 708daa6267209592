// Package seal encrypts message bodies with per-person data keys, so that a
// person's data can be erased from append-only streams (crypto-shredding).
//
// Why: alpd keeps every state change as an event on JetStream streams that
// are never rewritten (the ledger stream even denies purges). A person's
// right to erasure therefore cannot be met by deleting messages. Instead,
// every body that goes on a stream is sealed with a key that belongs to one
// person; erasing the person destroys that key, and everything sealed with
// it becomes unreadable while the streams stay intact.
//
// How:
//
//   - Each (tenant, person) has one random AES-256 data key, version 1. It
//     is stored in a JetStream KV bucket (see [BucketConfig]: one value per
//     key, no history) under the key "<tenant>.<person>", never in plain
//     form: it is wrapped (AES-256-GCM) by the tenant's DATA key in the
//     [keystore.KeyStore], with additional data binding it to tenant, person
//     and version. The KV bucket, unlike the streams, may be purged.
//   - [Sealer.Seal] gets or creates the person's key. Creation uses KV
//     Create, which fails if another replica created the key first; the
//     loser then reads and uses the winner's key, so replicas converge on
//     one key per person. The body is AES-256-GCM with a random 12-byte
//     nonce; its additional data is the caller's (e.g. the envelope id)
//     plus tenant, person and key version, so a sealed body cannot be
//     moved to another envelope or person.
//   - [Sealer.Digest] is a keyed digest (HMAC-SHA256) under a key derived
//     from the person's data key: deterministic, so it can stand in a
//     stream for something that must be compared later (an idempotency
//     key, a request), without anyone being able to test a guess against
//     it, and unlinkable once the key is destroyed.
//   - [Sealer.Destroy] purges the person's KV key (a purge drops every
//     earlier revision, so no history keeps the wrapped key) and writes a
//     tombstone in its place: the JSON value {"format":1,"destroyed":true,
//     "destroyed_at":...}, with no key material. The tombstone makes erasure
//     final: afterwards both Open and Seal for that person fail with
//     [ErrKeyDestroyed], on every replica, instead of Seal silently creating
//     a new key. Destroy is idempotent. The broker also appends a
//     DataKeyDestroyed event (see [WithDestroyObserver]).
//
// Caching and other replicas: unwrapped keys are cached in memory (at most
// [WithCacheSize] persons, least recently used dropped first) for
// [WithCacheTTL], default 30 s. A Destroy on this Sealer takes effect here
// at once; a Destroy on another replica takes effect here within that TTL:
// until the cached entry expires this Sealer may still open bodies of the
// person and seal new ones with the destroyed key (those are unreadable
// everywhere once the entry expires). A TTL is simpler than watching the
// bucket, and its bound holds without depending on a subscription staying
// healthy through reconnects; set the TTL to 0 to read the bucket on every
// call. A destroyed person stays marked in the cache without expiry (until
// the size bound drops the entry), as erasure is final.
//
// What this does not do: the data key of a person is never rotated (the
// version is always 1, the field exists for a later rotation scheme); a
// random 96-bit nonce per body keeps the usual AES-GCM bound of about 2^32
// bodies per person key. The tenant's DATA key must exist in the KeyStore
// before the first Seal: this package does not create it.
//
// Limit of erasure on disk: a purge removes the wrapped key from the bucket's
// stream (no read, history or replay returns it), but the JetStream file
// store only marks removed messages deleted and may keep their bytes in its
// block files until it compacts them; Raft logs of replicated buckets and
// backups keep them too. Secure deletion (SecureDeleteMsg) is not available:
// KV streams are created with DenyDelete, which the server will not lift.
// Those remnants are wrapped, so reading them also needs the tenant's DATA
// key from the KeyStore, which never reaches the NATS servers. Full shredding
// of such remnants needs the tenant's DATA key to be rotated and the old one
// revoked and removed once no live data key is wrapped by it (alpd does not
// re-wrap data keys).
package seal

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

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/personkeys"
)

var (
	// ErrKeyDestroyed: the person's data key was destroyed; their sealed
	// bodies are unreadable and nothing new may be sealed for them.
	ErrKeyDestroyed = errors.New("data key destroyed")
	// ErrNoDataKey: the person has no data key (nothing was ever sealed for
	// them, or the bucket lost it) or not the version the body names.
	ErrNoDataKey = errors.New("no data key")
	// ErrMalformed: a SealedBody is missing or has fields of the wrong size.
	ErrMalformed = errors.New("malformed sealed body")
	// ErrOpenFailed: the body does not authenticate under the person's key:
	// it was modified, or the additional data differs.
	ErrOpenFailed = errors.New("sealed body does not authenticate")
)

const nonceSize = 12

// BucketConfig returns the configuration of the data-key KV bucket named
// name (the broker namespaces it): one value per key and no history, so a
// replaced or purged value is gone from the bucket, file storage, no TTL
// (keys must never expire on their own). Callers may set Replicas.
func BucketConfig(name string) jetstream.KeyValueConfig {
	return personkeys.BucketConfig(name, "alpd per-person data keys, wrapped by the tenant's DATA key; purged on erasure")
}

// Option configures a Sealer.
type Option func(*options)

type options struct {
	ttl       time.Duration
	size      int
	now       func() time.Time
	onDestroy func(context.Context, *alpv1.DataKeyDestroyed) error
}

// WithCacheTTL sets how long an unwrapped key is used without reading the
// bucket again, which bounds how late another replica's Destroy takes
// effect here. 0 disables the cache. Default 30 s.
func WithCacheTTL(d time.Duration) Option { return func(o *options) { o.ttl = max(d, 0) } }

// WithCacheSize sets how many persons' keys are cached at most (default
// 4096; 0 disables the cache).
func WithCacheSize(n int) Option { return func(o *options) { o.size = max(n, 0) } }

// WithClock sets the clock for cache expiry and tombstone times (tests).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithDestroyObserver sets a function called after a person's key is
// destroyed (and on every repeated Destroy), e.g. to append the
// DataKeyDestroyed tombstone event to the person's streams. If it fails,
// the key stays destroyed and Destroy returns the error; call Destroy again
// to retry the notification.
func WithDestroyObserver(fn func(ctx context.Context, ev *alpv1.DataKeyDestroyed) error) Option {
	return func(o *options) { o.onDestroy = fn }
}

// Sealer seals and opens bodies with per-person data keys. It is safe for
// concurrent use; several Sealers (replicas) may share one bucket.
type Sealer struct {
	keys *personkeys.Store[dataKey]
	opts options
}

// dataKey is what a person's data key is used as: the AEAD of their bodies
// and the key of their digests (see Digest).
type dataKey struct {
	aead cipher.AEAD
	mac  []byte
}

// New returns a Sealer storing data keys in kv (configure its bucket with
// BucketConfig) wrapped by the DATA keys of ks.
func New(kv jetstream.KeyValue, ks keystore.KeyStore, opts ...Option) *Sealer {
	o := options{ttl: 30 * time.Second, size: 4096, now: time.Now}
	for _, fn := range opts {
		if fn != nil {
			fn(&o)
		}
	}
	if o.now == nil {
		o.now = time.Now
	}
	keys := personkeys.New(kv, ks, personkeys.Options[dataKey]{
		Domain: "alp-seal/data-key/v1",
		Derive: func(_, _ string, raw []byte) dataKey { return dataKey{aead: newAEAD(raw), mac: digestKey(raw)} },
		Erased: ErrKeyDestroyed, None: ErrNoDataKey,
		CacheTTL: o.ttl, CacheSize: o.size, Now: o.now,
	})
	return &Sealer{keys: keys, opts: o}
}

// validate checks the tenant and person id every operation names (the
// errors wrap alp.ErrInvalidTenant and alp.ErrInvalidPersonID).
func validate(tenant, personID string) error {
	if err := alp.ValidatePerson(tenant, personID); err != nil {
		return fmt.Errorf("seal: %w", err)
	}
	return nil
}

// kvKey is the bucket key of a person's data key. Person ids are a single
// token, so the last token is the person and the rest the tenant.
func lp(b []byte, parts ...[]byte) []byte {
	for _, p := range parts {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

func bodyAAD(tenant, personID string, version uint32, aad []byte) []byte {
	b := lp([]byte("alp-seal/body/v1"), []byte(tenant), []byte(personID))
	b = binary.BigEndian.AppendUint32(b, version)
	return lp(b, aad)
}

func newAEAD(key []byte) cipher.AEAD {
	block, err := aes.NewCipher(key)
	if err != nil {
		panic("seal: " + err.Error()) // data keys are always 32 bytes
	}
	a, err := cipher.NewGCM(block)
	if err != nil {
		panic("seal: " + err.Error())
	}
	return a
}

// ViewAAD binds the body of one trust class's view of an envelope
// (policy's Deliverable) to the envelope and the class, so a consumer
// agent's view cannot be passed off as a company agent's.
func ViewAAD(envelopeID, trustClass string) []byte {
	return []byte(envelopeID + "\x00view\x00" + trustClass)
}

// HeldAAD binds the body of a held item to the envelope and the item.
func HeldAAD(envelopeID, heldID string) []byte {
	return []byte(envelopeID + "\x00held\x00" + heldID)
}

// Seal encrypts plaintext for the person, creating their data key if they
// have none. aad (e.g. the envelope id) must be given again to Open.
func (s *Sealer) Seal(ctx context.Context, tenant, personID string, plaintext, aad []byte) (*alpv1.SealedBody, error) {
	if err := validate(tenant, personID); err != nil {
		return nil, err
	}
	k, err := s.key(ctx, tenant, personID, true)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, nonceSize)
	rand.Read(nonce)
	return &alpv1.SealedBody{
		Tenant:     tenant,
		PersonId:   personID,
		KeyVersion: k.Version,
		Nonce:      nonce,
		Ciphertext: k.Value.aead.Seal(nil, nonce, plaintext, bodyAAD(tenant, personID, k.Version, aad)),
	}, nil
}

// Open decrypts a sealed body with the same aad given to Seal.
func (s *Sealer) Open(ctx context.Context, body *alpv1.SealedBody, aad []byte) ([]byte, error) {
	if body == nil {
		return nil, fmt.Errorf("seal: open: %w: nil", ErrMalformed)
	}
	tenant, personID := body.GetTenant(), body.GetPersonId()
	if err := validate(tenant, personID); err != nil {
		return nil, fmt.Errorf("seal: open: %w", err)
	}
	switch {
	case body.GetKeyVersion() == 0:
		return nil, fmt.Errorf("seal: open: %w: no key version", ErrMalformed)
	case len(body.GetNonce()) != nonceSize:
		return nil, fmt.Errorf("seal: open: %w: nonce of %d bytes, want %d", ErrMalformed, len(body.GetNonce()), nonceSize)
	case len(body.GetCiphertext()) < 16:
		return nil, fmt.Errorf("seal: open: %w: ciphertext shorter than the tag", ErrMalformed)
	}
	k, err := s.key(ctx, tenant, personID, false)
	if err != nil {
		return nil, err
	}
	if k.Version != body.GetKeyVersion() {
		return nil, fmt.Errorf("seal: open for %s/%s: %w: body names key version %d, the person has %d", tenant, personID, ErrNoDataKey, body.GetKeyVersion(), k.Version)
	}
	pt, err := k.Value.aead.Open(nil, body.GetNonce(), body.GetCiphertext(), bodyAAD(tenant, personID, k.Version, aad))
	if err != nil {
		return nil, fmt.Errorf("seal: open for %s/%s: %w (modified, or different additional data)", tenant, personID, ErrOpenFailed)
	}
	return pt, nil
}

// key returns the person's usable data key, creating it if create is set
// and the person has none.
func (s *Sealer) key(ctx context.Context, tenant, personID string, create bool) (personkeys.Key[dataKey], error) {
	k, err := s.keys.Get(ctx, tenant, personID, create)
	if err != nil {
		return k, fmt.Errorf("seal: data key: %w", err)
	}
	return k, nil
}

// digestKey is the HMAC key of a person's digests, derived from their data
// key (HMAC-SHA256 under it of a label of its own), so no digest is ever
// computed with the key that seals.
func digestKey(raw []byte) []byte {
	m := hmac.New(sha256.New, raw)
	m.Write([]byte("alp-seal/digest-key/v1"))
	return m.Sum(nil)
}

// Digest is a keyed digest of parts for the person: HMAC-SHA256, under a
// key derived from their data key (created if they have none), of domain
// and the parts, each length-prefixed. It is deterministic, so a digest
// stored in the clear on a stream can be compared with a later request's;
// nobody without the key can test a guess against it; and once the
// person's key is destroyed no digest of theirs can be recomputed, so what
// it stood for becomes unlinkable. domain names the use ("alpd/ingress/…").
func (s *Sealer) Digest(ctx context.Context, tenant, personID, domain string, parts ...[]byte) ([]byte, error) {
	if err := validate(tenant, personID); err != nil {
		return nil, err
	}
	k, err := s.key(ctx, tenant, personID, true)
	if err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, k.Value.mac)
	m.Write(lp(lp(nil, []byte(domain)), parts...))
	return m.Sum(nil), nil
}

// Destroy erases the person's data key: afterwards every body sealed for
// them fails to open with ErrKeyDestroyed, and Seal for them is refused
// with ErrKeyDestroyed, on every Sealer sharing the bucket (on others after
// at most their cache TTL). It is idempotent and also works for a person
// who never had a key (it then only forbids future Seals).
func (s *Sealer) Destroy(ctx context.Context, tenant, personID string) error {
	if err := validate(tenant, personID); err != nil {
		return fmt.Errorf("seal: destroy: %w", err)
	}
	if err := s.keys.Erase(ctx, tenant, personID); err != nil {
		return fmt.Errorf("seal: destroy data key: %w", err)
	}
	if s.opts.onDestroy != nil {
		if err := s.opts.onDestroy(ctx, &alpv1.DataKeyDestroyed{Tenant: tenant, PersonId: personID}); err != nil {
			return fmt.Errorf("seal: data key of %s/%s destroyed, but the observer failed (call Destroy again to retry): %w", tenant, personID, err)
		}
	}
	return nil
}
