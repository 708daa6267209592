// Package storage is the read side of the ledger's per-person Merkle logs:
// what the person-facing API (services/ledger/api) builds on. It holds the
// interface and its types only; services/ledger/storage/jsstore implements
// it on JetStream, and the ledger service hands that implementation out
// (ledger.Service.Storage).
//
// Why an interface: the API must not know how logs are stored (one stream
// subject per person, tree tiles in a KV bucket, checkpoints in another),
// and its tests can use a fake.
//
// Every method takes the tenant (a domain hosted by the broker) and the
// person's opaque id (never an address). Sizes and indexes are uint64;
// tlog's int64 is used only where tlog itself is called.
//
// Consistency: logs only grow. A Head read now and a HashReader opened later
// agree on every tree size up to the Head's Size, so proofs for a Head can
// always be built. A Head is at least as new as the last append this
// process saw; on a multi-replica deployment it is caught up with the
// stream before it is returned.
//
// This interface is stable: add methods, never change existing ones.
package storage

import (
	"context"
	"crypto/ed25519"
	"errors"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

var (
	// ErrNoLog: the person has no ledger entry yet (their log is empty).
	ErrNoLog = errors.New("ledger: no log for this person")
	// ErrNotHosted: the tenant is not one of this broker's domains.
	ErrNotHosted = errors.New("ledger: tenant is not hosted by this broker")
	// ErrInvalid: a malformed tenant or person id, or an index, range or
	// tree size outside the log.
	ErrInvalid = errors.New("ledger: invalid request")
)

// Reader reads per-person logs. Implementations are safe for concurrent use.
type Reader interface {
	// Head is the log's current size and root with the latest signed
	// checkpoint. ErrNoLog for an empty log.
	Head(ctx context.Context, tenant, personID string) (Head, error)
	// Entries returns up to limit entries starting at index from, in index
	// order; fewer (possibly none) at the end of the log. ErrNoLog for an
	// empty log; ErrInvalid for limit < 1.
	Entries(ctx context.Context, tenant, personID string, from uint64, limit int) ([]StoredEntry, error)
	// HashReader reads the log's stored tree hashes (tlog layout), for
	// tlog.ProveRecord, tlog.ProveTree and tlog.TreeHash with any tree size
	// up to the size of a Head read before. It reads through the ctx given
	// here, so do not keep it beyond that ctx.
	HashReader(ctx context.Context, tenant, personID string) (tlog.HashReader, error)
	// InclusionProof proves leaf index in the tree of size treeSize
	// (tlog.ProveRecord; check with tlog.CheckRecord against the root of
	// that size). ErrInvalid unless index < treeSize <= the log's size.
	InclusionProof(ctx context.Context, tenant, personID string, index, treeSize uint64) (tlog.RecordProof, error)
	// ConsistencyProof proves that the tree of size oldSize is a prefix of
	// the tree of size newSize (tlog.ProveTree; check with tlog.CheckTree).
	// ErrInvalid unless 0 < oldSize <= newSize <= the log's size.
	ConsistencyProof(ctx context.Context, tenant, personID string, oldSize, newSize uint64) (tlog.TreeProof, error)
	// PublicKeys lists the tenant's ledger signing keys (every state, oldest
	// first): what checkpoints and receipts verify with.
	PublicKeys(ctx context.Context, tenant string) ([]PublicKey, error)
}

// Head is where a person's log stands.
type Head struct {
	// Origin is the log's checkpoint origin, ledgerlog.Origin(tenant, person).
	Origin string
	// Size is the number of leaves; Root the RFC 6962 root over them.
	Size uint64
	Root tlog.Hash
	// SignedCheckpoint is the latest checkpoint the ledger signed for this
	// log (a C2SP signed note, exact bytes), nil before the first one.
	// Checkpoints are signed in batches, so it may cover fewer leaves than
	// Size (CheckpointSize); it never covers more.
	SignedCheckpoint []byte
	CheckpointSize   uint64
}

// StoredEntry is one leaf of a log.
type StoredEntry struct {
	Index uint64
	// Leaf is the exact canonical bytes of the entry (ledgerlog.ParseEntry
	// reads it); its hash, tlog.RecordHash(Leaf), is the tree's leaf hash.
	Leaf []byte
	// Time is when the leaf was stored (JetStream's time; the entry has its
	// own time inside).
	Time time.Time
	// Opening opens the entry's commitment; nil when the entry has no
	// commitment, or when it can no longer be read (Erased).
	Opening *Opening
	// Erased: the entry had an opening, but the person's ledger secret was
	// erased, so it can never be read again. The leaf still verifies.
	Erased bool
}

// Opening is what opens a salted commitment:
// ledgerlog.Commit(Salt, Digest) equals the entry's commitment.
type Opening struct {
	Salt   []byte
	Digest []byte
}

// PublicKey is one of a tenant's ledger signing keys.
type PublicKey struct {
	KeyID string
	// Name is the signed-note key name (ledgerlog.KeyName(tenant)).
	Name string
	// VerifierKey is the signed-note verifier key
	// ("<name>+<hex key hash>+<base64 type||key>") for
	// golang.org/x/mod/sumdb/note.NewVerifier.
	VerifierKey string
	PublicKey   ed25519.PublicKey
	State       alpv1.KeyState
	Created     time.Time
	// CompromisedAt is set for revoked keys: signatures from then on are void.
	CompromisedAt time.Time
}
