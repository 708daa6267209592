// Package personkeys keeps one random 32-byte secret per person in a
// purgeable JetStream KV bucket, wrapped by the tenant's DATA key in the
// KeyStore, so that erasing a person is destroying their secret
// (crypto-shredding): internal/seal keeps the data keys that seal bodies
// with it, the ledger the secrets its salts and openings derive from.
//
//   - Get-or-create converges across replicas: creation is a KV Create,
//     which fails if another replica created the secret first; the loser
//     reads and uses the winner's.
//   - Erase purges the key (no history keeps the wrapped secret) and writes
//     a tombstone in its place, so no replica creates a new secret for the
//     person afterwards. It is idempotent and works for a person who never
//     had a secret.
//   - Unwrapped secrets are cached in memory, as whatever the caller
//     derives from them (Options.Derive), for a TTL and up to a size; the
//     TTL bounds how late another replica's Erase takes effect here. An
//     erasure seen here stays cached without expiry: it is final.
//
// The stored value is JSON: {"format":1,"version":1,"wrapped":…,"created":…}
// or the tombstone {"format":1,"destroyed":true,"destroyed_at":…}.
package personkeys

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/keystore"
)

const (
	// SecretSize is the size of every secret.
	SecretSize = 32
	version    = 1
	format     = 1
	// retries bounds the get-or-create and erase loops; each retry means
	// another replica changed the key between our read and our write.
	retries = 5
)

// BucketConfig is the configuration of a bucket named name that says what
// it holds: one value per key and no history (a replaced or purged value
// is gone), file storage, no TTL (secrets never expire on their own).
// Callers may set Replicas.
func BucketConfig(name, description string) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: name, Description: description, History: 1, Storage: jetstream.FileStorage}
}

// Options configure a Store. Domain, Derive and the two errors are
// required.
type Options[T any] struct {
	// Domain separates these secrets' wrapping from any other use of the
	// tenant's DATA key (e.g. "alp-seal/data-key/v1").
	Domain string
	// Derive makes what callers use from a secret (an AEAD, derived keys).
	// raw is cleared after it returns: copy what must be kept.
	Derive func(tenant, person string, raw []byte) T
	// Erased and None are wrapped by the errors for an erased person and,
	// without create, a person who has no secret.
	Erased, None error
	// CacheTTL (0: no cache) and CacheSize (0: no cache).
	CacheTTL  time.Duration
	CacheSize int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Key is a person's secret as the caller derived it.
type Key[T any] struct {
	Value   T
	Version uint32
}

// Store keeps the secrets. It is safe for concurrent use; several Stores
// (replicas) may share one bucket.
type Store[T any] struct {
	kv   jetstream.KeyValue
	ks   keystore.KeyStore
	opts Options[T]

	mu    sync.Mutex
	cache map[string]*list.Element // KV key → element holding *cached[T]
	lru   *list.List               // front = most recently used
}

type cached[T any] struct {
	id      string
	key     Key[T]
	erased  bool
	expires time.Time // zero: never (erased)
}

// entry is the stored value.
type entry struct {
	Format      int       `json:"format"`
	Version     uint32    `json:"version,omitempty"`
	Wrapped     []byte    `json:"wrapped,omitempty"`
	Created     time.Time `json:"created,omitzero"`
	Destroyed   bool      `json:"destroyed,omitempty"`
	DestroyedAt time.Time `json:"destroyed_at,omitzero"`
}

// New returns a Store keeping secrets in kv wrapped by the DATA keys of ks.
func New[T any](kv jetstream.KeyValue, ks keystore.KeyStore, o Options[T]) *Store[T] {
	if o.Now == nil {
		o.Now = time.Now
	}
	o.CacheTTL, o.CacheSize = max(o.CacheTTL, 0), max(o.CacheSize, 0)
	return &Store[T]{kv: kv, ks: ks, opts: o, cache: map[string]*list.Element{}, lru: list.New()}
}

func kvKey(tenant, person string) string { return tenant + "." + person }

func (s *Store[T]) wrapAAD(tenant, person string, v uint32) []byte {
	b := lp(nil, []byte(s.opts.Domain), []byte(tenant), []byte(person))
	return binary.BigEndian.AppendUint32(b, v)
}

func lp(b []byte, parts ...[]byte) []byte {
	for _, p := range parts {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

// Get returns the person's secret, from the cache or the bucket, creating
// it when create is set and the person has none. tenant and person must be
// valid KV key tokens (callers validate them).
func (s *Store[T]) Get(ctx context.Context, tenant, person string, create bool) (Key[T], error) {
	id := kvKey(tenant, person)
	if c := s.cached(id); c != nil {
		if c.erased {
			return Key[T]{}, fmt.Errorf("%s/%s: %w", tenant, person, s.opts.Erased)
		}
		return c.key, nil
	}
	for range retries {
		e, err := s.kv.Get(ctx, id)
		switch {
		case err == nil:
			return s.load(ctx, tenant, person, e.Value())
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			return Key[T]{}, fmt.Errorf("read the secret of %s/%s: %w", tenant, person, err)
		case !create:
			return Key[T]{}, fmt.Errorf("%s/%s: %w", tenant, person, s.opts.None)
		}
		k, err := s.create(ctx, tenant, person)
		if errors.Is(err, jetstream.ErrKeyExists) {
			continue // another replica created it first: read theirs
		}
		return k, err
	}
	return Key[T]{}, fmt.Errorf("the secret of %s/%s kept changing while being read; gave up after %d attempts", tenant, person, retries)
}

// load unwraps a stored value (or notes a tombstone) and caches the result.
func (s *Store[T]) load(ctx context.Context, tenant, person string, value []byte) (Key[T], error) {
	var e entry
	if err := json.Unmarshal(value, &e); err != nil || e.Format != format || !e.Destroyed && (e.Version == 0 || len(e.Wrapped) == 0) {
		return Key[T]{}, fmt.Errorf("the stored secret of %s/%s is malformed", tenant, person)
	}
	if e.Destroyed {
		s.put(&cached[T]{id: kvKey(tenant, person), erased: true})
		return Key[T]{}, fmt.Errorf("%s/%s: %w", tenant, person, s.opts.Erased)
	}
	raw, err := s.ks.Unwrap(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_DATA, e.Wrapped, s.wrapAAD(tenant, person, e.Version))
	if err != nil {
		return Key[T]{}, fmt.Errorf("unwrap the secret of %s/%s: %w", tenant, person, err)
	}
	defer clear(raw)
	if len(raw) != SecretSize {
		return Key[T]{}, fmt.Errorf("the secret of %s/%s is %d bytes, want %d", tenant, person, len(raw), SecretSize)
	}
	k := Key[T]{Value: s.opts.Derive(tenant, person, raw), Version: e.Version}
	s.put(&cached[T]{id: kvKey(tenant, person), key: k})
	return k, nil
}

// create makes, wraps and stores a new secret; the error wraps
// jetstream.ErrKeyExists if another writer got there first.
func (s *Store[T]) create(ctx context.Context, tenant, person string) (Key[T], error) {
	raw := make([]byte, SecretSize)
	rand.Read(raw)
	defer clear(raw)
	wrapped, err := s.ks.Wrap(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_DATA, raw, s.wrapAAD(tenant, person, version))
	if err != nil {
		return Key[T]{}, fmt.Errorf("wrap a new secret of %s/%s: %w", tenant, person, err)
	}
	value, err := json.Marshal(entry{Format: format, Version: version, Wrapped: wrapped, Created: s.opts.Now().UTC()})
	if err != nil {
		return Key[T]{}, err
	}
	if _, err := s.kv.Create(ctx, kvKey(tenant, person), value); err != nil {
		return Key[T]{}, fmt.Errorf("store the secret of %s/%s: %w", tenant, person, err)
	}
	k := Key[T]{Value: s.opts.Derive(tenant, person, raw), Version: version}
	s.put(&cached[T]{id: kvKey(tenant, person), key: k})
	return k, nil
}

// Erase destroys the person's secret and leaves a tombstone.
func (s *Store[T]) Erase(ctx context.Context, tenant, person string) error {
	id := kvKey(tenant, person)
	tomb, err := json.Marshal(entry{Format: format, Destroyed: true, DestroyedAt: s.opts.Now().UTC()})
	if err != nil {
		return err
	}
	for range retries {
		// Already a tombstone: done, without reopening a window in which
		// the key is absent and a Get elsewhere could create a new one.
		if e, err := s.kv.Get(ctx, id); err == nil {
			var cur entry
			if json.Unmarshal(e.Value(), &cur) == nil && cur.Destroyed {
				s.put(&cached[T]{id: id, erased: true})
				return nil
			}
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("erase %s/%s: read: %w", tenant, person, err)
		}
		if err := s.kv.Purge(ctx, id); err != nil {
			return fmt.Errorf("erase %s/%s: purge: %w", tenant, person, err)
		}
		// Create succeeds only over the purge marker; if a Get elsewhere
		// created a new secret in between, the next round purges it too.
		if _, err := s.kv.Create(ctx, id, tomb); err == nil {
			s.put(&cached[T]{id: id, erased: true})
			return nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("erase %s/%s: write tombstone: %w", tenant, person, err)
		}
	}
	return fmt.Errorf("erase %s/%s: the key kept changing; gave up after %d attempts", tenant, person, retries)
}

// CacheLen is the number of persons cached (erasures included).
func (s *Store[T]) CacheLen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lru.Len()
}

// cached returns a live cache entry for id, or nil.
func (s *Store[T]) cached(id string) *cached[T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.cache[id]
	if !ok {
		return nil
	}
	c := el.Value.(*cached[T])
	if !c.erased && !s.opts.Now().Before(c.expires) {
		s.lru.Remove(el)
		delete(s.cache, id)
		return nil
	}
	s.lru.MoveToFront(el)
	return c
}

// put caches c, replacing any entry for its id and dropping the least
// recently used entries beyond the size bound.
func (s *Store[T]) put(c *cached[T]) {
	if s.opts.CacheTTL == 0 || s.opts.CacheSize == 0 {
		return
	}
	if !c.erased {
		c.expires = s.opts.Now().Add(s.opts.CacheTTL)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.cache[c.id]; ok {
		if el.Value.(*cached[T]).erased {
			// Erasure is final: a load that raced with Erase must not
			// bring the secret back.
			s.lru.MoveToFront(el)
			return
		}
		s.lru.Remove(el)
	}
	s.cache[c.id] = s.lru.PushFront(c)
	for s.lru.Len() > s.opts.CacheSize {
		old := s.lru.Back()
		s.lru.Remove(old)
		delete(s.cache, old.Value.(*cached[T]).id)
	}
}
