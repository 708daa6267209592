// Package personmap is the erasable mapping between a person's opaque id and
// who the person is: their address and the IdP account (issuer, subject)
// they sign in with. ARCHITECTURE.md wants it out of the streams ("the id ↔
// address mapping lives in an erasable store"): the identity stream is kept
// forever, so its events carry only person ids, and this map, a purgeable
// JetStream KV bucket (<NS>_PERSONMAP, one value per key, no history), holds
// the rest until the person is erased.
//
// # Keys
//
// Every key is "<tenant domain>.<token>":
//
//	<tenant>.rec_<person id>  the record {address, issuer, subject}, wrapped
//	                          (AES-256-GCM) by the tenant's DATA key in the
//	                          KeyStore, bound to tenant and person id
//	<tenant>.adr_<hmac>       the address's owner {"person": id}
//	<tenant>.acc_<hmac>       the IdP account's owner {"person": id}
//	<tenant>.lookup_key       the tenant's lookup key (internal/personkeys
//	                          format: 32 random bytes wrapped by the DATA key)
//
// An address belongs to at most one person of a tenant, and an IdP account
// to at most one person: the owner keys are written with KV Create, which
// fails when the key exists, so replicas racing to claim one address or
// account agree on a single winner (as personkeys' get-or-create does). The
// address is compared case-insensitively (its lowercase form is hashed):
// "Ana@example.org" and "ana@example.org" are one address.
//
// # Why keyed hashes
//
// The owner keys must be found from an address or an account, so they are
// derived from them; a plain hash could be recomputed by anyone who can read
// the bucket and guesses an address, confirming that the person is here. The
// hashes are HMAC-SHA256 under a per-tenant lookup key that is stored only
// wrapped by the tenant's DATA key, which never leaves the KeyStore; a
// process that binds people (identity) unwraps it into memory. Erasure
// purges the owner keys along with the record, so no hash of the person's
// address or account remains anywhere, and keeping the lookup key (needed
// for everyone else) does not let anyone match one. The identity stream
// holds only the person id; its re-binding audit events hold keyed hashes of
// issuers (a tenant's IdP, not a person), never of subjects or addresses.
//
// # Erasure
//
// [Map.Erase] purges the owner keys that point to the person and the
// record, and leaves a tombstone record ({"format":1,"erased":true}) so that
// a binding in flight cannot write the record back. The limits of purging
// on disk are those of internal/seal: the file store may keep purged bytes
// until it compacts, but the record's bytes are wrapped by the DATA key.
//
// # Caching
//
// Records read are cached in memory for Options.CacheTTL (default 30 s) and
// up to Options.CacheSize persons; writes and erasures through this Map
// update the cache at once, those through another replica's Map within the
// TTL. (The identity projection also marks an erased person on every
// replica as soon as it applies the erasure event, so erasure takes effect
// everywhere without waiting for the TTL.)
package personmap

import (
	"container/list"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/personkeys"
)

// Errors; every error of the package wraps at most one of them.
var (
	// ErrNotFound: no such person, address owner or account owner.
	ErrNotFound = errors.New("personmap: not found")
	// ErrErased: the person was erased.
	ErrErased = errors.New("personmap: person erased")
	// ErrAddressTaken: the address belongs to another person of the tenant.
	ErrAddressTaken = errors.New("personmap: the address belongs to another person")
	// ErrAccountTaken: the IdP account is bound to another person.
	ErrAccountTaken = errors.New("personmap: the IdP account is bound to another person")
	// ErrInvalid: a malformed tenant, person id or entry.
	ErrInvalid = errors.New("personmap: invalid")

	errNoLookupKey = errors.New("personmap: no lookup key")
)

const (
	format     = 1
	recordAAD  = "alpd-personmap/record/v1"
	lookupName = "lookup_key"
	// retries bounds the claim and erase loops; each retry means another
	// writer changed a key between our read and our write.
	retries = 5

	// DefaultCacheTTL and DefaultCacheSize bound the record cache.
	DefaultCacheTTL  = 30 * time.Second
	DefaultCacheSize = 10000
)

// BucketConfig is the person map bucket named name: one value per key and
// no history (a replaced or purged value is gone), file storage, no TTL.
func BucketConfig(name string, replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      name,
		Description: "Person map: opaque person id ↔ address and IdP account (erasable; purged on erasure)",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// Entry is who a person is.
type Entry struct {
	Address string `json:"address"`
	Issuer  string `json:"issuer"`
	Subject string `json:"subject"`
}

// Options tune a Map.
type Options struct {
	// CacheTTL of records read (default DefaultCacheTTL; negative: no
	// cache) and CacheSize (default DefaultCacheSize).
	CacheTTL  time.Duration
	CacheSize int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Map is the person map of a broker. It is safe for concurrent use; any
// number of Maps (replicas) may share one bucket.
type Map struct {
	kv     jetstream.KeyValue
	nc     *nats.Conn
	bucket string
	ks     keystore.KeyStore
	opts   Options
	lookup *personkeys.Store[[]byte]

	mu    sync.Mutex
	cache map[string]*list.Element // record key → *cached
	lru   *list.List
}

type cached struct {
	key     string
	entry   Entry
	erased  bool
	expires time.Time
}

// Open creates or updates the bucket (BucketConfig(bucket, replicas)) and
// returns a Map on it, wrapping with the tenants' DATA keys in ks.
func Open(ctx context.Context, js jetstream.JetStream, bucket string, replicas int, ks keystore.KeyStore, o Options) (*Map, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, BucketConfig(bucket, replicas))
	if err != nil {
		return nil, fmt.Errorf("personmap: bucket %s: %w", bucket, err)
	}
	return newMap(kv, js.Conn(), bucket, ks, o), nil
}

func newMap(kv jetstream.KeyValue, nc *nats.Conn, bucket string, ks keystore.KeyStore, o Options) *Map {
	if o.CacheTTL == 0 {
		o.CacheTTL = DefaultCacheTTL
	}
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	m := &Map{kv: kv, nc: nc, bucket: bucket, ks: ks, opts: o, cache: map[string]*list.Element{}, lru: list.New()}
	m.lookup = personkeys.New(kv, ks, personkeys.Options[[]byte]{
		Domain: "alpd-personmap/lookup-key/v1",
		Derive: func(_, _ string, raw []byte) []byte { return append([]byte(nil), raw...) },
		Erased: errors.New("personmap: the lookup key was destroyed"),
		None:   errNoLookupKey,
		// The lookup key is never erased: cache it for long.
		CacheTTL: time.Hour, CacheSize: 256, Now: o.Now,
	})
	return m
}

// --- keys and values ------------------------------------------------------

func checkTenant(tenant string) error {
	if err := alp.ValidateTenant(tenant); err != nil {
		return fmt.Errorf("%w: tenant: %v", ErrInvalid, err)
	}
	return nil
}

// checkID: a person id is a KV key token (alp.ValidatePersonID).
func checkID(id string) error {
	if err := alp.ValidatePersonID(id); err != nil {
		return fmt.Errorf("%w: person id: %v", ErrInvalid, err)
	}
	return nil
}

func recKey(tenant, id string) string        { return tenant + ".rec_" + id }
func ownerKey(tenant, kind, h string) string { return tenant + "." + kind + "_" + h }

type record struct {
	Format   int       `json:"format"`
	Wrapped  []byte    `json:"wrapped,omitempty"`
	Erased   bool      `json:"erased,omitempty"`
	ErasedAt time.Time `json:"erased_at,omitzero"`
}

type owner struct {
	Format int    `json:"format"`
	Person string `json:"person"`
}

func aad(tenant, id string) []byte {
	var b []byte
	for _, p := range []string{recordAAD, tenant, id} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

// keyedHash is HMAC-SHA256 under the tenant's lookup key of a labelled,
// length-prefixed list of values, in hex.
func (m *Map) keyedHash(ctx context.Context, tenant string, create bool, label string, values ...string) (string, error) {
	k, err := m.lookup.Get(ctx, tenant, lookupName, create)
	if err != nil {
		return "", fmt.Errorf("personmap: lookup key of %s: %w", tenant, err)
	}
	mac := hmac.New(sha256.New, k.Value)
	for _, v := range append([]string{label, tenant}, values...) {
		mac.Write(binary.BigEndian.AppendUint32(nil, uint32(len(v))))
		mac.Write([]byte(v))
	}
	return hex.EncodeToString(mac.Sum(nil)), nil
}

func (m *Map) addressKey(ctx context.Context, tenant, address string, create bool) (string, error) {
	h, err := m.keyedHash(ctx, tenant, create, "address", alp.NormalizeAddress(address))
	if err != nil {
		return "", err
	}
	return ownerKey(tenant, "adr", h), nil
}

func (m *Map) accountKey(ctx context.Context, tenant, issuer, subject string, create bool) (string, error) {
	h, err := m.keyedHash(ctx, tenant, create, "account", issuer, subject)
	if err != nil {
		return "", err
	}
	return ownerKey(tenant, "acc", h), nil
}

// IssuerHash is the keyed hash of an issuer, for audit events that must say
// an issuer changed without naming an account.
func (m *Map) IssuerHash(ctx context.Context, tenant, issuer string) ([]byte, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, err
	}
	h, err := m.keyedHash(ctx, tenant, true, "issuer", issuer)
	if err != nil {
		return nil, err
	}
	return hex.DecodeString(h)
}

// --- reads ----------------------------------------------------------------

// Get is the person's entry: ErrNotFound if the map has none, ErrErased
// after erasure.
func (m *Map) Get(ctx context.Context, tenant, id string) (Entry, error) {
	if err := checkTenant(tenant); err != nil {
		return Entry{}, err
	}
	if err := checkID(id); err != nil {
		return Entry{}, err
	}
	key := recKey(tenant, id)
	if c := m.cached(key); c != nil {
		if c.erased {
			return Entry{}, fmt.Errorf("%w: %s/%s", ErrErased, tenant, id)
		}
		return c.entry, nil
	}
	e, _, err := m.read(ctx, tenant, id)
	return e, err
}

// read gets the record from the bucket (and caches it); rev is its
// revision, 0 when there is none.
func (m *Map) read(ctx context.Context, tenant, id string) (Entry, uint64, error) {
	key := recKey(tenant, id)
	kve, err := m.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Entry{}, 0, fmt.Errorf("%w: no record of %s/%s", ErrNotFound, tenant, id)
	}
	if err != nil {
		return Entry{}, 0, fmt.Errorf("personmap: read %s/%s: %w", tenant, id, err)
	}
	var r record
	if err := json.Unmarshal(kve.Value(), &r); err != nil || r.Format != format || !r.Erased && len(r.Wrapped) == 0 {
		return Entry{}, 0, fmt.Errorf("personmap: the record of %s/%s is malformed", tenant, id)
	}
	if r.Erased {
		m.put(&cached{key: key, erased: true})
		return Entry{}, kve.Revision(), fmt.Errorf("%w: %s/%s", ErrErased, tenant, id)
	}
	plain, err := m.ks.Unwrap(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_DATA, r.Wrapped, aad(tenant, id))
	if err != nil {
		return Entry{}, 0, fmt.Errorf("personmap: unwrap the record of %s/%s: %w", tenant, id, err)
	}
	var e Entry
	if err := json.Unmarshal(plain, &e); err != nil {
		return Entry{}, 0, fmt.Errorf("personmap: the record of %s/%s is malformed", tenant, id)
	}
	m.put(&cached{key: key, entry: e})
	return e, kve.Revision(), nil
}

// owner reads an owner key: the person and the revision, ErrNotFound when
// the key is free.
func (m *Map) owner(ctx context.Context, key string) (string, uint64, error) {
	kve, err := m.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", 0, ErrNotFound
	}
	if err != nil {
		return "", 0, fmt.Errorf("personmap: read an owner key: %w", err)
	}
	var o owner
	if err := json.Unmarshal(kve.Value(), &o); err != nil || o.Format != format || checkID(o.Person) != nil {
		return "", 0, fmt.Errorf("personmap: owner key %s is malformed", key)
	}
	return o.Person, kve.Revision(), nil
}

// AccountOwner is the person the IdP account is bound to (ErrNotFound if
// none).
func (m *Map) AccountOwner(ctx context.Context, tenant, issuer, subject string) (string, error) {
	if err := checkTenant(tenant); err != nil {
		return "", err
	}
	key, err := m.accountKey(ctx, tenant, issuer, subject, true)
	if err != nil {
		return "", err
	}
	return m.liveOwner(ctx, tenant, key)
}

// liveOwner is the owner of key unless that person was erased (a leftover
// of an interrupted erasure counts as free).
func (m *Map) liveOwner(ctx context.Context, tenant, key string) (string, error) {
	id, _, err := m.owner(ctx, key)
	if err != nil {
		return "", err
	}
	if _, err := m.Get(ctx, tenant, id); errors.Is(err, ErrErased) {
		return "", fmt.Errorf("%w: the owner was erased", ErrNotFound)
	}
	return id, nil
}

// AddressOwner is the person the address belongs to (ErrNotFound if none).
func (m *Map) AddressOwner(ctx context.Context, tenant, address string) (string, error) {
	if err := checkTenant(tenant); err != nil {
		return "", err
	}
	key, err := m.addressKey(ctx, tenant, address, true)
	if err != nil {
		return "", err
	}
	return m.liveOwner(ctx, tenant, key)
}

// --- writes ---------------------------------------------------------------

// Claim makes e the person's entry: the account and the address become
// id's if they are free (or already id's), the record is written, and the
// address and account the record named before, if others, are released. It
// is the single write path of bindings: a new person, a sign-in with a new
// address, a re-binding to another account, the migration of earlier
// versions' bindings. ErrAccountTaken or ErrAddressTaken (nothing changed)
// when another person owns them; ErrErased for an erased person.
func (m *Map) Claim(ctx context.Context, tenant, id string, e Entry) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	if err := checkID(id); err != nil {
		return err
	}
	if e.Address == "" || e.Issuer == "" || e.Subject == "" {
		return fmt.Errorf("%w: entry: address, issuer and subject are required", ErrInvalid)
	}
	for range retries {
		err := m.claim(ctx, tenant, id, e)
		if !errors.Is(err, errRecordChanged) {
			return err
		}
		m.Forget(tenant, id)
	}
	return fmt.Errorf("personmap: the record of %s/%s kept changing; gave up after %d attempts", tenant, id, retries)
}

// errRecordChanged: another writer changed the record between our read and
// our write.
var errRecordChanged = errors.New("personmap: the record changed")

func (m *Map) claim(ctx context.Context, tenant, id string, e Entry) error {
	old, rev, err := m.read(ctx, tenant, id)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	accKey, err := m.accountKey(ctx, tenant, e.Issuer, e.Subject, true)
	if err != nil {
		return err
	}
	adrKey, err := m.addressKey(ctx, tenant, e.Address, true)
	if err != nil {
		return err
	}
	accRev, createdAcc, err := m.take(ctx, tenant, accKey, id, ErrAccountTaken)
	if err != nil {
		return err
	}
	if _, _, err := m.take(ctx, tenant, adrKey, id, ErrAddressTaken); err != nil {
		if createdAcc {
			// Leave nothing half-claimed.
			if derr := m.drop(ctx, accKey, accRev); derr != nil {
				err = errors.Join(err, fmt.Errorf("personmap: undo the account claim: %w", derr))
			}
		}
		return err
	}
	if old != e {
		if err := m.writeRecord(ctx, tenant, id, e, rev); err != nil {
			return err
		}
	}
	// Release what the person owned before. Failing here leaves a stale
	// owner key pointing to this person, which only keeps that address or
	// account reserved for them: report it, the claim itself stands.
	var errs []error
	if rev != 0 && old.Address != "" && alp.NormalizeAddress(old.Address) != alp.NormalizeAddress(e.Address) {
		if k, err := m.addressKey(ctx, tenant, old.Address, true); err == nil {
			errs = append(errs, m.release(ctx, k, id))
		}
	}
	if rev != 0 && old.Issuer != "" && (old.Issuer != e.Issuer || old.Subject != e.Subject) {
		if k, err := m.accountKey(ctx, tenant, old.Issuer, old.Subject, true); err == nil {
			errs = append(errs, m.release(ctx, k, id))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("personmap: %s/%s claimed, but releasing the former address or account failed: %w", tenant, id, err)
	}
	return nil
}

// take makes owner key key id's: created when free; fine when already
// id's; taken (the given error) when another person's, unless that person
// was erased (a leftover of an interrupted erasure), whose key is purged
// and taken over. It returns the key's revision and whether it created it.
func (m *Map) take(ctx context.Context, tenant, key, id string, taken error) (uint64, bool, error) {
	val, err := json.Marshal(owner{Format: format, Person: id})
	if err != nil {
		return 0, false, err
	}
	for range retries {
		rev, err := m.kv.Create(ctx, key, val)
		if err == nil {
			return rev, true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return 0, false, fmt.Errorf("personmap: claim an owner key of %s: %w", tenant, err)
		}
		cur, curRev, err := m.owner(ctx, key)
		switch {
		case errors.Is(err, ErrNotFound):
			continue // released in between: create again
		case err != nil:
			return 0, false, err
		case cur == id:
			return curRev, false, nil
		}
		if _, _, rerr := m.read(ctx, tenant, cur); !errors.Is(rerr, ErrErased) {
			return 0, false, fmt.Errorf("%w (person %s)", taken, cur)
		}
		if err := m.drop(ctx, key, curRev); err != nil {
			return 0, false, fmt.Errorf("personmap: drop an erased person's owner key: %w", err)
		}
	}
	return 0, false, fmt.Errorf("personmap: an owner key of %s kept changing; gave up after %d attempts", tenant, retries)
}

// drop removes owner key key's revisions up to rev from the bucket's
// stream, leaving no purge marker (a marker's subject would keep the keyed
// hash). A later revision, written after rev by someone else, stays. It is
// a stream purge of the key's subject bounded by sequence: KV purges
// always leave a marker behind.
func (m *Map) drop(ctx context.Context, key string, rev uint64) error {
	req, err := json.Marshal(struct {
		Filter string `json:"filter"`
		Seq    uint64 `json:"seq"`
	}{"$KV." + m.bucket + "." + key, rev + 1})
	if err != nil {
		return err
	}
	msg, err := m.nc.RequestWithContext(ctx, "$JS.API.STREAM.PURGE.KV_"+m.bucket, req)
	if err != nil {
		return fmt.Errorf("personmap: purge an owner key: %w", err)
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Success bool                `json:"success"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("personmap: purge an owner key: %w", err)
	}
	if resp.Error != nil || !resp.Success {
		return fmt.Errorf("personmap: purge an owner key: %v", resp.Error)
	}
	return nil
}

// release purges owner key key if it is id's.
func (m *Map) release(ctx context.Context, key, id string) error {
	cur, rev, err := m.owner(ctx, key)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil
	case err != nil:
		return err
	case cur != id:
		return nil
	}
	return m.drop(ctx, key, rev)
}

// writeRecord wraps and stores e as id's record, replacing revision rev (0:
// none yet).
func (m *Map) writeRecord(ctx context.Context, tenant, id string, e Entry, rev uint64) error {
	plain, err := json.Marshal(e)
	if err != nil {
		return err
	}
	wrapped, err := m.ks.Wrap(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_DATA, plain, aad(tenant, id))
	clear(plain)
	if err != nil {
		return fmt.Errorf("personmap: wrap the record of %s/%s: %w", tenant, id, err)
	}
	val, err := json.Marshal(record{Format: format, Wrapped: wrapped})
	if err != nil {
		return err
	}
	key := recKey(tenant, id)
	if rev == 0 {
		_, err = m.kv.Create(ctx, key, val)
	} else {
		_, err = m.kv.Update(ctx, key, val, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		// Another writer changed the record (or erased the person) since
		// it was read: Claim reads it again.
		return errRecordChanged
	}
	if err != nil {
		return fmt.Errorf("personmap: write the record of %s/%s: %w", tenant, id, err)
	}
	m.put(&cached{key: key, entry: e})
	return nil
}

// Erase removes the person from the map: the owner keys of the address and
// account their record names, and of each of also (bindings the caller
// knows of elsewhere, such as earlier versions' events), are purged when
// they point to the person, then the record is replaced by a tombstone. It
// is idempotent and works for a person the map never had.
func (m *Map) Erase(ctx context.Context, tenant, id string, also ...Entry) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	if err := checkID(id); err != nil {
		return err
	}
	cur, _, err := m.read(ctx, tenant, id)
	switch {
	case errors.Is(err, ErrErased):
		return nil
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return err
	default:
		also = append(also, cur)
	}
	for _, e := range also {
		if e.Address != "" {
			k, err := m.addressKey(ctx, tenant, e.Address, true)
			if err != nil {
				return err
			}
			if err := m.release(ctx, k, id); err != nil {
				return fmt.Errorf("personmap: erase %s/%s: %w", tenant, id, err)
			}
		}
		if e.Issuer != "" || e.Subject != "" {
			k, err := m.accountKey(ctx, tenant, e.Issuer, e.Subject, true)
			if err != nil {
				return err
			}
			if err := m.release(ctx, k, id); err != nil {
				return fmt.Errorf("personmap: erase %s/%s: %w", tenant, id, err)
			}
		}
	}
	key := recKey(tenant, id)
	tomb, err := json.Marshal(record{Format: format, Erased: true, ErasedAt: m.opts.Now().UTC()})
	if err != nil {
		return err
	}
	for range retries {
		// Purge first: no revision of the record survives, then the
		// tombstone can only be created over the purge marker.
		if err := m.kv.Purge(ctx, key); err != nil {
			return fmt.Errorf("personmap: erase %s/%s: purge the record: %w", tenant, id, err)
		}
		if _, err := m.kv.Create(ctx, key, tomb); err == nil {
			m.put(&cached{key: key, erased: true})
			return nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("personmap: erase %s/%s: write the tombstone: %w", tenant, id, err)
		}
		// Someone wrote the record in between: purge it too.
	}
	return fmt.Errorf("personmap: erase %s/%s: the record kept changing; gave up after %d attempts", tenant, id, retries)
}

// Forget drops the person's cached record (another replica changed or
// erased it).
func (m *Map) Forget(tenant, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.cache[recKey(tenant, id)]; ok {
		m.lru.Remove(el)
		delete(m.cache, recKey(tenant, id))
	}
}

// --- cache ----------------------------------------------------------------

func (m *Map) cached(key string) *cached {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.cache[key]
	if !ok {
		return nil
	}
	c := el.Value.(*cached)
	if !c.erased && !m.opts.Now().Before(c.expires) {
		m.lru.Remove(el)
		delete(m.cache, key)
		return nil
	}
	m.lru.MoveToFront(el)
	return c
}

func (m *Map) put(c *cached) {
	if m.opts.CacheTTL < 0 {
		return
	}
	c.expires = m.opts.Now().Add(m.opts.CacheTTL)
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.cache[c.key]; ok {
		if el.Value.(*cached).erased {
			m.lru.MoveToFront(el) // erasure is final
			return
		}
		m.lru.Remove(el)
	}
	m.cache[c.key] = m.lru.PushFront(c)
	for m.lru.Len() > m.opts.CacheSize {
		old := m.lru.Back()
		m.lru.Remove(old)
		delete(m.cache, old.Value.(*cached).key)
	}
}
