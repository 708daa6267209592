// Package jsstore keeps the ledger's per-person Merkle logs on JetStream: it
// appends leaves without ever forking a log, keeps each log's tree (tlog
// stored hashes) in memory for the persons in use and in a KV bucket for
// the others, signs checkpoints, and implements storage.Reader.
//
// # Layout
//
//   - Leaves: stream <NS>_LEDGER (append-only: deletes and purges denied),
//     subject alp.ledger.<tenant token>.<person>. The n-th message on a
//     person's subject is leaf n-1: an alpv1.Event whose body
//     LedgerEntryAppended holds the exact leaf bytes. The stream is the
//     source of truth; everything else is derived from it.
//   - Trees: KV bucket <NS>_LEDGERTREES, a rebuildable cache. Per person,
//     "<tenant token>.<person>.h.<k>" holds stored hashes k*256.. (tlog's
//     layout), ".s.<k>" the stream sequences of leaves k*512.., and ".head"
//     the size, last sequence and root those tiles make up.
//   - Checkpoints: KV bucket <NS>_LEDGERCHECKPOINTS, "<tenant token>.<person>"
//     → the latest signed checkpoint of the log with its size and root.
//
// # Appending without forks
//
// Every append carries Nats-Expected-Last-Subject-Sequence = the stream
// sequence of the log's last leaf as this process knows it (0 for an empty
// log), so a writer with a stale view is refused (10071, or 10164 on
// replicated streams) instead of forking the log. It then reads the leaves
// it missed from the stream, and retries at the new end; conflicts are
// counted (alpd_ledger_append_conflicts_total). Concurrent appends to one
// log inside a process are grouped (group commit): one caller publishes the
// waiting entries as one atomic batch (AllowAtomicPublish) with the
// expectation on its first message, so a log's throughput is not bound by
// one round trip per leaf.
//
// Every leaf message has Nats-Msg-Id = hash(source id, kind). An append
// whose ack was lost is recognised when it is retried: inside the dedupe
// window the server reports a duplicate (or, for a batch, error 10201);
// after a conflict the catch-up read finds the message id among the leaves
// it missed; and for a redelivered source event (Request.Since) the log is
// searched from the event's time on. The tree only ever applies leaves as
// read or as acknowledged at known sequences, never what it merely tried to
// write.
//
// # Lazy trees
//
// Nothing is read at start-up. The first use of a person's log reads its
// KV head, checks the tiles against it (the root recomputed from the stored
// hashes, and the last leaf's hash against the stream), and replays only
// the leaves stored after it. Tiles are fetched on demand. A head that is
// missing, behind or inconsistent makes the tree be rebuilt from the
// stream. At most Options.MaxTrees trees stay in memory (least recently
// used dropped first; a tree with unsaved changes is saved first).
//
// # Checkpoints
//
// A background round (every Options.CheckpointInterval, or sooner after
// Options.CheckpointEvery appends) saves the snapshots of the logs appended
// to since the last round and signs a C2SP checkpoint for each with the
// tenant's LEDGER key. A checkpoint is signed only if it is larger than
// the log's previous one and the tree agrees with the previous one's root
// at that size; it replaces the previous one with a compare-and-set, so
// replicas never sign inconsistent or shrinking checkpoints of one log.
package jsstore

import (
	"container/list"
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/natsauth"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/ledger/secrets"
	"github.com/alpd-project/alpd/services/ledger/storage"
)

// Bucket names (without the broker namespace).
const (
	TreesBucket       = natsauth.LedgerTreesBucket
	CheckpointsBucket = natsauth.LedgerCheckpointsBucket
)

// Options tune a Store; zero values take the defaults.
type Options struct {
	// Tenants are the domains whose logs the store serves.
	Tenants alp.Tenants
	// MaxBatch bounds the leaves of one atomic append (default 500; the
	// server refuses batches above 1000).
	MaxBatch int
	// BatchThreshold is the smallest group of waiting leaves published as
	// one atomic batch (default 48); smaller groups are appended one by
	// one. An atomic batch costs the server a fixed 2-3 ms on an R1 file
	// stream, about as much as 40 single appends.
	BatchThreshold int
	// MaxTrees bounds the persons' trees kept in memory (default 4096).
	MaxTrees int
	// CheckpointInterval is the longest time between an append and the
	// checkpoint that covers it (default 100ms).
	CheckpointInterval time.Duration
	// CheckpointEvery starts a checkpoint round early after that many
	// appends (default 1000).
	CheckpointEvery int
	// MaxAttempts bounds the conflict retries of one append (default 32).
	MaxAttempts int
	// AppendTimeout bounds one group commit (default 30s).
	AppendTimeout time.Duration
	// AfterPublish, for tests, is called after a batch of n leaves starting
	// at index first was stored and before it is applied or acknowledged to
	// the callers. An error makes the append fail as if the process had
	// crashed there: the callers get the error and the tree is reloaded.
	AfterPublish func(tenant, person string, first uint64, n int) error
	Logger       *slog.Logger
	Registerer   prometheus.Registerer
}

func (o *Options) complete() {
	if o.MaxBatch <= 0 {
		o.MaxBatch = 500
	}
	o.MaxBatch = min(o.MaxBatch, 1000)
	if o.BatchThreshold <= 0 {
		o.BatchThreshold = 48
	}
	if o.MaxTrees <= 0 {
		o.MaxTrees = 4096
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = 100 * time.Millisecond
	}
	if o.CheckpointEvery <= 0 {
		o.CheckpointEvery = 1000
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 32
	}
	if o.AppendTimeout <= 0 {
		o.AppendTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
}

// Store is the JetStream ledger store. It is safe for concurrent use; any
// number of Stores (replicas) may share the streams and buckets.
type Store struct {
	b       *bus.Bus
	js      jetstream.JetStream
	ks      keystore.KeyStore
	secrets *secrets.Store
	opts    Options
	log     *slog.Logger
	m       *metrics
	stream  string

	ensureOnce sync.Once
	trees      jetstream.KeyValue
	cps        jetstream.KeyValue
	st         jetstream.Stream

	mu       sync.Mutex
	logs     map[string]*logState
	lru      *list.List // of *logState, front = most recent
	touched  map[*logState]bool
	appends  int
	kick     chan struct{}
	signers  map[string]note.Signer
	signerMu sync.Mutex
	done     chan struct{}
}

// Done is closed when Run has returned, after its last round.
func (s *Store) Done() <-chan struct{} { return s.done }

var _ storage.Reader = (*Store)(nil)

// New prepares a store; Ensure creates what it needs on the server and Run
// signs checkpoints.
func New(b *bus.Bus, ks keystore.KeyStore, sec *secrets.Store, o Options) (*Store, error) {
	o.complete()
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	return &Store{
		b: b, js: b.JetStream(), ks: ks, secrets: sec, opts: o, log: o.Logger, m: m,
		stream: b.StreamName(streams.Ledger),
		logs:   map[string]*logState{}, lru: list.New(), touched: map[*logState]bool{},
		kick: make(chan struct{}, 1), signers: map[string]note.Signer{}, done: make(chan struct{}),
	}, nil
}

// StreamConfig is the ledger stream's configuration: the table's, plus
// atomic batches (the group commit publishes several leaves as one unit).
func StreamConfig(b *bus.Bus, tenants []string, l streams.Limits) jetstream.StreamConfig {
	def, _ := streams.ByName(streams.Ledger)
	cfg := b.Config(def.Spec(tenants, l))
	cfg.AllowAtomicPublish = true
	return cfg
}

// Ensure creates or updates the ledger stream and the store's buckets. The
// ledger stream's configuration adds atomic batches to the table's, so it
// is made with bus.EnsureStreamConfig.
//
// It may be called again (a consumer's supervisor does, when streams
// vanished): the handles made by the first call stay valid, as they name
// the stream and buckets rather than hold them.
func (s *Store) Ensure(ctx context.Context, l streams.Limits) error {
	st, err := s.b.EnsureStreamConfig(ctx, StreamConfig(s.b, s.opts.Tenants, l))
	if err != nil {
		return err
	}
	replicas := s.b.Options().Replicas
	trees, err := s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      s.b.StreamName(TreesBucket),
		Description: "alpd ledger tree tiles per person (a cache rebuilt from the ledger stream)",
		History:     1, Storage: jetstream.FileStorage, Replicas: replicas,
	})
	if err != nil {
		return fmt.Errorf("ledger: trees bucket: %w", err)
	}
	cps, err := s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      s.b.StreamName(CheckpointsBucket),
		Description: "alpd ledger: the latest signed checkpoint of each person's log",
		History:     1, Storage: jetstream.FileStorage, Replicas: replicas,
	})
	if err != nil {
		return fmt.Errorf("ledger: checkpoints bucket: %w", err)
	}
	s.ensureOnce.Do(func() { s.st, s.trees, s.cps = st, trees, cps })
	return nil
}

// Origin is the checkpoint origin of a person's log.
func Origin(tenant, person string) string { return ledgerlog.Origin(tenant, person) }

func (s *Store) checkTenant(tenant string) error {
	if !s.opts.Tenants.Hosts(tenant) {
		return fmt.Errorf("%w: %q", storage.ErrNotHosted, tenant)
	}
	return nil
}

func (s *Store) check(tenant, person string) error {
	if err := s.checkTenant(tenant); err != nil {
		return err
	}
	if err := alp.ValidatePersonID(person); err != nil {
		return fmt.Errorf("%w: %v", storage.ErrInvalid, err)
	}
	return nil
}

// logState is one person's log in this process: its tree (under mu) and
// the group-commit queue (under qmu).
type logState struct {
	tenant, person, subject, key string

	mu     sync.Mutex
	tree   *tree
	loaded bool
	// rebuild: the snapshot met an inconsistency; the next load ignores it
	// and replays the whole log from the stream.
	rebuild bool

	qmu     sync.Mutex
	queue   []*pending
	leading bool

	// flushMu serializes the snapshot writes of the log, so an older
	// snapshot never lands after a newer one.
	flushMu sync.Mutex

	// Under Store.mu.
	el   *list.Element
	refs int

	// recent are the message ids of the last leaves found in the log
	// (applied to the tree, or recognised as stored by an earlier
	// attempt), a ring under mu: HasLeafOf answers from it without reading
	// the stream when the leaf is one of them.
	recent     [recentLeaves]uint64
	recentNext int
}

// recentLeaves is how many leaf message ids a log remembers: a decision
// follows its envelope's entry within a few leaves.
const recentLeaves = 64

// remember records the message id of a leaf found in the log, as a 64-bit
// hash: 512 bytes per log in memory (a false match among 64 is a chance of
// one in 2^58).
func (ls *logState) remember(msgID string) {
	ls.recent[ls.recentNext%recentLeaves] = recentHash(msgID)
	ls.recentNext++
}

func (ls *logState) remembers(msgID string) bool {
	h := recentHash(msgID)
	for i := range min(ls.recentNext, recentLeaves) {
		if ls.recent[i] == h {
			return true
		}
	}
	return false
}

func recentHash(msgID string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(msgID))
	return h.Sum64()
}

// acquire returns the person's log state, pinned in memory until release.
func (s *Store) acquire(tenant, person string) (*logState, error) {
	if err := s.check(tenant, person); err != nil {
		return nil, err
	}
	subject, err := streams.LedgerSubject(tenant, person)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", storage.ErrInvalid, err)
	}
	key := bus.TenantToken(tenant) + "." + person
	s.mu.Lock()
	defer s.mu.Unlock()
	ls, ok := s.logs[key]
	if !ok {
		ls = &logState{tenant: tenant, person: person, subject: subject, key: key, tree: newTree(key)}
		ls.el = s.lru.PushFront(ls)
		s.logs[key] = ls
		s.m.trees.Set(float64(len(s.logs)))
	} else {
		s.lru.MoveToFront(ls.el)
	}
	ls.refs++
	return ls, nil
}

func (s *Store) release(ls *logState) {
	s.mu.Lock()
	ls.refs--
	s.evictLocked()
	s.mu.Unlock()
}

// evictLocked drops least recently used trees beyond MaxTrees; trees in
// use or with unsaved changes (touched) stay until they are saved.
func (s *Store) evictLocked() {
	for el := s.lru.Back(); el != nil && len(s.logs) > s.opts.MaxTrees; {
		prev := el.Prev()
		ls := el.Value.(*logState)
		if ls.refs == 0 && !s.touched[ls] {
			s.lru.Remove(el)
			delete(s.logs, ls.key)
			s.m.evictions.Inc()
		}
		el = prev
	}
	s.m.trees.Set(float64(len(s.logs)))
}

// Loaded is the number of trees in memory (tests and metrics).
func (s *Store) Loaded() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.logs)
}

// touch records an append for the next checkpoint round.
func (s *Store) touch(ls *logState, n int) {
	s.mu.Lock()
	s.touched[ls] = true
	s.appends += n
	kick := s.appends >= s.opts.CheckpointEvery
	if kick {
		s.appends = 0
	}
	s.mu.Unlock()
	if kick {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// ledgerEvent builds the leaf's event, with the bus's headers.
func (s *Store) ledgerEvent(req *Request, index uint64, leaf, opening []byte) *alpv1.Event {
	ev := newEvent(req)
	ev.Body = &alpv1.Event_LedgerEntryAppended{LedgerEntryAppended: &alpv1.LedgerEntryAppended{
		Leaf: leaf, Index: index, PersonId: req.Person, SealedOpening: opening,
	}}
	return ev
}
